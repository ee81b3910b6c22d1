"""Debian's Chromium, headless, driven over the Chrome DevTools Protocol (CDP) for the page's browser test.

Not Selenium or Playwright: with ``--remote-debugging-pipe`` Chromium reads CDP commands on its descriptor 3
and writes answers and events on 4 (JSON, each ended by a NUL byte), so two pipes and the standard library
drive it: no pip package, no chromedriver, no port. The test does what a person does: open, choose, type,
click, read the page, take a screenshot.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
#: The flags that keep a headless Chromium from reaching for the network at start (on a machine without
#: one, its connections are refused many at a time) and from needing a sandbox as root.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-pipe",
)


class CdpError(RuntimeError):
    """An error answer of CDP, or Chromium gone."""


class Chromium:
    """A headless Chromium with one tab, its own fresh profile, stopped by :meth:`close` (a context manager).

    Args:
        width, height: the tab's viewport, in CSS pixels (the screenshot's size).
        timeout: seconds to wait for any one answer of Chromium.
    """

    def __init__(self, width: int = 900, height: int = 760, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="pal-chromium-")
        to_chromium, self._out = _high_pipe()  # Chromium reads commands on its fd 3
        self._in, from_chromium = _high_pipe()  # and writes answers on its fd 4

        def descriptors() -> None:  # in the child, before exec: the pipe ends at 3 and 4
            os.dup2(to_chromium, 3)
            os.dup2(from_chromium, 4)

        self.process = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", f"--window-size={width},{height}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,  # keeps the inheritable 3 and 4 (Python opens every other descriptor non-inheritable)
            preexec_fn=descriptors,  # two dup2 calls, no lock taken
            start_new_session=True,
        )
        os.close(to_chromium)
        os.close(from_chromium)
        self._buffer, self._next_id = b"", 0
        self.events: list[dict[str, Any]] = []  # CDP events read while waiting for answers
        try:
            self._open_tab(width, height)
        except BaseException:
            self.close()  # no Chromium left running when the start fails
            raise

    def _open_tab(self, width: int, height: int) -> None:
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Network"):
            self.call(f"{domain}.enable", session=True)
        self.call(  # the viewport, so that the screenshot is width x height whatever the window's frame
            "Emulation.setDeviceMetricsOverride",
            session=True,
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    # --- CDP --------------------------------------------------------------------------------------------

    def call(self, method: str, session: bool = False, **params: Any) -> dict[str, Any]:
        """Send one command (to the tab when ``session``) and return its result; events read meanwhile are kept
        in :attr:`events`."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._read()
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise CdpError(f"{method}: {answer['error']}")
                return dict(answer.get("result", {}))
            if "method" in answer:
                self.events.append(answer)

    def _read(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._in], [], [], left)[0]:
                raise CdpError(f"Chromium did not answer within {self.timeout} s")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise CdpError(f"Chromium closed the pipe (exit status {self.process.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return dict(json.loads(message))

    # --- what a person does -----------------------------------------------------------------------------

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the tab (awaited when it is a promise)."""
        result = self.call(
            "Runtime.evaluate", session=True, expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise CdpError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0) -> Any:
        """Poll until the JavaScript ``expression`` is truthy; its value."""
        deadline = time.monotonic() + timeout
        while not (value := self.evaluate(expression)):
            if time.monotonic() > deadline:
                raise CdpError(f"timed out waiting for {expression}")
            time.sleep(0.05)
        return value

    def open(self, url: str) -> None:
        """Go to ``url`` and wait until its document has loaded."""
        self.call("Page.navigate", session=True, url=url)
        self.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'")

    def click(self, selector: str) -> None:
        """A left click at the centre of the element ``selector``, as the mouse gives it."""
        x, y = self.wait_for(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)})?.getBoundingClientRect();"
            " return r && r.width ? [r.x + r.width / 2, r.y + r.height / 2] : null; })()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.call(
                "Input.dispatchMouseEvent", session=True, type=kind, x=x, y=y, button="left", clickCount=1
            )

    def type(self, selector: str, text: str) -> None:
        """Click into the field ``selector``, clear it and type ``text``."""
        self.click(selector)
        self.evaluate(f"document.querySelector({json.dumps(selector)}).select()")
        for kind in ("rawKeyDown", "keyUp"):  # the Delete key (46), on the selected text
            self.call(
                "Input.dispatchKeyEvent",
                session=True,
                type=kind,
                key="Delete",
                code="Delete",
                windowsVirtualKeyCode=46,
            )
        if text:
            self.call("Input.insertText", session=True, text=text)
        typed = self.evaluate(f"document.querySelector({json.dumps(selector)}).value")
        if typed != text:
            raise CdpError(f"typed {text!r} into {selector}, which holds {typed!r}")

    def choose(self, selector: str, value: str) -> None:
        """Choose ``value`` in the ``<select>`` ``selector`` (as picking it from the list does: a change event)."""
        self.evaluate(
            f"(() => {{ const s = document.querySelector({json.dumps(selector)}); s.focus(); s.value = "
            f"{json.dumps(value)}; s.dispatchEvent(new Event('change', {{bubbles: true}})); }})()"
        )

    def screenshot(self, path: Path) -> Path:
        """A PNG of the tab's viewport, written to ``path``."""
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.call("Browser.close")
            self.process.wait(timeout=10)
        except (CdpError, OSError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        finally:
            os.close(self._in)
            os.close(self._out)
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _high_pipe() -> tuple[int, int]:
    """A pipe whose ends are numbered 10 or more, so that moving them to 3 and 4 in the child overwrites neither."""
    read, write = os.pipe()
    high = fcntl.fcntl(read, fcntl.F_DUPFD_CLOEXEC, 10), fcntl.fcntl(write, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(read)
    os.close(write)
    return high

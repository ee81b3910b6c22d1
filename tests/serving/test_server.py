"""The real server: ``pal-lightning serve`` started in a subprocess as docs/serving.md starts it (one server,
shared by this file's tests), called over HTTP. Its answers equal ``predict``'s, concurrent requests of
different tasks batched together included; 1,000 fuzzed requests each get the status the request checks
give (a 4xx with a one-line JSON error, or an answer) and leave the same worker process serving; the page's
Python blocks run as written against it; the page at ``GET /``, driven in headless Chromium, shows what
``POST /predict`` answers."""

from __future__ import annotations

import http.client
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import torch

pytest.importorskip("litserve", reason="the serve extra is not installed")

from serving.headless import CHROMIUM, Chromium  # tests/ is on sys.path

from pal_lightning import MultiTaskModule, TaskSpec
from pal_lightning.serving.answers import catalogue
from pal_lightning.serving.command import parser
from pal_lightning.serving.schema import BadRequest, TaskInfo, parse_body
from pal_lightning.serving.stats import difference
from pal_lightning.testing import TINY_BERT, free_port
from pal_lightning.testing.processes import get_json, wait_healthy

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "serving.md"
DEMO_MODEL = "runs/demo/version_0/model"  # what the page serves; the tiny model here instead
TOPIC = TaskSpec(name="topic", num_labels=3, text_columns=("sentence",))


def page_blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", PAGE.read_text(encoding="utf-8"), re.S | re.M)


def serve_lines() -> list[list[str]]:
    """The page's ``pal-lightning serve`` command lines, as words."""
    lines = (line for block in page_blocks("bash") for line in block.splitlines())
    return [shlex.split(line) for line in lines if line.startswith("pal-lightning serve")]


@dataclass
class Server:
    port: int
    process: subprocess.Popen[str]
    module: MultiTaskModule
    tasks: dict[str, TaskInfo]

    def call(self, body: bytes, content_type: str = "application/json") -> tuple[int, Any]:
        """The status and decoded JSON answer of ``POST /predict`` with ``body``."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            connection.request("POST", "/predict", body=body, headers={"Content-Type": content_type})
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()

    def workers(self) -> set[int]:
        """The inference workers' process ids (spawned by LitServe)."""
        children = psutil.Process(self.process.pid).children(recursive=True)
        return {c.pid for c in children if "spawn_main" in " ".join(c.cmdline())}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    torch.manual_seed(0)
    module = MultiTaskModule(
        tasks=["sst", "qqp", "sts", TOPIC],
        encoder_config=TINY_BERT,
        adapter={"size": 8, "num_heads": 2, "init": "random"},
        pair_encoding={"sts": "siamese", "default": "cross"},
    )
    module.set_label_names({"topic": ["sports", "politics", "arts"]})
    folder = module.save_pretrained(tmp_path_factory.mktemp("served") / "model")
    words = serve_lines()[0]  # the page's first: pal-lightning serve runs/demo/version_0/model --port 8000
    assert words[:3] == ["pal-lightning", "serve", DEMO_MODEL] and words[3:] == ["--port", "8000"], words
    port = free_port()
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    process = subprocess.Popen(
        [sys.executable, "-m", "pal_lightning", "serve", str(folder), "--port", str(port)],
        env=env,
        cwd=tmp_path_factory.mktemp("cwd"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: nothing of it outlives the tests
    )
    try:
        wait_healthy(port, process, 180, lambda: process.communicate()[0])
        yield Server(port, process, MultiTaskModule.from_pretrained(folder), catalogue(module))
    finally:
        process.send_signal(signal.SIGTERM)  # shuts down as Ctrl-C does
        try:
            out = process.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out = process.communicate()[0]
            raise AssertionError(f"the server did not stop on SIGTERM:\n{out}") from None
        assert "Traceback" not in out, out


def test_the_serving_page_runs_as_written(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, Any] = {}
    for block in page_blocks("python"):
        code = block.replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")
        exec(compile(code, str(PAGE), "exec"), namespace)  # noqa: S102 - the page's code
    out = capsys.readouterr().out
    assert out.count("'predictions'") >= 4 and "'truncated': False" in out
    assert "422 Task 'qqp' takes a pair of sentences" in out
    assert namespace["tasks"]["sts"]["kind"] == "pair_regression"
    for words in serve_lines():  # the lines not started here (GPUs) parse
        args = parser().parse_args(words[2:])
        assert args.model == DEMO_MODEL


def test_answers_equal_predict_also_when_requests_are_batched_together(server: Server) -> None:
    long = " ".join(["the music is fun but the end is long and bad"] * 20)  # 220 words: over 128 tokens
    sentences = ["a fine film", "dull plot", long, "ok"]
    pairs = [["how do I cook rice?", "how is rice cooked?"], ["a", "b c d e"], ["same", "same"]]
    bodies = [{"tasks": ["sst", "topic"], "text": s, "all_classes": True} for s in sentences]
    bodies += [{"tasks": "all", "text": p} for p in pairs]
    with ThreadPoolExecutor(len(bodies)) as pool:  # at once: LitServe batches them (up to 8)
        answers = list(pool.map(lambda b: server.call(json.dumps(b).encode()), bodies))
    assert all(status == 200 for status, _ in answers)
    listed = server.call(json.dumps(bodies).encode())[1]  # the same inputs as one request's list
    for got in ([a for _, a in answers], listed):
        for task, texts, first in (
            ("sst", sentences, 0),
            ("topic", sentences, 0),
            ("qqp", pairs, 4),
            ("sts", pairs, 4),
        ):
            expected = server.module.predict(task, [t if isinstance(t, str) else tuple(t) for t in texts])
            rows = [got[first + i]["predictions"][task] for i in range(len(texts))]
            if expected.scores is not None:
                np.testing.assert_allclose([r["score"] for r in rows], expected.scores, atol=1e-5)
            else:
                assert [r["label"] for r in rows] == expected.labels
                assert expected.probabilities is not None
                np.testing.assert_allclose(
                    [r["probability"] for r in rows], expected.probabilities.max(1), atol=1e-5
                )
        assert list(got[0]["predictions"]["topic"]["probabilities"]) == ["sports", "politics", "arts"]
        assert [a["truncated"] for a in got[:4]] == [False, False, True, False]  # cut as predict cuts it


# --- the page, in headless Chromium -------------------------------------------------------------------------

#: What the page shows of its answer: the label, the score, each bar's class, its value and its length
#: (as a share of its track), the truncation notice, the error line, and whether the second box is shown.
SHOWN = """(() => {
  const get = (id) => document.getElementById(id), visible = (id) => !get(id).hidden;
  const rows = [...document.querySelectorAll('#bars .row')];
  return {answered: Number(document.body.dataset.answered || 0), answer: visible('answer'),
    label: get('label').textContent, score: get('score').textContent, truncated: visible('truncated'),
    bars: rows.map((r) => [r.children[0].textContent, r.children[2].textContent,
      r.querySelector('.bar').getBoundingClientRect().width / r.children[1].getBoundingClientRect().width]),
    error: visible('error') ? get('error').textContent : null, pair: visible('second')};
})()"""


def _ask(browser: Chromium, task: str, *texts: str) -> dict[str, Any]:
    """Choose ``task``, type ``texts`` in its boxes, click Predict and wait for what the page shows."""
    before = browser.evaluate(SHOWN)["answered"]
    browser.choose("#task", task)
    for box, text in zip(("#text1", "#text2"), texts, strict=False):
        browser.type(box, text)
    browser.click("#send")
    browser.wait_for(f"Number(document.body.dataset.answered || 0) > {before}")
    shown: dict[str, Any] = browser.evaluate(SHOWN)
    return shown


def _assert_shows(shown: dict[str, Any], answer: dict[str, Any], task: str) -> None:
    """The page shows ``answer``'s prediction of ``task``: its label and every class's probability (a bar of
    that length), or its score; the truncation notice when the answer says so."""
    one = answer["predictions"][task]
    assert shown["answer"] and shown["error"] is None and shown["truncated"] == answer["truncated"]
    if "score" in one:
        assert shown["score"] == f"score {one['score']:.3f}" and shown["bars"] == [] and shown["label"] == ""
        return
    assert shown["label"] == one["label"] and shown["score"] == ""
    assert [b[:2] for b in shown["bars"]] == [[k, f"{v:.3f}"] for k, v in one["probabilities"].items()]
    np.testing.assert_allclose([b[2] for b in shown["bars"]], list(one["probabilities"].values()), atol=0.01)


def test_the_page_in_headless_chromium_shows_what_predict_answers(server: Server, tmp_path: Path) -> None:
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"Debian's Chromium is not installed ({CHROMIUM}): apt-get install chromium")
    from PIL import Image  # matplotlib's (the dev extra)

    sentence, long = "the match went to extra time", " ".join(["the music is fun but the end is long"] * 30)
    pair = ("How do I cook rice?", "How is rice cooked?")
    asked = {
        "single": ("topic", sentence),
        "truncated": ("topic", long),
        "pair": ("qqp", pair),
        "score": ("sts", pair),
    }
    answers = {}
    with Chromium() as browser:
        browser.open(f"http://127.0.0.1:{server.port}/")
        options = browser.wait_for("[...document.querySelectorAll('#task option')].map((o) => o.value)")
        assert options == list(server.tasks)  # from GET /tasks, in the model's order
        for case, (task, text) in asked.items():
            shown = _ask(browser, task, *([text] if isinstance(text, str) else text))
            body = {"task": task, "text": text if isinstance(text, str) else list(text), "all_classes": True}
            status, answers[case] = server.call(json.dumps(body).encode())  # the same input, straight
            assert status == 200 and shown["pair"] == (task != "topic"), shown
            _assert_shows(shown, answers[case], task)
            if case == "single":  # the picture: a class name, a value and a bar per class
                picture = browser.screenshot(tmp_path / "page.png")
        assert [a["truncated"] for a in answers.values()] == [False, True, False, False]
        shown = _ask(browser, "qqp", pair[0], "  ")  # a bad input: the server's line, no answer
        status, refused = server.call(json.dumps({"task": "qqp", "text": [pair[0], "  "]}).encode())
        assert status == 422 and shown["error"] == f"422 {refused['error']}" and not shown["answer"]
        browser.type("#key", "s3cret")  # sent as the guard reads it (this server has no key: it ignores it)
        browser.events.clear()
        _assert_shows(_ask(browser, "topic", sentence), answers["single"], "topic")
        sent = [e["params"]["request"] for e in browser.events if e["method"] == "Network.requestWillBeSent"]
        assert [r["headers"].get("X-API-Key") for r in sent if r["url"].endswith("/predict")] == ["s3cret"]
    print(f"the page's screenshot: {picture}")
    assert picture.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and picture.stat().st_size > 5_000
    with Image.open(picture) as image:
        assert image.size == (900, 760)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50  # text, fields and bars, not a blank page
    assert any(rgb == (0x3B, 0x7D, 0xD8) for _, rgb in colours)  # the bars' blue


# --- fuzzing -----------------------------------------------------------------------------------------------

TEXTS: list[Any] = [
    "a fine film",
    "\ud800 lone surrogate",
    "\x00",
    "",
    "  ",
    5,
    None,
    [],
    ["a"],
    ["a", "b"],
    ["a", ""],
    ["a", 3],
    {"a": 1},
    "é" * 300,
]
TASK_NAMES: list[Any] = ["sst", "qqp", "sts", "topic", "nope", 3, None, ""]


def _fuzzed(rng: random.Random) -> tuple[bytes, str]:
    """One request body, mostly malformed, and its content type."""
    kind = rng.randrange(8)
    item: dict[str, Any] = {}
    if rng.random() < 0.9:
        item["text"] = rng.choice(TEXTS)
    if rng.random() < 0.5:
        item["task"] = rng.choice(TASK_NAMES)
    else:
        item["tasks"] = rng.choice(
            ["all", [], "sst", [rng.choice(TASK_NAMES) for _ in range(rng.randrange(3))]]
        )
    if rng.random() < 0.2:
        item[rng.choice(["all_classes", "lang"])] = rng.choice([True, "yes", 1])
    payload: Any = item
    if kind == 0:
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
    elif kind == 1:
        body = json.dumps(item).encode()[: rng.randrange(1, 20)]  # cut short
    elif kind == 2:
        payload = rng.choice([None, 7, "text", [], [1, 2], {"a": {"b": []}}, [[item]]])
        body = json.dumps(payload).encode()
    elif kind == 3:
        body = json.dumps([item] * rng.choice([2, 65, 200])).encode()  # 64 inputs at most
    elif kind == 4 and rng.random() < 0.05:
        body = json.dumps({"task": "sst", "text": "a" * 1_100_000}).encode()  # over the 1 MB limit
    elif kind == 5 and rng.random() < 0.3:
        body = rng.choice([b"[" * 50_000, b"1" * 5000, b'{"task": "sst", "text": "a \\ud800"}'])
    else:
        body = json.dumps(payload).encode()
    return body, rng.choice(["application/json", "text/plain", "application/x-www-form-urlencoded"])


def _expected(body: bytes, tasks: dict[str, TaskInfo]) -> int:
    """The status the request checks give ``body`` (200 when it is answered)."""
    if len(body) > 1_000_000:
        return 413
    try:
        parse_body(body, tasks, 64)
    except BadRequest as err:
        return err.status
    return 200


def test_a_thousand_fuzzed_requests_get_their_4xx_and_the_same_worker_serves_on(server: Server) -> None:
    workers = server.workers()
    assert len(workers) == 1
    rng = random.Random(0)
    bodies = [_fuzzed(rng) for _ in range(1000)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda b: server.call(*b), bodies))
    statuses = []
    for (body, _), (status, out) in zip(bodies, answers, strict=True):
        assert status == _expected(body, server.tasks), (body[:200], status, out)
        statuses.append(status)
        if status != 200:
            assert list(out) == ["error"] and isinstance(out["error"], str) and "\n" not in out["error"]
        else:
            for one in out if isinstance(out, list) else [out]:
                assert set(one) == {"predictions", "truncated"}
    assert {400, 413, 422} <= set(statuses) and statuses.count(200) >= 20  # every kind happened
    status, out = server.call(b'{"task": "sts", "text": ["A man plays.", "Someone plays music."]}')
    expected = server.module.predict("sts", [("A man plays.", "Someone plays music.")]).scores
    assert status == 200 and expected is not None
    assert out["predictions"]["sts"]["score"] == pytest.approx(expected[0], abs=1e-5)
    assert server.workers() == workers  # the same worker process, never restarted


def test_the_stats_count_every_batch_of_the_mixed_server(server: Server) -> None:
    before = get_json(server.port, "/stats")
    bodies = [{"task": t, "text": "a fine film"} for t in ("sst", "topic") * 4]
    bodies += [{"tasks": "all", "text": ["a", "b"]}]  # qqp and sts: two inputs
    with ThreadPoolExecutor(len(bodies)) as pool:
        assert {s for s, _ in pool.map(lambda b: server.call(json.dumps(b).encode()), bodies)} == {200}
    after = get_json(server.port, "/stats")
    done = difference(before, after)
    assert after["batching"] == "mixed" and (done["requests"], done["inputs"]) == (9, 10)
    assert done["batches"] == sum(done["batch_sizes"].values()) >= 2  # 8 requests at most in one
    # A batch's rows run in forwards of at most 8 (CPU): of the 10 rows, one batch at most holds more than 8.
    assert done["batches"] <= done["forwards"] <= done["batches"] + 1
    assert sum(int(k) * n for k, n in done["batch_sizes"].items()) == 9
    assert 1 <= done["mean_tasks_per_batch"] <= 4

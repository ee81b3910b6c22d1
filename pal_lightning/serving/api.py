"""The LitServe side of ``pal-lightning serve`` (the ``serve`` extra, checked by the command first): the API
each inference worker runs, and the server, which learns the tasks from its first worker before its HTTP
processes start, so that only the workers load the model.
"""

# no ``from __future__ import annotations``: LitServe reads decode_request's and encode_response's annotations
# at run time to choose how the route parses the body (none: JSON) and what it answers (none: JSON)

import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import litserve as ls

from pal_lightning.core.errors import PalUserError
from pal_lightning.serving.answers import answer_requests, catalogue
from pal_lightning.serving.schema import ServeRequest, TaskInfo
from pal_lightning.serving.stats import BatchCounters
from pal_lightning.serving.subset import keep_tasks

#: Rows per forward pass on the CPU, where a forward costs its padded tokens: a batch's rows sorted by length
#: and cut into forwards this small waste little padding (benchmarks/RESULTS.md, "Serving: the load test").
CPU_ROWS_PER_FORWARD = 8

#: The exit status of a worker that could not load the model (it said why on the announce queue).
LOAD_FAILED = 2


class PalAPI(ls.LitAPI):  # litserve is untyped: LitAPI is Any to the checker
    """``POST /predict`` for every task of one model.

    Args:
        model: a ``save_pretrained`` folder or hub id (``None`` with ``ckpt``).
        ckpt: a ``.ckpt`` file (``None`` with ``model``).
        max_batch_size: the most requests LitServe puts in one batch.
        batch_timeout: seconds LitServe waits for a batch to fill.
        model_class: the ``MultiTaskModule`` subclass (dotted name) the model was saved from (``None``: the
            base class).
        announce: a ``SimpleQueue`` on which ``setup`` puts ``("tasks", catalogue)`` once the model is loaded,
            or ``("error", message)``; ``None``: nothing put.
        batching: ``mixed`` (one forward for every task of a batch) or ``per_task`` (one per task in it).
        tasks: the tasks to serve (the others' weights are dropped once loaded); ``None``: every task.
        counters: where each batch is counted (``GET /stats``); ``None``: not counted.
        rows_per_forward: the most ``(task, text)`` rows per forward, sorted by length; 0:
            :data:`CPU_ROWS_PER_FORWARD` on the CPU, all of a batch elsewhere.
    """

    def __init__(
        self,
        model: str | None,
        ckpt: str | None,
        max_batch_size: int,
        batch_timeout: float,
        announce: Any = None,
        model_class: str | None = None,
        batching: str = "mixed",
        tasks: Sequence[str] | None = None,
        counters: BatchCounters | None = None,
        rows_per_forward: int = 0,
    ) -> None:
        super().__init__(max_batch_size=max_batch_size, batch_timeout=batch_timeout)
        self.model_path, self.ckpt, self.announce = model, ckpt, announce
        self.model_class, self.batching, self.tasks, self.counters = model_class, batching, tasks, counters
        self.rows_per_forward = rows_per_forward
        self.module: Any = None

    def setup(self, device: str) -> None:
        """Load the model on ``device`` (once per worker), in eval mode, and announce its tasks."""
        from pal_lightning.inference.pipeline import load_model

        try:
            self.module = load_model(self.model_path, self.ckpt, self.model_class).to(device).eval()
            if not self.rows_per_forward and str(device).startswith("cpu"):
                self.rows_per_forward = CPU_ROWS_PER_FORWARD
            if self.tasks is not None:
                keep_tasks(self.module, self.tasks)
        except PalUserError as err:
            if self.announce is None:
                raise
            self.announce.put(("error", str(err)))  # SimpleQueue: written before put returns
            os._exit(LOAD_FAILED)  # the server says why in one line; raising would log a traceback here
        if self.announce is not None:  # a worker of PalServer: the server stops it on Ctrl-C
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # (its own KeyboardInterrupt: a traceback)
            self.announce.put(("tasks", catalogue(self.module)))

    def decode_request(self, request, **kwargs):  # type: ignore[no-untyped-def]  # see the note on imports
        """The checked request (:class:`~pal_lightning.serving.guard.Guard` rewrote the body canonically)."""
        return ServeRequest.from_canonical(request)

    def predict(self, x: Any, **kwargs: Any) -> Any:
        """The answers of a batch (a list of requests), or of one request when batching is off."""
        requests = x if isinstance(x, list) else [x]
        start = time.perf_counter()
        rows = self.rows_per_forward
        answers = answer_requests(self.module, requests, per_task=self.batching == "per_task", rows=rows)
        if self.counters is not None:
            items = [task for r in requests for q in r.queries for task in q.tasks]
            groups = [items.count(t) for t in set(items)] if self.batching == "per_task" else [len(items)]
            forwards = sum(-(-n // rows) if rows else 1 for n in groups)
            seconds = time.perf_counter() - start
            self.counters.record(len(requests), len(items), len(set(items)), forwards, seconds)
        return answers if isinstance(x, list) else answers[0]

    def encode_response(self, output, **kwargs):  # type: ignore[no-untyped-def]  # see the note on imports
        """The answer as it is (JSON-ready already)."""
        return output


def wait_for_tasks(announce: Any, workers: Sequence[Any], poll: float = 0.05) -> dict[str, TaskInfo]:
    """The tasks the first worker to load the model announces.

    Raises:
        PalUserError: with the worker's message when it could not load the model, or when every worker
            stopped without a word (its error, e.g. CUDA out of memory, is in the log above).
    """
    while announce.empty():
        if workers and not any(w.is_alive() for w in workers):
            raise PalUserError(
                "The inference workers stopped while loading the model; the log above says why."
            )
        time.sleep(poll)
    kind, value = announce.get()
    if kind == "error":
        raise PalUserError(value)
    return dict(value)


def _set_unless_gone(event: Any) -> None:
    """Set a manager's event; nothing when the manager is already gone (a worker died: LitServe shut it down)."""
    try:
        event.set()
    except (OSError, EOFError):
        pass


class PalServer(ls.LitServer):
    """A ``LitServer`` that fills ``tasks`` (the dict its guard and ``GET /tasks`` read) from the first
    worker's announcement before it starts the HTTP processes, then calls ``on_ready(tasks)``."""

    def __init__(
        self,
        api: PalAPI,
        tasks: dict[str, TaskInfo],
        on_ready: Callable[[dict[str, TaskInfo]], None],
        **kwargs: Any,
    ) -> None:
        super().__init__(api, **kwargs)
        self.served_tasks, self.on_ready = tasks, on_ready

    def verify_worker_status(self) -> None:
        """LitServe's wait for a ready worker, after the tasks are known (every worker stopped on a load error)."""
        try:
            self.served_tasks.update(wait_for_tasks(self.lit_api.announce, self.inference_workers))
        except PalUserError:
            for worker in self.inference_workers:
                worker.terminate()
            raise
        super().verify_worker_status()
        self.on_ready(self.served_tasks)

    def _perform_graceful_shutdown(
        self, manager: Any, uvicorn_workers: Any, shutdown_reason: str = "normal"
    ) -> None:
        # LitServe 0.2 (its private shutdown step: no public hook runs before it) shuts its multiprocessing
        # manager down while its monitoring thread sleeps between looks at the manager's shutdown event; the
        # thread's next look then fails on the closed pipe and logs a "Monitoring worker crashed" traceback,
        # at random on Ctrl-C or SIGTERM. So the event is set first and the thread seen out before the manager
        # goes. The event is set from a new thread: on Ctrl-C this thread's own connection to the manager is
        # still waiting on that event, and a request sent on it would never be read.
        monitor = [t for t in threading.enumerate() if t.name == "litserve-monitoring"]
        if self._shutdown_event is not None and threading.current_thread() not in monitor:
            setter = threading.Thread(target=_set_unless_gone, args=(self._shutdown_event,), daemon=True)
            setter.start()
            setter.join(timeout=5)
            for thread in monitor:
                thread.join(timeout=self.monitor_internal + 5)
        super()._perform_graceful_shutdown(manager, uvicorn_workers, shutdown_reason)

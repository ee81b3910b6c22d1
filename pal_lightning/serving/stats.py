"""What the inference workers did, for ``GET /stats``: batches, requests, inputs, tasks per batch, forward
passes and busy seconds, in one shared ``multiprocessing`` array (made before the workers and HTTP processes
start): the workers write it, any HTTP process reads it.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

#: Tasks-per-batch counts above this are counted in its slot (no model here has as many tasks).
TASK_SLOTS = 64
#: The totals, in their order at the start of the array.
TOTALS = ("batches", "requests", "inputs", "forwards", "busy_seconds")


class BatchCounters:
    """Counters of the batches the workers answer, shared by every process of one server.

    Args:
        max_batch_size: the most requests in one batch (the size of the batch-size histogram).
    """

    def __init__(self, max_batch_size: int) -> None:
        self.max_batch_size = max_batch_size
        # the array: the totals, then requests per batch 0..max_batch_size, then tasks per batch 0..TASK_SLOTS
        self._by_tasks = len(TOTALS) + max_batch_size + 1
        self.array: Any = multiprocessing.get_context("spawn").Array("d", self._by_tasks + TASK_SLOTS + 1)

    def record(self, requests: int, inputs: int, tasks: int, forwards: int, seconds: float) -> None:
        """Count one batch: its requests, its ``(task, text)`` inputs, its distinct tasks, the forward passes
        it took and the seconds its answer took."""
        with self.array.get_lock():
            for i, value in enumerate((1, requests, inputs, forwards, seconds)):
                self.array[i] += value
            self.array[len(TOTALS) + min(requests, self.max_batch_size)] += 1
            self.array[self._by_tasks + min(tasks, TASK_SLOTS)] += 1

    def snapshot(self) -> dict[str, Any]:
        """The counters as ``GET /stats`` gives them: the totals, and the histograms ``batch_sizes``
        (requests per batch) and ``tasks_per_batch`` as ``{"count": batches}`` (counts that happened)."""
        with self.array.get_lock():
            values = list(self.array)
        out: dict[str, Any] = {name: values[i] for i, name in enumerate(TOTALS)}
        for name in TOTALS[:-1]:
            out[name] = int(out[name])
        out["batch_sizes"] = histogram(values[len(TOTALS) : self._by_tasks])
        out["tasks_per_batch"] = histogram(values[self._by_tasks :])
        return out


def histogram(slots: list[float]) -> dict[str, int]:
    """``{"k": count}`` of the slots ``k`` counted at least once."""
    return {str(k): int(n) for k, n in enumerate(slots) if n}


def difference(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What happened between two snapshots, with the mean requests and tasks per batch (``None``: no batch)."""
    out: dict[str, Any] = {name: after[name] - before[name] for name in TOTALS}
    for key in ("batch_sizes", "tasks_per_batch"):
        counts = {k: after[key].get(k, 0) - before[key].get(k, 0) for k in after[key]}
        out[key] = {k: n for k, n in counts.items() if n}
    batches = out["batches"]
    out["mean_batch_size"] = out["requests"] / batches if batches else None
    out["mean_tasks_per_batch"] = (
        sum(int(k) * n for k, n in out["tasks_per_batch"].items()) / batches if batches else None
    )
    return out

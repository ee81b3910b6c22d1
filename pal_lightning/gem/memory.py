"""The episodic memory of GEM: one reservoir of training-example indices per task."""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from pal_lightning.core.errors import PalUserError

__all__ = ["EpisodicMemory"]

_MASK64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """SplitMix64's finaliser: a fast, well-mixed 64-bit hash of an integer."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _task_key(task: str) -> int:
    """A stable integer per task name (Python's ``hash`` of a str changes between processes)."""
    return zlib.crc32(task.encode("utf-8"))


class EpisodicMemory:
    """One reservoir of training-example indices per task (Vitter's algorithm R).

    The ``n``-th example of a task (0-based) is stored while there is room, then replaces slot
    ``j = hash(seed, task, n) mod (n + 1)`` when ``j < size``: a uniform sample of all the task has seen
    (a ring buffer would keep a late slice). The draw depends on ``(seed, task, n)`` only, so every DDP
    rank holds the same memories and a resumed run continues exactly.

    Args:
        size: examples kept per task.
        seed: seed of the replacement draws and of :meth:`sample`.
    """

    def __init__(self, size: int, seed: int = 0) -> None:
        if size < 1:
            raise PalUserError(f"memory_size must be >= 1, got {size}.")
        self.size = int(size)
        self.seed = int(seed)
        self.buffers: dict[str, list[int]] = {}
        self.seen: dict[str, int] = {}

    def add(self, task: str, indices: Iterable[int]) -> None:
        """Offer ``indices`` (positions in ``task``'s train split), in order, to ``task``'s reservoir."""
        buffer = self.buffers.setdefault(task, [])
        n = self.seen.get(task, 0)
        base = _mix64((self.seed & _MASK64) ^ (_task_key(task) << 32))
        for index in indices:
            if len(buffer) < self.size:  # n < size, or a memory loaded from a smaller one
                buffer.append(int(index))
            else:
                j = _mix64(base ^ n) % (n + 1)
                if j < self.size:
                    buffer[j] = int(index)
            n += 1
        self.seen[task] = n

    def __len__(self) -> int:
        return sum(len(b) for b in self.buffers.values())

    def tasks(self) -> list[str]:
        """Tasks with a non-empty memory."""
        return [t for t, b in self.buffers.items() if b]

    def sample(self, task: str, n: int, step: int) -> list[int]:
        """``min(n, len(memory))`` distinct stored indices drawn by ``(seed, step, task)`` (alike on every rank)."""
        buffer = self.buffers.get(task, [])
        n = min(int(n), len(buffer))
        if n <= 0:
            return []
        rng = np.random.default_rng([self.seed & _MASK64, int(step), _task_key(task)])
        positions = rng.choice(len(buffer), size=n, replace=False)
        return [buffer[int(i)] for i in positions]

    def state_dict(self) -> dict[str, Any]:
        """Plain ints, lists and strings (checkpoints stay loadable with ``torch.load(weights_only=True)``)."""
        return {
            "size": self.size,
            "seed": self.seed,
            "buffers": {t: list(b) for t, b in self.buffers.items()},
            "seen": dict(self.seen),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore buffers and counters; buffers longer than ``size`` keep their first ``size`` slots."""
        if int(state.get("size", self.size)) != self.size or int(state.get("seed", self.seed)) != self.seed:
            warnings.warn(
                f"Episodic memory saved with size={state.get('size')}, seed={state.get('seed')} is loaded into "
                f"one with size={self.size}, seed={self.seed}: the memories will not match an uninterrupted run.",
                stacklevel=2,
            )
        self.buffers = {str(t): [int(i) for i in b][: self.size] for t, b in state["buffers"].items()}
        self.seen = {str(t): int(n) for t, n in state["seen"].items()}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EpisodicMemory) and self.state_dict() == other.state_dict()

    def __repr__(self) -> str:
        sizes = {t: len(b) for t, b in self.buffers.items()}
        return f"EpisodicMemory(size={self.size}, seed={self.seed}, stored={sizes}, seen={self.seen})"

"""Mixed batches (``--data.batch_mixing mixed``): every row of a step draws its task by the schedule, and the
plain mean loss over rows has the per-task schedule's expected gradient (``docs/design.md`` §3)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sampling import streams
from pal_lightning.data.sampling.per_task import BATCH_MIXINGS, MIXED, MultiTaskBatchSampler, TaskBatch
from pal_lightning.data.sampling.phase_plan import INTERLEAVED, SEQUENTIAL
from pal_lightning.data.sampling.schedules import SamplingSchedule


class MixedBatch(NamedTuple):
    """What the mixed sampler yields: one :class:`TaskBatch` per task present, in the tasks' order (the
    dataset stacks them with :func:`pal_lightning.core.batch.mix_batches`)."""

    parts: tuple[TaskBatch, ...]

    @property
    def split(self) -> str:
        return self.parts[0].split


def one_batch_size(batch_sizes: Mapping[str, int]) -> int:
    """The one per-rank batch size of mixed batches; a PalUserError for per-task batch sizes that differ."""
    sizes = {int(b) for b in batch_sizes.values()}
    if len(sizes) != 1:
        raise PalUserError(
            f"batch_mixing 'mixed' draws each row's task, so a batch has one size for all tasks; got per-task "
            f"batch sizes {dict(batch_sizes)}. Give one --data.batch_size, or use --data.batch_mixing per_task."
        )
    return sizes.pop()


def check_batch_mixing(batch_mixing: str, schedule: str, sampling: str) -> None:
    """Refuse an unknown ``batch_mixing``, or ``mixed`` with an option it has no form of."""
    if batch_mixing not in BATCH_MIXINGS:
        raise PalUserError(
            f"Unknown batch_mixing {batch_mixing!r}; choose one of {', '.join(BATCH_MIXINGS)}."
        )
    if batch_mixing != MIXED:
        return
    if schedule == SEQUENTIAL:
        raise PalUserError(
            "batch_mixing 'mixed' draws every row's task from the interleaved sampling schedule; the sequential "
            "schedule trains one task after another. Use --data.batch_mixing per_task, or --data.schedule "
            "interleaved."
        )
    if sampling == "round_robin":
        raise PalUserError(
            "sampling 'round_robin' cycles through whole batches, one task each; with batch_mixing 'mixed' every "
            "row draws its task. Use --data.sampling uniform (the same frequencies), or --data.batch_mixing "
            "per_task."
        )


class MixedTaskBatchSampler(MultiTaskBatchSampler):
    """Yields :class:`MixedBatch` es whose rows draw their tasks by the schedule: the per-task sampler's
    arguments (by keyword after ``schedule``) but ``phases``, with ``lengths`` each example's padded width;
    a PalUserError for per-task batch sizes that differ, or the ``round_robin`` schedule."""

    batch_mixing = MIXED

    def __init__(
        self,
        sizes: Mapping[str, int],
        batch_sizes: Mapping[str, int],
        schedule: SamplingSchedule,
        **options: Any,
    ) -> None:
        if "phases" in options:
            raise TypeError(
                "MixedTaskBatchSampler takes no phases: a sequential schedule trains one task at a time."
            )
        check_batch_mixing(MIXED, INTERLEAVED, schedule.name)
        super().__init__(sizes, batch_sizes, schedule, **options)
        #: Rows per rank of every batch.
        self.batch_size = one_batch_size(self.batch_sizes)

    @property
    def global_batch(self) -> int:
        """Rows of one step over all ranks, ``B * W``."""
        return self.batch_size * self.num_replicas

    def row_tasks(self, epoch: int) -> np.ndarray:
        """``[S, B * W]``: the task index of every global row of ``epoch``, the same on every rank."""
        probs = self.epoch_probabilities(epoch)
        return streams.row_draws(self.seed, epoch, self.steps_per_epoch, self.global_batch, probs)

    def task_sequence(self, epoch: int) -> np.ndarray:
        """The task of most rows of each step (ties: the first), for reports only."""
        draws = self.row_tasks(epoch)
        return np.stack([(draws == i).sum(axis=1) for i in range(len(self.tasks))], axis=1).argmax(axis=1)

    def _positions_used(self, epoch: int, steps: int) -> dict[str, int]:
        counts = np.bincount(self.row_tasks(epoch)[:steps].ravel(), minlength=len(self.tasks))
        return {t: int(counts[i]) for i, t in enumerate(self.tasks)}

    def _make_cycle(self, task: str, cycle: int) -> np.ndarray:
        return streams.spaced_cycle(self.seed, task, cycle, self.sizes[task], self.global_batch)

    def batches(self, epoch: int, start: int = 0) -> Iterator[MixedBatch]:  # type: ignore[override]
        """This rank's mixed batches of ``epoch`` from step ``start`` on (pure: no state is changed)."""
        draws, pool = self.row_tasks(epoch), self.pool_batches
        first = start - start % pool  # pools start at multiples of pool_batches
        offsets = dict(self._epoch_offsets(epoch))
        for t, used in self._positions_used(epoch, first).items():
            offsets[t] += used
        lo, hi = self.rank * self.batch_size, (self.rank + 1) * self.batch_size
        for p0 in range(first, self.steps_per_epoch, pool):
            p1 = min(p0 + pool, self.steps_per_epoch)
            dealt = self._pool_examples(epoch, p0, draws[p0:p1], offsets)
            for step in range(max(p0, start), p1):
                row, parts = draws[step], []
                for i, t in enumerate(self.tasks):
                    mine = int(np.count_nonzero(row[lo:hi] == i))
                    if mine:
                        before = int(np.count_nonzero(row[:lo] == i))
                        idx = dealt[t][step - p0][before : before + mine]
                        parts.append(TaskBatch(t, self.split, tuple(int(j) for j in idx)))
                yield MixedBatch(tuple(parts))

    def _pool_examples(
        self, epoch: int, p0: int, draws: np.ndarray, offsets: dict[str, int]
    ) -> dict[str, list[np.ndarray]]:
        """``{task: [examples of each step of the pool from p0]}``; advances ``offsets`` past the pool."""
        order = np.arange(len(draws))
        if self.lengths is not None:  # grouped: sorted longest first, dealt to the steps in a random order
            order = streams.pool_order(self.seed, epoch, p0, len(draws))
        place = np.argsort(order)  # step s is dealt the place[s]-th slice
        dealt: dict[str, list[np.ndarray]] = {}
        for i, t in enumerate(self.tasks):
            counts = (draws == i).sum(axis=1)
            total = int(counts.sum())
            if not total:
                continue
            examples = self._take(t, offsets[t], total)
            offsets[t] += total
            ends = np.cumsum(counts[order])
            if self.lengths is None:
                slices = np.split(examples, ends[:-1])
            else:
                by_length = examples[np.argsort(-self.lengths[t][examples], kind="stable")]
                slices = streams.deal_apart(by_length, ends)
            dealt[t] = [slices[k] for k in place]
        return dealt

    def __iter__(self) -> Iterator[MixedBatch]:  # type: ignore[override]
        return super().__iter__()  # type: ignore[return-value]

"""Mixed batches (``--data.batch_mixing mixed``): every row of a training batch draws its own task.

The per-task sampler (:class:`~pal_lightning.data.batch_samplers.MultiTaskBatchSampler`) draws one task
per step with the schedule's probabilities ``p_t`` of the epoch (annealing included) and fills the batch
with that task's examples. :class:`MixedTaskBatchSampler` keeps the schedule and draws per row instead:

* Epoch ``e`` has ``S`` steps of ``B * W`` rows (``B`` the per-rank batch size, one for every task;
  ``W`` the world size). The task of every row is drawn i.i.d. from ``p_t`` of epoch ``e`` by a
  generator seeded by ``(seed, e)``, the same on every rank.
* Task ``t``'s rows take the next positions of its example stream, as the per-task sampler's steps do
  (random permutations of its examples one after another: without replacement within a pass,
  reshuffled when used up, continuing across epochs): the ``k``-th row of ``t`` in the epoch takes
  stream position ``offset_t(e) + k``, rows in step order, then row order.
* Rank ``r`` keeps global rows ``r * B .. (r + 1) * B - 1`` of each step: disjoint shares, ``S``
  batches on every rank.

So the plan is again a pure function of ``(seed, epoch, step)``: :meth:`state_dict` is the per-task
sampler's ``(epoch, position)`` and a resumed run yields the same batches.

Why the loss of a mixed batch is its plain mean over rows. The per-task schedule's step trains task
``t`` with probability ``p_t`` on the mean loss of ``B`` of its examples, so its expected gradient is
``sum_t p_t grad L_t`` (``L_t`` the task's expected per-example loss). A mixed batch's row ``i`` has
task ``t`` with probability ``p_t`` and then an example of ``t`` (uniform over the pass), so the
expected gradient of one row's loss is ``sum_t p_t grad L_t`` too, and so is that of the mean of ``B``
(or, under DDP, of ``B * W``) rows: ``(1 / B) sum_t n_t L_t^batch``, ``n_t`` the rows of ``t``
(``E[n_t / B] = p_t``). Weighting each present task's mean loss by ``p_t`` instead would drop the
weight of the tasks a batch happens to miss and bias the step. The module does the former
(:mod:`pal_lightning.module.mixed_step`). Same expectation, less variance between steps: every step
sees every task in proportion, instead of one task's gradient at a time.

Within a step, one global batch holds consecutive positions of each task's stream, so the boundary
between two passes over a task may fall inside it: each pass's first ``B * W`` positions are kept
disjoint from the previous pass's last ``B * W`` (:func:`_spaced_cycle`), so no example appears twice
in a global batch (a task with fewer than three global batches of examples may still repeat one).
Length grouping (``group_by_length``) has no mixed form: the options refuse it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import NamedTuple

import numpy as np

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.batch_samplers import (
    MIXED,
    MultiTaskBatchSampler,
    TaskBatch,
    _raw_cycle,
    _seed_words,
)
from pal_lightning.data.schedules import SamplingSchedule

__all__ = ["MixedBatch", "MixedTaskBatchSampler", "one_batch_size"]

_ROW_STREAM = 3  # after batch_samplers' task (1) and example (2) streams


class MixedBatch(NamedTuple):
    """What the mixed sampler yields: one :class:`TaskBatch` per task present, in the tasks' order; the
    dataset pads each and stacks them into one mixed batch (:func:`pal_lightning.core.batch.mix_batches`)."""

    parts: tuple[TaskBatch, ...]

    @property
    def split(self) -> str:
        return self.parts[0].split


def one_batch_size(batch_sizes: Mapping[str, int]) -> int:
    """The one per-rank batch size of mixed batches (every task's ``B_t`` must be the same).

    Raises:
        PalUserError: for per-task batch sizes that differ.
    """
    sizes = {int(b) for b in batch_sizes.values()}
    if len(sizes) != 1:
        raise PalUserError(
            f"batch_mixing 'mixed' draws each row's task, so a batch has one size for all tasks; got per-task "
            f"batch sizes {dict(batch_sizes)}. Give one --data.batch_size, or use --data.batch_mixing per_task."
        )
    return sizes.pop()


class MixedTaskBatchSampler(MultiTaskBatchSampler):
    """Yields :class:`MixedBatch` es whose rows draw their tasks by the schedule (module docstring).

    Takes the per-task sampler's arguments, except ``phases`` (a sequential schedule trains one task at a
    time) and ``lengths`` (no length grouping). ``steps_per_epoch`` defaults to the per-task sampler's
    one pass, ``sum_t ceil(N_t / (B W))``, so both modes take as many steps and rows per epoch.

    Raises:
        PalUserError: for per-task batch sizes that differ, or the ``round_robin`` schedule (a cycle of
            whole batches; ``uniform`` draws rows with the same frequencies).
    """

    batch_mixing = MIXED

    def __init__(
        self,
        sizes: Mapping[str, int],
        batch_sizes: Mapping[str, int],
        schedule: SamplingSchedule,
        steps_per_epoch: int | None = None,
        num_replicas: int = 1,
        rank: int = 0,
        seed: int = 42,
        split: str = "train",
    ) -> None:
        if schedule.is_round_robin:
            raise PalUserError(
                "sampling 'round_robin' cycles through whole batches, one task each; with batch_mixing 'mixed' "
                "every row draws its task. Use --data.sampling uniform (the same frequencies), or "
                "--data.batch_mixing per_task."
            )
        super().__init__(
            sizes,
            batch_sizes,
            schedule,
            steps_per_epoch=steps_per_epoch,
            num_replicas=num_replicas,
            rank=rank,
            seed=seed,
            split=split,
        )
        #: Rows per rank of every batch.
        self.batch_size = one_batch_size(self.batch_sizes)

    @property
    def global_batch(self) -> int:
        """Rows of one step over all ranks, ``B * W``."""
        return self.batch_size * self.num_replicas

    def row_tasks(self, epoch: int) -> np.ndarray:
        """``[S, B * W]``: the task index (into :attr:`tasks`) of every global row of ``epoch``, the same
        on every rank."""
        return _row_draws(
            self.seed,
            epoch,
            self.steps_per_epoch,
            self.global_batch,
            tuple(self.tasks),
            tuple(self.sizes.values()),
            self.schedule.name,
            self.schedule.num_epochs,
            tuple(sorted((self.schedule.weights or {}).items())),
            tuple(sorted((self.schedule.multipliers or {}).items())),
        )

    def task_sequence(self, epoch: int) -> np.ndarray:
        """The task of most rows of each step (ties: the first in :attr:`tasks`); for reports only, since
        every row has its own task (:meth:`row_tasks`)."""
        draws = self.row_tasks(epoch)
        counts = np.stack([(draws == i).sum(axis=1) for i in range(len(self.tasks))], axis=1)
        return counts.argmax(axis=1)

    def _positions_used(self, epoch: int, steps: int) -> dict[str, int]:
        counts = np.bincount(self.row_tasks(epoch)[:steps].ravel(), minlength=len(self.tasks))
        return {t: int(counts[i]) for i, t in enumerate(self.tasks)}

    def _cycle(self, task: str, cycle: int) -> np.ndarray:
        key = (self.seed, task, cycle)
        hit = self._cycles.get(key)
        if hit is None:
            hit = _spaced_cycle(self.seed, task, cycle, self.sizes[task], self.global_batch)
            if len(self._cycles) >= 4 * len(self.tasks):  # keep memory bounded
                self._cycles.clear()
            self._cycles[key] = hit
        return hit

    def batches(self, epoch: int, start: int = 0) -> Iterator[MixedBatch]:  # type: ignore[override]
        """This rank's mixed batches of ``epoch`` from step ``start`` on (pure: no state is changed)."""
        draws = self.row_tasks(epoch)
        offsets = dict(self._epoch_offsets(epoch))
        for t, used in self._positions_used(epoch, start).items():
            offsets[t] += used
        lo, hi = self.rank * self.batch_size, (self.rank + 1) * self.batch_size
        for step in range(start, self.steps_per_epoch):
            row = draws[step]
            parts = []
            for i, t in enumerate(self.tasks):
                before = int(np.count_nonzero(row[:lo] == i))
                mine = int(np.count_nonzero(row[lo:hi] == i))
                if mine:
                    idx = self._take(t, offsets[t] + before, mine)
                    parts.append(TaskBatch(t, self.split, tuple(int(j) for j in idx)))
                offsets[t] += int(np.count_nonzero(row == i))
            yield MixedBatch(tuple(parts))

    def __iter__(self) -> Iterator[MixedBatch]:  # type: ignore[override]
        return super().__iter__()  # type: ignore[return-value]


@functools.lru_cache(maxsize=16)
def _row_draws(
    seed: int,
    epoch: int,
    steps: int,
    global_batch: int,
    tasks: tuple[str, ...],
    sizes: tuple[int, ...],
    schedule: str,
    num_epochs: int,
    weights: tuple[tuple[str, float], ...],
    multipliers: tuple[tuple[str, float], ...],
) -> np.ndarray:
    sched = SamplingSchedule(
        schedule, num_epochs=num_epochs, weights=dict(weights) or None, multipliers=dict(multipliers) or None
    )
    probs = sched.probabilities(dict(zip(tasks, sizes, strict=True)), epoch)
    p = np.asarray([probs[t] for t in tasks], dtype=np.float64)
    rng = np.random.Generator(
        np.random.PCG64(np.random.SeedSequence([*_seed_words(seed), _ROW_STREAM, epoch]))
    )
    draws = rng.choice(len(tasks), size=(steps, global_batch), p=p / p.sum()).astype(np.int32)
    draws.setflags(write=False)
    return draws


def _spaced_cycle(seed: int, task: str, cycle: int, n: int, window: int) -> np.ndarray:
    """Pass ``cycle`` over a task's ``n`` examples, its first ``window`` positions disjoint from the last
    ``window`` of the previous pass.

    A global batch holds at most ``window`` consecutive positions of a task's stream, wherever the
    boundary between passes falls in it. Clashes are swapped with examples from the middle of the pass
    (never its last ``window``), so every pass's tail is its raw permutation's and each pass depends on
    the previous raw one only. With ``n < 3 * window`` not every clash may find a partner.
    """
    perm = _raw_cycle(seed, task, cycle, n)
    if cycle == 0 or n < 2 * window:
        return perm
    perm = perm.copy()
    prev_tail = set(_raw_cycle(seed, task, cycle - 1, n)[n - window :].tolist())
    clashes = [i for i in range(window) if int(perm[i]) in prev_tail]
    if clashes:
        free = (j for j in range(window, n - window) if int(perm[j]) not in prev_tail)
        for i, j in zip(clashes, free, strict=False):
            perm[i], perm[j] = perm[j], perm[i]
    return perm

"""The per-task batch sampler (one task per step, alike on every rank, resumable) and the evaluation batches
(every example once across ranks). ``docs/design.md`` §3 has the maths."""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from torch.utils.data import Sampler

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sampling import streams
from pal_lightning.data.sampling.phase_plan import Phase, default_steps_per_epoch, make_phases
from pal_lightning.data.sampling.schedules import SamplingSchedule

log = logging.getLogger(__name__)

#: The values of ``--data.batch_mixing``: one task's rows per batch, or every row's task drawn on its own.
PER_TASK, MIXED = "per_task", "mixed"
BATCH_MIXINGS = (PER_TASK, MIXED)


class TaskBatch(NamedTuple):
    """What a batch sampler yields: the examples ``indices`` of one split of one task."""

    task: str
    split: str
    indices: tuple[int, ...]


class EpochHandle:
    """Lightning calls ``set_epoch`` on ``batch_sampler.sampler`` only: this forwards it to the batch sampler."""

    def __init__(self, owner: MultiTaskBatchSampler) -> None:
        self._owner = owner

    def set_epoch(self, epoch: int) -> None:
        self._owner.set_epoch(epoch)


class MultiTaskBatchSampler(Sampler[TaskBatch]):
    """Yields :class:`TaskBatch` es of one task per step, the same on every rank, resumable.

    Args:
        sizes: training examples per task (``N_t``), in a fixed task order.
        batch_sizes: per-rank batch size per task (``B_t``).
        schedule: how tasks are drawn.
        steps_per_epoch: steps per epoch per rank; ``None`` = one pass over the data.
        num_replicas: world size ``W``.
        rank: this process's rank.
        seed: base seed of every generator.
        lengths: token counts per example per task; given, batches are grouped by length.
        pool_batches: global batches per length-grouping pool.
        split: split name put in each :class:`TaskBatch`.
        phases: ``(task, batches)`` of a sequential schedule; given, ``schedule`` is not used and
            ``steps_per_epoch`` defaults to their sum.
        probabilities: the task probabilities of a 0-based epoch, what the steps are drawn with (the data
            module passes its ``task_probabilities_for_epoch``, the values the training log shows); default
            ``schedule.probabilities(sizes, epoch)``. A pure function of the epoch: every rank and a resumed
            run draw the same tasks. ``round_robin`` cycles and does not ask it.
    """

    #: How a batch is made: rows of one task (this class) or of several (``mixed``).
    batch_mixing: str = PER_TASK

    def __init__(
        self,
        sizes: Mapping[str, int],
        batch_sizes: Mapping[str, int],
        schedule: SamplingSchedule,
        steps_per_epoch: int | None = None,
        num_replicas: int = 1,
        rank: int = 0,
        seed: int = 42,
        lengths: Mapping[str, np.ndarray] | None = None,
        pool_batches: int = 50,
        split: str = "train",
        phases: Sequence[tuple[str, int]] | None = None,
        probabilities: Callable[[int], Mapping[str, float]] | None = None,
    ) -> None:
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"Need 0 <= rank < num_replicas, got rank={rank}, num_replicas={num_replicas}.")
        self.sizes = {t: int(n) for t, n in sizes.items()}
        if not any(self.sizes.values()):
            raise PalUserError(f"No training examples in any task (sizes {self.sizes}).")
        self.tasks = list(self.sizes)
        self.batch_sizes = {t: int(batch_sizes[t]) for t in self.tasks}
        if any(b < 1 for b in self.batch_sizes.values()):
            raise PalUserError(f"Batch sizes must be >= 1, got {self.batch_sizes}.")
        if pool_batches < 1:
            raise PalUserError(f"pool_batches must be >= 1, got {pool_batches}.")
        self.schedule, self.num_replicas, self.rank, self.seed = schedule, num_replicas, rank, int(seed)
        self.lengths = dict(lengths) if lengths is not None else None
        self.pool_batches, self.split = pool_batches, split
        #: The sequential schedule's phases (empty for interleaved sampling).
        self.phases: list[Phase] = make_phases(phases) if phases else []
        unknown = sorted({p.task for p in self.phases} - set(self.tasks))
        if unknown:
            raise PalUserError(f"Continual phases name unknown tasks {unknown}; the tasks are {self.tasks}.")
        if steps_per_epoch is None and self.phases:
            steps_per_epoch = self.phases[-1].end
        elif steps_per_epoch is None:
            steps_per_epoch = default_steps_per_epoch(self.sizes, self.batch_sizes, num_replicas)
        self.steps_per_epoch = int(steps_per_epoch)
        if self.steps_per_epoch < 1:
            raise PalUserError(f"steps_per_epoch must be >= 1, got {self.steps_per_epoch}.")
        #: The task probabilities of an epoch (``None``: the schedule's).
        self.probabilities = probabilities
        self._probabilities: dict[int, streams.Probabilities] = {}
        self.epoch = 0
        self.sampler = EpochHandle(self)
        #: Batches of the epoch the consumer really used (the Trainer prefetches past what it used).
        self.position_fn: Callable[[], int | None] | None = None
        self._resume_position = self._position = 0
        self._offset_cache: dict[int, dict[str, int]] = {}
        self._cycles: dict[tuple[int, str, int], np.ndarray] = {}

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next iteration yields; a new epoch starts at its first step."""
        if epoch != self.epoch:
            self.epoch = int(epoch)
            self._resume_position = self._position = 0

    def __len__(self) -> int:
        return self.steps_per_epoch

    def state_dict(self) -> dict[str, Any]:
        """Where the current epoch stands: enough to continue exactly (everything else is seeded)."""
        position = self.position_fn() if self.position_fn is not None else None
        return {
            "epoch": self.epoch,
            "position": int(self._position if position is None else position),
            "seed": self.seed,
            "sizes": dict(self.sizes),
            "batch_sizes": dict(self.batch_sizes),
            "num_replicas": self.num_replicas,
            "steps_per_epoch": self.steps_per_epoch,
            "schedule": "sequential" if self.phases else self.schedule.name,
            "phases": [[p.task, p.start, p.end] for p in self.phases],
            "batch_mixing": self.batch_mixing,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``'s step; a PalUserError when sizes, batch sizes, mixing or phases differ."""
        why = "Cannot resume the task sampler:"
        if dict(state["sizes"]) != self.sizes or dict(state["batch_sizes"]) != self.batch_sizes:
            raise PalUserError(
                f"{why} the training data or batch sizes changed since the checkpoint (saved sizes "
                f"{state['sizes']}, batch sizes {state['batch_sizes']}; now {self.sizes}, {self.batch_sizes}). "
                "Resume with the same tasks, files, limit_examples and batch_size."
            )
        saved_mixing = str(state.get("batch_mixing", PER_TASK))
        if saved_mixing != self.batch_mixing:
            raise PalUserError(
                f"{why} the checkpoint trained with batch_mixing {saved_mixing!r}, this run asks for "
                f"{self.batch_mixing!r}. Resume with --data.batch_mixing {saved_mixing}, or start a new fit "
                "without --ckpt_path."
            )
        saved_phases, phases = [list(p) for p in state.get("phases") or []], [list(p) for p in self.phases]
        if saved_phases != phases:
            raise PalUserError(
                f"{why} the continual schedule changed since the checkpoint (saved phases {saved_phases}, now "
                f"{phases}). Resume with the same schedule, task_order, steps_per_task/epochs_per_task, "
                "batch_size and number of devices."
            )
        saved = (state["num_replicas"], state["steps_per_epoch"])
        now = (self.num_replicas, self.steps_per_epoch)
        if saved != now:
            log.warning(
                "Resuming with a different world size or steps_per_epoch (saved %s/%s, now %s/%s): the task "
                "order is kept but the examples seen will differ from the uninterrupted run.",
                *saved,
                *now,
            )
        self.seed = int(state["seed"])
        self._offset_cache.clear()
        epoch, position = int(state["epoch"]), int(state["position"])
        if position >= self.steps_per_epoch:  # saved at the very end of an epoch
            epoch, position = epoch + 1, 0
        self.epoch, self._resume_position, self._position = epoch, position, position

    def task_sequence(self, epoch: int) -> np.ndarray:
        """Task index (into :attr:`tasks`) of every step of ``epoch``; the same on every rank."""
        if self.phases:
            ids = tuple(self.tasks.index(p.task) for p in self.phases)
            return streams.phase_sequence(epoch, self.steps_per_epoch, ids, tuple(p.end for p in self.phases))
        if self.schedule.is_round_robin:
            return streams.cycle_sequence(epoch, self.steps_per_epoch, len(self.tasks))
        return streams.task_sequence(self.seed, epoch, self.steps_per_epoch, self.epoch_probabilities(epoch))

    def epoch_probabilities(self, epoch: int) -> streams.Probabilities:
        """The probabilities ``epoch``'s tasks are drawn with, in the order of :attr:`tasks` (asked once per
        epoch, so a batch and the stream positions before it always agree)."""
        if epoch not in self._probabilities:
            probs: Mapping[str, float]
            if self.probabilities is None:
                probs = self.schedule.probabilities(self.sizes, epoch)
                source = f"sampling {self.schedule.name!r}"
            else:
                probs, source = self.probabilities(epoch), "task_probabilities_for_epoch"
            self._probabilities[epoch] = streams.probability_vector(self.tasks, probs, source)
        return self._probabilities[epoch]

    def _epoch_offsets(self, epoch: int) -> dict[str, int]:
        """Stream position of every task at the start of ``epoch`` (replays earlier epochs)."""
        if epoch in self._offset_cache:
            return self._offset_cache[epoch]
        start = max((e for e in self._offset_cache if e < epoch), default=0)
        offsets = dict(self._offset_cache.get(start, dict.fromkeys(self.tasks, 0)))
        for e in range(start, epoch):
            for t, used in self._positions_used(e, self.steps_per_epoch).items():
                offsets[t] += used
            self._offset_cache[e + 1] = dict(offsets)
        self._offset_cache.setdefault(epoch, dict(offsets))
        return offsets

    def _positions_used(self, epoch: int, steps: int) -> dict[str, int]:
        """Stream positions per task that the first ``steps`` steps of ``epoch`` use, all ranks together."""
        counts = np.bincount(self.task_sequence(epoch)[:steps], minlength=len(self.tasks))
        return {t: int(counts[i]) * self.batch_sizes[t] * self.num_replicas for i, t in enumerate(self.tasks)}

    def _cycle(self, task: str, cycle: int) -> np.ndarray:
        key = (self.seed, task, cycle)
        if key not in self._cycles:
            if len(self._cycles) >= 4 * len(self.tasks):  # keep memory bounded
                self._cycles.clear()
            self._cycles[key] = self._make_cycle(task, cycle)
        return self._cycles[key]

    def _make_cycle(self, task: str, cycle: int) -> np.ndarray:
        global_batch = self.batch_sizes[task] * self.num_replicas
        if self.lengths is None:
            return streams.plain_cycle(self.seed, task, cycle, self.sizes[task], global_batch)
        return streams.grouped_cycle(
            self.seed, task, cycle, self.sizes[task], global_batch, self.pool_batches, self.lengths[task]
        )

    def _take(self, task: str, start: int, count: int) -> np.ndarray:
        """Stream positions ``start .. start + count - 1`` of ``task`` as example indices."""
        n, out, pos, end = self.sizes[task], [], start, start + count
        while pos < end:
            cycle, within = divmod(pos, n)
            chunk = min(end - pos, n - within)
            out.append(self._cycle(task, cycle)[within : within + chunk])
            pos += chunk
        return np.concatenate(out)

    def batches(self, epoch: int, start: int = 0) -> Iterator[TaskBatch]:
        """This rank's batches of ``epoch`` from step ``start`` on (pure: no state is changed)."""
        seq = self.task_sequence(epoch)
        offsets = dict(self._epoch_offsets(epoch))
        for t, used in self._positions_used(epoch, start).items():
            offsets[t] += used
        for step in range(start, self.steps_per_epoch):
            t = self.tasks[int(seq[step])]
            b = self.batch_sizes[t]
            idx = self._take(t, offsets[t] + self.rank * b, b)
            offsets[t] += b * self.num_replicas
            yield TaskBatch(t, self.split, tuple(int(i) for i in idx))

    def __iter__(self) -> Iterator[TaskBatch]:
        epoch, start = self.epoch, self._resume_position
        self._resume_position, self._position = 0, start
        for batch in self.batches(epoch, start):
            self._position += 1
            yield batch


def eval_batches(
    splits: Mapping[tuple[str, str], int],
    batch_sizes: Mapping[str, int],
    num_replicas: int = 1,
    rank: int = 0,
    lengths: Mapping[tuple[str, str], np.ndarray] | None = None,
) -> list[TaskBatch]:
    """This rank's evaluation batches: every example of every split exactly once across ranks.

    Rank ``r`` takes the block ``[r N / W, (r + 1) N / W)`` of each split (longest first with ``lengths``) in
    ``ceil(ceil(N / W) / B)`` batches, the same number on every rank; splits are interleaved batch by batch
    so that ``limit_val_batches`` still sees every task.
    """
    per_split: list[list[TaskBatch]] = []
    for (task, split), n in splits.items():
        if n == 0:
            continue
        lo, hi = (rank * n) // num_replicas, ((rank + 1) * n) // num_replicas
        idx = np.arange(lo, hi)
        if lengths is not None:
            idx = idx[np.argsort(-lengths[(task, split)][lo:hi], kind="stable")]
        num_batches = math.ceil(math.ceil(n / num_replicas) / batch_sizes[task])
        chunks = np.array_split(idx, min(num_batches, max(len(idx), 1)))
        per_split.append([TaskBatch(task, split, tuple(int(i) for i in c)) for c in chunks if len(c)])
    return [b for group in itertools.zip_longest(*per_split) for b in group if b is not None]

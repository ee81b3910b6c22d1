"""Batch samplers: one task per training step (or one per row: mixed batches), identical on every rank,
exactly resumable.

Training (:class:`MultiTaskBatchSampler`)
    Epoch ``e`` has ``S`` steps. The task of each step is drawn from the schedule's
    probabilities with a generator seeded by ``(seed, e)`` (round-robin: task
    ``(e * S + s) mod T``), so every rank computes the same task sequence without
    communicating. Each task has an endless *example stream*: the concatenation of
    random permutations of its examples (cycle ``c`` is seeded by ``(seed, task, c)``),
    i.e. sampling without replacement that reshuffles a task when it is used up. The
    ``k``-th step of task ``t`` takes the next ``B_t * W`` stream positions (``B_t`` the
    task's per-rank batch size, ``W`` the world size) and rank ``r`` keeps positions
    ``r * B_t .. (r + 1) * B_t - 1`` of them: shares are disjoint and every rank yields
    exactly ``S`` batches. A task's stream continues across epochs (the position at the
    start of epoch ``e`` is recomputed by replaying the task sequences of epochs
    ``0..e-1``), so the state of an epoch is just ``(epoch, steps consumed)``, which
    :meth:`~MultiTaskBatchSampler.state_dict` saves and a resumed run restores exactly.

    Sequential (continual) schedule: given ``phases`` (task ``t_i`` for ``n_i`` training
    batches, one after another), global training batch ``g = e * S + s`` belongs to the
    phase ``i`` with ``start_i <= g mod P < end_i`` (``P = sum_i n_i``, ``start_i =
    sum_{k<i} n_k``, ``end_i = start_i + n_i``): the task sequence is still a pure
    function of ``(epoch, step)``, so resume and DDP work unchanged. By default
    ``S = P``: the whole continual run is one epoch. With a smaller ``S`` the phases
    span several epochs; past ``P`` the curriculum starts again.

    Optional length grouping sorts each pool of ``pool_batches * B_t * W`` stream
    positions by length, cuts it into global batches and shuffles their order, so a
    batch holds examples of similar length (less padding) while the order of batches
    stays random.

Mixed batches (:class:`MixedTaskBatchSampler`, ``--data.batch_mixing mixed``): every row draws its task.
    The per-task sampler (:class:`MultiTaskBatchSampler`) draws one task
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
    (:mod:`pal_lightning.module.multitask`). Same expectation, less variance between steps: every step
    sees every task in proportion, instead of one task's gradient at a time.

    Within a step, one global batch holds consecutive positions of each task's stream, so the boundary
    between two passes over a task may fall inside it: each pass's first ``B * W`` positions are kept
    disjoint from the previous pass's last ``B * W`` (:func:`_spaced_cycle`), so no example appears twice
    in a global batch (a task with fewer than three global batches of examples may still repeat one).

    Length grouping of mixed batches (``group_by_length``) keeps every row's task draw and every batch's
    task mix, and only chooses *which* of a task's examples a batch gets. The steps of an epoch are cut
    into pools of ``pool_batches`` consecutive steps; a pool's rows of task ``t`` take the same stream
    positions as without grouping. The pool's steps are put in a random order (seeded by ``(seed, epoch,
    pool)``) and every task's examples of the pool, sorted longest first, are dealt to the steps in that
    order, each step taking as many as it drew rows of the task::

        drawn tasks (pool of 4 steps, B * W = 4)      dealt in the step order 2, 0, 3, 1
        step 0: a a b c                               step 2: a's 2 longest, b's and c's longest
        step 1: b a b b                               step 0: a's next 2, b's next, c's next
        step 2: a b c a       ->  rows keep their     step 3: a's next, b's next, c's last 2
        step 3: c c a b           tasks; examples     step 1: a's shortest, b's 3 shortest
                                  follow the order

    So one step holds the long examples of every task and another the short ones (less padding: a mixed
    batch pads to its longest row, a siamese pair's width being its longer sentence), while the rows' tasks,
    and so the expected gradient argued above, are those of the ungrouped draw; only the pairing of
    examples into batches changes, as with one-task grouping. An example met twice in a pool (a pass
    boundary) sorts next to itself: :func:`_deal_apart` moves one copy to a neighbouring step.

Evaluation (:func:`eval_batches`)
    Every example exactly once: rank ``r`` takes the ``r``-th contiguous block of each
    split (no padding, no duplicates), sorted by length, cut into the same number of
    batches on every rank.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from torch.utils.data import Sampler

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.schedules import SamplingSchedule

log = logging.getLogger(__name__)

_SCHEDULE_STREAM = 1
_EXAMPLE_STREAM = 2
_ROW_STREAM = 3
_POOL_STREAM = 4

#: The values of ``--data.batch_mixing``: every batch holds one task's rows (``per_task``), or every row's
#: task is drawn on its own (``mixed``, :class:`MixedTaskBatchSampler`).
PER_TASK, MIXED = "per_task", "mixed"
BATCH_MIXINGS = (PER_TASK, MIXED)


class Phase(NamedTuple):
    """One phase of a sequential schedule: ``task`` trains on global training batches ``start .. end - 1``.

    Counted in training batches (per rank, ``epoch * steps_per_epoch + batch_idx``), not optimizer
    steps: with ``accumulate_grad_batches = k`` a phase of ``n`` batches is ``n / k`` optimizer steps.
    """

    task: str
    start: int
    end: int


def make_phases(plan: Sequence[tuple[str, int]]) -> list[Phase]:
    """Consecutive :class:`Phase` s from ``(task, batches)`` pairs: ``start_i = sum_{k<i} n_k``.

    Raises:
        PalUserError: a phase with fewer than one batch.
    """
    phases, start = [], 0
    for task, n in plan:
        if int(n) < 1:
            raise PalUserError(f"Every continual phase needs >= 1 training batch; {task!r} got {n}.")
        phases.append(Phase(str(task), start, start + int(n)))
        start += int(n)
    return phases


class TaskBatch(NamedTuple):
    """What a batch sampler yields: the examples ``indices`` of one split of one task."""

    task: str
    split: str
    indices: tuple[int, ...]


def _seed_words(seed: int) -> list[int]:
    # SeedSequence wants non-negative integers; keep negative seeds distinct from positive ones.
    return [seed % (1 << 63), 1 if seed < 0 else 0]


def default_steps_per_epoch(
    sizes: Mapping[str, int], batch_sizes: Mapping[str, int], num_replicas: int
) -> int:
    """Steps of one pass over the data: ``sum_t ceil(N_t / (B_t * W))``."""
    return sum(math.ceil(n / (batch_sizes[t] * num_replicas)) for t, n in sizes.items() if n > 0)


class EpochHandle:
    """The object Lightning finds at ``batch_sampler.sampler`` and calls ``set_epoch`` on.

    Lightning only calls ``set_epoch`` on ``dataloader.sampler`` and
    ``dataloader.batch_sampler.sampler``; this handle forwards the call to its batch sampler.
    """

    def __init__(self, owner: MultiTaskBatchSampler) -> None:
        self._owner = owner

    def set_epoch(self, epoch: int) -> None:
        self._owner.set_epoch(epoch)


class MultiTaskBatchSampler(Sampler[TaskBatch]):
    """Yields :class:`TaskBatch` es of one task per step; see the module docstring for the maths.

    Args:
        sizes: training examples per task (``N_t``), in a fixed task order.
        batch_sizes: per-rank batch size per task (``B_t``).
        schedule: how tasks are drawn.
        steps_per_epoch: steps per epoch per rank; ``None`` = one pass over the data.
        num_replicas: world size ``W`` (number of ranks).
        rank: this process's rank.
        seed: base seed of every generator.
        lengths: token counts per example per task; given, batches are grouped by length.
        pool_batches: global batches per length-grouping pool.
        split: split name put in each :class:`TaskBatch`.
        phases: ``(task, batches)`` pairs of a sequential (continual) schedule; given, ``schedule``
            is not used and ``steps_per_epoch`` defaults to the sum of the phase lengths.
    """

    #: How a batch is made: rows of one task (this class) or of several (``mixed``, :class:`MixedTaskBatchSampler`).
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
    ) -> None:
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"Need 0 <= rank < num_replicas, got rank={rank}, num_replicas={num_replicas}.")
        self.sizes = {t: int(n) for t, n in sizes.items()}
        if not self.sizes or all(n == 0 for n in self.sizes.values()):
            raise PalUserError(f"No training examples in any task (sizes {self.sizes}).")
        self.tasks = list(self.sizes)
        self.batch_sizes = {t: int(batch_sizes[t]) for t in self.tasks}
        if any(b < 1 for b in self.batch_sizes.values()):
            raise PalUserError(f"Batch sizes must be >= 1, got {self.batch_sizes}.")
        self.schedule = schedule
        self.num_replicas = num_replicas
        self.rank = rank
        self.seed = int(seed)
        self.lengths = dict(lengths) if lengths is not None else None
        if pool_batches < 1:
            raise PalUserError(f"pool_batches must be >= 1, got {pool_batches}.")
        self.pool_batches = pool_batches
        self.split = split
        #: The sequential schedule's phases (empty for interleaved sampling).
        self.phases: list[Phase] = make_phases(phases) if phases else []
        unknown = sorted({p.task for p in self.phases} - set(self.tasks))
        if unknown:
            raise PalUserError(f"Continual phases name unknown tasks {unknown}; the tasks are {self.tasks}.")
        if steps_per_epoch is not None:
            self.steps_per_epoch = int(steps_per_epoch)
        elif self.phases:
            self.steps_per_epoch = self.phases[-1].end
        else:
            self.steps_per_epoch = default_steps_per_epoch(self.sizes, self.batch_sizes, num_replicas)
        if self.steps_per_epoch < 1:
            raise PalUserError(f"steps_per_epoch must be >= 1, got {self.steps_per_epoch}.")
        self.epoch = 0
        self.sampler = EpochHandle(self)
        #: Optional callable giving the number of batches of the current epoch the consumer has
        #: really used (the Trainer prefetches, so what was yielded can run ahead of that).
        self.position_fn: Callable[[], int | None] | None = None
        self._resume_position = 0
        self._position = 0
        self._offset_cache: dict[int, dict[str, int]] = {}
        self._cycles: dict[tuple[int, str, int], np.ndarray] = {}

    # ----------------------------------------------------------------- epoch and state

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next iteration yields; a new epoch starts at its first step."""
        if epoch != self.epoch:
            self.epoch = int(epoch)
            self._resume_position = 0
            self._position = 0

    def __len__(self) -> int:
        return self.steps_per_epoch

    def state_dict(self) -> dict[str, Any]:
        """Where the current epoch stands: enough to continue exactly (everything else is seeded)."""
        position = self.position_fn() if self.position_fn is not None else None
        if position is None:
            position = self._position
        return {
            "epoch": self.epoch,
            "position": int(position),
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
        """Continue from ``state``: the next iteration starts at the saved step of the saved epoch.

        Raises:
            PalUserError: when the tasks, their sizes or batch sizes differ from the saved run.
        """
        if dict(state["sizes"]) != self.sizes or dict(state["batch_sizes"]) != self.batch_sizes:
            raise PalUserError(
                "Cannot resume the task sampler: the training data or batch sizes changed since the checkpoint "
                f"(saved sizes {state['sizes']}, batch sizes {state['batch_sizes']}; now {self.sizes}, "
                f"{self.batch_sizes}). Resume with the same tasks, files, limit_examples and batch_size."
            )
        saved_mixing = str(state.get("batch_mixing", PER_TASK))
        if saved_mixing != self.batch_mixing:
            raise PalUserError(
                f"Cannot resume the task sampler: the checkpoint trained with batch_mixing {saved_mixing!r}, this "
                f"run asks for {self.batch_mixing!r} (their batches differ). Resume with "
                f"--data.batch_mixing {saved_mixing}, or start a new fit without --ckpt_path."
            )
        saved_phases = [list(p) for p in state.get("phases") or []]
        if saved_phases != [list(p) for p in self.phases]:
            raise PalUserError(
                "Cannot resume the task sampler: the continual schedule changed since the checkpoint "
                f"(saved phases {saved_phases}, now {[list(p) for p in self.phases]}). Resume with the same "
                "schedule, task_order, steps_per_task/epochs_per_task, batch_size and number of devices."
            )
        if state["num_replicas"] != self.num_replicas or state["steps_per_epoch"] != self.steps_per_epoch:
            log.warning(
                "Resuming with a different world size or steps_per_epoch (saved %s/%s, now %s/%s): the task "
                "order is kept but the examples seen will differ from the uninterrupted run.",
                state["num_replicas"],
                state["steps_per_epoch"],
                self.num_replicas,
                self.steps_per_epoch,
            )
        self.seed = int(state["seed"])
        self._offset_cache.clear()
        epoch, position = int(state["epoch"]), int(state["position"])
        if position >= self.steps_per_epoch:  # saved at the very end of an epoch
            epoch, position = epoch + 1, 0
        self.epoch = epoch
        self._resume_position = position
        self._position = position

    # ----------------------------------------------------------------- the plan

    def task_sequence(self, epoch: int) -> np.ndarray:
        """Task index (into :attr:`tasks`) of every step of ``epoch``; the same on every rank."""
        if self.phases:
            return _phase_sequence(
                epoch,
                self.steps_per_epoch,
                tuple(self.tasks.index(p.task) for p in self.phases),
                tuple(p.end for p in self.phases),
            )
        return _task_sequence(
            self.seed,
            epoch,
            self.steps_per_epoch,
            tuple(self.tasks),
            tuple(self.sizes.values()),
            self.schedule.name,
            self.schedule.num_epochs,
            tuple(sorted((self.schedule.weights or {}).items())),
            tuple(sorted((self.schedule.multipliers or {}).items())),
        )

    def _epoch_offsets(self, epoch: int) -> dict[str, int]:
        """Stream position of every task at the start of ``epoch`` (replays earlier epochs)."""
        if epoch in self._offset_cache:
            return self._offset_cache[epoch]
        known = [e for e in self._offset_cache if e < epoch]
        start = max(known) if known else 0
        offsets = dict(self._offset_cache.get(start, dict.fromkeys(self.tasks, 0)))
        for e in range(start, epoch):
            used = self._positions_used(e, self.steps_per_epoch)
            for t in self.tasks:
                offsets[t] += used[t]
            self._offset_cache[e + 1] = dict(offsets)
        self._offset_cache.setdefault(epoch, dict(offsets))
        return offsets

    def _positions_used(self, epoch: int, steps: int) -> dict[str, int]:
        """Stream positions of every task that the first ``steps`` steps of ``epoch`` use, all ranks together."""
        counts = np.bincount(self.task_sequence(epoch)[:steps], minlength=len(self.tasks))
        return {t: int(counts[i]) * self.batch_sizes[t] * self.num_replicas for i, t in enumerate(self.tasks)}

    def _cycle(self, task: str, cycle: int) -> np.ndarray:
        """Example order of one full pass (``cycle``) over ``task``'s examples."""
        key = (self.seed, task, cycle)
        hit = self._cycles.get(key)
        if hit is None:
            if self.lengths is None:
                hit = _plain_cycle(
                    self.seed, task, cycle, self.sizes[task], self.batch_sizes[task] * self.num_replicas
                )
            else:
                hit = _grouped_cycle(
                    self.seed,
                    task,
                    cycle,
                    self.sizes[task],
                    self.batch_sizes[task] * self.num_replicas,
                    self.pool_batches,
                    self.lengths[task],
                )
            if len(self._cycles) >= 4 * len(self.tasks):  # keep memory bounded
                self._cycles.clear()
            self._cycles[key] = hit
        return hit

    def _take(self, task: str, start: int, count: int) -> np.ndarray:
        """Stream positions ``start .. start + count - 1`` of ``task`` as example indices."""
        n = self.sizes[task]
        out = []
        pos, end = start, start + count
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
        # Stream positions consumed inside the epoch before ``start``.
        for t, used in self._positions_used(epoch, start).items():
            offsets[t] += used
        for step in range(start, self.steps_per_epoch):
            t = self.tasks[int(seq[step])]
            b = self.batch_sizes[t]
            global_start = offsets[t]
            offsets[t] += b * self.num_replicas
            idx = self._take(t, global_start + self.rank * b, b)
            yield TaskBatch(t, self.split, tuple(int(i) for i in idx))

    def __iter__(self) -> Iterator[TaskBatch]:
        epoch, start = self.epoch, self._resume_position
        self._resume_position = 0
        self._position = start
        for batch in self.batches(epoch, start):
            self._position += 1
            yield batch


@functools.lru_cache(maxsize=64)
def _task_sequence(
    seed: int,
    epoch: int,
    steps: int,
    tasks: tuple[str, ...],
    sizes: tuple[int, ...],
    schedule: str,
    num_epochs: int,
    weights: tuple[tuple[str, float], ...],
    multipliers: tuple[tuple[str, float], ...] = (),
) -> np.ndarray:
    if schedule == "round_robin":
        # A global cycle that continues across epochs: step s of epoch e is global step e * S + s.
        return (epoch * steps + np.arange(steps)) % len(tasks)
    sched = SamplingSchedule(
        schedule, num_epochs=num_epochs, weights=dict(weights) or None, multipliers=dict(multipliers) or None
    )
    probs = sched.probabilities(dict(zip(tasks, sizes, strict=True)), epoch)
    p = np.asarray([probs[t] for t in tasks], dtype=np.float64)
    rng = np.random.Generator(
        np.random.PCG64(np.random.SeedSequence([*_seed_words(seed), _SCHEDULE_STREAM, epoch]))
    )
    seq = rng.choice(len(tasks), size=steps, p=p / p.sum())
    seq.setflags(write=False)
    return seq


@functools.lru_cache(maxsize=64)
def _phase_sequence(epoch: int, steps: int, task_ids: tuple[int, ...], ends: tuple[int, ...]) -> np.ndarray:
    # Global batch g = e * S + s lies in phase i when ends[i-1] <= g mod P < ends[i].
    g = (epoch * steps + np.arange(steps)) % ends[-1]
    seq = np.asarray(task_ids)[np.searchsorted(np.asarray(ends), g, side="right")]
    seq.setflags(write=False)
    return seq


def _raw_cycle(seed: int, task: str, cycle: int, n: int) -> np.ndarray:
    """A random permutation of ``n`` examples, seeded by ``(seed, task, cycle)``."""
    words = [*_seed_words(seed), _EXAMPLE_STREAM, zlib.crc32(task.encode()), cycle]
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(words)))
    return rng.permutation(n)


def _plain_cycle(seed: int, task: str, cycle: int, n: int, global_batch: int) -> np.ndarray:
    """Cycle ``cycle`` of the example stream, with no example twice in a global batch.

    The global batch that straddles the boundary between cycles ``c - 1`` and ``c`` takes
    the last ``tail`` examples of cycle ``c - 1`` and the first ``head`` of cycle ``c``. Any
    of those first ``head`` examples that also sit in that tail is swapped with an example
    from the middle of cycle ``c``. Swaps never touch the tail of a cycle, so
    every tail is the raw permutation's and each cycle depends on the previous raw one only.
    (A task with fewer than two global batches of examples cannot avoid repeats.)
    """
    perm = _raw_cycle(seed, task, cycle, n)
    head = (-cycle * n) % global_batch
    if cycle == 0 or head == 0 or n < 2 * global_batch:
        return perm
    prev_tail = set(_raw_cycle(seed, task, cycle - 1, n)[n - (global_batch - head) :].tolist())
    tail_len = (n - head) % global_batch
    clashes = [i for i in range(head) if int(perm[i]) in prev_tail]
    if clashes:
        free = (j for j in range(head, n - tail_len) if int(perm[j]) not in prev_tail)
        for i, j in zip(clashes, free, strict=False):
            perm[i], perm[j] = perm[j], perm[i]
    return perm


def _grouped_cycle(
    seed: int, task: str, cycle: int, n: int, global_batch: int, pool_batches: int, lengths: np.ndarray
) -> np.ndarray:
    """A permutation of ``n`` examples whose global batches hold examples of similar length."""
    perm = _plain_cycle(seed, task, cycle, n, global_batch)
    words = [*_seed_words(seed), _EXAMPLE_STREAM, zlib.crc32(task.encode()), cycle, 1]
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(words)))
    # Global batches start at stream positions that are multiples of global_batch; this cycle
    # starts at position cycle * n, so its first (partial) global batch has ``head`` examples.
    head = min((-cycle * n) % global_batch, n)
    parts = [perm[:head]]
    body = perm[head:]
    full = (len(body) // global_batch) * global_batch
    pool = pool_batches * global_batch
    for start in range(0, full, pool):
        chunk = body[start : min(start + pool, full)]
        # Longest first inside the pool, then shuffle whole global batches.
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        order = rng.permutation(len(chunk) // global_batch)
        parts.extend(chunk[i * global_batch : (i + 1) * global_batch] for i in order)
    parts.append(body[full:])
    return np.concatenate(parts)


def eval_batches(
    splits: Mapping[tuple[str, str], int],
    batch_sizes: Mapping[str, int],
    num_replicas: int = 1,
    rank: int = 0,
    lengths: Mapping[tuple[str, str], np.ndarray] | None = None,
) -> list[TaskBatch]:
    """This rank's evaluation batches: every example of every split exactly once across ranks.

    Rank ``r`` takes the contiguous block ``[r N / W, (r + 1) N / W)`` of each split,
    sorted by length (longest first) when ``lengths`` is given, cut into
    ``ceil(ceil(N / W) / B)`` near-equal batches, a number that is the same on every rank
    (as long as ``N >= W``), so ranks run the same number of evaluation steps and the same
    task at each step. Splits are interleaved batch by batch, so a cap on the number of
    evaluation batches (``limit_val_batches``) still sees every task.
    """
    per_split: list[list[TaskBatch]] = []
    for (task, split), n in splits.items():
        if n == 0:
            continue
        lo, hi = (rank * n) // num_replicas, ((rank + 1) * n) // num_replicas
        idx = np.arange(lo, hi)
        if lengths is not None:
            idx = idx[np.argsort(-lengths[(task, split)][lo:hi], kind="stable")]
        per_rank = math.ceil(n / num_replicas)
        num_batches = math.ceil(per_rank / batch_sizes[task])
        chunks = np.array_split(idx, min(num_batches, max(len(idx), 1)))
        per_split.append([TaskBatch(task, split, tuple(int(i) for i in c)) for c in chunks if len(c)])
    # Interleave the splits (a, b, c, a, b, c, ...) so that limit_val_batches keeps every task.
    return [b for group in itertools.zip_longest(*per_split) for b in group if b is not None]


# ----------------------------------------------------------------- mixed batches
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
    time). ``lengths`` are each example's padded width in a mixed batch (a siamese pair's longer side);
    given, every pool of ``pool_batches`` steps deals long examples to the same steps (module docstring).
    ``steps_per_epoch`` defaults to the per-task sampler's one pass, ``sum_t ceil(N_t / (B W))``, so both
    modes take as many steps and rows per epoch.

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
        lengths: Mapping[str, np.ndarray] | None = None,
        pool_batches: int = 50,
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
            lengths=lengths,
            pool_batches=pool_batches,
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
        pool = self.pool_batches
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
                    before = int(np.count_nonzero(row[:lo] == i))
                    mine = int(np.count_nonzero(row[lo:hi] == i))
                    if mine:
                        idx = dealt[t][step - p0][before : before + mine]
                        parts.append(TaskBatch(t, self.split, tuple(int(j) for j in idx)))
                yield MixedBatch(tuple(parts))

    def _pool_examples(
        self, epoch: int, p0: int, draws: np.ndarray, offsets: dict[str, int]
    ) -> dict[str, list[np.ndarray]]:
        """``{task: [examples of each step of the pool]}``, each step's in its rows' order, for the pool of
        steps ``p0 ..`` whose row draws are ``draws`` (tasks with no row in the pool are left out); advances
        ``offsets`` past the pool's stream positions.

        Each task's examples of the pool are the next stream positions, dealt to the steps in an order:
        ungrouped, in stream order to the steps in step order (step ``k`` takes the positions after step
        ``k - 1``'s); grouped, sorted longest first, to the steps in one random order (module docstring).
        """
        order = np.arange(len(draws))
        if self.lengths is not None:
            words = [*_seed_words(self.seed), _POOL_STREAM, epoch, p0]
            order = np.random.Generator(np.random.PCG64(np.random.SeedSequence(words))).permutation(order)
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
                slices = _deal_apart(examples[np.argsort(-self.lengths[t][examples], kind="stable")], ends)
            dealt[t] = [slices[k] for k in place]
        return dealt

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


def _deal_apart(examples: np.ndarray, ends: np.ndarray) -> list[np.ndarray]:
    """``examples`` cut at ``ends`` (slice ``k`` is ``examples[ends[k-1]:ends[k]]``), with no example twice
    in one slice where a swap with a neighbouring slice avoids it.

    Sorted by length, two copies of an example (drawn on both sides of a pass boundary) are neighbours and
    would land in one batch. Each repeated copy is swapped with the nearest position of another slice whose
    example is new to this slice and whose slice lacks the copy: the lengths barely change, the multiset
    of examples (and so every stream position's use) does not. Repeats are rare (pool rows of a task that
    straddle one of its pass boundaries), so the common case is one ``np.unique`` per slice.
    """
    out = examples.copy()
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    slice_of = np.repeat(np.arange(len(ends)), ends - starts)

    def members(k: int) -> np.ndarray:
        return out[starts[k] : ends[k]]

    for k in range(len(ends)):
        if len(np.unique(members(k))) == ends[k] - starts[k]:
            continue
        seen: set[int] = set()
        for i in range(int(starts[k]), int(ends[k])):
            if int(out[i]) not in seen:
                seen.add(int(out[i]))
                continue
            here = set(members(k).tolist())
            for distance in range(1, len(out)):
                j = next(
                    (
                        j
                        for j in (i - distance, i + distance)
                        if 0 <= j < len(out)
                        and slice_of[j] != k
                        and int(out[j]) not in here
                        and int(out[i]) not in members(int(slice_of[j])).tolist()
                    ),
                    None,
                )
                if j is not None:
                    out[i], out[j] = out[j], out[i]
                    break
    return [out[starts[k] : ends[k]] for k in range(len(ends))]

"""The task schedule: every task interleaved (drawn per step by the sampling schedule), or the tasks of
``task_order`` one after another in phases (continual learning), each ``steps_per_task`` training batches
or ``epochs_per_task`` passes of ``ceil(N_t / (B_t W))`` global batches."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.task_values import per_task
from pal_lightning.tasks.specs import repeated_names

INTERLEAVED = "interleaved"
SEQUENTIAL = "sequential"
#: Values of ``schedule`` (the task schedule, not the sampling schedule of ``sampling``).
TASK_SCHEDULES = (INTERLEAVED, SEQUENTIAL)

#: Options that only mean something for the sequential schedule.
_SEQUENTIAL_ONLY = ("task_order", "steps_per_task", "epochs_per_task")


class Phase(NamedTuple):
    """One phase of a sequential schedule: ``task`` trains on global training batches ``start .. end - 1``
    (per rank, ``epoch * steps_per_epoch + batch_idx``; with ``accumulate_grad_batches = k`` a phase of
    ``n`` batches is ``n / k`` optimizer steps)."""

    task: str
    start: int
    end: int


def make_phases(plan: Sequence[tuple[str, int]]) -> list[Phase]:
    """Consecutive :class:`Phase` s from ``(task, batches)`` pairs.

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


def default_steps_per_epoch(
    sizes: Mapping[str, int], batch_sizes: Mapping[str, int], num_replicas: int
) -> int:
    """Steps of one pass over the data: ``sum_t ceil(N_t / (B_t * W))``."""
    return sum(math.ceil(n / (batch_sizes[t] * num_replicas)) for t, n in sizes.items() if n > 0)


@dataclass(frozen=True)
class PhasePlan:
    """The checked sequential-schedule options (an empty ``order`` for the interleaved schedule)."""

    order: tuple[str, ...] = ()
    """The tasks trained one after another, in order."""
    steps_per_task: Mapping[str, int] | None = None
    """Training batches of each phase, when given in batches."""
    epochs_per_task: float | None = None
    """Passes over each phase's training data, when given in passes (the default: 1)."""

    @property
    def sequential(self) -> bool:
        """Whether the tasks are trained one after another."""
        return bool(self.order)

    def lengths(
        self, train_sizes: Mapping[str, int], batch_sizes: Mapping[str, int], world: int
    ) -> list[tuple[str, int]]:
        """``(task, training batches)`` of every phase in order (empty for the interleaved schedule).

        Raises:
            RuntimeError: for phases given in passes before the training sizes are known.
        """
        if not self.sequential:
            return []
        if self.steps_per_task is not None:
            return [(t, self.steps_per_task[t]) for t in self.order]
        if not train_sizes:
            raise RuntimeError("The phases of epochs_per_task are known after setup('fit') (they need N_t).")
        assert self.epochs_per_task is not None
        passes = default_steps_per_epoch
        # the 1e-9 keeps e.g. 1.5 * 4 at 6
        return [
            (
                t,
                max(
                    1,
                    math.ceil(self.epochs_per_task * passes({t: train_sizes[t]}, batch_sizes, world) - 1e-9),
                ),
            )
            for t in self.order
        ]

    def phases(
        self, train_sizes: Mapping[str, int], batch_sizes: Mapping[str, int], world: int
    ) -> list[Phase]:
        """The phases with their start and end in training batches (empty for the interleaved schedule)."""
        return make_phases(self.lengths(train_sizes, batch_sizes, world))

    def steps_per_epoch(
        self, given: int | None, train_sizes: Mapping[str, int], batch_sizes: Mapping[str, int], world: int
    ) -> int:
        """Training batches per epoch per rank: ``given`` when set, else the whole continual run (the sum of
        the phases), else one pass over every task."""
        if given is not None:
            return int(given)
        if self.sequential:
            return self.phases(train_sizes, batch_sizes, world)[-1].end
        return default_steps_per_epoch(train_sizes, batch_sizes, world)


def check_task_schedule(
    schedule: str,
    task_order: Sequence[str] | str | None,
    steps_per_task: int | Mapping[str, int] | None,
    epochs_per_task: float | None,
) -> None:
    """The checks that need no task list: a known schedule, sequential-only options only with it,
    steps or passes per phase (not both), and a positive number of passes.

    Raises:
        PalUserError: naming the option and the fix.
    """
    if schedule not in TASK_SCHEDULES:
        raise PalUserError(f"Unknown schedule {schedule!r}; choose one of {', '.join(TASK_SCHEDULES)}.")
    if schedule != SEQUENTIAL:
        values = (task_order, steps_per_task, epochs_per_task)
        given = [name for name, value in zip(_SEQUENTIAL_ONLY, values, strict=True) if value is not None]
        if given:
            raise PalUserError(
                f"{', '.join(given)} only apply to schedule='sequential' (--data.schedule sequential); "
                f"the schedule is {schedule!r}."
            )
        return
    if steps_per_task is not None and epochs_per_task is not None:
        raise PalUserError("Give steps_per_task or epochs_per_task for schedule='sequential', not both.")
    if epochs_per_task is not None and not (math.isfinite(float(epochs_per_task)) and epochs_per_task > 0):
        raise PalUserError(f"epochs_per_task must be > 0, got {epochs_per_task}.")


def plan_phases(
    schedule: str,
    task_order: Sequence[str] | str | None,
    steps_per_task: int | Mapping[str, int] | None,
    epochs_per_task: float | None,
    task_names: Sequence[str],
) -> PhasePlan:
    """Check the task-schedule options against the tasks and return the plan: ``task_order`` (default every
    task) names each task at most once; a sequential phase is one pass unless told otherwise.

    Raises:
        PalUserError: naming the option and the fix.
    """
    check_task_schedule(schedule, task_order, steps_per_task, epochs_per_task)
    if schedule != SEQUENTIAL:
        return PhasePlan()
    if isinstance(task_order, str):
        task_order = [task_order]
    order = list(task_order) if task_order is not None else list(task_names)
    unknown = [t for t in order if t not in task_names]
    repeated = repeated_names(order)
    if not order or unknown or repeated:
        raise PalUserError(
            f"task_order must list some of the tasks {list(task_names)}, each at most once; got {order} "
            f"(unknown {unknown}, repeated {repeated})."
        )
    steps = per_task(steps_per_task, order, "steps_per_task") if steps_per_task is not None else None
    if steps is None and epochs_per_task is None:
        epochs_per_task = 1.0
    return PhasePlan(tuple(order), steps, None if epochs_per_task is None else float(epochs_per_task))

"""The task schedule: every task interleaved, or the tasks of ``task_order`` one after another in phases."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from pal_lightning.core.errors import PalUserError
from pal_lightning.tasks.specs import repeated_names

INTERLEAVED = "interleaved"
SEQUENTIAL = "sequential"
#: Values of ``schedule`` (the task schedule, not the sampling schedule of ``sampling``).
TASK_SCHEDULES = (INTERLEAVED, SEQUENTIAL)

_SEQUENTIAL_ONLY = ("task_order", "steps_per_task", "epochs_per_task")


class Phase(NamedTuple):
    """``task`` trains on training batches ``start .. end - 1`` (``epoch * steps_per_epoch + batch_idx``)."""

    task: str
    start: int
    end: int


def per_task(value: int | Mapping[str, int], tasks: Sequence[str], what: str) -> dict[str, int]:
    """An int, or a ``task -> int`` mapping naming each task or a ``default``, for every task of ``tasks``
    (``what``: the option, for messages); a PalUserError for an unknown or missing task, or a value below 1."""
    if isinstance(value, Mapping):
        default = value.get("default")
        unknown = [k for k in value if k != "default" and k not in tasks]
        missing = [t for t in tasks if t not in value and default is None]
        if unknown or missing:
            raise PalUserError(
                f"{what} (--data.{what}) per task must name the tasks {list(tasks)} (or give a 'default'); "
                f"unknown {unknown}, missing {missing}."
            )
        out = {t: int(value.get(t, default)) for t in tasks}  # type: ignore[arg-type]
    else:
        out = dict.fromkeys(tasks, int(value))
    bad = {t: b for t, b in out.items() if b < 1}
    if bad:
        given = bad if isinstance(value, Mapping) else value  # the value as the user wrote it
        raise PalUserError(
            f"{what} (--data.{what}) must be at least 1, got {given!r}. Give a positive number."
        )
    return out


def make_phases(plan: Sequence[tuple[str, int]]) -> list[Phase]:
    """Consecutive :class:`Phase` s from ``(task, batches)`` pairs; raises PalUserError for an empty phase."""
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
    """Training batches of each phase, if given so."""
    epochs_per_task: float | None = None
    """Passes over each phase's training data, if given so."""

    @property
    def sequential(self) -> bool:
        """Whether the tasks are trained one after another."""
        return bool(self.order)

    def lengths(
        self, train_sizes: Mapping[str, int], batch_sizes: Mapping[str, int], world: int
    ) -> list[tuple[str, int]]:
        """``(task, training batches)`` of every phase (empty when interleaved); needs the sizes for passes."""
        if not self.sequential:
            return []
        if self.steps_per_task is not None:
            return [(t, self.steps_per_task[t]) for t in self.order]
        if not train_sizes:
            raise RuntimeError("The phases of epochs_per_task are known after setup('fit') (they need N_t).")
        epochs = float(self.epochs_per_task or 1)
        one_pass = {t: default_steps_per_epoch({t: train_sizes[t]}, batch_sizes, world) for t in self.order}
        return [(t, max(1, math.ceil(epochs * one_pass[t] - 1e-9))) for t in self.order]  # 1.5 * 4 stays 6

    def phases(
        self, train_sizes: Mapping[str, int], batch_sizes: Mapping[str, int], world: int
    ) -> list[Phase]:
        """The phases, start and end in training batches (empty when interleaved)."""
        return make_phases(self.lengths(train_sizes, batch_sizes, world))

    def steps_per_epoch(
        self, given: int | None, train_sizes: Mapping[str, int], batch_sizes: Mapping[str, int], world: int
    ) -> int:
        """Training batches per epoch per rank: ``given``, else the whole continual run, else one pass."""
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
    """The task-schedule checks that need no task list; raises PalUserError naming the option and the fix."""
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
    """The checked plan of the task-schedule options; raises PalUserError naming the option and the fix."""
    check_task_schedule(schedule, task_order, steps_per_task, epochs_per_task)
    if schedule != SEQUENTIAL:
        return PhasePlan()
    order = (
        [task_order]
        if isinstance(task_order, str)
        else list(task_names if task_order is None else task_order)
    )
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

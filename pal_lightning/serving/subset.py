"""A loaded model cut down to some of its tasks (``--tasks``): the others' per-task modules, individual layers
and heads leave memory; the kept tasks' answers are unchanged (per-task parts are looked up by name).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pal_lightning.core.errors import PalUserError


def parse_task_list(value: str | None) -> tuple[str, ...] | None:
    """The task names of a ``--tasks a,b`` value in order (``None`` for every task).

    Raises:
        PalUserError: for an empty list, an empty name or a name given twice.
    """
    if value is None:
        return None
    names = [n.strip() for n in value.split(",")]
    if not all(names) or len(set(names)) != len(names):
        raise PalUserError(
            f"Invalid --tasks {value!r}: give the task names to serve, each once, separated by commas "
            "(e.g. --tasks sst,qqp), or leave it out to serve every task."
        )
    return tuple(names)


def keep_tasks(module: Any, tasks: Sequence[str]) -> Any:
    """``module`` (a loaded ``MultiTaskModule``) with only ``tasks``: the others' adapters, individual-layer
    copies no kept task uses, heads, specs and evaluation views deleted in place. Returns ``module``.

    Raises:
        PalUserError: for a task the model does not have, naming the ones it has.
    """
    unknown = [t for t in tasks if t not in module.task_specs]
    if unknown:
        raise PalUserError(
            f"Invalid --tasks: this model has no task {', '.join(map(repr, unknown))}; "
            f"its tasks are {', '.join(module.task_specs)}."
        )
    keep = set(tasks)
    encoder = module.encoder
    for name in [n for n in encoder.adapters if n not in keep]:
        del encoder.adapters[name]
    groups = {encoder.task_group[t] for t in keep if t in encoder.task_group}
    for group in [g for g in encoder.individual if g not in groups]:
        del encoder.individual[group]
    for name in [n for n in module.heads if n not in keep]:
        del module.heads[name]
    module.task_specs = {n: s for n, s in module.task_specs.items() if n in keep}
    module.eval_views = {n: v for n, v in module.eval_views.items() if v.parent in keep}
    return module

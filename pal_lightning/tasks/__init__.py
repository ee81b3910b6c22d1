"""Tasks: what a task is (its specification and the built-in ones), its metrics and evaluation views,
independent of model and data code.

The specification's public names are re-exported here; the rest lives in its module
(:mod:`~pal_lightning.tasks.metrics`, :mod:`~pal_lightning.tasks.glue`, ...).
"""

from pal_lightning.tasks.specs import (
    BUILTIN_TASKS,
    TaskKind,
    TaskSpec,
    available_tasks,
    get_task,
    register_task,
)

__all__ = ["BUILTIN_TASKS", "TaskKind", "TaskSpec", "available_tasks", "get_task", "register_task"]

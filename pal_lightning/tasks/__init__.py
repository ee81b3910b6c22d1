"""Tasks: what a task is (:mod:`~pal_lightning.tasks.specs`), the built-in ones
(:mod:`~pal_lightning.tasks.catalogue`, registered on import), their metrics and evaluation views,
independent of model and data code."""

from pal_lightning.tasks.catalogue import BUILTIN_TASKS, GLUE_TASKS, overall_name
from pal_lightning.tasks.specs import TaskKind, TaskSpec, available_tasks, get_task, register_task

__all__ = [
    "BUILTIN_TASKS",
    "GLUE_TASKS",
    "TaskKind",
    "TaskSpec",
    "available_tasks",
    "get_task",
    "overall_name",
    "register_task",
]

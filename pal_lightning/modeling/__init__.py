"""The multi-task encoder, its configuration, parameter accounting and task-only weights."""

from pal_lightning.modeling.accounting import ParameterReport, parameter_report
from pal_lightning.modeling.encoder import MultiTaskEncoder
from pal_lightning.modeling.methods.config import AdapterConfig
from pal_lightning.modeling.task_io.folders import load_task_folders, save_task_folders
from pal_lightning.modeling.task_io.weights import load_task_weights, save_task_weights

__all__ = [
    "MultiTaskEncoder",
    "AdapterConfig",
    "ParameterReport",
    "load_task_folders",
    "load_task_weights",
    "parameter_report",
    "save_task_folders",
    "save_task_weights",
]

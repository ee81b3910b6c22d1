"""pal-lightning: parameter-efficient multi-task fine-tuning of BERT encoders.

One pretrained encoder shared by all tasks, small task-specific Projected
Attention Layers (PALs) beside every layer, one head per task, annealed task
sampling, on PyTorch Lightning.

The public API is re-exported here. Heavy modules (torch, transformers,
lightning) are imported on first use, so ``pal-lightning --help`` starts fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pal_lightning.core.version import __version__

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "TaskSpec": "pal_lightning.tasks.specs",
    "TaskKind": "pal_lightning.tasks.specs",
    "register_task": "pal_lightning.tasks.specs",
    "get_task": "pal_lightning.tasks.specs",
    "available_tasks": "pal_lightning.tasks.specs",
    "BUILTIN_TASKS": "pal_lightning.tasks.catalogue",
    "PalUserError": "pal_lightning.core.errors",
    "resolve_encoder": "pal_lightning.core.hub",
    "DEFAULT_ENCODER": "pal_lightning.core.hub",
    "MultiTaskBert": "pal_lightning.modeling",
    "AdapterConfig": "pal_lightning.modeling",
    "parameter_report": "pal_lightning.modeling",
    "ParameterReport": "pal_lightning.modeling",
    "MultiTaskModule": "pal_lightning.module.multitask",
    "save_task_weights": "pal_lightning.modeling",
    "load_task_weights": "pal_lightning.modeling",
    "MultiTaskDataModule": "pal_lightning.data",
    "DataConfig": "pal_lightning.data",
    "MLMPretrainModule": "pal_lightning.pretraining",
    "MLMDataModule": "pal_lightning.pretraining",
    "task_probabilities": "pal_lightning.data.sampling.schedules",
    "annealed_alpha": "pal_lightning.data.sampling.schedules",
    "PredictionWriter": "pal_lightning.callbacks",
    "GEMCallback": "pal_lightning.gem",
    "EpisodicMemory": "pal_lightning.gem",
    "ContinualEvaluation": "pal_lightning.callbacks",
    "RNGStateCallback": "pal_lightning.callbacks",
    "AtomicCheckpointIO": "pal_lightning.core.checkpoint_io",
    "project_gradient": "pal_lightning.gem",
    "agem_project": "pal_lightning.gem",
    "continual_metrics": "pal_lightning.tasks.continual_metrics",
    "cs224n_overall": "pal_lightning.tasks.metrics",
    "overall_score": "pal_lightning.tasks.metrics",
    "pipeline": "pal_lightning.inference.pipeline",
    "TaskPipeline": "pal_lightning.inference.pipeline",
}

__all__ = [
    "AtomicCheckpointIO",
    "BUILTIN_TASKS",
    "ContinualEvaluation",
    "DEFAULT_ENCODER",
    "DataConfig",
    "EpisodicMemory",
    "GEMCallback",
    "MLMDataModule",
    "MLMPretrainModule",
    "MultiTaskBert",
    "MultiTaskDataModule",
    "MultiTaskModule",
    "AdapterConfig",
    "PalUserError",
    "ParameterReport",
    "PredictionWriter",
    "RNGStateCallback",
    "TaskKind",
    "TaskPipeline",
    "TaskSpec",
    "agem_project",
    "annealed_alpha",
    "available_tasks",
    "continual_metrics",
    "cs224n_overall",
    "get_task",
    "load_task_weights",
    "overall_score",
    "parameter_report",
    "pipeline",
    "project_gradient",
    "register_task",
    "resolve_encoder",
    "save_task_weights",
    "task_probabilities",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pal_lightning' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from pal_lightning.callbacks import ContinualEvaluation, PredictionWriter, RNGStateCallback
    from pal_lightning.core.checkpoint_io import AtomicCheckpointIO
    from pal_lightning.core.errors import PalUserError
    from pal_lightning.core.hub import DEFAULT_ENCODER, resolve_encoder
    from pal_lightning.data import DataConfig, MultiTaskDataModule
    from pal_lightning.data.sampling.schedules import annealed_alpha, task_probabilities
    from pal_lightning.gem import EpisodicMemory, GEMCallback, agem_project, project_gradient
    from pal_lightning.inference.pipeline import TaskPipeline, pipeline
    from pal_lightning.modeling import (
        AdapterConfig,
        MultiTaskBert,
        ParameterReport,
        load_task_weights,
        parameter_report,
        save_task_weights,
    )
    from pal_lightning.module.multitask import MultiTaskModule
    from pal_lightning.pretraining import MLMDataModule, MLMPretrainModule
    from pal_lightning.tasks.catalogue import BUILTIN_TASKS
    from pal_lightning.tasks.continual_metrics import continual_metrics
    from pal_lightning.tasks.metrics import cs224n_overall, overall_score
    from pal_lightning.tasks.specs import (
        TaskKind,
        TaskSpec,
        available_tasks,
        get_task,
        register_task,
    )

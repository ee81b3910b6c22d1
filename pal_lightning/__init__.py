"""pal-lightning: parameter-efficient multi-task fine-tuning of Transformer encoders (one shared encoder,
a per-task method such as Projected Attention Layers, one head per task), on PyTorch Lightning. The public API is re-exported here, imported on first use (a fast ``--help``).
"""

# ruff: noqa: F401  (the TYPE_CHECKING imports are the exports, for type checkers)
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pal_lightning.core.version import __version__

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    name: module
    for module, names in {
        "pal_lightning.tasks.specs": "TaskSpec TaskKind register_task get_task available_tasks",
        "pal_lightning.tasks.catalogue": "BUILTIN_TASKS",
        "pal_lightning.core.errors": "PalUserError",
        "pal_lightning.core.hub": "resolve_encoder DEFAULT_ENCODER",
        "pal_lightning.modeling": "MultiTaskEncoder AdapterConfig parameter_report ParameterReport "
        "save_task_weights load_task_weights",
        "pal_lightning.module.multitask": "MultiTaskModule",
        "pal_lightning.module.optim_config": "OptimConfig",
        "pal_lightning.data": "MultiTaskDataModule DataConfig",
        "pal_lightning.pretraining": "MLMPretrainModule MLMDataModule",
        "pal_lightning.data.sampling.schedules": "task_probabilities annealed_alpha register_sampling_rule",
        "pal_lightning.callbacks": "PredictionWriter ContinualEvaluation RNGStateCallback",
        "pal_lightning.gem": "GEMCallback EpisodicMemory project_gradient agem_project",
        "pal_lightning.core.checkpoint_io": "AtomicCheckpointIO",
        "pal_lightning.tasks.continual_metrics": "continual_metrics",
        "pal_lightning.tasks.metrics": "cs224n_overall overall_score",
        "pal_lightning.inference.pipeline": "pipeline TaskPipeline",
    }.items()
    for name in names.split()
}
__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pal_lightning' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs: the names above, typed
    from pal_lightning.callbacks import ContinualEvaluation, PredictionWriter, RNGStateCallback
    from pal_lightning.core.checkpoint_io import AtomicCheckpointIO
    from pal_lightning.core.errors import PalUserError
    from pal_lightning.core.hub import DEFAULT_ENCODER, resolve_encoder
    from pal_lightning.data import DataConfig, MultiTaskDataModule
    from pal_lightning.data.sampling.schedules import (
        annealed_alpha,
        register_sampling_rule,
        task_probabilities,
    )
    from pal_lightning.gem import EpisodicMemory, GEMCallback, agem_project, project_gradient
    from pal_lightning.inference.pipeline import TaskPipeline, pipeline
    from pal_lightning.modeling import (
        AdapterConfig,
        MultiTaskEncoder,
        ParameterReport,
        load_task_weights,
        parameter_report,
        save_task_weights,
    )
    from pal_lightning.module.multitask import MultiTaskModule
    from pal_lightning.module.optim_config import OptimConfig
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

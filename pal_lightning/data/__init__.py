"""Data: readers with row validation, tokenisation cache, task sampling and the DataModule."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pal_lightning.data.options import DataConfig
from pal_lightning.data.sampling.per_task import MultiTaskBatchSampler, TaskBatch, eval_batches
from pal_lightning.data.sampling.phase_plan import Phase
from pal_lightning.data.sampling.schedules import (
    SamplingSchedule,
    annealed_alpha,
    register_sampling_rule,
    sampling_rules,
    task_probabilities,
)
from pal_lightning.data.sources.hf import dataset_task
from pal_lightning.data.sources.readers import RawSplit, read_split
from pal_lightning.data.sources.text import ptb_detokenize, undo_double_quoting

if TYPE_CHECKING:
    from pal_lightning.data.datamodule import MultiTaskDataModule


def __getattr__(name: str) -> Any:
    # Only the DataModule needs Lightning (slow to import): the rest loads without it.
    if name == "MultiTaskDataModule":
        return importlib.import_module("pal_lightning.data.datamodule").MultiTaskDataModule
    raise AttributeError(f"module 'pal_lightning.data' has no attribute {name!r}")


__all__ = [
    "DataConfig",
    "MultiTaskBatchSampler",
    "MultiTaskDataModule",
    "Phase",
    "RawSplit",
    "SamplingSchedule",
    "TaskBatch",
    "annealed_alpha",
    "dataset_task",
    "eval_batches",
    "ptb_detokenize",
    "read_split",
    "register_sampling_rule",
    "sampling_rules",
    "task_probabilities",
    "undo_double_quoting",
]

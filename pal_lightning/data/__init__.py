"""Data: readers with row validation, tokenisation cache, task sampling and the DataModule.

Public entry points:

* :class:`MultiTaskDataModule` - the LightningDataModule; :class:`DataConfig` - its options.
* :func:`~pal_lightning.data.sources.hf.dataset_task` - a task reading a ``datasets.DatasetDict``.
* :func:`task_probabilities`, :func:`annealed_alpha` - the sampling maths (:mod:`.sampling.schedules`).
* :class:`MultiTaskBatchSampler` - one task per step, DDP-consistent, resumable (:mod:`.sampling`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pal_lightning.data.options import DataConfig
from pal_lightning.data.sampling.per_task import MultiTaskBatchSampler, TaskBatch, eval_batches
from pal_lightning.data.sampling.phase_plan import Phase
from pal_lightning.data.sampling.schedules import SamplingSchedule, annealed_alpha, task_probabilities
from pal_lightning.data.sources.hf import dataset_task
from pal_lightning.data.sources.readers import RawSplit, read_split
from pal_lightning.data.sources.text import ptb_detokenize, undo_double_quoting

if TYPE_CHECKING:
    from pal_lightning.data.datamodule import MultiTaskDataModule


def __getattr__(name: str) -> Any:
    # Only the DataModule needs Lightning, whose import is most of a fresh interpreter's start-up: it loads
    # on first use, so that the readers, the sampling maths and the splits (a DDP rank's or a script's
    # `pal_lightning.data.stage_splits`) load without it.
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
    "task_probabilities",
    "undo_double_quoting",
]

"""Data: readers with row validation, tokenisation cache, task sampling and the DataModule.

Public entry points:

* :class:`MultiTaskDataModule` - the LightningDataModule; :class:`DataConfig` - its options.
* :func:`~pal_lightning.data.hf_sources.dataset_task` - a task reading a ``datasets.DatasetDict``.
* :func:`~pal_lightning.data.sampling.task_probabilities`,
  :func:`~pal_lightning.data.sampling.annealed_alpha` - the sampling maths.
* :class:`~pal_lightning.data.samplers.MultiTaskBatchSampler` - one task per step, DDP-consistent, resumable.
"""

from __future__ import annotations

from pal_lightning.data.datamodule import MultiTaskDataModule
from pal_lightning.data.hf_sources import dataset_task
from pal_lightning.data.options import DataConfig
from pal_lightning.data.readers import RawSplit, read_split
from pal_lightning.data.samplers import MultiTaskBatchSampler, Phase, TaskBatch, eval_batches
from pal_lightning.data.sampling import SamplingSchedule, annealed_alpha, task_probabilities
from pal_lightning.data.text import ptb_detokenize, undo_double_quoting

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

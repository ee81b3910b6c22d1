"""The map-style dataset that turns a :class:`~pal_lightning.data.sampling.per_task.TaskBatch` (or a mixed
batch) into one padded batch (a dict of :mod:`pal_lightning.core.batch` keys), built whole by
``__getitems__``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from pal_lightning.core.batch import IDS, INDICES, LABELS, SPLIT, TASK, mix_batches
from pal_lightning.data.sampling.mixed import MixedBatch
from pal_lightning.data.sampling.per_task import TaskBatch
from pal_lightning.data.tokenize import TokenizedSplit, pad_batch


class MultiTaskDataset(Dataset):
    """Tokenised splits of several tasks, addressed by :class:`TaskBatch`.

    Args:
        splits: ``(task, split) -> TokenizedSplit``.
        pad_token_id: id used to pad ``input_ids``.
        pad_to_multiple_of: sequence lengths are rounded up to a multiple of this (1: the longest example).
    """

    def __init__(
        self, splits: Mapping[tuple[str, str], TokenizedSplit], pad_token_id: int, pad_to_multiple_of: int = 1
    ) -> None:
        self.splits = dict(splits)
        self.pad_token_id = int(pad_token_id)
        self.pad_to_multiple_of = int(pad_to_multiple_of)

    def __len__(self) -> int:
        return sum(len(s) for s in self.splits.values())

    def __getitem__(self, key: TaskBatch | MixedBatch) -> dict[str, Any]:
        return self.__getitems__(key)

    def __getitems__(self, key: TaskBatch | MixedBatch) -> dict[str, Any]:
        """The padded batch of ``key``'s examples (one task, one split); for a :class:`MixedBatch`, its
        tasks' batches stacked into one mixed batch (``tasks`` per row)."""
        if isinstance(key, MixedBatch):
            mixed = mix_batches([self.__getitems__(part) for part in key.parts])
            mixed[SPLIT] = key.split
            return mixed
        data = self.splits[(key.task, key.split)]
        idx = np.asarray(key.indices, dtype=np.int64)
        batch: dict[str, Any] = {
            TASK: key.task,
            SPLIT: key.split,
            IDS: data.ids[idx].tolist(),
            INDICES: idx.tolist(),
        }
        if data.labels is not None:
            labels = data.labels[idx]
            batch[LABELS] = torch.from_numpy(
                labels.astype(np.float32 if labels.dtype.kind == "f" else np.int64)
            )
        for side, enc in data.encodings.items():
            suffix = f"_{side}" if side else ""
            batch.update(pad_batch(enc, idx, self.pad_token_id, suffix, self.pad_to_multiple_of))
        return batch

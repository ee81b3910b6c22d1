"""The dataset that builds whole padded batches, and what the data module's DataLoaders share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from pal_lightning.core.batch import IDS, INDICES, LABELS, SPLIT, TASK, mix_batches
from pal_lightning.data.sampling.mixed import MixedBatch
from pal_lightning.data.sampling.per_task import MultiTaskBatchSampler, TaskBatch
from pal_lightning.data.tokenize import TokenizedSplit, pad_batch

__all__ = ["BatchListDataset", "MultiTaskDataset", "ResumableDataLoader", "TrainSampling", "loader_options"]


class MultiTaskDataset(Dataset):
    """Tokenised ``(task, split)`` splits, addressed by :class:`TaskBatch` (or :class:`MixedBatch`), padded with
    ``pad_token_id`` to a multiple of ``pad_to_multiple_of``."""

    def __init__(
        self, splits: Mapping[tuple[str, str], TokenizedSplit], pad_token_id: int, pad_to_multiple_of: int = 1
    ) -> None:
        self.splits = dict(splits)
        self.pad_token_id, self.pad_to_multiple_of = int(pad_token_id), int(pad_to_multiple_of)

    def __len__(self) -> int:
        return sum(len(s) for s in self.splits.values())

    def __getitem__(self, key: TaskBatch | MixedBatch) -> dict[str, Any]:
        return self.__getitems__(key)

    def __getitems__(self, key: TaskBatch | MixedBatch) -> dict[str, Any]:
        """The padded batch of ``key``'s examples; a :class:`MixedBatch`'s parts stacked into one batch."""
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


def passthrough(batch: Any) -> Any:
    """Collate function for batches that the dataset already assembled."""
    return batch


class BatchListDataset(Dataset):
    """A fixed list of pre-planned batches: item ``i`` is batch ``i``."""

    def __init__(self, base: MultiTaskDataset, batches: Sequence[TaskBatch]) -> None:
        self.base, self.batches = base, list(batches)

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.base.__getitems__(self.batches[i])


class ResumableDataLoader(DataLoader):
    """A DataLoader whose position Lightning saves and restores (it looks for these methods)."""

    def state_dict(self) -> dict[str, Any]:
        assert isinstance(self.batch_sampler, MultiTaskBatchSampler)
        return self.batch_sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        assert isinstance(self.batch_sampler, MultiTaskBatchSampler)
        self.batch_sampler.load_state_dict(state)


def loader_options(num_workers: int, seed: int) -> dict[str, Any]:
    """The DataLoader arguments every loader shares."""
    return {
        "num_workers": num_workers,
        "collate_fn": passthrough,
        "pin_memory": torch.cuda.is_available(),
        "persistent_workers": num_workers > 0,
        # Workers' base seeds come from here, not the global torch RNG, whose stream (dropout) would shift
        # at every validation or epoch start, so a resumed run could not repeat the uninterrupted one.
        "generator": torch.Generator().manual_seed(seed),
    }


class TrainSampling:
    """The train loader's batch sampler across rebuilt loaders and checkpoints: Lightning restores the state
    before it builds the loader, so a saved position waits here until a sampler exists."""

    def __init__(self) -> None:
        self.sampler: MultiTaskBatchSampler | None = None
        """The sampler of the last train loader built (``None`` before the first)."""
        self._pending: dict[str, Any] | None = None

    def loader(
        self,
        sampler: MultiTaskBatchSampler,
        dataset: MultiTaskDataset,
        epoch: int | None,
        options: dict[str, Any],
    ) -> ResumableDataLoader:
        """``dataset``'s loader drawn by ``sampler`` (now the live one), at the saved position or at ``epoch``."""
        if self._pending is not None:
            sampler.load_state_dict(self._pending)
            self._pending = None
        elif epoch is not None:  # a loader rebuilt mid-training may be iterated before set_epoch
            sampler.set_epoch(epoch)
        self.sampler = sampler
        # the sampler yields TaskBatch keys, not index lists: the dataset's __getitems__ takes each whole
        return ResumableDataLoader(dataset, batch_sampler=sampler, **options)  # type: ignore[arg-type]

    def state_dict(self) -> dict[str, Any]:
        """The sampler's position (``{}`` before a sampler exists)."""
        return {} if self.sampler is None else {"train_sampler": self.sampler.state_dict()}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore the sampler's position: now if a sampler exists, else when the next one is built."""
        state = state_dict.get("train_sampler")
        if state and self.sampler is not None:
            self.sampler.load_state_dict(state)
        elif state:
            self._pending = dict(state)

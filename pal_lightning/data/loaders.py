"""The DataLoaders the data module serves: evaluation batches planned once (every example once across
ranks), and training batches from the batch sampler, whose position :class:`TrainSampling` carries across
rebuilt loaders and checkpoints."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from pal_lightning.data.dataset import MultiTaskDataset
from pal_lightning.data.sampling.per_task import MultiTaskBatchSampler, TaskBatch, eval_batches
from pal_lightning.data.tokenize import TokenizedSplit

__all__ = ["ResumableDataLoader", "TrainSampling", "eval_loader", "loader_options"]


def passthrough(batch: Any) -> Any:
    """Collate function for batches that the dataset already assembled."""
    return batch


class BatchListDataset(Dataset):
    """A fixed list of pre-planned batches (evaluation and prediction): item ``i`` is batch ``i``."""

    def __init__(self, base: MultiTaskDataset, batches: Sequence[TaskBatch]) -> None:
        self.base = base
        self.batches = list(batches)

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.base.__getitems__(self.batches[i])


class ResumableDataLoader(DataLoader):
    """A DataLoader whose position Lightning saves in the checkpoint and restores on resume (it looks for
    these methods); both delegate to the batch sampler."""

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
        # Each new DataLoader iterator draws its workers' base seed from this generator; without
        # one it draws from the global torch RNG, so every validation or epoch start would shift
        # the dropout stream and a resumed run could not repeat the uninterrupted one exactly.
        "generator": torch.Generator().manual_seed(seed),
    }


def eval_loader(
    splits: Mapping[tuple[str, str], TokenizedSplit],
    batch_sizes: Mapping[str, int],
    world: int,
    rank: int,
    pad_token_id: int,
    options: dict[str, Any],
    pad_to_multiple_of: int = 1,
) -> DataLoader:
    """This rank's share of every example of ``splits``, one task per batch, longest batches first."""
    batches = eval_batches(
        {p: len(d) for p, d in splits.items()},
        batch_sizes,
        num_replicas=world,
        rank=rank,
        lengths={p: d.lengths for p, d in splits.items()},
    )
    dataset = BatchListDataset(MultiTaskDataset(splits, pad_token_id, pad_to_multiple_of), batches)
    return DataLoader(dataset, batch_size=None, shuffle=False, **options)


class TrainSampling:
    """The training loader's batch sampler across rebuilt loaders and checkpoints: Lightning restores a data
    module's state before it builds the train loader, and may rebuild the loader mid-training, so a saved
    position waits here until a sampler exists, and every new sampler starts where the run is."""

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
        """``dataset``'s loader drawn by ``sampler``, which becomes the live sampler: at the saved position
        when there is one, else at the start of ``epoch`` (``None``: no Trainer, as built)."""
        if self._pending is not None:
            sampler.load_state_dict(self._pending)
            self._pending = None
        elif epoch is not None:
            # A loader rebuilt mid-training (reload_dataloaders_every_n_epochs) may be iterated
            # before Lightning calls set_epoch: start it at the right epoch.
            sampler.set_epoch(epoch)
        self.sampler = sampler
        # the sampler yields TaskBatch keys, not index lists: the dataset's __getitems__ takes each whole
        return ResumableDataLoader(dataset, batch_sampler=sampler, **options)  # type: ignore[arg-type]

    def state_dict(self) -> dict[str, Any]:
        """The sampler's position (``{}`` before a sampler exists)."""
        if self.sampler is None:
            return {}
        return {"train_sampler": self.sampler.state_dict()}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore the sampler's position: now if a sampler exists, else when the next one is built."""
        state = state_dict.get("train_sampler")
        if not state:
            return
        if self.sampler is not None:
            self.sampler.load_state_dict(state)
        else:
            self._pending = dict(state)

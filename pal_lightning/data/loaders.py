"""The DataLoaders the data module serves, from tokenised splits and planned batches.

Training batches come from a :class:`~pal_lightning.data.batch_samplers.MultiTaskBatchSampler` (one task
per step, resumable); evaluation batches are planned once by
:func:`~pal_lightning.data.batch_samplers.eval_batches` (every example exactly once across ranks).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader

from pal_lightning.data.batch_samplers import eval_batches
from pal_lightning.data.dataset import BatchListDataset, MultiTaskDataset, passthrough
from pal_lightning.data.tokenize import TokenizedSplit

__all__ = ["eval_loader", "loader_options"]


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

"""What sharding the loaders by rank needs from the Trainer: the world size and rank, no Lightning
``DistributedSampler`` (it would duplicate evaluation examples and break the task schedule), and how far
the Trainer really got in the epoch (it prefetches, so the sampler's own count runs ahead)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pal_lightning.core import distributed
from pal_lightning.core.errors import PalUserError
from pal_lightning.core.private_api import disable_distributed_sampler

if TYPE_CHECKING:
    import lightning.pytorch as pl

__all__ = ["fit_batches_consumed", "shard_of", "turn_off_distributed_sampler"]

log = logging.getLogger(__name__)


def shard_of(trainer: pl.Trainer | None) -> tuple[int, int]:
    """``(world size, global rank)``: the trainer's, else the process group's, else ``(1, 0)``."""
    if trainer is not None:
        return int(trainer.world_size), int(trainer.global_rank)
    if distributed.is_distributed():
        return distributed.world_size(), distributed.rank()
    return 1, 0


def turn_off_distributed_sampler(trainer: pl.Trainer | None) -> None:
    """Switch the trainer's ``use_distributed_sampler`` off (our samplers shard by rank themselves).

    Raises:
        PalUserError: under DDP, when this Lightning version has no such switch to turn off.
    """
    if trainer is None:
        return
    was_on = disable_distributed_sampler(trainer)  # a private Lightning setting (compat.py says why)
    if was_on:
        if distributed.is_main_process():
            log.info("MultiTaskDataModule shards data itself: set Trainer(use_distributed_sampler=False).")
    elif was_on is None and trainer.world_size > 1:
        raise PalUserError(
            "MultiTaskDataModule needs Trainer(use_distributed_sampler=False) under DDP; pass it to the "
            "Trainer (--trainer.use_distributed_sampler false)."
        )


def fit_batches_consumed(trainer: pl.Trainer | None) -> int | None:
    """Training batches of the current epoch the Trainer has processed, or ``None`` outside ``fit``
    (the sampler then falls back to its own count)."""
    if trainer is None:
        return None
    try:
        if trainer.state.fn != "fit":
            return None
        # batch_progress.current is a _BatchProgress tracker with `processed` (typed as its base class)
        return int(trainer.fit_loop.epoch_loop.batch_progress.current.processed)  # type: ignore[attr-defined]
    except AttributeError:  # another Lightning layout: fall back to the sampler's own count
        return None

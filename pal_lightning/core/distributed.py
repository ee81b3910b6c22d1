"""Distributed helpers: rank, world size, gathers, sum, broadcast, barrier, closing the process group.

Without an initialised process group each behaves as the only process of a world of one. The
collective ones must be called by every rank at the same point.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    import lightning.pytorch as pl

T = TypeVar("T")


def is_distributed() -> bool:
    """Whether ``torch.distributed`` is available and a process group is initialised."""
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """This process's global rank: the process group's, else the one Lightning read from the launcher."""
    if is_distributed():
        return dist.get_rank()
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    return int(getattr(rank_zero_only, "rank", 0) or 0)


def world_size() -> int:
    """The number of processes in the process group (1 without one)."""
    return dist.get_world_size() if is_distributed() else 1


def is_main_process(trainer: pl.Trainer | None = None) -> bool:
    """Whether this is global rank 0 (``trainer.is_global_zero`` when a trainer is given)."""
    if trainer is not None:
        return bool(trainer.is_global_zero)
    return rank() == 0


#: Where torchrun, Lightning's DDP launcher and srun put a process's rank (Lightning's order).
_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID")


def is_launched_rank() -> bool:
    """Whether a launcher started this process as a rank > 0 (read from the environment, before any
    process group exists)."""
    value = next((os.environ[k] for k in _RANK_VARIABLES if os.environ.get(k, "") != ""), "0")
    return value != "0"


def decided_by_rank_zero(
    name: str, scope: str, decide: Callable[[], str], peek: Callable[[], str] | None = None
) -> str:
    """A value rank 0 decides before ``fit`` (a run folder, a checkpoint) that every rank must share.

    No process group exists yet: rank 0 calls ``decide()`` and leaves the value in ``PAL_<name>``, which
    the ranks Lightning's DDP launcher starts inherit (when decided for the same ``scope``); ranks of
    ``torchrun`` or ``srun`` call ``peek()`` (a value without side effects), else ``decide()``. (Lightning
    has no hook to broadcast it before the loggers are built.)
    """
    key = f"PAL_{name}"
    prefix = scope + os.pathsep
    inherited = os.environ.get(key, "")
    if is_launched_rank():
        if inherited.startswith(prefix):
            return inherited[len(prefix) :]
        if peek is not None:  # an external launcher's rank > 0
            return peek()
    value = decide()
    os.environ[key] = prefix + value
    return value


def launcher_world_size() -> int | None:
    """How many processes ``torchrun`` or ``srun`` started; ``None`` without an external launcher."""
    from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment

    if TorchElasticEnvironment.detect():
        return int(os.environ.get("WORLD_SIZE", "1"))
    if SLURMEnvironment.detect():
        return int(os.environ.get("SLURM_NTASKS", "1"))
    return None


def gather_objects(obj: T) -> list[T]:
    """``obj`` of every rank, in rank order (pickled: for small objects)."""
    if world_size() == 1:
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def gather_tensors(tensor: torch.Tensor) -> list[torch.Tensor]:
    """``tensor`` of every rank, in rank order, detached; the first dimensions may differ."""
    world = world_size()
    if world == 1:
        return [tensor]
    size = torch.tensor([tensor.shape[0]], device=tensor.device, dtype=torch.long)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size)
    counts = [int(s.item()) for s in sizes]
    padded = tensor.new_zeros((max(counts), *tensor.shape[1:]))
    padded[: tensor.shape[0]] = tensor.detach()
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    return [part[:n] for part, n in zip(parts, counts, strict=True)]


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over all ranks in place and return it (unchanged for a single process)."""
    if world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def broadcast(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    """Overwrite ``tensor`` on every rank with rank ``src``'s values in place and return it."""
    if world_size() > 1:
        dist.broadcast(tensor, src=src)
    return tensor


def barrier() -> None:
    """Wait until every rank gets here (returns at once for a single process)."""
    if world_size() > 1:
        dist.barrier()


def close_process_group() -> None:
    """Tear down the process group a finished run left open, on every rank together (left to the
    interpreter's exit, gloo's threads can abort a finished rank)."""
    if is_distributed():
        dist.barrier()
        dist.destroy_process_group()

"""Distributed helpers: rank, world size, gather, sum, barrier and closing the process group.

Every function is safe without ``torch.distributed`` (not compiled in, or no process group
initialised): it then behaves as the only process of a world of one (rank 0, the object itself,
the tensor unchanged, no wait). The collective ones (:func:`gather_objects`, :func:`all_reduce_sum`,
:func:`broadcast`, :func:`barrier`, :func:`close_process_group`) must be called by every rank at
the same point, as any collective (:func:`gather_tensors` too).

Inside a Lightning hook, ``is_main_process(trainer)`` asks the trainer (its strategy knows the
rank even for launchers that have not created a process group yet); elsewhere the initialised
process group decides, and before one exists, the rank Lightning read from the launcher's
environment variables (``RANK``, ``LOCAL_RANK``, ``SLURM_PROCID``, ...). A hook that holds a trainer
may also call its strategy's collectives (``trainer.strategy.barrier()``, ``.broadcast(obj)``), the
public Lightning API, which works for strategies beyond ``torch.distributed`` as well.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, TypeVar

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    import lightning.pytorch as pl

T = TypeVar("T")

__all__ = [
    "all_reduce_sum",
    "barrier",
    "broadcast",
    "close_process_group",
    "gather_objects",
    "gather_tensors",
    "is_distributed",
    "is_launched_rank",
    "is_main_process",
    "launcher_world_size",
    "rank",
    "world_size",
]


def is_distributed() -> bool:
    """Whether ``torch.distributed`` is available and a process group is initialised."""
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """This process's global rank: the process group's, else the launcher's (0 for a single process).

    Before a process group exists, Lightning's ``rank_zero_only.rank`` holds the rank its launcher
    passed in the environment (and the strategy updates it at setup), so messages printed before
    ``fit`` starts are still printed once.
    """
    if is_distributed():
        return dist.get_rank()
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    return int(getattr(rank_zero_only, "rank", 0) or 0)


def world_size() -> int:
    """The number of processes in the process group (1 without one)."""
    return dist.get_world_size() if is_distributed() else 1


def is_main_process(trainer: pl.Trainer | None = None) -> bool:
    """Whether this is the process that writes files and prints: global rank 0.

    Args:
        trainer: when given, its ``is_global_zero`` decides (the one idiom for Lightning hooks).
    """
    if trainer is not None:
        return bool(trainer.is_global_zero)
    return rank() == 0


#: Where launchers put a process's global rank, in the order Lightning reads them before a process
#: group exists: torchrun (``RANK``), Lightning's own DDP launcher (``LOCAL_RANK``), SLURM's srun.
_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID")


def is_launched_rank() -> bool:
    """Whether a launcher started this process as a rank > 0: Lightning's DDP launcher (``LOCAL_RANK``),
    ``torchrun`` (``RANK``; on a second node ``LOCAL_RANK`` is 0 again) or ``srun`` (``SLURM_PROCID``).

    Read from the environment at call time: the CLI needs it before any process group exists, to
    let rank 0 alone pick the run folder and print the messages that come before ``fit``.
    """
    value = next((os.environ[k] for k in _RANK_VARIABLES if os.environ.get(k, "") != ""), "0")
    return value != "0"


def launcher_world_size() -> int | None:
    """How many processes an external launcher started: ``torchrun``'s ``WORLD_SIZE`` or ``srun``'s
    ``SLURM_NTASKS``, as Lightning's cluster environments detect them; ``None`` without one."""
    from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment

    if TorchElasticEnvironment.detect():
        return int(os.environ.get("WORLD_SIZE", "1"))
    if SLURMEnvironment.detect():
        return int(os.environ.get("SLURM_NTASKS", "1"))
    return None


def gather_objects(obj: T) -> list[T]:
    """``obj`` of every rank, in rank order (``[obj]`` for a single process).

    Uses ``all_gather_object`` (pickled through the process group): meant for small Python
    objects such as prediction rows or generator states, not for large tensors.
    """
    if world_size() == 1:
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def gather_tensors(tensor: torch.Tensor) -> list[torch.Tensor]:
    """``tensor`` of every rank, in rank order; the ranks' first dimensions may differ (``[tensor]`` alone).

    The sizes are exchanged first and the rows padded to the longest, so every rank sends the same
    shape (what ``all_gather`` needs). The result holds copies, without gradient; the other
    dimensions and the dtype must agree across ranks.
    """
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
    """Overwrite ``tensor`` on every rank with rank ``src``'s values in place and return it.

    Used where every rank must take the same decision although their float sums may differ.
    """
    if world_size() > 1:
        dist.broadcast(tensor, src=src)
    return tensor


def barrier() -> None:
    """Wait until every rank gets here (returns at once for a single process)."""
    if world_size() > 1:
        dist.barrier()


def close_process_group() -> None:
    """Tear down the process group a finished run left open, on every rank together.

    Lightning keeps the group alive for a later ``fit``/``predict`` in the same process. Left to
    the interpreter's exit, gloo's worker threads can be destroyed while still joinable and abort
    a rank that had finished its work ("terminate called without an active exception", exit -6).
    Call it only where every rank gets (after a successful run), so the barrier cannot hang.
    """
    if is_distributed():
        dist.barrier()
        dist.destroy_process_group()

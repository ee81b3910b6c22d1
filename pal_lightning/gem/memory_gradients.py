"""The rows of GEM's ``G``: gradients of the model's loss on remembered examples.

Duck-typed contract: ``data.train_batch(task, indices)`` rebuilds a training batch of ``task``'s
train-split positions ``indices`` (CPU tensors are fine: it is moved to the module's device), and
``module.batch_loss(batch)`` is that batch's mean loss. Under DDP every rank calls these functions
with the same arguments except ``rank``; each rank takes every ``world_size``-th remembered example
and the gradients are summed across ranks (:func:`pal_lightning.distributed.all_reduce_sum`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from torch import Tensor, nn

from pal_lightning import distributed
from pal_lightning.gem.gram import Grads
from pal_lightning.gem.memory import EpisodicMemory

if TYPE_CHECKING:
    from pal_lightning.contracts import BatchLossModel

__all__ = ["MemorySource", "constraint_gradients", "memory_gradient", "sum_across_ranks"]

ForwardContext = Callable[[], Any]


@dataclass(frozen=True)
class MemorySource:
    """Where the memory gradients of one step come from, and how this rank takes its share."""

    module: nn.Module
    """The (unwrapped) module, with ``batch_loss(batch)`` (:class:`~pal_lightning.contracts.BatchLossModel`)."""
    data: Any
    """Anything with ``train_batch(task, indices)`` (:class:`~pal_lightning.contracts.TrainBatchSource`)."""
    forward_context: ForwardContext = contextlib.nullcontext
    """The precision plugin's ``forward_context`` (autocast under mixed precision)."""
    rank: int = 0
    """This process's rank: it takes every ``world_size``-th remembered example from ``rank`` on."""
    world_size: int = 1
    """The number of ranks (their gradients are summed)."""

    def loss(self, task: str, indices: list[int]) -> Tensor:
        """``module.batch_loss`` of ``task``'s remembered examples ``indices``, under the forward context."""
        device = next(self.module.parameters()).device
        batch = move_data_to_device(self.data.train_batch(task, indices), device)
        with self.forward_context():
            return cast("BatchLossModel", self.module).batch_loss(batch)


def memory_gradient(
    source: MemorySource, draws: Mapping[str, list[int]], params: list[nn.Parameter]
) -> Grads:
    """Gradient of the example-weighted mean loss over ``draws`` (task -> indices of all ranks).

    Each rank takes every ``world_size``-th index from ``rank`` on; the local losses are
    weighted by their share of the whole draw and the gradients summed across ranks.
    """
    total = sum(len(idx) for idx in draws.values())
    loss: Tensor | None = None
    for task, idx in draws.items():
        share = idx[source.rank :: source.world_size]
        if not share:
            continue
        part = source.loss(task, share) * (len(share) / total)
        loss = part if loss is None else loss + part
    grads: Grads = [None] * len(params)
    if loss is not None:
        grads = list(torch.autograd.grad(loss.float(), params, allow_unused=True))
    if source.world_size > 1:
        grads = sum_across_ranks(grads, params)
    return grads


def constraint_gradients(
    source: MemorySource,
    memory: EpisodicMemory,
    mode: str,
    tasks: list[str],
    step: int,
    memory_batch_size: int,
    params: list[nn.Parameter],
) -> list[Grads]:
    """Rows of ``G``: one per task (``mode="gem"``), or the single A-GEM reference gradient.

    ``memory_batch_size * world_size`` remembered examples are drawn per task (GEM) or in all, split
    over the tasks with the first ones taking the remainder (A-GEM), by ``memory.sample``.
    """
    want = memory_batch_size * source.world_size
    if mode == "gem":
        return [memory_gradient(source, {task: memory.sample(task, want, step)}, params) for task in tasks]
    counts = [want // len(tasks) + (i < want % len(tasks)) for i in range(len(tasks))]
    draws = {task: memory.sample(task, n, step) for task, n in zip(tasks, counts, strict=True)}
    return [memory_gradient(source, draws, params)]


def sum_across_ranks(grads: Grads, params: list[nn.Parameter]) -> Grads:
    """Sum gradients across ranks; a tensor stays ``None`` only if it is ``None`` on every rank.

    Every rank makes the same calls in the same order: one small reduction of the "present"
    mask (a rank with no memory examples cannot know which tensors its model would have
    touched), then one reduction per tensor that some rank has.
    """
    device = params[0].device
    present = torch.tensor([x is not None for x in grads], dtype=torch.float32, device=device)
    distributed.all_reduce_sum(present)
    out: Grads = []
    for p, x, used in zip(params, grads, present.tolist(), strict=True):
        if used == 0:  # None on every rank: no call on any rank
            out.append(None)
            continue
        out.append(distributed.all_reduce_sum(torch.zeros_like(p) if x is None else x.contiguous()))
    return out

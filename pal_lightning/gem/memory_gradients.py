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
from pal_lightning.gem.batched_gradients import can_alias, task_gradients
from pal_lightning.gem.gram import Grads
from pal_lightning.gem.memory import EpisodicMemory
from pal_lightning.gem.sparse_embeddings import sparse_embedding_gradients

if TYPE_CHECKING:
    from pal_lightning.contracts import BatchLossModel

__all__ = [
    "MemorySource",
    "constraint_gradients",
    "memory_gradient",
    "sum_across_ranks",
    "sum_rows_across_ranks",
]

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

    def batch(self, task: str, indices: list[int]) -> Any:
        """``task``'s remembered examples ``indices`` as a training batch on the module's device."""
        device = next(self.module.parameters()).device
        return move_data_to_device(self.data.train_batch(task, indices), device)

    def loss_of(self, batch: Any) -> Tensor:
        """``module.batch_loss(batch)`` under the forward context."""
        with self.forward_context():
            return cast("BatchLossModel", self.module).batch_loss(batch)

    def loss(self, task: str, indices: list[int]) -> Tensor:
        """``module.batch_loss`` of ``task``'s remembered examples ``indices``, under the forward context."""
        return self.loss_of(self.batch(task, indices))


def memory_gradient(
    source: MemorySource,
    draws: Mapping[str, list[int]],
    params: list[nn.Parameter],
    sparse_embeddings: bool = False,
) -> Grads:
    """Gradient of the example-weighted mean loss over ``draws`` (task -> indices of all ranks).

    Each rank takes every ``world_size``-th index from ``rank`` on; the local losses are
    weighted by their share of the whole draw and the gradients summed across ranks.
    ``sparse_embeddings`` (one process only): embedding tables' gradients as sparse rows
    (:mod:`pal_lightning.gem.sparse_embeddings`).
    """
    total = sum(len(idx) for idx in draws.values())
    loss: Tensor | None = None
    grads: Grads = [None] * len(params)
    sparse = sparse_embeddings and source.world_size == 1
    with sparse_embedding_gradients(source.module, params) if sparse else contextlib.nullcontext():
        for task, idx in draws.items():
            share = idx[source.rank :: source.world_size]
            if not share:
                continue
            part = source.loss(task, share) * (len(share) / total)
            loss = part if loss is None else loss + part
        if loss is not None:
            grads = list(torch.autograd.grad(loss.float(), params, allow_unused=True))
    if sparse:  # each table's rows summed once here, not in every dot product
        grads = [g.coalesce() if g is not None and g.is_sparse else g for g in grads]
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
    batch_tasks: bool = True,
) -> list[Grads]:
    """Rows of ``G``: one per task (``mode="gem"``), or the single A-GEM reference gradient.

    ``memory_batch_size * world_size`` remembered examples are drawn per task (GEM) or in all, split
    over the tasks with the first ones taking the remainder (A-GEM), by ``memory.sample``. GEM's rows
    come from one backward (:func:`~pal_lightning.gem.batched_gradients.task_gradients`) when
    ``batch_tasks`` and the parameters allow it, else from one backward per task; A-GEM's single row
    is one backward either way, its embedding tables' gradients sparse rows in one process on a CPU.
    """
    want = memory_batch_size * source.world_size
    if mode == "gem":
        draws = {task: memory.sample(task, want, step) for task in tasks}
        if batch_tasks and len(tasks) > 1 and can_alias(source.module, params):
            rows = task_gradients(source, draws, params)
            return sum_rows_across_ranks(rows, params) if source.world_size > 1 else rows
        return [memory_gradient(source, {task: draw}, params) for task, draw in draws.items()]
    counts = [want // len(tasks) + (i < want % len(tasks)) for i in range(len(tasks))]
    draws = {task: memory.sample(task, n, step) for task, n in zip(tasks, counts, strict=True)}
    # sparse embedding rows save the CPU a table-sized gradient (4 % of A-GEM's step); on a GPU a dense
    # table costs nothing beside the launches sparse rows add, and keeps the row flat (flat_rows)
    on_cpu = bool(params) and params[0].device.type == "cpu"
    return [memory_gradient(source, draws, params, sparse_embeddings=on_cpu)]


def sum_across_ranks(grads: Grads, params: list[nn.Parameter]) -> Grads:
    """Sum one gradient across ranks (:func:`sum_rows_across_ranks` of a single row)."""
    return sum_rows_across_ranks([grads], params)[0]


def sum_rows_across_ranks(rows: list[Grads], params: list[nn.Parameter]) -> list[Grads]:
    """Sum gradients across ranks; a tensor stays ``None`` only if it is ``None`` on every rank.

    Every rank makes the same calls in the same order: one small reduction of the "present"
    mask (a rank with no memory examples cannot know which tensors its model would have
    touched), then one reduction per parameter that some rank has in some row, all rows stacked
    (elementwise sums: the same numbers as one reduction per row).
    """
    device = params[0].device
    present = torch.tensor([[x is not None for x in row] for row in rows], dtype=torch.float32, device=device)
    used = distributed.all_reduce_sum(present.reshape(len(rows), len(params))).tolist()
    out: list[Grads] = [[None] * len(params) for _ in rows]
    for j, p in enumerate(params):
        live = [i for i in range(len(rows)) if used[i][j] > 0]
        if not live:  # None on every rank: no call on any rank
            continue
        stacked = torch.stack([torch.zeros_like(p) if (x := rows[i][j]) is None else x for i in live])
        for i, x in zip(live, distributed.all_reduce_sum(stacked).unbind(0), strict=True):
            out[i][j] = x
    return out

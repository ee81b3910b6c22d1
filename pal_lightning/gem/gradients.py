"""The rows of GEM's ``G``: gradients of the model's loss on remembered examples.

Duck-typed contract: ``data.train_batch(task, indices)`` rebuilds a training batch of ``task``'s
train-split positions ``indices`` (CPU tensors are fine: it is moved to the module's device), and
``module.batch_loss(batch)`` is that batch's mean loss. Under DDP every rank calls these functions
with the same arguments except ``rank``; each rank takes every ``world_size``-th remembered example
and the gradients are summed across ranks (:func:`pal_lightning.core.distributed.all_reduce_sum`).

## All tasks' rows from one backward (:func:`task_gradients`)

GEM's per-task memory gradients from one backward: every task's forward sees its own alias of the
parameters, so one backward of ``sum_k L_k`` leaves ``dL_k/dθ`` on task ``k``'s aliases alone.

Why it is exact: an alias is an identity view (``p.view_as(p)``) substituted for the parameter during
task ``k``'s forward (:func:`torch.func.functional_call`). The forward computes the same numbers
as the task's own forward, in the same order (dropout draws included: forwards run in task order, as
the per-task path runs them, and a backward draws no random numbers); the backward of the sum sends
``dL/dL_k = 1`` into each task's graph, and the graphs share nothing but the parameters, whose
gradients are collected per alias. The result equals ``t`` separate ``autograd.grad`` calls up to
nothing (the same kernels on the same inputs); ``tests/callbacks/test_gem_batched.py`` compares them.

What it saves: ``t - 1`` calls into the autograd engine and, under DDP, ``t - 1`` rounds of
collectives (every row's tensor is summed in one all-reduce). What it does not save: each task still
has its own forward, because the model routes one task per forward (one adapter, one head); the
forwards' arithmetic is unchanged. It holds the ``t`` graphs at once (``t`` times the activation
memory of one memory batch).

When it is not used (:func:`can_alias`): the participating parameters are not all parameters of the
module by name (a model that hands out tensors it does not own), in which case the per-task path runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from torch import Tensor, nn
from torch.func import functional_call

from pal_lightning.core import distributed
from pal_lightning.gem.gram import Grads
from pal_lightning.gem.memory import EpisodicMemory
from pal_lightning.gem.sparse_embeddings import sparse_embedding_gradients

if TYPE_CHECKING:
    from pal_lightning.core.contracts import BatchLossModel

__all__ = [
    "MemorySource",
    "can_alias",
    "constraint_gradients",
    "memory_gradient",
    "sum_across_ranks",
    "sum_rows_across_ranks",
    "task_gradients",
]

ForwardContext = Callable[[], Any]


@dataclass(frozen=True)
class MemorySource:
    """Where the memory gradients of one step come from, and how this rank takes its share."""

    module: nn.Module
    """The (unwrapped) module, with ``batch_loss(batch)`` (:class:`~pal_lightning.core.contracts.BatchLossModel`)."""
    data: Any
    """Anything with ``train_batch(task, indices)`` (:class:`~pal_lightning.core.contracts.TrainBatchSource`)."""
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
    one_pass: bool | None = None,
) -> list[Grads]:
    """Rows of ``G``: one per task (``mode="gem"``), or the single A-GEM reference gradient.

    ``memory_batch_size * world_size`` remembered examples are drawn per task (GEM) or in all, split
    over the tasks with the first ones taking the remainder (A-GEM), by ``memory.sample``.

    With ``one_pass`` and more than one task, where the module allows it
    (:func:`~pal_lightning.gem.one_pass.one_pass_applies`), every task's share runs as one mixed batch:
    GEM's rows from one forward and one backward per task, A-GEM's row from one forward and one backward
    (:mod:`pal_lightning.gem.one_pass`). ``None`` (default): A-GEM always; GEM on a CUDA device only
    (:func:`~pal_lightning.gem.one_pass.wants_one_pass`). Otherwise one forward per task: GEM's rows from one backward
    (:func:`~pal_lightning.gem.gradients.task_gradients`) when ``batch_tasks`` and the parameters allow
    it, else from one backward per task; A-GEM's single row is one backward either way. A-GEM's embedding
    tables' gradients are sparse rows in one process on a CPU, on both paths.
    """
    from pal_lightning.gem import one_pass as mixed  # it builds on this module's MemorySource

    want = memory_batch_size * source.world_size
    wanted = mixed.wants_one_pass(one_pass, mode, params)
    in_one_pass = wanted and len(tasks) > 1 and mixed.one_pass_applies(source.module)
    if mode == "gem":
        draws = {task: memory.sample(task, want, step) for task in tasks}
        owners = mixed.task_owners(source.module, tasks) if in_one_pass else None
        if owners is not None:
            rows = mixed.mixed_task_gradients(source, draws, params, owners)
            return sum_rows_across_ranks(rows, params) if source.world_size > 1 else rows
        if batch_tasks and len(tasks) > 1 and can_alias(source.module, params):
            rows = task_gradients(source, draws, params)
            return sum_rows_across_ranks(rows, params) if source.world_size > 1 else rows
        return [memory_gradient(source, {task: draw}, params) for task, draw in draws.items()]
    counts = [want // len(tasks) + (i < want % len(tasks)) for i in range(len(tasks))]
    draws = {task: memory.sample(task, n, step) for task, n in zip(tasks, counts, strict=True)}
    # sparse embedding rows save the CPU a table-sized gradient (4 % of A-GEM's step); on a GPU a dense
    # table costs nothing beside the launches sparse rows add, and keeps the row flat (flat_rows)
    on_cpu = bool(params) and params[0].device.type == "cpu"
    if in_one_pass:
        grads = mixed.mixed_memory_gradient(source, draws, params, sparse_embeddings=on_cpu)
        return [sum_across_ranks(grads, params) if source.world_size > 1 else grads]
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


# ---------------------------------------------------------------- one backward for every task's row
class _BatchLoss(nn.Module):
    """``module.batch_loss`` as a ``forward``, so that :func:`functional_call` can run it."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, source: MemorySource, batch: Any) -> Tensor:
        return source.loss_of(batch)


def _names(module: nn.Module, params: Sequence[nn.Parameter]) -> list[str] | None:
    """The module's name of each parameter in ``params`` (``None`` if one is not the module's)."""
    by_id = {id(p): name for name, p in module.named_parameters(remove_duplicate=False)}
    names = [by_id.get(id(p)) for p in params]
    return None if any(n is None for n in names) else cast("list[str]", names)


def can_alias(module: nn.Module, params: Sequence[nn.Parameter]) -> bool:
    """Whether :func:`task_gradients` can substitute aliases for every parameter in ``params``."""
    return bool(params) and _names(module, params) is not None


def task_gradients(
    source: MemorySource, draws: Mapping[str, list[int]], params: list[nn.Parameter]
) -> list[Grads]:
    """One gradient per task of ``draws`` (task -> indices of all ranks), each of that task's mean loss.

    This rank's share of each draw is every ``world_size``-th index from ``rank`` on, its loss weighted
    by the share's size over the draw's (as :func:`~pal_lightning.gem.gradients.memory_gradient`
    does for one task). Not yet summed across ranks.
    """
    names = _names(source.module, params)
    if names is None:
        raise ValueError("task_gradients needs parameters of source.module (see can_alias)")
    wrapper = _BatchLoss(source.module)
    losses: list[Tensor] = []
    aliases: list[list[Tensor] | None] = [None] * len(draws)
    for k, (task, idx) in enumerate(draws.items()):
        share = idx[source.rank :: source.world_size]
        if not share:
            continue
        batch = source.batch(task, share)  # built outside functional_call, which swaps the parameters
        alias = [p.view_as(p) for p in params]
        substitute: dict[str, Any] = {f"module.{n}": a for n, a in zip(names, alias, strict=True)}
        # tie_weights: a parameter the module holds under several names (tied weights) is named once
        # here; its alias must stand in under every name, or the uses through the others are lost
        loss = functional_call(wrapper, substitute, (source, batch), strict=False, tie_weights=True)
        losses.append((loss * (len(share) / len(idx))).float())  # as memory_gradient weighs and casts
        aliases[k] = alias
    rows: list[Grads] = [[None] * len(params) for _ in draws]
    inputs = [a for alias in aliases if alias is not None for a in alias]
    if not inputs:
        return rows
    grads = torch.autograd.grad(torch.stack(losses).sum(), inputs, allow_unused=True)
    it = iter(grads)
    for k, task_alias in enumerate(aliases):
        if task_alias is not None:
            rows[k] = [next(it) for _ in task_alias]
    return rows

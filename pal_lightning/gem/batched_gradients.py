"""GEM's per-task memory gradients from one backward: every task's forward sees its own alias of the
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

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor, nn
from torch.func import functional_call

from pal_lightning.gem.gram import Grads

if TYPE_CHECKING:
    from pal_lightning.gem.memory_gradients import MemorySource

__all__ = ["can_alias", "task_gradients"]


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
    by the share's size over the draw's (as :func:`~pal_lightning.gem.memory_gradients.memory_gradient`
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

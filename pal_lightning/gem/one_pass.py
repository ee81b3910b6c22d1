"""GEM's and A-GEM's memories in one pass: the remembered examples of every constraining task mixed into one
batch (per-example task routing, :meth:`~pal_lightning.MultiTaskModule.forward_mixed`).

The per-task path (:mod:`pal_lightning.gem.gradients`) runs one forward per task, because a one-task batch
is what ``batch_loss`` takes. A mixed batch of all the tasks' shares runs the encoder once, each row
through its own task's modules and head, and ``module.mixed_losses(batch)`` gives each task's mean loss
over its rows, the very number ``batch_loss`` gives for a one-task batch of them (rows are independent:
attention stays within a sequence and no module mixes rows; padding to the longest row of the mix changes
no row, the mask is 0 there).

A-GEM (:func:`mixed_memory_gradient`): the reference gradient is that of ``sum_k L_k n_k / N`` (``L_k``
task ``k``'s mean loss over its ``n_k`` examples on this rank, ``N`` the whole draw over all ranks), the
example-weighted mean the per-task path differentiates (:func:`~pal_lightning.gem.gradients.memory_gradient`):
one forward and one backward.

GEM (:func:`mixed_task_gradients`): one gradient per task, ``d(L_k n_k / N_k)/dθ``, from the one shared
forward and one backward per task (``retain_graph``). Why each equals the task's own gradient: ``L_k``
depends on task ``k``'s rows only, so the cotangent the backward of ``L_k`` sends into every other row is
exactly 0 and those rows add nothing to any parameter's gradient. One difference of form remains, and is
removed: another task's own modules (its adapter, its individual layers) lie on ``L_k``'s graph (their
rows are joined to task ``k``'s inside the encoder) and would get a zero tensor where task ``k``'s own
forward gives no gradient at all (``None``, which the write-back and the optimizer treat differently from a
zero). The backward of ``L_k`` is therefore asked only for the parameters that task ``k`` can use: the
participating parameters minus those that belong to other tasks alone (``encoder.task_parameters`` and
``heads[task]``); the others stay ``None`` (and their backward is skipped).

What it saves: ``t - 1`` forwards' worth of operators and one bigger batch's matmuls instead of ``t``
small ones (host-bound steps: GPUs, tiny shapes). A-GEM does the per-task path's arithmetic, so it takes the
one pass by default everywhere. What it costs GEM: its ``t`` backwards each run over the whole mixed batch
(the other tasks' rows with zero cotangents), so its backward arithmetic is ``t`` times the per-task path's.
On a CPU at the quickstart shape (all-MiniLM-L6-v2, a step of 32 x 64, two constraining tasks of 16
examples) that is 374 GFLOP a step instead of 277 and a step 1.4-1.6 times slower, so GEM takes the one
pass by default on CUDA devices only, where a step waits for the host issuing operators
(:func:`wants_one_pass`; ``GEMCallback(one_pass=True)`` forces it).

When it does not apply (:func:`one_pass_applies`; the per-task path runs instead): the module has no
``mixed_losses`` (any model other than :class:`~pal_lightning.MultiTaskModule` that does not provide one);
a :class:`~pal_lightning.MultiTaskModule` subclass that overrides how a one-task batch's loss is computed
(``batch_loss``, ``forward``, ``encode``: the mixed pass would not run the override); an encoder that runs
a mixed batch as one forward per task anyway (``encoder.mixed_by_task``: DeBERTa with a method on its
relative-position sites); an encoder called through ``torch.compile`` (the per-task forwards run compiled,
a mixed forward would run eagerly); GEM with a participating parameter whose owner is unknown (a module
without ``encoder.task_parameters``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from torch import Tensor, nn

from pal_lightning.core.batch import mix_batches
from pal_lightning.gem.gram import Grads

if TYPE_CHECKING:  # gradients imports this module at run time: the type alone, no cycle
    from pal_lightning.gem.gradients import MemorySource
from pal_lightning.gem.sparse_embeddings import sparse_embedding_gradients

__all__ = [
    "mixed_memory_gradient",
    "mixed_memory_losses",
    "mixed_task_gradients",
    "one_pass_applies",
    "task_owners",
    "wants_one_pass",
]

#: What a :class:`~pal_lightning.MultiTaskModule` subclass may override that changes a one-task batch's
#: loss without changing ``mixed_losses`` (then the per-task path runs, which calls the override).
_MODULE_HOME = "pal_lightning.module.multitask"
"""Where ``MultiTaskModule`` is defined (the class is recognised by its name and module)."""
_ONE_TASK_PATH = ("batch_loss", "forward", "encode", "_encode_batch", "_encode_siamese")


def _compiling(module: nn.Module) -> bool:
    return bool(getattr(getattr(module, "_encoder_call", None), "compiling", False))


def wants_one_pass(one_pass: bool | None, mode: str, params: list[nn.Parameter]) -> bool:
    """Whether a step asks for the one pass: as ``one_pass`` says, or by default (``None``) for A-GEM always
    (the per-task path's arithmetic in fewer operators) and for GEM on a CUDA device (``t`` backwards over
    the mixed batch: more arithmetic, fewer operators; module docstring)."""
    if one_pass is not None:
        return one_pass
    return mode != "gem" or (bool(params) and params[0].device.type == "cuda")


def one_pass_applies(module: nn.Module) -> bool:
    """Whether ``module``'s memory batches of several tasks may run as one mixed batch (module docstring)."""
    if not callable(getattr(module, "mixed_losses", None)):
        return False
    if bool(getattr(getattr(module, "encoder", None), "mixed_by_task", False)) or _compiling(module):
        return False
    # MultiTaskModule found by name in the class's MRO: gem sits below the module package, so it does not
    # import it (and an object of another class has no one-task path to override)
    base = next(
        (
            c
            for c in type(module).__mro__
            if c.__qualname__ == "MultiTaskModule" and c.__module__ == _MODULE_HOME
        ),
        None,
    )
    if base is not None:
        return all(getattr(type(module), name) is getattr(base, name) for name in _ONE_TASK_PATH)
    return True


def task_owners(module: nn.Module, tasks: list[str]) -> dict[int, set[str]] | None:
    """``id(parameter) -> the tasks among `tasks` that own it`` (their adapter, individual layers, head), or
    ``None`` when the module does not say (no ``encoder.task_parameters``). A parameter no task owns is
    shared: every task's forward may use it."""
    encoder = getattr(module, "encoder", None)
    task_parameters = getattr(encoder, "task_parameters", None)
    if not callable(task_parameters):
        return None
    heads = getattr(module, "heads", None)
    owners: dict[int, set[str]] = {}
    for task in tasks:
        owned = [p for _, p in task_parameters(task)]
        if isinstance(heads, nn.ModuleDict) and task in heads:
            owned += list(heads[task].parameters())
        for p in owned:
            owners.setdefault(id(p), set()).add(task)
    return owners


def _shares(source: MemorySource, draws: Mapping[str, list[int]]) -> dict[str, list[int]]:
    """This rank's share of each task's draw (every ``world_size``-th index from ``rank`` on), non-empty ones."""
    shares = {task: idx[source.rank :: source.world_size] for task, idx in draws.items()}
    return {task: share for task, share in shares.items() if share}


def mixed_memory_losses(source: MemorySource, shares: Mapping[str, list[int]]) -> dict[str, Tensor]:
    """Each task's mean loss over its remembered examples ``shares[task]``, from one mixed batch: the
    one-task batches are built as the per-task path builds them, mixed on the host and moved once."""
    batches = [source.data.train_batch(task, share) for task, share in shares.items()]
    device = next(source.module.parameters()).device
    batch = move_data_to_device(mix_batches(batches), device)
    with source.forward_context():
        losses: dict[str, Tensor] = source.module.mixed_losses(batch)  # type: ignore[operator]
    return losses


def mixed_memory_gradient(
    source: MemorySource,
    draws: Mapping[str, list[int]],
    params: list[nn.Parameter],
    sparse_embeddings: bool = False,
) -> Grads:
    """:func:`~pal_lightning.gem.gradients.memory_gradient` (A-GEM's reference gradient) from one forward and
    one backward of the mixed batch of every task's share. Not yet summed across ranks."""
    total = sum(len(idx) for idx in draws.values())
    shares = _shares(source, draws)
    if not shares:
        return [None] * len(params)
    sparse = sparse_embeddings and source.world_size == 1
    with sparse_embedding_gradients(source.module, params) if sparse else contextlib.nullcontext():
        losses = mixed_memory_losses(source, shares)
        loss: Tensor | None = None
        for task, share in shares.items():  # the same terms in the same order as memory_gradient adds them
            part = losses[task] * (len(share) / total)
            loss = part if loss is None else loss + part
        assert loss is not None
        grads: Grads = list(torch.autograd.grad(loss.float(), params, allow_unused=True))
    if sparse:  # as memory_gradient: each table's rows summed once here
        grads = [g.coalesce() if g is not None and g.is_sparse else g for g in grads]
    return grads


def mixed_task_gradients(
    source: MemorySource,
    draws: Mapping[str, list[int]],
    params: list[nn.Parameter],
    owners: Mapping[int, set[str]],
) -> list[Grads]:
    """:func:`~pal_lightning.gem.gradients.task_gradients` (one row per task of ``draws``, each the gradient
    of ``L_k * n_k / N_k``) from one forward of the mixed batch and one backward per task; ``owners`` from
    :func:`task_owners`. Not yet summed across ranks."""
    rows: list[Grads] = [[None] * len(params) for _ in draws]
    shares = _shares(source, draws)
    if not shares:
        return rows
    losses = mixed_memory_losses(source, shares)
    present = [k for k, task in enumerate(draws) if task in shares]
    for n, k in enumerate(present):
        task = list(draws)[k]
        usable = [j for j, p in enumerate(params) if task in owners.get(id(p), (task,))]
        if not usable:
            continue
        weighted = (losses[task] * (len(shares[task]) / len(draws[task]))).float()
        grads = torch.autograd.grad(
            weighted, [params[j] for j in usable], allow_unused=True, retain_graph=n < len(present) - 1
        )
        for j, g in zip(usable, grads, strict=True):
            rows[k][j] = g
    return rows

"""The rows of GEM's ``G``: gradients of ``module.batch_loss`` on remembered examples (``data.train_batch``).

Under DDP each rank takes every ``world_size``-th example of a draw, weighted by its share, and the rows
are summed across ranks. :func:`constraint_gradients` chooses the path to the same rows: per task
(:func:`memory_gradient`); from one backward on identity aliases of the parameters (:func:`task_gradients`);
or one mixed batch through ``module.mixed_losses`` (:func:`mixed_task_gradients`). A-GEM's embedding tables
give sparse rows in one process on a CPU (:func:`sparse_embedding_gradients`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from torch import Tensor, nn
from torch.func import functional_call

from pal_lightning.core import distributed
from pal_lightning.core.batch import mix_batches
from pal_lightning.gem.gram import Grads
from pal_lightning.gem.memory import EpisodicMemory

if TYPE_CHECKING:
    from pal_lightning.core.contracts import BatchLossModel

__all__ = ["MemorySource", "constraint_gradients", "memory_gradient", "sparse_embedding_gradients"]

#: ``MultiTaskModule`` (recognised by name: gem sits below the module package), and what a subclass may
#: override that changes a one-task batch's loss but not ``mixed_losses``.
_MULTITASK_MODULE = "pal_lightning.module.multitask.MultiTaskModule"
_ONE_TASK_PATH = ("batch_loss", "forward", "encode", "_encode_batch", "_encode_siamese")


@dataclass(frozen=True)
class MemorySource:
    """Where the memory gradients of one step come from, and how this rank takes its share."""

    module: nn.Module
    """The (unwrapped) module, with ``batch_loss(batch)``."""
    data: Any
    """Anything with ``train_batch(task, indices)``."""
    forward_context: Callable[[], Any] = contextlib.nullcontext
    """The precision plugin's ``forward_context`` (autocast under mixed precision)."""
    rank: int = 0
    world_size: int = 1

    def batch(self, task: str, indices: list[int]) -> Any:
        return self.on_device(self.data.train_batch(task, indices))

    def on_device(self, batch: Any) -> Any:
        return move_data_to_device(batch, next(self.module.parameters()).device)

    def loss_of(self, batch: Any) -> Tensor:
        with self.forward_context():
            return cast("BatchLossModel", self.module).batch_loss(batch)

    def shares(self, draws: Mapping[str, list[int]]) -> dict[str, list[int]]:
        """This rank's non-empty share of each task's draw."""
        shares = {task: idx[self.rank :: self.world_size] for task, idx in draws.items()}
        return {task: share for task, share in shares.items() if share}


def _compiling(module: nn.Module) -> bool:
    """Whether ``module`` calls its encoder through ``torch.compile``."""
    return bool(getattr(getattr(module, "_encoder_call", None), "compiling", False))


@contextlib.contextmanager
def sparse_embedding_gradients(module: nn.Module, params: Sequence[nn.Parameter]) -> Iterator[int]:
    """Within the block, ``module``'s embedding tables among ``params`` give sparse gradients (none when the
    encoder is compiled: a changed attribute recompiles). Yields how many; switched back on leaving."""
    wanted = {id(p) for p in params}
    embeddings = [m for m in module.modules() if type(m) is nn.Embedding and not m.sparse]
    tables = [] if _compiling(module) else [m for m in embeddings if id(m.weight) in wanted]
    for table in tables:
        table.sparse = True
    try:
        yield len(tables)
    finally:
        for table in tables:
            table.sparse = False


# ---------------------------------------------------------------- the choice
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
    """Rows of ``G``, summed across ranks: one per task (``mode="gem"``), or A-GEM's reference gradient.

    ``memory_batch_size * world_size`` examples are drawn per task (GEM) or in all, split over the tasks
    with the first ones taking the remainder (A-GEM). The path: one pass where asked
    (:func:`wants_one_pass`), with several tasks and where it applies; else GEM's rows from one backward
    (:func:`task_gradients`) when ``batch_tasks`` and :func:`can_alias`, else one backward per task.
    """
    want = memory_batch_size * source.world_size
    mixed = wants_one_pass(one_pass, mode, params) and len(tasks) > 1 and one_pass_applies(source.module)
    if mode == "gem":
        draws = {task: memory.sample(task, want, step) for task in tasks}
        owners = task_owners(source.module, tasks) if mixed else None
        if owners is not None:
            rows = mixed_task_gradients(source, draws, params, owners)
        elif batch_tasks and len(tasks) > 1 and can_alias(source.module, params):
            rows = task_gradients(source, draws, params)
        else:
            return [memory_gradient(source, {task: draw}, params) for task, draw in draws.items()]
        return sum_rows_across_ranks(rows, params) if source.world_size > 1 else rows
    counts = [want // len(tasks) + (i < want % len(tasks)) for i in range(len(tasks))]
    draws = {task: memory.sample(task, n, step) for task, n in zip(tasks, counts, strict=True)}
    # sparse embedding rows on a CPU only: on a GPU a dense table costs nothing beside the launches sparse
    # rows add, and keeps the row flat
    on_cpu = bool(params) and params[0].device.type == "cpu"
    return [memory_gradient(source, draws, params, sparse_embeddings=on_cpu, one_pass=mixed)]


def wants_one_pass(one_pass: bool | None, mode: str, params: list[nn.Parameter]) -> bool:
    """As ``one_pass`` says, or by default (``None``) for A-GEM always and for GEM on a CUDA device."""
    if one_pass is not None:
        return one_pass
    return mode != "gem" or (bool(params) and params[0].device.type == "cuda")


def one_pass_applies(module: nn.Module) -> bool:
    """Whether ``module``'s memory batches may run as one mixed batch: it has ``mixed_losses``, an encoder
    neither compiled nor running a mixed batch task by task (``mixed_by_task``), and (a
    ``MultiTaskModule``) no override of the one-task loss, which the mixed pass would not run."""
    if not callable(getattr(module, "mixed_losses", None)):
        return False
    if bool(getattr(getattr(module, "encoder", None), "mixed_by_task", False)) or _compiling(module):
        return False
    base = next(
        (c for c in type(module).__mro__ if f"{c.__module__}.{c.__qualname__}" == _MULTITASK_MODULE), None
    )
    return base is None or all(getattr(type(module), name) is getattr(base, name) for name in _ONE_TASK_PATH)


def task_owners(module: nn.Module, tasks: list[str]) -> dict[int, set[str]] | None:
    """``id(parameter) -> the tasks among `tasks` owning it`` (adapter, individual layers, head), or
    ``None`` without ``encoder.task_parameters``. A parameter no task owns is shared."""
    task_parameters = getattr(getattr(module, "encoder", None), "task_parameters", None)
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


# ---------------------------------------------------------------- one row of several tasks' examples
def memory_gradient(
    source: MemorySource,
    draws: Mapping[str, list[int]],
    params: list[nn.Parameter],
    sparse_embeddings: bool = False,
    one_pass: bool = False,
) -> Grads:
    """Gradient of the example-weighted mean loss over ``draws`` (task -> indices of all ranks), summed
    across ranks; ``one_pass``: from one mixed batch. ``sparse_embeddings`` (one process only): embedding
    tables' gradients as sparse rows."""
    total = sum(len(idx) for idx in draws.values())
    shares = source.shares(draws)
    grads: Grads = [None] * len(params)
    sparse = sparse_embeddings and source.world_size == 1
    with sparse_embedding_gradients(source.module, params) if sparse else contextlib.nullcontext():
        if shares:
            losses = mixed_memory_losses(source, shares) if one_pass else None
            parts = [
                (source.loss_of(source.batch(task, share)) if losses is None else losses[task])
                * (len(share) / total)
                for task, share in shares.items()
            ]
            loss = sum(parts[1:], start=parts[0])  # ((p0 + p1) + p2) ...
            grads = list(torch.autograd.grad(loss.float(), params, allow_unused=True))
    if sparse:  # each table's rows summed once here, not in every dot product
        grads = [g.coalesce() if g is not None and g.is_sparse else g for g in grads]
    if source.world_size > 1:
        grads = sum_rows_across_ranks([grads], params)[0]
    return grads


def mixed_memory_losses(source: MemorySource, shares: Mapping[str, list[int]]) -> dict[str, Tensor]:
    """Each task's mean loss over its examples ``shares[task]``, from one mixed batch moved once."""
    batch = source.on_device(mix_batches([source.data.train_batch(t, s) for t, s in shares.items()]))
    with source.forward_context():
        losses: dict[str, Tensor] = source.module.mixed_losses(batch)  # type: ignore[operator]
    return losses


# ---------------------------------------------------------------- GEM: a row per task, not yet summed
class _BatchLoss(nn.Module):
    """``module.batch_loss`` as a ``forward``, so that :func:`functional_call` can run it."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, source: MemorySource, batch: Any) -> Tensor:
        return source.loss_of(batch)


def _names(module: nn.Module, params: Sequence[nn.Parameter]) -> list[str] | None:
    by_id = {id(p): name for name, p in module.named_parameters(remove_duplicate=False)}
    names = [by_id.get(id(p)) for p in params]
    return None if any(n is None for n in names) else cast("list[str]", names)


def can_alias(module: nn.Module, params: Sequence[nn.Parameter]) -> bool:
    """Whether every parameter in ``params`` is the module's (by name), as :func:`task_gradients` needs."""
    return bool(params) and _names(module, params) is not None


def task_gradients(
    source: MemorySource, draws: Mapping[str, list[int]], params: list[nn.Parameter]
) -> list[Grads]:
    """One row per task of ``draws``, each of this rank's weighted share, from one backward (aliases)."""
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
        # tie_weights: a parameter held under several names must be aliased under every one
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


def mixed_task_gradients(
    source: MemorySource,
    draws: Mapping[str, list[int]],
    params: list[nn.Parameter],
    owners: Mapping[int, set[str]],
) -> list[Grads]:
    """:func:`task_gradients` from one mixed forward and one backward per task, each asked only for the
    parameters its task may use (``owners`` from :func:`task_owners`)."""
    rows: list[Grads] = [[None] * len(params) for _ in draws]
    shares = source.shares(draws)
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


# ---------------------------------------------------------------- across ranks
def sum_rows_across_ranks(rows: list[Grads], params: list[nn.Parameter]) -> list[Grads]:
    """Sum gradients across ranks; a tensor stays ``None`` only if it is ``None`` on every rank.

    Every rank makes the same calls: one reduction of the "present" mask (a rank without examples cannot
    know which tensors its model would have touched), then one per parameter some rank has, rows stacked.
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

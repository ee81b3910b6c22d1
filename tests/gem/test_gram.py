"""GEM's flat rows (:mod:`pal_lightning.gem.gram`) give what the per-tensor path gives, in far fewer
operators; the callback takes them where asked and keeps the per-tensor path where they cannot apply."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from pal_lightning.core.private_api import TorchDispatchMode
from pal_lightning.gem import GEMCallback
from pal_lightning.gem.gram import (
    FlatLayout,
    GramRows,
    add_flat_rows,
    add_rows,
    bordered_gram,
    can_flatten,
    flat_bordered_gram,
    flatten,
    flatten_rows,
    gram_matrix,
    unflatten_rows,
)
from pal_lightning.gem.memory import EpisodicMemory

GEM_TASKS = ("sst", "qqp", "sts")  # the heads of the shared `setup` fixture (conftest.py)


class _Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.count += 1
        return func(*args, **(kwargs or {}))


def _params(n: int = 40, seed: int = 0) -> list[nn.Parameter]:
    """``n`` parameter tensors of assorted shapes (a model's many small tensors), each with a gradient."""
    gen = torch.Generator().manual_seed(seed)
    shapes = [(7, 5), (5,), (3, 4, 2), (11,)]
    params = [nn.Parameter(torch.randn(shapes[i % 4], generator=gen)) for i in range(n)]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    return params


def _rows(params: list[nn.Parameter], t: int, seed: int = 1) -> list[list[torch.Tensor | None]]:
    gen = torch.Generator().manual_seed(seed)
    return [[torch.randn(p.shape, generator=gen) for p in params] for _ in range(t)]


def test_flat_gram_bordered_gram_and_write_back_equal_the_per_tensor_ones() -> None:
    params = _params()
    rows = _rows(params, t=3)
    F = flatten_rows(rows, params)
    assert F.shape == (3, sum(p.numel() for p in params)) and F.dtype == torch.float64
    GGt = gram_matrix(rows)
    torch.testing.assert_close(F @ F.T, GGt, rtol=1e-6, atol=0)
    g = [p.grad for p in params]
    M = bordered_gram(g, rows, GGt)
    torch.testing.assert_close(flat_bordered_gram(flatten(g, params), F, F @ F.T), M, rtol=1e-6, atol=0)
    v = [0.5, -0.25, 2.0]
    expected = [p.grad.clone() for p in params]
    for e, *row in zip(expected, *rows, strict=True):
        for coeff, r in zip(v, row, strict=True):
            e.add_(r, alpha=coeff)
    add_flat_rows(params, F, v)
    for p, e in zip(params, expected, strict=True):
        torch.testing.assert_close(p.grad, e, rtol=1e-6, atol=1e-7)
    # and the inverse of flattening returns the rows themselves
    for back, row in zip(unflatten_rows(F, params), rows, strict=True):
        for x, y in zip(back, row, strict=True):
            assert x.shape == y.shape and torch.equal(x, y)


def test_flat_path_dispatches_a_fraction_of_the_per_tensor_operators() -> None:
    """The point of the flat path on a GPU: the host issues far fewer operators (each one a launch)."""
    params = _params(n=100)
    rows = _rows(params, t=2)
    counts = []
    for flat in (False, True):
        with _Count() as counter:
            if flat:
                F = flatten_rows(rows, params)
                flat_bordered_gram(flatten([p.grad for p in params], params), F, F @ F.T)
                add_flat_rows(params, F, [0.1, 0.2])
            else:
                bordered_gram([p.grad for p in params], rows, gram_matrix(rows))
                add_rows(params, rows, [0.1, 0.2])
        counts.append(counter.count)
    per_tensor, flat_count = counts
    # per tensor: 6 dot products (each with its flattening views) and 2 additions per parameter tensor;
    # flat: about one view per tensor and row, and a handful of matrix operators
    assert per_tensor > 1000 and flat_count < per_tensor / 2, counts


def test_a_missing_or_sparse_entry_keeps_the_per_tensor_path() -> None:
    params = _params(n=4)
    rows = _rows(params, t=2)
    assert can_flatten(rows, params)
    assert not can_flatten([[None, *rows[0][1:]], rows[1]], params)
    assert not can_flatten([[rows[0][0].to_sparse(), *rows[0][1:]], rows[1]], params)
    params[2].grad = None
    assert not can_flatten(rows, params)


def _project_once(model: nn.Module, dm: object, memory: EpisodicMemory, **options: object) -> tuple:
    cb = GEMCallback(memory_size=12, memory_batch_size=4, margin=0.1, **options)  # type: ignore[arg-type]
    cb.memory = memory
    cb.task_order = list(GEM_TASKS)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(21)
    model.batch_loss(dm.train_batch("sst", list(range(8)))).backward()  # type: ignore[attr-defined]
    torch.manual_seed(22)
    stats = cb.project_step(model, dm, step=7, current=["sst"])
    grads = [p.grad.clone() for p in cb.participating_parameters(model)]
    return cb, grads, stats


@pytest.mark.parametrize("mode", ["gem", "agem"])
def test_project_step_same_flat_and_per_tensor(
    setup: tuple, make_memory: Callable[[], EpisodicMemory], mode: str
) -> None:
    """On the tiny PAL model: the same projected gradient and statistics either way; GEM's rows went flat
    (A-GEM's embedding rows are sparse in one process, so its step stays per tensor whatever is asked)."""
    model, dm = setup
    results = {}
    for flat in (False, True):
        results[flat] = _project_once(model, dm, make_memory(), mode=mode, flat_rows=flat, refresh_every=2)
    (cb_a, per_tensor, stats_a), (cb_b, flat_grads, stats_b) = results[False], results[True]
    assert (
        stats_a["gem/violated"] == stats_b["gem/violated"]
        and stats_a["gem/constraints"] == stats_b["gem/constraints"]
    )
    assert isinstance(cb_b._cache[2], torch.Tensor) == (mode == "gem")  # type: ignore[index]
    assert not isinstance(cb_a._cache[2], torch.Tensor)  # type: ignore[index]
    for x, y in zip(per_tensor, flat_grads, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-7)
    model.zero_grad(set_to_none=True)


def test_default_is_per_tensor_on_a_cpu_and_cached_flat_rows_survive_a_missing_gradient(
    setup: tuple, make_memory: Callable[[], EpisodicMemory]
) -> None:
    model, dm = setup
    params = GEMCallback().participating_parameters(model)
    assert not GEMCallback().wants_flat_rows(params)  # default None: CUDA only
    assert GEMCallback(flat_rows=True).wants_flat_rows(params) and not GEMCallback(
        flat_rows=False
    ).wants_flat_rows(params)
    # step 7 leaves flat rows in the cache (refresh_every=2); at step 8 one parameter has no gradient:
    # the cached rows go back to tensors and the write-back creates that gradient, as per tensor
    outcomes = []
    for flat in (False, True):
        cb, _, _ = _project_once(model, dm, make_memory(), flat_rows=flat, refresh_every=2)
        model.zero_grad(set_to_none=True)
        torch.manual_seed(23)
        model.batch_loss(dm.train_batch("sst", list(range(8, 12)))).backward()
        first = cb.participating_parameters(model)[0]
        first.grad = None
        stats = cb.project_step(model, dm, step=8, current=["sst"])
        outcomes.append((stats["gem/violated"], [None if p.grad is None else p.grad.clone() for p in params]))
    (violated_a, grads_a), (violated_b, grads_b) = outcomes
    assert violated_a == violated_b
    for x, y in zip(grads_a, grads_b, strict=True):
        assert (x is None) == (y is None)
        if x is not None:
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-7)
    model.zero_grad(set_to_none=True)


# ------------------------------------------------------------ from test_gem_flat_layout.py


def test_the_layout_gives_the_same_bits_as_the_plain_flat_path() -> None:
    params, twins = _params(40), _params(40)
    rows = _rows(params, t=3)
    layout = FlatLayout(params)
    assert torch.equal(flatten_rows(rows, params, layout), flatten_rows(rows, params))
    grads = [p.grad for p in params]
    assert torch.equal(flatten(grads, params, layout), flatten(grads, params))
    F = flatten_rows(rows, params)
    add_flat_rows(params, F, [0.5, 0.0, -0.25], layout)
    add_flat_rows(twins, F, [0.5, 0.0, -0.25])
    for p, q in zip(params, twins, strict=True):
        assert torch.equal(p.grad, q.grad)  # type: ignore[arg-type]


def test_the_layout_dispatches_a_few_operators_whatever_the_number_of_tensors() -> None:
    counts = []
    for n in (20, 200):
        params = _params(n)
        rows = _rows(params, t=2)
        layout = FlatLayout(params)  # built once, kept across steps: not counted
        with _Count() as counter:
            F = flatten_rows(rows, params, layout)
            flatten([p.grad for p in params], params, layout)
            add_flat_rows(params, F, [0.1, 0.2], layout)
        counts.append(counter.count)
    # without the layout: a view per tensor and row for each flattening and for the write-back
    assert counts[0] == counts[1] <= 20, counts


def test_gram_rows_keep_their_layout_while_the_parameters_stay() -> None:
    projector = GramRows()
    params = _params(8)
    layout = projector.layout(params)
    assert layout is not None and projector.layout(params) is layout
    other = _params(8, seed=1)  # other tensors: another buffer
    assert projector.layout(other) is not layout
    assert projector.layout([*params[:2], nn.Parameter(torch.zeros(3, dtype=torch.float64))]) is None

"""The Gram matrix and the write-back (:mod:`pal_lightning.gem.gram`): per tensor (``None`` and sparse
entries, half precision) and flat, which gives the same in far fewer operators and is taken where asked
and possible."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

from pal_lightning.core.private_api import TorchDispatchMode
from pal_lightning.gem import GEMCallback
from pal_lightning.gem.gram import (
    FlatLayout,
    GramRows,
    _dot,
    add_flat_rows,
    add_rows,
    bordered_gram,
    can_flatten,
    flat_bordered_gram,
    flatten,
    flatten_rows,
    gram_matrix,
    unflatten_rows,
    wants_flat_rows,
)
from pal_lightning.gem.memory import EpisodicMemory
from pal_lightning.testing import TINY_BERT

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
    assert not wants_flat_rows(GEMCallback().flat_rows, params)  # default None: CUDA only
    assert wants_flat_rows(GEMCallback(flat_rows=True).flat_rows, params)
    assert not wants_flat_rows(GEMCallback(flat_rows=False).flat_rows, params)
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


# ------------------------------------------------------------ the kept buffer (FlatLayout)


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


def test_gram_matrix_skips_missing_tensors() -> None:
    x = [torch.ones(3), None, torch.full((2, 2), 2.0)]
    y = [torch.full((3,), -1.0), torch.ones(4), None]
    M = gram_matrix([x, y]).numpy()
    np.testing.assert_allclose(M, [[3 + 16, -3], [-3, 3 + 4]])
    assert gram_matrix([]).shape == (0, 0)


def test_half_precision_products_are_taken_in_float32() -> None:
    """bf16 gradients: 3 (1 + 2^-7)^2 = 3.0469 (bf16 itself would round it to 3.047 or worse)."""
    x = torch.full((3,), 1.0 + 2**-7, dtype=torch.bfloat16)
    M = gram_matrix([[x], [x.half()]])
    assert M.dtype == torch.float64
    np.testing.assert_allclose(M.numpy(), np.full((2, 2), 3 * (1 + 2**-7) ** 2), rtol=1e-7)


def test_add_rows_by_hand() -> None:
    """p.grad += sum_k v_k rows[k]: a coefficient of exactly 1 is added, a zero one skipped without
    stopping at it; a parameter without a gradient gets one in its own dtype (rows may be float64)."""
    a, b = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(3))
    a.grad = torch.tensor([1.0, 2.0])
    rows = [
        [torch.tensor([1.0, 1.0]), None],
        [torch.tensor([5.0, 5.0]), torch.ones(3, dtype=torch.float64)],
        [None, torch.full((3,), 2.0, dtype=torch.float64)],
    ]
    add_rows([a, b], rows, [1.0, 0.0, 0.5])
    assert torch.equal(a.grad, torch.tensor([2.0, 3.0]))
    assert b.grad is not None and b.grad.dtype == torch.float32 and torch.equal(b.grad, torch.ones(3))
    c = nn.Parameter(torch.zeros(3))
    add_rows([c], [[torch.ones(3)]], [0.0])
    assert c.grad is None  # a zero coefficient does not even create a gradient


def test_dots_and_write_back_on_sparse_rows_equal_the_dense_ones(setup: tuple) -> None:
    model, _ = setup
    params = GEMCallback(mode="agem").participating_parameters(model)
    gen = torch.Generator().manual_seed(3)
    g = [torch.randn(p.shape, generator=gen) for p in params]
    row = [torch.randn(p.shape, generator=gen) for p in params]
    word = next(i for i, p in enumerate(params) if p.shape[0] == TINY_BERT["vocab_size"])
    rows_used = torch.tensor([5, 9, 100, 101])  # a table's gradient: zero outside the rows used
    dense = torch.zeros_like(row[word])
    dense[rows_used] = row[word][rows_used]
    row[word] = dense
    sparse_row = list(row)
    sparse_row[word] = dense.to_sparse(sparse_dim=1)
    M_dense = bordered_gram(g, [row], gram_matrix([row]))
    M_sparse = bordered_gram(g, [sparse_row], gram_matrix([sparse_row]))
    torch.testing.assert_close(M_sparse, M_dense, rtol=1e-6, atol=0.0)
    # <g, r> by hand over the four rows for the table's share
    assert float(torch.dot(g[word][rows_used].reshape(-1), dense[rows_used].reshape(-1))) != 0.0
    for p, x in zip(params, g, strict=True):
        p.grad = x.clone()
    add_rows(params, [sparse_row], [-0.25])
    for p, x, r in zip(params, g, row, strict=True):
        torch.testing.assert_close(p.grad, x - 0.25 * r, rtol=1e-6, atol=1e-6)
        p.grad = None


def test_dot_of_sparse_rows_in_either_order_equals_the_dense_dot() -> None:
    gen = torch.Generator().manual_seed(4)
    a = torch.zeros(10, 3)
    a[[1, 4, 7]] = torch.randn(3, 3, generator=gen)
    b = torch.zeros(10, 3)
    b[[0, 4, 7, 9]] = torch.randn(4, 3, generator=gen)
    dense = torch.randn(10, 3, generator=gen)
    # by hand: only rows 4 and 7 are stored in both; every row of a against the dense tensor
    both = float((a[4] * b[4]).sum() + (a[7] * b[7]).sum())
    with_dense = float(sum((a[i] * dense[i]).sum() for i in (1, 4, 7)))
    sa = a.to_sparse(sparse_dim=1)
    sb = torch.sparse_coo_tensor(  # uncoalesced: row 4 stored twice, summing to b[4]
        torch.tensor([[0, 4, 7, 9, 4]]),
        torch.cat([b[[0]], b[[4]] / 2, b[[7, 9]], b[[4]] / 2]),
        (10, 3),
        check_invariants=True,
    )
    assert not sb.is_coalesced()
    assert float(_dot(sa, sb)) == pytest.approx(both, rel=1e-6)
    assert float(_dot(sb, sa)) == pytest.approx(both, rel=1e-6)
    assert float(_dot(sa, dense)) == pytest.approx(with_dense, rel=1e-6)
    assert float(_dot(dense, sa)) == pytest.approx(with_dense, rel=1e-6)
    assert float(_dot(sb, sb)) == pytest.approx(float((b * b).sum()), rel=1e-6)


def test_sparse_row_written_into_a_missing_gradient_is_dense_and_scaled() -> None:
    weight = nn.Parameter(torch.zeros(6, 2))
    r = torch.zeros(6, 2)
    r[[2, 5]] = torch.tensor([[1.0, -2.0], [3.0, 0.5]])
    add_rows([weight], [[r.to_sparse(sparse_dim=1)]], [-0.5])
    assert weight.grad is not None and not weight.grad.is_sparse
    torch.testing.assert_close(weight.grad, -0.5 * r, rtol=0.0, atol=0.0)
    # into an existing gradient of another precision: only the two stored rows change, cast to its dtype
    wide = nn.Parameter(torch.zeros(6, 2, dtype=torch.float64))
    wide.grad = torch.ones(6, 2, dtype=torch.float64)
    add_rows([wide], [[r.to_sparse(sparse_dim=1)]], [2.0])
    torch.testing.assert_close(wide.grad, 1.0 + 2.0 * r.double(), rtol=0.0, atol=0.0)

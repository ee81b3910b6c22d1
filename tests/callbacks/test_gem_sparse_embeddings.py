"""A-GEM's reference gradient with sparse embedding-table gradients equals the dense one written out by hand,
and the projected step is the same: rows, dot products and write-back (tiny BERT, dropout on)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from pal_lightning.gem import GEMCallback
from pal_lightning.gem.gradients import MemorySource, constraint_gradients, memory_gradient
from pal_lightning.gem.gram import _dot, add_rows, bordered_gram, gram_matrix
from pal_lightning.gem.memory import EpisodicMemory
from pal_lightning.gem.sparse_embeddings import sparse_embedding_gradients
from pal_lightning.testing import TINY_BERT

TASKS = ("sst", "qqp", "sts")  # the heads of the shared `setup` fixture (conftest.py)


def _dense(x: torch.Tensor | None) -> torch.Tensor | None:
    return None if x is None else x.to_dense()


@pytest.mark.parametrize("one_pass", [False, True])
def test_agem_row_is_the_dense_gradient_with_sparse_embedding_tables(
    setup: tuple,
    make_memory: Callable[[], EpisodicMemory],
    request: pytest.FixtureRequest,
    one_pass: bool,
) -> None:
    """Per task and in one pass (one mixed batch, which draws dropout in another order than the forwards
    by hand: compared without dropout)."""
    model, dm = setup
    model.train(not one_pass)
    request.addfinalizer(model.train)
    params = GEMCallback(mode="agem").participating_parameters(model)
    memory = make_memory()
    tasks = ["qqp", "sts"]  # 7 examples: 4 of qqp, 3 of sts (the first task takes the remainder)
    draws = {"qqp": memory.sample("qqp", 4, 3), "sts": memory.sample("sts", 3, 3)}
    torch.manual_seed(7)
    # by hand: the example-weighted mean loss, one dense autograd.grad, tables as they are
    loss = sum(model.batch_loss(dm.train_batch(t, idx)) * (len(idx) / 7) for t, idx in draws.items())
    expected = torch.autograd.grad(loss.float(), params, allow_unused=True)
    torch.manual_seed(7)
    (row,) = constraint_gradients(
        MemorySource(model, dm), memory, "agem", tasks, 3, 7, params, one_pass=one_pass
    )
    tables = [m.weight for m in model.modules() if isinstance(m, nn.Embedding)]
    sparse = [i for i, x in enumerate(row) if x is not None and x.is_sparse]
    # word, position and token-type tables of the shared encoder, and nothing else
    assert sorted(id(params[i]) for i in sparse) == sorted(id(w) for w in tables if w.requires_grad)
    assert len(sparse) == 3 and all(row[i].is_coalesced() for i in sparse)
    word = next(i for i in sparse if params[i].shape[0] == TINY_BERT["vocab_size"])
    used: set[int] = set()  # the token ids of the remembered examples
    for t, idx in draws.items():
        used |= {int(v) for v in dm.train_batch(t, idx)["input_ids"].unique()}
    assert set(row[word].indices()[0].tolist()) <= used and row[word]._nnz() < params[word].shape[0]
    for x, y in zip(row, expected, strict=True):
        assert (x is None) == (y is None)
        if x is not None:
            torch.testing.assert_close(x.to_dense(), y, rtol=1e-5, atol=1e-7)
    assert not any(m.sparse for m in model.modules() if isinstance(m, nn.Embedding))  # switched back


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


def test_tables_stay_dense_when_the_encoder_is_compiled_or_not_among_the_parameters(setup: tuple) -> None:
    model, _ = setup
    params = GEMCallback(mode="agem").participating_parameters(model)
    with sparse_embedding_gradients(model, params) as switched:
        assert switched == 3 and all(m.sparse for m in model.modules() if isinstance(m, nn.Embedding))
    tables = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    with sparse_embedding_gradients(model, [p for p in params if id(p) not in tables]) as switched:
        assert switched == 0
    compiling = model._encoder_call.backend
    model._encoder_call.backend = "inductor"  # as MultiTaskModule(compile=True): never called here
    try:
        with sparse_embedding_gradients(model, params) as switched:
            assert switched == 0
    finally:
        model._encoder_call.backend = compiling
    assert not any(m.sparse for m in model.modules() if isinstance(m, nn.Embedding))


def test_gem_rows_stay_dense_and_equal_the_gradient_by_hand(
    setup: tuple,
    make_memory: Callable[[], EpisodicMemory],
) -> None:
    """GEM's rows (one backward per task here) are left dense: only A-GEM's single row is made sparse."""
    model, dm = setup
    params = GEMCallback(mode="gem").participating_parameters(model)
    memory = make_memory()
    rows = constraint_gradients(MemorySource(model, dm), memory, "gem", ["sst", "sts"], 3, 2, params, False)
    assert len(rows) == 2 and not any(x.is_sparse for row in rows for x in row if x is not None)
    draw = {"sst": memory.sample("sst", 2, 3)}
    torch.manual_seed(11)
    expected = torch.autograd.grad(model.batch_loss(dm.train_batch("sst", draw["sst"])), params[:1])
    torch.manual_seed(11)
    row = memory_gradient(MemorySource(model, dm), draw, params)  # the default: dense tables
    assert not any(x.is_sparse for x in row if x is not None)
    torch.testing.assert_close(row[0], expected[0], rtol=1e-5, atol=1e-7)


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


def test_tables_of_any_module_are_switched_and_switched_back_after_an_error() -> None:
    """A module without a compiled encoder call (no ``_encoder_call``) still gets sparse tables."""
    model = nn.Sequential(nn.Embedding(5, 2), nn.Linear(2, 1))
    with pytest.raises(RuntimeError, match="inside"):
        with sparse_embedding_gradients(model, list(model.parameters())) as switched:
            assert switched == 1 and model[0].sparse
            raise RuntimeError("inside")
    assert model[0].sparse is False

"""A-GEM's reference gradient with sparse embedding-table gradients equals the dense one written out by hand,
and the projected step is the same: rows, dot products and write-back (tiny BERT, dropout on)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pal_lightning.data import MultiTaskDataModule
from pal_lightning.gem import GEMCallback
from pal_lightning.gem.gram import add_rows, bordered_gram, gram_matrix
from pal_lightning.gem.memory import EpisodicMemory
from pal_lightning.gem.memory_gradients import MemorySource, constraint_gradients
from pal_lightning.gem.sparse_embeddings import sparse_embedding_gradients
from pal_lightning.module import MultiTaskModule
from pal_lightning.testing import TINY_BERT, write_cs224n_data

TASKS = ("sst", "qqp", "sts")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[MultiTaskModule, MultiTaskDataModule]:
    data_dir = write_cs224n_data(tmp_path_factory.mktemp("gem_sparse") / "data")
    torch.manual_seed(0)
    model = MultiTaskModule(bert_config=TINY_BERT, pal_size=8, pal_heads=2).train()
    dm = MultiTaskDataModule(data_dir=str(data_dir), cache_dir=False, batch_size=4, max_length=32)
    dm.setup("fit")
    return model, dm


def _memory() -> EpisodicMemory:
    memory = EpisodicMemory(12, seed=5)
    for task in TASKS:
        memory.add(task, range(12))
    return memory


def _dense(x: torch.Tensor | None) -> torch.Tensor | None:
    return None if x is None else x.to_dense()


def test_agem_row_is_the_dense_gradient_with_sparse_embedding_tables(setup: tuple) -> None:
    model, dm = setup
    params = GEMCallback(mode="agem").participating_parameters(model)
    memory = _memory()
    tasks = ["qqp", "sts"]  # 7 examples: 4 of qqp, 3 of sts (the first task takes the remainder)
    draws = {"qqp": memory.sample("qqp", 4, 3), "sts": memory.sample("sts", 3, 3)}
    torch.manual_seed(7)
    # by hand: the example-weighted mean loss, one dense autograd.grad, tables as they are
    loss = sum(model.batch_loss(dm.train_batch(t, idx)) * (len(idx) / 7) for t, idx in draws.items())
    expected = torch.autograd.grad(loss.float(), params, allow_unused=True)
    torch.manual_seed(7)
    (row,) = constraint_gradients(MemorySource(model, dm), memory, "agem", tasks, 3, 7, params)
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

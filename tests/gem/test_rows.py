"""The rows of ``G`` (:mod:`pal_lightning.gem.rows`): one backward for all tasks (``batch_tasks``), one pass
(one mixed batch) and sparse embedding rows each equal the per-task rows.

The batched rows are compared with one ``autograd.grad`` per task by hand, dropout on and the same seed
before both (the forwards run in the same order); the one pass in eval mode (a mixed forward draws
dropout in another order).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from pal_lightning.core import distributed
from pal_lightning.data import MultiTaskDataModule
from pal_lightning.gem import GEMCallback
from pal_lightning.gem import rows as memory_gradients
from pal_lightning.gem.gram import bordered_gram, gram_matrix
from pal_lightning.gem.memory import EpisodicMemory
from pal_lightning.gem.rows import (
    MemorySource,
    can_alias,
    constraint_gradients,
    memory_gradient,
    sparse_embedding_gradients,
    sum_rows_across_ranks,
    task_gradients,
)
from pal_lightning.module.multitask import MultiTaskModule
from pal_lightning.testing import TINY_BERT, write_cs224n_data

TASKS = ("sst", "qqp", "sts")  # the heads of the shared `setup` fixture (conftest.py)


def _by_hand(model: nn.Module, dm: MultiTaskDataModule, draws: dict[str, list[int]], params: list) -> list:
    """One backward per task of its memory batch's mean loss (today's computation, written out)."""
    rows = []
    for task, idx in draws.items():
        loss = model.batch_loss(dm.train_batch(task, idx))
        rows.append(torch.autograd.grad(loss.float(), params, allow_unused=True))
    return rows


def _assert_rows_equal(
    got: list, expected: list, tol: tuple[float, float] = (1e-5, 1e-7), dense: bool = False
) -> None:
    """Same ``None`` pattern, every tensor within ``tol`` (rtol, atol); ``dense``: sparse ones densified."""
    assert len(got) == len(expected)
    for row_got, row_expected in zip(got, expected, strict=True):
        assert [x is None for x in row_got] == [y is None for y in row_expected]
        for x, y in zip(row_got, row_expected, strict=True):
            if x is not None:
                x, y = (x.to_dense(), y.to_dense()) if dense else (x, y)
                torch.testing.assert_close(x, y, rtol=tol[0], atol=tol[1])


@pytest.mark.parametrize("parameters", ["shared", "all"])
def test_batched_rows_equal_per_task_rows(
    setup: tuple,
    make_memory: Callable[[], EpisodicMemory],
    parameters: str,
) -> None:
    model, dm = setup
    cb = GEMCallback(parameters=parameters)
    params = cb.participating_parameters(model)
    assert can_alias(model, params)
    memory = make_memory()
    draws = {task: memory.sample(task, 5, step=3) for task in ("sst", "qqp", "sts")}
    torch.manual_seed(11)
    expected = _by_hand(model, dm, draws, params)
    torch.manual_seed(11)
    # one_pass=False: the per-task forwards this file is about (one pass draws dropout in another order)
    got = constraint_gradients(
        MemorySource(model, dm), memory, "gem", list(TASKS), 3, 5, params, one_pass=False
    )
    _assert_rows_equal(got, expected)
    # with parameters="all" a task's head is used by its own row only: None (not zero) in the others
    if parameters == "all":
        head = next(i for i, p in enumerate(params) if p is model.heads["sst"].linear.weight)
        assert got[0][head] is not None and got[1][head] is None and got[2][head] is None
    # dropout is on: another seed gives other rows, so the equality above is not trivial
    torch.manual_seed(12)
    other = task_gradients(MemorySource(model, dm), draws, params)
    assert any(not torch.equal(x, y) for x, y in zip(other[0], got[0], strict=True) if x is not None)


def test_project_step_same_with_and_without_batching(
    setup: tuple,
    make_memory: Callable[[], EpisodicMemory],
) -> None:
    model, dm = setup
    batch = dm.train_batch("sst", list(range(8)))
    results = []
    for batch_tasks in (False, True):
        cb = GEMCallback(
            memory_size=12, memory_batch_size=4, margin=0.1, batch_tasks=batch_tasks, one_pass=False
        )
        cb.memory = make_memory()
        cb.task_order = list(TASKS)
        model.zero_grad(set_to_none=True)
        torch.manual_seed(21)
        model.batch_loss(batch).backward()
        stats = cb.project_step(model, dm, step=7, current=["sst"])
        results.append(([p.grad.clone() for p in cb.participating_parameters(model)], stats))
    (before, stats_a), (after, stats_b) = results
    assert stats_a["gem/constraints"] == stats_b["gem/constraints"] == 2
    assert stats_a["gem/violated"] == stats_b["gem/violated"]
    for x, y in zip(before, after, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-7)
    model.zero_grad(set_to_none=True)


def test_a_task_without_examples_gets_no_row_and_strangers_are_refused(setup: tuple) -> None:
    """A task whose share is empty (a draw smaller than the world size, on the last ranks) has no
    row (None everywhere) and the next tasks still get theirs."""
    model, dm = setup
    params = GEMCallback(parameters="all").participating_parameters(model)
    torch.manual_seed(5)
    expected = _by_hand(model, dm, {"qqp": [0, 1]}, params)
    torch.manual_seed(5)
    got = task_gradients(MemorySource(model, dm), {"sst": [], "qqp": [0, 1]}, params)
    assert got[0] == [None] * len(params)
    _assert_rows_equal(got[1:], expected)
    with pytest.raises(
        ValueError, match=f"^{re.escape('task_gradients needs parameters of source.module (see can_alias)')}$"
    ):
        task_gradients(MemorySource(model, dm), {"sst": [0]}, [nn.Parameter(torch.ones(1))])


def test_a_tensor_missing_here_but_present_on_another_rank_is_that_rank_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One process: the rows unchanged; can_alias refuses parameters not the module's. Two ranks simulated
    in one process: the all-reduce adds the other rank's contribution, written out by hand. This rank has
    no gradient for the bias in row 0 (its heads were unused here) but the other rank has one: this rank
    must send zeros, and the sum is the other rank's tensor."""
    module = nn.Linear(3, 2)
    stranger = nn.Parameter(torch.ones(2))
    assert can_alias(module, list(module.parameters()))
    assert not can_alias(module, [module.weight, stranger])  # not the module's: the per-task path runs
    assert not can_alias(module, [])
    rows = [[torch.ones(2, 3), None], [None, None]]
    summed = sum_rows_across_ranks(rows, list(module.parameters()))  # one process: unchanged
    assert torch.equal(summed[0][0], torch.ones(2, 3)) and summed[0][1] is None and summed[1] == [None, None]
    other_bias = torch.tensor([1.5, -2.0])
    other_weight = torch.full((2, 3), 0.25)
    calls: list[tuple[int, ...]] = []

    def other_rank_added(t: torch.Tensor) -> torch.Tensor:  # what gloo's SUM over 2 ranks would give
        calls.append(tuple(t.shape))
        if t.shape == (2, 2):  # the presence mask [row, parameter]: the other rank has both in row 0
            return t + torch.tensor([[1.0, 1.0], [0.0, 0.0]])
        if t.shape == (1, 2, 3):  # the weight, row 0 only
            return t + other_weight
        assert t.shape == (1, 2), t.shape  # the bias, row 0 only
        return t + other_bias

    monkeypatch.setattr(distributed, "all_reduce_sum", other_rank_added)
    mine = torch.ones(2, 3)
    summed = sum_rows_across_ranks([[mine, None], [None, None]], list(module.parameters()))
    assert calls == [(2, 2), (1, 2, 3), (1, 2)]  # the mask, then one reduction per parameter in use
    assert torch.equal(summed[0][0], mine + other_weight)
    assert torch.equal(summed[0][1], other_bias)  # zeros from this rank
    assert summed[1] == [None, None]


def test_bordered_gram_is_the_gram_matrix() -> None:
    """The cached rows' Gram matrix bordered with the step's gradient: the same numbers (hand values too)."""
    gen = torch.Generator().manual_seed(3)
    shapes = [(4, 3), (5,), (2, 2)]
    g = [torch.randn(shapes[0], generator=gen), None, torch.randn(shapes[2], generator=gen)]  # a gap inside
    rows = [
        [torch.randn(s, generator=gen) if i != j else None for i, s in enumerate(shapes)] for j in range(3)
    ]
    M = bordered_gram(g, rows, gram_matrix(rows))
    assert torch.equal(M, gram_matrix([g, *rows]))
    flat = [
        torch.cat(
            [(x if x is not None else torch.zeros(s)).reshape(-1) for x, s in zip(r, shapes, strict=True)]
        )
        for r in [g, *rows]
    ]
    X = torch.stack(flat).double()
    torch.testing.assert_close(M, X @ X.T, rtol=1e-6, atol=1e-6)


class _Tied(nn.Module):
    """One Parameter under two names (``a.weight`` and ``b.weight``), as tied weights are."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.b.weight = self.a.weight

    def batch_loss(self, batch: dict) -> torch.Tensor:
        return (self.b(torch.tanh(self.a(batch["x"]))) - batch["y"]).pow(2).mean()


class _TiedData:
    def __init__(self) -> None:
        gen = torch.Generator().manual_seed(0)
        self.x = {t: torch.randn(10, 4, generator=gen) for t in ("t0", "t1")}
        self.y = {t: torch.randn(10, 4, generator=gen) for t in ("t0", "t1")}

    def train_batch(self, task: str, indices: list[int]) -> dict:
        return {"x": self.x[task][indices], "y": self.y[task][indices]}


def test_batched_rows_of_tied_weights_count_every_use() -> None:
    """A tied weight's gradient sums its uses under both names; the batched path must substitute the
    alias under each name (with only one, the other use's gradient was lost: up to 0.25 off here)."""
    torch.manual_seed(0)
    model, data = _Tied(), _TiedData()
    params = list(model.parameters())  # the tied weight once
    assert len(params) == 3 and can_alias(model, params)
    memory = EpisodicMemory(10)
    for task in ("t0", "t1"):
        memory.add(task, range(10))
    draws = {task: memory.sample(task, 4, step=0) for task in ("t0", "t1")}
    expected = []
    for task, idx in draws.items():
        loss = model.batch_loss(data.train_batch(task, idx))
        expected.append(torch.autograd.grad(loss, params))
    got = task_gradients(MemorySource(model, data), draws, params)
    _assert_rows_equal(got, expected)


# ------------------------------------------------------------ one pass (eval mode)
PAIRS = {"sts": "siamese", "default": "cross"}


@pytest.fixture(scope="module")
def eval_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cs224n_data(tmp_path_factory.mktemp("gem_one_pass") / "data")


@pytest.fixture(scope="module")
def eval_setup(eval_data_dir: Path) -> Iterator[tuple[MultiTaskModule, MultiTaskDataModule]]:
    """A tiny PAL model (``sts`` siamese) in eval mode, and its data module on fixture files."""
    torch.manual_seed(0)
    model = MultiTaskModule(
        encoder_config=TINY_BERT, adapter={"size": 8, "num_heads": 2}, pair_encoding=PAIRS
    ).eval()
    dm = MultiTaskDataModule(
        data_dir=str(eval_data_dir), cache_dir=False, batch_size=4, max_length=32, pair_encoding=PAIRS
    )
    dm.setup("fit")
    yield model, dm


@pytest.fixture
def memory(make_memory: Callable[[], EpisodicMemory]) -> EpisodicMemory:
    return make_memory()


def _rows(
    model: nn.Module, dm: MultiTaskDataModule, memory: EpisodicMemory, mode: str, params: list, **kw
) -> list:
    source = MemorySource(model, dm, rank=kw.pop("rank", 0), world_size=kw.pop("world_size", 1))
    kw.setdefault("one_pass", True)  # GEM's default on a CPU is per task (one_pass=None)
    return constraint_gradients(
        source, memory, mode, kw.pop("tasks", TASKS), 3, kw.pop("mbs", 5), params, **kw
    )


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The one-pass paths taken, by name (A-GEM's: ``memory_gradient(one_pass=True)``)."""
    calls: list[str] = []
    real_rows, real_row = memory_gradients.mixed_task_gradients, memory_gradients.memory_gradient

    def rows(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append("mixed_task_gradients")
        return real_rows(*args, **kwargs)

    def row(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if kwargs.get("one_pass"):
            calls.append("mixed_memory_gradient")
        return real_row(*args, **kwargs)

    monkeypatch.setattr(memory_gradients, "mixed_task_gradients", rows)
    monkeypatch.setattr(memory_gradients, "memory_gradient", row)
    return calls


@pytest.mark.parametrize("parameters", ["shared", "all"])
@pytest.mark.parametrize("mode", ["gem", "agem"])
def test_one_pass_rows_equal_the_per_task_rows(
    eval_setup: tuple, memory: EpisodicMemory, spy: list[str], mode: str, parameters: str
) -> None:
    """GEM's three rows (one forward, three backwards) and A-GEM's reference (one forward, one backward)
    equal the per-task path's (one forward per task); with ``parameters="all"`` another task's adapter
    and head stay ``None`` in a row, as per task."""
    model, dm = eval_setup
    params = GEMCallback(parameters=parameters).participating_parameters(model)
    forwards: list[int] = []
    hook = model.encoder.register_forward_hook(lambda *_: forwards.append(1))
    try:
        got = _rows(model, dm, memory, mode, params)
        one_pass = len(forwards)
        per_task = _rows(model, dm, memory, mode, params, one_pass=False)
    finally:
        hook.remove()
    assert (one_pass, len(forwards) - one_pass) == (1, len(TASKS))  # the point of the one pass
    assert spy == ["mixed_task_gradients" if mode == "gem" else "mixed_memory_gradient"]
    _assert_rows_equal(got, per_task, (1e-6, 1e-6), dense=True)
    assert len(spy) == 1  # one_pass=False: the per-task path
    if parameters == "all" and mode == "gem":
        adapter = next(
            i for i, p in enumerate(params) if p is next(model.encoder.adapters["qqp"].parameters())
        )
        head = next(i for i, p in enumerate(params) if p is model.heads["sst"].linear.weight)
        assert [row[adapter] is None for row in got] == [True, False, True]
        assert [row[head] is None for row in got] == [False, True, True]


@pytest.mark.parametrize("mode", ["gem", "agem"])
def test_rank_shares_of_one_pass_sum_to_the_whole_draw(
    eval_setup: tuple, memory: EpisodicMemory, mode: str
) -> None:
    """Under DDP each rank mixes its own share of every task and the rows are summed across ranks (the
    identity in one process): the two ranks' rows added by hand are the single-process rows of the whole
    draw. A-GEM's draw of 2 x 3 examples over three tasks is 2/2/2, a rank holds one of each task."""
    model, dm = eval_setup
    params = GEMCallback().participating_parameters(model)
    whole = _rows(model, dm, memory, mode, params, mbs=6)
    ranks = [_rows(model, dm, memory, mode, params, mbs=3, rank=r, world_size=2) for r in (0, 1)]
    summed = [
        [None if a is None else a.to_dense() + b.to_dense() for a, b in zip(r0, r1, strict=True)]
        for r0, r1 in zip(*ranks, strict=True)
    ]
    _assert_rows_equal(summed, whole, (1e-6, 1e-6), dense=True)


def test_projected_step_is_the_same(eval_setup: tuple, memory: EpisodicMemory) -> None:
    """A whole GEM step (rows, Gram matrix, QP, write-back) on one pass and per task: the same decision
    and the same projected gradient."""
    model, dm = eval_setup
    batch = dm.train_batch("sst", list(range(8)))
    results = []
    for flag in (True, False):
        cb = GEMCallback(memory_size=12, memory_batch_size=4, margin=0.1, one_pass=flag)
        cb.memory, cb.task_order = memory, list(TASKS)
        model.zero_grad(set_to_none=True)
        model.batch_loss(batch).backward()
        stats = cb.project_step(model, dm, step=7, current=["sst"])
        results.append(([p.grad.clone() for p in cb.participating_parameters(model)], stats))
    model.zero_grad(set_to_none=True)
    (one, stats_one), (per_task, stats_per_task) = results
    stats_one.pop("gem/projection_ms")
    stats_per_task.pop("gem/projection_ms")
    assert stats_one.keys() == stats_per_task.keys() and stats_one["gem/constraints"] == 2
    assert stats_one["gem/violated"] == stats_per_task["gem/violated"]
    for x, y in zip(one, per_task, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-6, atol=1e-6)


class _OwnLoss(MultiTaskModule):
    """A subclass whose one-task loss is its own: a mixed pass would not run it."""

    def batch_loss(self, batch):  # noqa: ANN001, ANN201
        return 2.0 * super().batch_loss(batch)


def test_per_task_where_one_pass_does_not_apply(
    eval_setup: tuple, memory: EpisodicMemory, spy: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, dm = eval_setup
    params = GEMCallback().participating_parameters(model)
    assert memory_gradients.one_pass_applies(model)
    _rows(model, dm, memory, "gem", params, tasks=["qqp"], mbs=1)  # one task: nothing to mix
    _rows(model, dm, memory, "agem", params, tasks=["qqp"], mbs=1)
    assert spy == []
    own = _OwnLoss(encoder_config=TINY_BERT, pair_encoding=PAIRS)
    assert not memory_gradients.one_pass_applies(own)
    assert not memory_gradients.one_pass_applies(nn.Linear(2, 2))  # no mixed_losses
    with monkeypatch.context() as m:  # an encoder that routes a mixed batch one task at a time
        m.setattr(type(model.encoder), "mixed_by_task", property(lambda self: True))
        assert not memory_gradients.one_pass_applies(model)
        _rows(model, dm, memory, "agem", params, mbs=2)
        assert spy == []
    with monkeypatch.context() as m:  # no owner of the task-specific parameters: GEM per task, A-GEM mixed
        m.setattr(memory_gradients, "task_owners", lambda module, tasks: None)
        _rows(model, dm, memory, "gem", params, mbs=1)
        _rows(model, dm, memory, "agem", params, mbs=2)
        assert spy == ["mixed_memory_gradient"]
    spy.clear()
    cb = GEMCallback(memory_batch_size=1, one_pass=False)
    cb.memory, cb.task_order = memory, list(TASKS)
    model.batch_loss(dm.train_batch("sst", [0, 1])).backward()
    cb.project_step(model, dm, step=0, current=["sst"])
    defaults = inspect.signature(
        memory_gradients.constraint_gradients
    ).parameters  # __defaults__: not under mutmut
    assert spy == [] and (defaults["batch_tasks"].default, defaults["one_pass"].default) == (True, None)
    for one_pass, mode, expected in (  # the option as constructed: forced either way, or by default
        (True, "gem", ["mixed_task_gradients"]),
        (False, "agem", []),
        (None, "gem", []),  # the default: GEM per task on a CPU, A-GEM in one pass
        (None, "agem", ["mixed_memory_gradient"]),
    ):
        spy.clear()
        cb = GEMCallback(memory_batch_size=1, one_pass=one_pass, mode=mode)
        cb.memory, cb.task_order = memory, list(TASKS)
        cb.project_step(model, dm, step=0, current=["sst"])
        assert spy == expected, (one_pass, mode)
    model.zero_grad(set_to_none=True)
    params = [nn.Parameter(torch.ones(1))]
    assert memory_gradients.wants_one_pass(None, "agem", params) and not memory_gradients.wants_one_pass(
        None, "gem", params
    )
    assert memory_gradients.wants_one_pass(True, "gem", params) and not memory_gradients.wants_one_pass(
        False, "agem", params
    )


# ------------------------------------------------------------ sparse embedding rows


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


def test_tables_of_any_module_are_switched_and_switched_back_after_an_error() -> None:
    """A module without a compiled encoder call (no ``_encoder_call``) still gets sparse tables."""
    model = nn.Sequential(nn.Embedding(5, 2), nn.Linear(2, 1))
    with pytest.raises(RuntimeError, match="inside"):
        with sparse_embedding_gradients(model, list(model.parameters())) as switched:
            assert switched == 1 and model[0].sparse
            raise RuntimeError("inside")
    assert model[0].sparse is False

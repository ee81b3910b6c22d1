"""GEM's and A-GEM's memories in one pass (one mixed batch of every task's remembered examples,
:mod:`pal_lightning.gem.one_pass`) give the rows of the per-task path (one forward per task).

Dropout is off (eval mode): the mixed forward draws its dropout masks in another order than the per-task
forwards, so only the deterministic computation can be compared. The model has the three kinds of head
(single sentence, cross pair, siamese pair: ``sts``'s second sentences become extra rows of the pass).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from pal_lightning.data import MultiTaskDataModule
from pal_lightning.gem import GEMCallback, one_pass
from pal_lightning.gem import gradients as memory_gradients
from pal_lightning.gem.gradients import MemorySource, constraint_gradients
from pal_lightning.gem.memory import EpisodicMemory
from pal_lightning.module.multitask import MultiTaskModule
from pal_lightning.testing import TINY_BERT, write_cs224n_data

TASKS = ["sst", "qqp", "sts"]
PAIRS = {"sts": "siamese", "default": "cross"}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cs224n_data(tmp_path_factory.mktemp("gem_one_pass") / "data")


@pytest.fixture(scope="module")
def setup(data_dir: Path) -> Iterator[tuple[MultiTaskModule, MultiTaskDataModule]]:
    """A tiny PAL model (``sts`` siamese) in eval mode, and its data module on fixture files."""
    torch.manual_seed(0)
    model = MultiTaskModule(
        bert_config=TINY_BERT, adapter={"size": 8, "num_heads": 2}, pair_encoding=PAIRS
    ).eval()
    dm = MultiTaskDataModule(
        data_dir=str(data_dir), cache_dir=False, batch_size=4, max_length=32, pair_encoding=PAIRS
    )
    dm.setup("fit")
    yield model, dm


@pytest.fixture
def memory() -> EpisodicMemory:
    memory = EpisodicMemory(12, seed=5)
    for task in TASKS:
        memory.add(task, range(12))
    return memory


def _rows(
    model: nn.Module, dm: MultiTaskDataModule, memory: EpisodicMemory, mode: str, params: list, **kw
) -> list:
    source = MemorySource(model, dm, rank=kw.pop("rank", 0), world_size=kw.pop("world_size", 1))
    kw.setdefault("one_pass", True)  # GEM's default on a CPU is per task (one_pass=None)
    return constraint_gradients(
        source, memory, mode, kw.pop("tasks", TASKS), 3, kw.pop("mbs", 5), params, **kw
    )


def _assert_rows_equal(got: list, expected: list) -> None:
    """Same ``None`` pattern, and every tensor within 1e-6 (fp32)."""
    assert len(got) == len(expected)
    for row_got, row_expected in zip(got, expected, strict=True):
        assert [x is None for x in row_got] == [y is None for y in row_expected]
        for x, y in zip(row_got, row_expected, strict=True):
            if x is not None:
                torch.testing.assert_close(x.to_dense(), y.to_dense(), rtol=1e-6, atol=1e-6)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The one-pass functions called, by name."""
    calls: list[str] = []
    for name in ("mixed_task_gradients", "mixed_memory_gradient"):
        real = getattr(one_pass, name)

        def wrapped(*args, _real: Callable = real, _name: str = name, **kwargs):  # noqa: ANN002, ANN003, ANN202
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(one_pass, name, wrapped)
    return calls


@pytest.mark.parametrize("parameters", ["shared", "all"])
@pytest.mark.parametrize("mode", ["gem", "agem"])
def test_one_pass_rows_equal_the_per_task_rows(
    setup: tuple, memory: EpisodicMemory, spy: list[str], mode: str, parameters: str
) -> None:
    """GEM's three rows (one forward, three backwards) and A-GEM's reference (one forward, one backward)
    equal the per-task path's (one forward per task); with ``parameters="all"`` another task's adapter
    and head stay ``None`` in a row, as per task."""
    model, dm = setup
    params = GEMCallback(parameters=parameters).participating_parameters(model)
    got = _rows(model, dm, memory, mode, params)
    assert spy == ["mixed_task_gradients" if mode == "gem" else "mixed_memory_gradient"]
    _assert_rows_equal(got, _rows(model, dm, memory, mode, params, one_pass=False))
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
    setup: tuple, memory: EpisodicMemory, mode: str
) -> None:
    """Under DDP each rank mixes its own share of every task and the rows are summed across ranks (the
    identity in one process): the two ranks' rows added by hand are the single-process rows of the whole
    draw. A-GEM's draw of 2 x 3 examples over three tasks is 2/2/2, a rank holds one of each task."""
    model, dm = setup
    params = GEMCallback().participating_parameters(model)
    whole = _rows(model, dm, memory, mode, params, mbs=6)
    ranks = [_rows(model, dm, memory, mode, params, mbs=3, rank=r, world_size=2) for r in (0, 1)]
    summed = [
        [None if a is None else a.to_dense() + b.to_dense() for a, b in zip(r0, r1, strict=True)]
        for r0, r1 in zip(*ranks, strict=True)
    ]
    _assert_rows_equal(summed, whole)


def test_projected_step_is_the_same(setup: tuple, memory: EpisodicMemory) -> None:
    """A whole GEM step (rows, Gram matrix, QP, write-back) on one pass and per task: the same decision
    and the same projected gradient."""
    model, dm = setup
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
    setup: tuple, memory: EpisodicMemory, spy: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, dm = setup
    params = GEMCallback().participating_parameters(model)
    assert one_pass.one_pass_applies(model)
    _rows(model, dm, memory, "gem", params, tasks=["qqp"], mbs=1)  # one task: nothing to mix
    _rows(model, dm, memory, "agem", params, tasks=["qqp"], mbs=1)
    assert spy == []
    own = _OwnLoss(bert_config=TINY_BERT, pair_encoding=PAIRS)
    assert not one_pass.one_pass_applies(own)
    assert not one_pass.one_pass_applies(nn.Linear(2, 2))  # no mixed_losses
    with monkeypatch.context() as m:  # an encoder that routes a mixed batch one task at a time
        m.setattr(type(model.encoder), "mixed_by_task", property(lambda self: True))
        assert not one_pass.one_pass_applies(model)
        _rows(model, dm, memory, "agem", params, mbs=2)
        assert spy == []
    with monkeypatch.context() as m:  # no owner of the task-specific parameters: GEM per task, A-GEM mixed
        m.setattr(one_pass, "task_owners", lambda module, tasks: None)
        _rows(model, dm, memory, "gem", params, mbs=1)
        _rows(model, dm, memory, "agem", params, mbs=2)
        assert spy == ["mixed_memory_gradient"]
    spy.clear()
    cb = GEMCallback(memory_batch_size=1, one_pass=False)
    cb.memory, cb.task_order = memory, list(TASKS)
    model.batch_loss(dm.train_batch("sst", [0, 1])).backward()
    cb.project_step(model, dm, step=0, current=["sst"])
    assert spy == [] and memory_gradients.constraint_gradients.__defaults__ == (True, None)
    cb.one_pass = True
    cb.project_step(model, dm, step=0, current=["sst"])
    assert spy == ["mixed_task_gradients"]
    spy.clear()
    cb.one_pass = None  # the default: GEM per task on a CPU, A-GEM in one pass
    cb.project_step(model, dm, step=0, current=["sst"])
    cb.mode = "agem"
    cb.project_step(model, dm, step=0, current=["sst"])
    assert spy == ["mixed_memory_gradient"]
    model.zero_grad(set_to_none=True)
    params = [nn.Parameter(torch.ones(1))]
    assert one_pass.wants_one_pass(None, "agem", params) and not one_pass.wants_one_pass(None, "gem", params)
    assert one_pass.wants_one_pass(True, "gem", params) and not one_pass.wants_one_pass(False, "agem", params)

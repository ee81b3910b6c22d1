"""GEM's memory gradients from one backward (``batch_tasks=True``) equal today's per-task computation
(both with one forward per task, ``one_pass=False``; the one-pass path: ``test_gem_one_pass.py``).

The reference is computed here by hand, one ``autograd.grad`` per task on the module's own
``batch_loss``, not through the library's per-task path; dropout stays on (training mode), with the
same seed before both, because the batched path runs the tasks' forwards in the same order.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch
from torch import nn

from pal_lightning.core import distributed
from pal_lightning.data import MultiTaskDataModule
from pal_lightning.gem import GEMCallback
from pal_lightning.gem.gradients import (
    MemorySource,
    can_alias,
    constraint_gradients,
    sum_rows_across_ranks,
    task_gradients,
)
from pal_lightning.gem.gram import bordered_gram, gram_matrix
from pal_lightning.gem.memory import EpisodicMemory

TASKS = ("sst", "qqp", "sts")  # the heads of the shared `setup` fixture (conftest.py)


def _by_hand(model: nn.Module, dm: MultiTaskDataModule, draws: dict[str, list[int]], params: list) -> list:
    """One backward per task of its memory batch's mean loss (today's computation, written out)."""
    rows = []
    for task, idx in draws.items():
        loss = model.batch_loss(dm.train_batch(task, idx))
        rows.append(torch.autograd.grad(loss.float(), params, allow_unused=True))
    return rows


def _assert_rows_equal(got: list, expected: list) -> None:
    assert len(got) == len(expected)
    for row_got, row_expected in zip(got, expected, strict=True):
        for x, y in zip(row_got, row_expected, strict=True):
            assert (x is None) == (y is None)
            if x is not None:
                torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-7)


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


def test_fallback_and_single_process_reduction() -> None:
    module = nn.Linear(3, 2)
    stranger = nn.Parameter(torch.ones(2))
    assert can_alias(module, list(module.parameters()))
    assert not can_alias(module, [module.weight, stranger])  # not the module's: the per-task path runs
    assert not can_alias(module, [])
    rows = [[torch.ones(2, 3), None], [None, None]]
    summed = sum_rows_across_ranks(rows, list(module.parameters()))  # one process: unchanged
    assert torch.equal(summed[0][0], torch.ones(2, 3)) and summed[0][1] is None and summed[1] == [None, None]


def test_a_tensor_missing_here_but_present_on_another_rank_is_that_rank_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two ranks simulated in one process: the all-reduce adds the other rank's contribution, written
    out by hand. This rank has no gradient for the bias in row 0 (its heads were unused here) but the
    other rank has one: this rank must send zeros, and the sum is the other rank's tensor."""
    module = nn.Linear(3, 2)
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

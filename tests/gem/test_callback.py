"""GEMCallback: options, state, the projected step, and the callback inside a real Trainer.fit."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn

from pal_lightning.callbacks import RNGStateCallback
from pal_lightning.core.errors import PalUserError
from pal_lightning.data import MultiTaskDataModule
from pal_lightning.gem import EpisodicMemory, GEMCallback, project_gradient, projection, qp
from pal_lightning.gem import rows as memory_gradients
from pal_lightning.gem.gram import gram_matrix
from pal_lightning.gem.rows import MemorySource
from pal_lightning.module.multitask import MultiTaskModule
from pal_lightning.testing import TINY_BERT, quiet_trainer, write_cs224n_data
from pal_lightning.testing.callbacks import ConstraintRows

os.environ.setdefault("HF_HUB_OFFLINE", "1")


# ---------------------------------------------------------------------------------------- options and state


def test_callback_state_without_order_or_counters_loads_with_defaults() -> None:
    """A state saved before the task order and the counters were kept: empty order, zero counters."""
    cb = GEMCallback(memory_size=3)
    cb.projections = cb.violations = 5
    cb.task_order = ["old"]
    cb.load_state_dict({"memory": {"size": 3, "seed": 0, "buffers": {"sst": [1]}, "seen": {"sst": 1}}})
    assert cb.task_order == [] and cb.memory.buffers == {"sst": [1]}
    assert [cb.fallbacks, cb.skipped_nonfinite, cb.violations, cb.projections] == [0, 0, 0, 0]
    full = {**cb.state_dict(), "task_order": ["sst", "qqp"], "projections": 4, "fallbacks": 1}
    cb.load_state_dict(full)
    assert cb.state_dict() == full


def test_constraining_sets() -> None:
    cb = GEMCallback(memory_size=4, constraints="others")
    for task in ("sst", "qqp", "sts"):
        cb.task_order.append(task)
        cb.memory.add(task, [0, 1])
    assert cb.constraining_tasks(["qqp"]) == ["sst", "sts"]
    assert cb.constraining_tasks(["qqp", "sst"]) == ["sts"]
    past = GEMCallback(memory_size=4, constraints="past")
    past.task_order, past.memory = cb.task_order, cb.memory
    assert past.constraining_tasks(["sst"]) == []
    assert past.constraining_tasks(["sts"]) == ["sst", "qqp"]
    assert past.constraining_tasks(["qqp", "sts"]) == ["sst"]  # a window spanning a phase change
    # a task never trained on (project_step called directly) comes after all of them (was all but the last)
    assert past.constraining_tasks(["new"]) == ["sst", "qqp", "sts"]


def test_bad_arguments() -> None:
    for kwargs, message in (
        ({"mode": "qp"}, "GEMCallback mode='qp' is not supported: choose one of ('gem', 'agem')."),
        (
            {"constraints": "all"},
            "GEMCallback constraints='all' is not supported: choose one of ('others', 'past').",
        ),
        (
            {"parameters": "heads"},
            "GEMCallback parameters='heads' is not supported: choose one of ('shared', 'all').",
        ),
        ({"memory_size": 0}, "memory_size must be >= 1, got 0."),
        ({"memory_batch_size": 0}, "GEMCallback memory_batch_size must be >= 1, got 0."),
        ({"refresh_every": 0}, "GEMCallback refresh_every must be >= 1, got 0."),
        ({"margin": -0.1}, "GEMCallback margin must be a finite number >= 0, got -0.1."),
        ({"margin": float("inf")}, "GEMCallback margin must be a finite number >= 0, got inf."),
        ({"eps": 0.0}, "GEMCallback eps must be a finite number > 0, got 0.0."),
        ({"eps": float("inf")}, "GEMCallback eps must be a finite number > 0, got inf."),
    ):
        with pytest.raises(PalUserError, match=f"^{re.escape(message)}$"):
            GEMCallback(**kwargs)
    # the smallest valid values
    GEMCallback(memory_size=1, memory_batch_size=1, refresh_every=1, margin=0.0, eps=1e-300)
    cb = GEMCallback()

    def exactly(message: str) -> str:
        return f"^{re.escape(message)}$"

    no_data = (
        "GEMCallback needs a data module with train_batch(task, indices) to rebuild remembered "
        "examples (e.g. pal_lightning.MultiTaskDataModule): pass datamodule= to Trainer.fit."
    )
    with pytest.raises(PalUserError, match=exactly(no_data)):
        cb.setup(SimpleNamespace(datamodule=None), nn.Linear(2, 2), "fit")
    trainer = SimpleNamespace(datamodule=_Data())
    no_loss = (
        "GEMCallback needs a LightningModule with batch_loss(batch) (e.g. pal_lightning.MultiTaskModule)."
    )
    with pytest.raises(PalUserError, match=exactly(no_loss)):
        cb.setup(trainer, nn.Linear(2, 2), "fit")
    frozen = _Toy().requires_grad_(False)
    no_params = (
        "GEMCallback(parameters='all') found no trainable parameters to project "
        "(frozen encoder?): use parameters='all' or unfreeze the encoder."
    )
    with pytest.raises(PalUserError, match=exactly(no_params)):
        GEMCallback(parameters="all").setup(trainer, frozen, "fit")
    GEMCallback(parameters="all").setup(trainer, _Toy(), "fit")  # all there: no error
    GEMCallback(parameters="all").setup(SimpleNamespace(datamodule=None), frozen, "validate")  # fit only
    no_batch = (
        "GEMCallback needs training batches with 'task' and 'indices' (positions in the train "
        "split), as pal_lightning.MultiTaskDataModule makes them."
    )
    with pytest.raises(PalUserError, match=exactly(no_batch)):
        cb.on_train_batch_start(SimpleNamespace(global_step=0), nn.Linear(2, 2), {"x": torch.ones(1)}, 0)


def test_window_tasks_gather_the_micro_batches_of_one_optimizer_step() -> None:
    """With gradient accumulation the micro-batches of one optimizer step (the same global_step) are
    one window: all their tasks are current (none constrains the step), and the next step starts over."""
    cb = GEMCallback(memory_size=4)
    for step, task, indices in ((0, "sst", [0, 1]), (0, "qqp", [5]), (0, "sst", [2]), (1, "sts", [7])):
        if step == 1:
            assert cb._window_tasks == ["sst", "qqp"] and cb.constraining_tasks(cb._window_tasks) == []
        cb.on_train_batch_start(
            SimpleNamespace(global_step=step), nn.Linear(2, 2), {"task": task, "indices": indices}, 0
        )
    assert cb._window_tasks == ["sts"] and cb.constraining_tasks(cb._window_tasks) == ["sst", "qqp"]
    assert cb.task_order == ["sst", "qqp", "sts"]
    assert cb.memory.buffers == {"sst": [0, 1, 2], "qqp": [5], "sts": [7]}


# ------------------------------------------------------------------------- multi-tensor projection


class _Toy(nn.Module):
    """A model whose gradient lives in several tensors, with a batch_loss per task."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 5)
        self.b = nn.Linear(5, 3)
        self.heads = nn.ModuleDict({t: nn.Linear(3, 1) for t in ("t0", "t1", "t2")})

    @property
    def device(self) -> torch.device:
        return self.a.weight.device

    def batch_loss(self, batch: dict) -> torch.Tensor:
        out = self.heads[batch["task"]](torch.tanh(self.b(torch.tanh(self.a(batch["x"])))))
        return ((out.squeeze(1) - batch["y"]) ** 2).mean()


class _Data:
    """The duck-typed data contract: train_batch(task, indices) -> batch."""

    def __init__(self) -> None:
        gen = torch.Generator().manual_seed(0)
        self.x = {t: torch.randn(50, 6, generator=gen) for t in ("t0", "t1", "t2")}
        self.y = {t: torch.randn(50, generator=gen) * (i + 1) for i, t in enumerate(("t0", "t1", "t2"))}

    def train_batch(self, task: str, indices: list[int]) -> dict:
        idx = torch.tensor(indices)
        return {"task": task, "x": self.x[task][idx], "y": self.y[task][idx]}


def _flat(grads: list) -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in grads]).double()


@pytest.mark.parametrize("mode", ["gem", "agem"])
def test_project_step_matches_flat_projection(mode: str) -> None:
    """Per-tensor dot products + in-place write-back == the flat pure function on the concatenation."""
    data = _Data()
    for seed in range(20):  # until a step with a violated constraint (most seeds)
        torch.manual_seed(seed)
        model = _Toy()
        cb = GEMCallback(memory_size=50, memory_batch_size=8, mode=mode, parameters="all", margin=0.5)
        for t in ("t0", "t1", "t2"):
            cb.task_order.append(t)
            cb.memory.add(t, range(50))
        params = [p for p in model.parameters()]
        loss = model.batch_loss(data.train_batch("t0", list(range(10))))
        loss.backward()
        g = _flat_row([p.grad for p in params], params)
        # the memory gradients the callback will compute (same draws), flattened by hand
        tasks = cb.constraining_tasks(["t0"])
        assert tasks == ["t1", "t2"]
        if mode == "gem":
            draws = [{t: cb.memory.sample(t, 8, step=5)} for t in tasks]
        else:
            draws = [{t: cb.memory.sample(t, 4, step=5) for t in tasks}]
        rows = []
        for draw in draws:
            total = sum(len(i) for i in draw.values())
            mem_loss = sum(model.batch_loss(data.train_batch(t, i)) * len(i) / total for t, i in draw.items())
            grads = torch.autograd.grad(mem_loss, params, allow_unused=True)
            rows.append(_flat_row(list(grads), params))
        G = torch.stack(rows)
        stats = cb.project_step(model, data, step=5, current=["t0"])
        if stats["gem/violated"]:
            break
    else:
        pytest.fail("no violated step in 20 seeds")
    assert stats["gem/constraints"] == len(rows)
    got = _flat([p.grad for p in params])
    if mode == "gem":
        expected = project_gradient(g, G, margin=0.5, eps=cb.eps)
    else:
        expected = projection.agem_project(g, G[0])
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    # the constraints hold after projection (up to the ridge)
    cos = (G @ got) / (G.norm(dim=1) * got.norm())
    assert torch.all(cos >= -1e-3)
    assert min(stats["gem/min_cosine"], 1.0) < 0


def _flat_row(row: list, params: list) -> torch.Tensor:
    return _flat([x if x is not None else torch.zeros_like(p) for x, p in zip(row, params, strict=True)])


def _hand_gradient(model: _Toy, data: _Data, draws: dict[str, list[int]], params: list) -> torch.Tensor:
    """The gradient of the mean loss over every example of ``draws`` (one loss per example), flattened."""
    losses = [model.batch_loss(data.train_batch(t, [i])) for t, idx in draws.items() for i in idx]
    return _flat_row(list(torch.autograd.grad(torch.stack(losses).mean(), params, allow_unused=True)), params)


@pytest.mark.parametrize("batch_tasks", [True, False])
def test_rank_shares_sum_to_the_whole_draw(batch_tasks: bool) -> None:
    """Under DDP each rank takes every world_size-th example and the gradients are summed across
    ranks. In one process (the sum across ranks is the identity) the two ranks' rows, added by hand,
    must be the single-process rows, and both the gradient of each draw's mean loss computed one
    example at a time. GEM: one row per task; A-GEM: one row of 2 x 7 examples split 5/5/4."""
    data = _Data()
    torch.manual_seed(0)
    model = _Toy()
    params = list(model.parameters())
    memory = EpisodicMemory(50, seed=2)
    tasks = ["t0", "t1", "t2"]
    for t in tasks:
        memory.add(t, range(50))
    sampled: list[tuple[str, int]] = []
    draw_of = memory.sample

    def spy(task: str, n: int, step: int) -> list[int]:
        sampled.append((task, n))
        return draw_of(task, n, step)

    memory.sample = spy  # type: ignore[method-assign]
    for mode, mbs in (("gem", 3), ("agem", 7)):
        sampled.clear()
        whole = memory_gradients.constraint_gradients(
            MemorySource(model, data), memory, mode, tasks, 4, 2 * mbs, params, batch_tasks
        )
        args = (memory, mode, tasks, 4, mbs, params, batch_tasks)
        sources = (MemorySource(model, data, rank=r, world_size=2) for r in (0, 1))
        ranks = [memory_gradients.constraint_gradients(source, *args) for source in sources]
        if mode == "gem":  # 2 ranks x 3 examples per task
            counts = [6, 6, 6]
            draws = [{t: draw_of(t, 6, 4)} for t in tasks]
        else:  # 14 examples in all over three tasks: 5, 5, 4 (the first ones take the remainder)
            counts = [5, 5, 4]
            draws = [{t: draw_of(t, n, 4) for t, n in zip(tasks, counts, strict=True)}]
        assert sampled == list(zip(tasks, counts, strict=True)) * 3
        if mode == "agem":  # a task with fewer examples than ranks: rank 1 has none of t0's, but t1's
            draw = {"t0": [3], "t1": [1, 2, 4]}
            shares = [
                memory_gradients.memory_gradient(
                    MemorySource(model, data, rank=r, world_size=2), draw, params
                )
                for r in (0, 1)
            ]
            summed = _flat_row(shares[0], params) + _flat_row(shares[1], params)
            torch.testing.assert_close(
                summed, _hand_gradient(model, data, draw, params), rtol=1e-5, atol=1e-7
            )
            alone = MemorySource(model, data, rank=1, world_size=2)
            assert memory_gradients.memory_gradient(alone, {"t0": [3]}, params) == [None] * len(params)
        assert len(whole) == len(draws) and all(len(r) == len(draws) for r in ranks)
        for k, draw in enumerate(draws):
            expected = _hand_gradient(model, data, draw, params)
            torch.testing.assert_close(_flat_row(whole[k], params), expected, rtol=1e-5, atol=1e-7)
            summed = _flat_row(ranks[0][k], params) + _flat_row(ranks[1][k], params)
            torch.testing.assert_close(summed, expected, rtol=1e-5, atol=1e-7)
            # one rank's share alone is not the whole: the draw really is split
            assert not torch.allclose(_flat_row(ranks[0][k], params), expected, rtol=1e-3)


def _toy_callback(**kwargs: object) -> tuple[GEMCallback, _Toy, _Data]:
    torch.manual_seed(0)
    cb = GEMCallback(memory_size=50, memory_batch_size=4, parameters="all", **kwargs)  # type: ignore[arg-type]
    for t in ("t0", "t1", "t2"):
        cb.task_order.append(t)
        cb.memory.add(t, range(50))
    return cb, _Toy(), _Data()


def _backward(model: _Toy, data: _Data, task: str = "t0") -> None:
    model.zero_grad(set_to_none=True)
    model.batch_loss(data.train_batch(task, list(range(10)))).backward()


def _count_rows(cb: GEMCallback) -> list[tuple[int, tuple[str, ...]]]:
    """Record (step, tasks) each time ``cb`` computes its memory gradients."""
    computed: list[tuple[int, tuple[str, ...]]] = []
    compute = cb._constraint_gradients

    def counting(source, tasks, step, params):  # noqa: ANN001, ANN202
        computed.append((step, tuple(tasks)))
        return compute(source, tasks, step, params)

    cb._constraint_gradients = counting  # type: ignore[method-assign]
    return computed


def test_non_finite_steps_are_left_alone_counted_and_drop_the_cached_rows() -> None:
    cb, model, data = _toy_callback(refresh_every=4)
    computed = _count_rows(cb)
    for step, bad in ((0, float("nan")), (1, float("inf")), (2, None)):
        _backward(model, data)
        if bad is not None:
            model.a.weight.grad[0, 0] = bad
        before = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        stats = cb.project_step(model, data, step=step, current=["t0"])
        if step == 0:  # g left alone (its finite tensors compared), nothing violated
            after = [p.grad for p in model.parameters() if p.grad is not None]
            assert stats["gem/skipped_nonfinite"] == 1 and stats["gem/violated"] == 0
            assert all(
                torch.equal(a, b) for a, b in zip(before, after, strict=True) if torch.isfinite(a).all()
            )
    assert cb.skipped_nonfinite == 2 and stats["gem/skipped_nonfinite"] == 2.0
    # a skipped step's rows are not reused (refresh_every=4 would)
    assert [step for step, _ in computed] == [0, 1, 2]


def test_refresh_every_reuses_the_rows_while_the_tasks_are_the_same() -> None:
    cb, model, data = _toy_callback(refresh_every=2)
    computed = _count_rows(cb)
    for step, current in ((0, "t0"), (1, "t0"), (2, "t0"), (3, "t0"), (4, "t1"), (5, "t0")):
        _backward(model, data, current)
        cb.project_step(model, data, step=step, current=[current])
    # steps 0-1 and 2-3 share rows; the constraining set changes at 4 and back at 5
    assert computed == [(0, ("t1", "t2")), (2, ("t1", "t2")), (4, ("t0", "t2")), (5, ("t1", "t2"))]
    fresh, _, _ = _toy_callback()  # refresh_every=1: nothing is kept between steps
    _backward(model, data)
    fresh.project_step(model, data, step=0, current=["t0"])
    assert fresh._cache is None


def test_project_step_statistics_and_counters(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a step reports: nothing to constrain; GEM's violation (0 when none is left); the time
    (within the wall time around the call, and at least that of the memory gradients inside it);
    fallbacks accumulated over steps; the callback's ridge used (visible with the exact solve off)."""
    cb, model, data = _toy_callback(margin=0.0)
    _backward(model, data)
    assert cb.project_step(model, data, step=0, current=["t0", "t1", "t2"]) == {
        "gem/constraints": 0.0,
        "gem/violated": 0.0,
        "gem/projection_ms": pytest.approx(0.0, abs=50.0),
        "gem/fallbacks": 0.0,
        "gem/skipped_nonfinite": 0.0,
    }
    inner: list[float] = []
    compute = cb._constraint_gradients

    def timed(*args):  # noqa: ANN002, ANN202
        start = time.perf_counter()
        out = compute(*args)
        inner.append(time.perf_counter() - start)
        return out

    cb._constraint_gradients = timed  # type: ignore[method-assign]
    for seed in range(20):  # a step with a violated constraint
        torch.manual_seed(seed)
        model = _Toy()
        _backward(model, data)
        start = time.perf_counter()
        stats = cb.project_step(model, data, step=seed, current=["t0"])
        wall = time.perf_counter() - start
        if stats["gem/violated"]:
            break
    assert 1000 * inner[-1] <= stats["gem/projection_ms"] <= 1000 * wall
    assert stats["gem/violation"] == pytest.approx(0.0, abs=1e-9)  # exact: none left, and 0 is reported as 0
    agem, model, data = _toy_callback(mode="agem")
    _backward(model, data)
    assert "gem/violation" not in agem.project_step(model, data, step=0, current=["t0"])
    # one row g_1 = (1, 0, ...) against g = (-1, 2, 0, ...): without the exact solve v = 1 / (1 + eps)
    p = nn.Parameter(torch.zeros(3))
    p.grad = torch.tensor([-1.0, 2.0, 0.0])
    rows = [[torch.tensor([1.0, 0.0, 0.0])]]

    def broken(*args: object, **kwargs: object) -> np.ndarray:
        raise np.linalg.LinAlgError("SVD did not converge")

    monkeypatch.setattr(qp, "solve_gem_dual_exact", broken)
    ridged = GEMCallback(eps=0.3, margin=0.0, parameters="all")
    step_stats: dict[str, float] = {}
    ridged._project([p], rows, gram_matrix(rows), step_stats)
    torch.testing.assert_close(p.grad, torch.tensor([-1.0 + 1 / 1.3, 2.0, 0.0]), rtol=1e-6, atol=1e-7)
    assert step_stats["gem/violation"] > 0.1  # the ridge's residual, reported

    def fail(*args: object) -> np.ndarray:
        raise ValueError("constraints are inconsistent, no solution")

    monkeypatch.setattr(qp, "solve_gem_dual", fail)
    for _ in range(2):
        p.grad = torch.tensor([-1.0, 2.0, 0.0])
        ridged._project([p], rows, gram_matrix(rows), {})
    assert ridged.fallbacks == 2 * (projection.EPS_RETRIES + 1)


def test_defaults_as_documented() -> None:
    cb = GEMCallback()
    defaults = (256, 16, 0.5, "gem", "others", "shared", 1, projection.DEFAULT_EPS, 0, True, None, {})
    assert (
        *(cb.memory_size, cb.memory_batch_size, cb.margin, cb.mode, cb.constraints, cb.parameters),
        *(cb.refresh_every, cb.eps, cb.seed, cb.batch_tasks, cb.flat_rows, cb.last_stats),
    ) == defaults
    assert (cb.memory.size, cb.memory.seed) == (256, 0) and EpisodicMemory(4).seed == 0
    cb = GEMCallback(
        memory_size=np.int64(7), eps=np.float32(0.5), seed=np.int64(3), batch_tasks=0, flat_rows=1
    )
    assert (cb.memory.size, cb.memory.seed) == (7, 3)
    assert [type(x) for x in (cb.memory_size, cb.eps, cb.seed, cb.batch_tasks)] == [int, float, int, bool]
    assert cb.batch_tasks is False and cb.flat_rows is True


def test_shared_parameters_come_from_the_encoder() -> None:
    """parameters="shared": encoder.shared_parameters() if it has one, else pretrained_parameters();
    a model without either gets the PalUserError naming the fix."""
    frozen, trainable = nn.Parameter(torch.ones(1), requires_grad=False), nn.Parameter(torch.ones(2))
    pretrained_only = nn.Module()
    pretrained_only.encoder = SimpleNamespace(pretrained_parameters=lambda: [("w", trainable), ("f", frozen)])
    assert GEMCallback().participating_parameters(pretrained_only) == [trainable]
    both = nn.Module()
    both.encoder = SimpleNamespace(
        shared_parameters=lambda: [("f", frozen)], pretrained_parameters=lambda: [("w", trainable)]
    )
    assert GEMCallback().participating_parameters(both) == []
    message = (
        "GEMCallback(parameters='shared') needs module.encoder.pretrained_parameters() "
        "(pal_lightning.modeling.MultiTaskEncoder): use parameters='all' for another model."
    )
    for module in (_Toy(), SimpleNamespace(encoder=SimpleNamespace())):
        with pytest.raises(PalUserError, match=f"^{re.escape(message)}$"):
            GEMCallback().participating_parameters(module)  # type: ignore[arg-type]


def test_the_batched_path_is_taken_when_asked_and_possible(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = memory_gradients.task_gradients

    def spy(source, draws, params):  # noqa: ANN001, ANN202
        calls.append(len(draws))
        return real(source, draws, params)

    monkeypatch.setattr(memory_gradients, "task_gradients", spy)
    cb, model, data = _toy_callback()
    params = list(model.parameters())
    source = MemorySource(model, data)

    def rows(tasks: list[str], *batch_tasks: bool, use: list | None = None) -> int:
        calls.clear()
        memory_gradients.constraint_gradients(
            source, cb.memory, "gem", tasks, 0, 2, use or params, *batch_tasks
        )
        return len(calls)

    assert rows(["t1", "t2"]) == 1 and rows(["t1", "t2"], True) == 1  # the default: batched
    assert rows(["t1", "t2"], False) == 0 and rows(["t1"], True) == 0  # asked not to; one task
    assert rows(["t0", "t1", "t2"], True) == 1
    stranger = [*params, nn.Parameter(torch.ones(1))]
    assert rows(["t1", "t2"], True, use=stranger) == 0  # not the module's parameters: per task
    for batch_tasks, expected in ((True, 1), (False, 0)):  # the callback passes its option on
        calls.clear()
        cb.batch_tasks = batch_tasks
        _backward(model, data)
        cb.project_step(model, data, step=0, current=["t0"])
        assert len(calls) == expected


# ---------------------------------------------------------------------------------------- Trainer.fit


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cs224n_data(tmp_path_factory.mktemp("gem") / "data")


def _fit(
    data_dir: Path,
    callback: GEMCallback,
    max_steps: int,
    ckpt_path: str | None = None,
    precision: str = "bf16-mixed",
    extra: tuple = (),
) -> tuple[pl.Trainer, MultiTaskModule]:
    # a seed whose tiny run meets conflicting tasks within its few steps (GEM projects, A-GEM's reference
    # binds); whether a given seed does depends on the random initialisation, which the encoder
    # families' construction changed (seed 0 stopped binding then)
    pl.seed_everything(1)
    model = MultiTaskModule(encoder_config=TINY_BERT, adapter={"size": 8, "num_heads": 2})
    dm = MultiTaskDataModule(data_dir=str(data_dir), cache_dir=False, batch_size=4, max_length=32)
    trainer = quiet_trainer(
        max_steps=max_steps,
        accumulate_grad_batches=2,
        gradient_clip_val=1.0,
        precision=precision,
        enable_checkpointing=bool(extra) and any(isinstance(c, ModelCheckpoint) for c in extra),
        limit_val_batches=0,
        callbacks=[callback, *extra],
    )
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return trainer, model


class _CheckProjected(pl.Callback):
    """Runs after GEMCallback: the written-back gradient satisfies every constraint of the step.

    It records the memory gradients (rows of ``G``) each time the callback computes them, so the
    check works for every ``refresh_every`` (with 1 nothing is cached). On a violated step A-GEM's
    result is orthogonal to its reference gradient; GEM's has ``<g~, g_k> >= 0`` for every row.
    """

    def __init__(self, gem: GEMCallback) -> None:
        self.gem = gem
        self.checked = 0
        self.seen: list[dict[str, float]] = []
        self.recorded = ConstraintRows(gem)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:  # noqa: ANN001
        stats = dict(self.gem.last_stats)
        self.seen.append(stats)
        if not stats.get("gem/violated"):
            return
        assert self.recorded.rows is not None and len(self.recorded.rows) == stats["gem/constraints"]
        params = self.gem.participating_parameters(pl_module)
        M = gram_matrix([[p.grad for p in params], *self.recorded.rows]).numpy()
        cos = M[0, 1:] / np.sqrt(M[0, 0] * np.diag(M)[1:])
        assert np.all(cos >= -1e-3), cos
        if self.gem.mode == "agem":  # g~ = g - (g.g_ref / |g_ref|^2) g_ref is orthogonal to g_ref
            assert abs(float(cos[0])) <= 1e-3, cos
        self.checked += 1


def test_gem_inside_fit_bf16_accumulation_clipping(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    solves: list[int] = []
    real = qp.solve_gem_dual

    def spy(GGt, Gg, margin, eps):  # noqa: ANN001, ANN202
        solves.append(len(Gg))
        return real(GGt, Gg, margin, eps)

    monkeypatch.setattr(qp, "solve_gem_dual", spy)
    autocast: list[bool] = []  # every loss, the memories' included, under the precision's autocast
    real_loss = MultiTaskModule.batch_loss

    def loss_spy(self, batch):  # noqa: ANN001, ANN202
        autocast.append(torch.is_autocast_enabled("cpu"))
        return real_loss(self, batch)

    monkeypatch.setattr(MultiTaskModule, "batch_loss", loss_spy)
    cb = GEMCallback(memory_size=16, memory_batch_size=4, refresh_every=2)
    check = _CheckProjected(cb)
    trainer, model = _fit(data_dir, cb, max_steps=6, extra=(check,))
    assert len(autocast) > 12 and all(autocast)  # 12 training micro-batches, then the memories'
    assert trainer.global_step == 6 and len(check.seen) == 6
    assert solves and max(solves) >= 1  # the QP really ran
    assert check.checked >= 1  # ... and its result was checked against the constraints
    assert cb.projections == len(solves) and cb.fallbacks == 0
    assert max(s["gem/constraints"] for s in check.seen) == 2  # 3 tasks: two others constrain
    assert all(np.isfinite(v) for s in check.seen for v in s.values())
    assert {"gem/violated", "gem/min_cosine", "gem/projection_ms", "gem/fallbacks", "gem/constraints"} <= set(
        trainer.logged_metrics
    )
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert set(cb.memory.tasks()) == {"sst", "qqp", "sts"} and cb.task_order
    # 12 training batches of 4 examples went through the memories
    assert sum(cb.memory.seen.values()) == 12 * 4


def test_agem_inside_fit(data_dir: Path) -> None:
    cb = GEMCallback(memory_size=16, memory_batch_size=6, mode="agem")
    check = _CheckProjected(cb)
    trainer, model = _fit(data_dir, cb, max_steps=4, extra=(check,))
    assert max(s["gem/constraints"] for s in check.seen) == 1  # one reference gradient
    assert cb.violations >= 1 and cb.projections == cb.violations
    assert cb.refresh_every == 1 and check.checked == cb.violations  # every projection was checked
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_memories_survive_a_checkpoint_and_resume_exactly(data_dir: Path, tmp_path: Path) -> None:
    straight = GEMCallback(memory_size=6, memory_batch_size=2)
    saver = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1, filename="{step}")
    _fit(data_dir, straight, max_steps=6, precision="32-true", extra=(saver, RNGStateCallback()))
    path = tmp_path / "step=4.ckpt"
    ckpt = torch.load(path, weights_only=True)  # plain Python state only
    state = ckpt["callbacks"][straight.state_key]
    fresh = GEMCallback(memory_size=6, memory_batch_size=2)
    fresh.load_state_dict(state)
    assert sum(fresh.memory.seen.values()) == 4 * 2 * 4  # 4 steps x 2 micro-batches x 4 examples
    assert fresh.task_order and len(fresh.memory) > 0
    assert fresh.projections > 0  # this run projected by step 4: restoring the counters is visible
    # resuming at step 4 continues with the same memories as the uninterrupted run
    resumed = GEMCallback(memory_size=6, memory_batch_size=2)
    _fit(
        data_dir, resumed, max_steps=6, ckpt_path=str(path), precision="32-true", extra=(RNGStateCallback(),)
    )
    assert sum(straight.memory.seen.values()) == 6 * 2 * 4
    assert resumed.memory == straight.memory and resumed.task_order == straight.task_order
    # the cumulative counters were restored too: the resumed run ends with the uninterrupted run's
    counters = ("projections", "violations", "fallbacks", "skipped_nonfinite")
    assert [getattr(resumed, c) for c in counters] == [getattr(straight, c) for c in counters]


def test_fit_without_train_batch_fails_clearly(data_dir: Path) -> None:
    class NoMemoryData(MultiTaskDataModule):
        train_batch = None  # type: ignore[assignment]

    cb = GEMCallback()
    model = MultiTaskModule(encoder_config=TINY_BERT, adapter={"size": 8, "num_heads": 2})
    dm = NoMemoryData(data_dir=str(data_dir), cache_dir=False, batch_size=4, max_length=32)
    trainer = quiet_trainer(max_steps=1, callbacks=[cb])
    with pytest.raises(PalUserError, match=r"train_batch\(task, indices\)"):
        trainer.fit(model, datamodule=dm)

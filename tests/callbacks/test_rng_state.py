"""The random generators' round trip: every generator (torch, numpy, python ``random``) restored exactly.

The resume tests through the CLI only see torch's generator (dropout); these check the other two
directly, and through ``Trainer.fit`` resumed from a mid-run checkpoint.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.demos.boring_classes import BoringModel

import pal_lightning.core.distributed
from pal_lightning.callbacks.rng_state import RNGStateCallback, apply_rng_state, collect_rng_state
from pal_lightning.testing import quiet_trainer


def _draw() -> tuple[list[float], list[float], list[float]]:
    """A few numbers from each generator (python's gauss uses its cached second value too)."""
    return (
        torch.rand(3).tolist(),
        np.random.rand(3).tolist() + [float(np.random.standard_normal())],
        [random.random(), random.gauss(0.0, 1.0), random.random()],
    )


@pytest.mark.parametrize("generator", ["torch", "numpy", "python"])
def test_each_generator_round_trips_through_a_weights_only_load(generator: str, tmp_path: Path) -> None:
    pl.seed_everything(3)
    random.gauss(0.0, 1.0)  # leaves a cached gauss value in python's state
    np.random.standard_normal()  # ... and in numpy's
    torch.save({"s": collect_rng_state()}, tmp_path / "s.pt")
    state = torch.load(tmp_path / "s.pt", weights_only=True)["s"]
    expected = _draw()
    # advance only the generator under test: restoring must bring exactly that one back
    {"torch": lambda: torch.rand(7), "numpy": lambda: np.random.rand(7), "python": lambda: random.random()}[
        generator
    ]()
    apply_rng_state(state)
    assert _draw() == expected


def test_callback_restores_its_rank_at_the_first_training_hook(caplog: pytest.LogCaptureFixture) -> None:
    pl.seed_everything(5)
    cb = RNGStateCallback()
    saved = cb.state_dict()
    assert saved["world_size"] == 1 and len(saved["states"]) == 1
    expected = _draw()
    resumed = RNGStateCallback()
    resumed.load_state_dict(saved)
    assert not resumed.restored  # nothing happens before training starts
    resumed.on_train_batch_start(None, None, None, 0)  # type: ignore[arg-type]
    assert resumed.restored and _draw() == expected
    # restored once only: a later hook does not rewind again
    after = _draw()
    resumed.on_train_epoch_start(None, None)  # type: ignore[arg-type]
    assert _draw() != after

    # a checkpoint of two ranks loaded by one process: rank 0's states, and a warning
    other = collect_rng_state()
    with caplog.at_level(logging.WARNING):
        resumed.load_state_dict({"world_size": 2, "states": [saved["states"][0], other]})
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "The checkpoint holds the random states of 2 rank(s) but this run has 1: the resumed run will not "
        "repeat the original one exactly."
    ]  # the whole message, to its last character
    resumed.on_train_epoch_start(None, None)  # type: ignore[arg-type]
    assert _draw() == expected


class _Drawing(BoringModel):
    """Draws from numpy and python ``random`` at each training step, as user code (augmentation) may."""

    def __init__(self) -> None:
        super().__init__()
        self.draws: dict[int, tuple[float, float, float]] = {}

    def training_step(self, batch, batch_idx):  # noqa: ANN001, ANN201
        self.draws[self.global_step] = (
            float(np.random.rand()),
            random.random(),
            float(torch.rand(1)),
        )
        return super().training_step(batch, batch_idx)


def _fit(tmp_path: Path, max_steps: int, ckpt_path: str | None = None) -> _Drawing:
    model = _Drawing()
    trainer = quiet_trainer(
        max_steps=max_steps,
        limit_val_batches=0,
        enable_checkpointing=True,
        callbacks=[
            RNGStateCallback(),
            ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1, filename="{step}"),
        ],
    )
    trainer.fit(model, ckpt_path=ckpt_path)
    return model


@pytest.mark.filterwarnings(
    "ignore:The dirpath has changed", "ignore:You're resuming from a checkpoint that ended"
)
def test_resumed_fit_draws_the_same_numpy_and_python_numbers(tmp_path: Path) -> None:
    pl.seed_everything(6)
    full = _fit(tmp_path / "full", max_steps=6)
    pl.seed_everything(6)
    _fit(tmp_path / "first", max_steps=3)
    # another process would start from other states: scramble every generator before resuming
    pl.seed_everything(1234)
    resumed = _fit(tmp_path / "resumed", max_steps=6, ckpt_path=str(tmp_path / "first" / "step=3.ckpt"))
    assert sorted(resumed.draws) == [3, 4, 5]
    assert [resumed.draws[s] for s in (3, 4, 5)] == [full.draws[s] for s in (3, 4, 5)]


# ------------------------------------------------- ranks and CUDA without processes or a GPU


class _FakeDist:
    """Just what pal_lightning.core.distributed reads of torch.distributed, for ``rank`` of ``world`` processes."""

    def __init__(self, rank: int, world: int, others: list) -> None:
        self.rank, self.world, self.others = rank, world, others

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def get_rank(self) -> int:
        return self.rank

    def get_world_size(self) -> int:
        return self.world

    def all_gather_object(self, out: list, obj: object) -> None:
        out[:] = [obj if r == self.rank else self.others[r] for r in range(self.world)]


def test_each_rank_gathers_and_restores_its_own_states(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pl.seed_everything(7)
    rank0 = collect_rng_state()
    _draw()
    fake = _FakeDist(rank=1, world=2, others=[rank0, None])
    monkeypatch.setattr(
        pal_lightning.core.distributed, "dist", fake
    )  # the one place that calls torch.distributed
    cb = RNGStateCallback()
    assert cb.restored is False
    saved = cb.state_dict()  # rank 1 gathers: rank 0's states first, its own second
    assert saved["world_size"] == 2 and saved["states"][0] is rank0
    expected = _draw()
    _draw()
    with caplog.at_level(logging.WARNING):
        cb.load_state_dict(saved)
        cb.on_train_epoch_start(None, None)  # type: ignore[arg-type]
        assert cb.restored and _draw() == expected  # rank 1 took states[1], not states[0]
        # three ranks saved, two now: rank 1 still restores its entry; only rank 0 warns
        cb.load_state_dict({"world_size": 3, "states": [rank0, saved["states"][1], rank0]})
        assert cb.restored is False
        cb.on_train_batch_start(None, None, None, 0)  # type: ignore[arg-type]
        assert _draw() == expected
    assert "random states" not in caplog.text
    # one rank saved, two now: rank 1 has nothing to restore (its generators stay as they are)
    cb.load_state_dict({"world_size": 1, "states": [rank0]})
    before = collect_rng_state()
    cb.on_train_epoch_start(None, None)  # type: ignore[arg-type]
    assert not cb.restored
    after_hook = _draw()
    apply_rng_state(before)
    assert _draw() == after_hook  # the hook left the generators alone
    # rank 0 of that run does warn, naming both numbers
    fake.rank = 0
    with caplog.at_level(logging.WARNING):
        cb.load_state_dict({"world_size": 1, "states": [rank0]})
    assert (
        "The checkpoint holds the random states of 1 rank(s) but this run has 2: the resumed" in caplog.text
    )
    assert "run will not repeat the original one exactly." in caplog.text


def test_cuda_generators_round_trip_where_the_device_count_matches(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A stand-in for torch.cuda's generator functions: the states go out and come back unchanged."""
    device_states = [torch.arange(4, dtype=torch.uint8), torch.arange(4, 8, dtype=torch.uint8)]
    restored: list = []
    cuda = torch.cuda
    monkeypatch.setattr(cuda, "is_available", lambda: True)
    monkeypatch.setattr(cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(cuda, "device_count", lambda: 2)
    monkeypatch.setattr(cuda, "get_rng_state_all", lambda: [s.clone() for s in device_states])
    monkeypatch.setattr(cuda, "set_rng_state_all", lambda states: restored.extend(states))
    state = collect_rng_state()
    assert [s.tolist() for s in state["cuda"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    state["cuda"] = [s.tolist() for s in state["cuda"]]  # as lists: restored as uint8 tensors
    apply_rng_state(state)
    assert [(s.dtype, s.tolist()) for s in restored] == [
        (torch.uint8, [0, 1, 2, 3]),
        (torch.uint8, [4, 5, 6, 7]),
    ]
    # another number of devices: nothing restored, and a warning that says so
    restored.clear()
    monkeypatch.setattr(cuda, "device_count", lambda: 1)
    with caplog.at_level(logging.WARNING):
        apply_rng_state(state)
    assert restored == []
    assert "CUDA generator states of 2 device(s), this process sees 1: CUDA generators are not restored" in (
        caplog.text
    )
    # no CUDA in use: no CUDA entry, and a state without one restores nothing there
    monkeypatch.setattr(cuda, "is_initialized", lambda: False)
    assert "cuda" not in collect_rng_state()
    apply_rng_state({k: v for k, v in state.items() if k != "cuda"})  # CUDA there, no states for it
    monkeypatch.setattr(cuda, "is_available", lambda: False)
    apply_rng_state(state)
    assert restored == []

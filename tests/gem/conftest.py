"""Fixtures shared by the GEM tests: a brute-force dual, a tiny model and data module, a filled memory."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest
import torch

from pal_lightning.data import MultiTaskDataModule
from pal_lightning.gem.memory import EpisodicMemory
from pal_lightning.module.multitask import MultiTaskModule
from pal_lightning.testing import TINY_BERT, write_cs224n_data

GEM_TASKS = ("sst", "qqp", "sts")
"""Three heads: single sentences and pairs, classification and regression."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[MultiTaskModule, MultiTaskDataModule]:
    """A tiny PAL model in training mode (dropout on) and a data module set up on fixture files."""
    data_dir = write_cs224n_data(tmp_path_factory.mktemp("gem_rows") / "data")
    torch.manual_seed(0)
    model = MultiTaskModule(encoder_config=TINY_BERT, adapter={"size": 8, "num_heads": 2}).train()
    dm = MultiTaskDataModule(data_dir=str(data_dir), cache_dir=False, batch_size=4, max_length=32)
    dm.setup("fit")
    return model, dm


@pytest.fixture
def make_memory() -> Callable[[], EpisodicMemory]:
    """A fresh memory of 12 slots per task holding each task's examples 0..11 (seed 5)."""

    def make() -> EpisodicMemory:
        memory = EpisodicMemory(12, seed=5)
        for task in GEM_TASKS:
            memory.add(task, range(12))
        return memory

    return make


def _brute_force_dual(P: np.ndarray, q: np.ndarray, margin: float) -> np.ndarray:
    """``argmin_{v >= margin} 1/2 v^T P v + q^T v`` by brute force (small ``t``): for every set S of
    coefficients above the margin, ``(P v + q)_S = 0`` by least squares with ``v = margin`` elsewhere; of
    the KKT points (``v >= margin``, ``P v + q >= 0``), the one with the smallest objective."""
    t = len(q)
    best, best_obj = None, np.inf
    scale = max(float(np.abs(P).max(initial=0.0)), float(np.abs(q).max(initial=0.0)), 1e-300)
    for size in range(t + 1):
        for S in map(list, itertools.combinations(range(t), size)):
            v = np.full(t, margin, dtype=np.float64)
            F = [k for k in range(t) if k not in S]
            if S:
                v[S] = np.linalg.lstsq(P[np.ix_(S, S)], -(q[S] + P[np.ix_(S, F)] @ v[F]), rcond=None)[0]
            c = q + P @ v
            if np.any(v < margin - 1e-9 * max(1.0, abs(margin))) or np.any(c < -1e-9 * scale):
                continue
            obj = 0.5 * v @ P @ v + q @ v
            if obj < best_obj:
                best, best_obj = v, obj
    assert best is not None
    return best


@pytest.fixture(scope="session")
def brute_force_dual() -> Callable[[np.ndarray, np.ndarray, float], np.ndarray]:
    """GEM's dual solved independently of pal_lightning.gem.qp (every active set tried)."""
    return _brute_force_dual

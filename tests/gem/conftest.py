"""Fixtures shared by the GEM memory-gradient tests (batched rows, sparse embedding rows)."""

from __future__ import annotations

from collections.abc import Callable

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

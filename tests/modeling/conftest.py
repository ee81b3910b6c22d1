"""Shared fixtures for the modeling tests: a tiny random BERT shape and a padded batch."""

from __future__ import annotations

import os

import pytest
import torch

from pal_lightning.testing import TINY_BERT_3_LAYERS as TINY

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def batch() -> dict[str, torch.Tensor]:
    """Three sequences of length 7; the second has three padding positions."""
    gen = torch.Generator().manual_seed(0)
    input_ids = torch.randint(1, TINY["vocab_size"], (3, 7), generator=gen)
    attention_mask = torch.ones(3, 7, dtype=torch.long)
    attention_mask[1, 4:] = 0
    input_ids[1, 4:] = 0
    token_type_ids = torch.zeros(3, 7, dtype=torch.long)
    token_type_ids[:, 4:] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy 2-core machine the thread pool's
    contention makes each tiny forward ~10x slower; use one thread per test and restore afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

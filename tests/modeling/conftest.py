"""Shared fixtures for the modeling tests: a tiny random BERT shape and a padded batch."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pal_lightning.modeling import MultiTaskEncoder
from pal_lightning.testing import TINY_BERT_3_LAYERS as TINY
from pal_lightning.testing import without_dropout

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


@pytest.fixture
def tiny_encoder() -> Callable[..., MultiTaskEncoder]:
    """``build(adapter, seed=0)``: a dropout-free tiny encoder of tasks a and b, in eval mode."""

    def build(adapter: object, seed: int = 0) -> MultiTaskEncoder:
        torch.manual_seed(seed)
        return MultiTaskEncoder.from_config(without_dropout(TINY), ["a", "b"], adapter=adapter).eval()

    return build


@pytest.fixture
def frozen_steps(batch) -> Callable[[MultiTaskEncoder, str], tuple[set[str], set[str]]]:
    """``train(model, task)``: three AdamW steps of ``task`` with a head and the encoder frozen; returns the
    names of the parameters (``head.*`` included) that changed, and all names."""

    def train(model: MultiTaskEncoder, task: str) -> tuple[set[str], set[str]]:
        model.train().backbone.requires_grad_(False)
        head = nn.Linear(model.hidden_size, 2)
        before = {
            n: p.detach().clone() for n, p in [*model.named_parameters(), *head.named_parameters("head")]
        }
        params = [p for p in [*model.parameters(), *head.parameters()] if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=1e-2)
        labels = torch.tensor([0, 1, 1])
        for _ in range(3):
            optimizer.zero_grad()
            F.cross_entropy(head(model(**batch, task=task)[:, 0]), labels).backward()
            optimizer.step()
        after = dict([*model.named_parameters(), *head.named_parameters("head")])
        return {n for n, p in after.items() if not torch.equal(p, before[n])}, set(after)

    return train

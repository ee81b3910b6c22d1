"""The module tests' model: a tiny random encoder with single sentences (``sst``), cross pairs (``qqp``),
siamese pairs (``sts``) and a single ``bce`` logit (``binary``): heads of widths 5, 2, 1 and 1; and a mixed
stream of their inputs."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pal_lightning import MultiTaskModule, TaskSpec  # noqa: E402
from pal_lightning.testing import TINY_BERT  # noqa: E402

#: ``(task, input)`` of every kind, interleaved.
MIXED_ITEMS: list[tuple[str, Any]] = [
    ("sst", "a great, moving film ."),
    ("qqp", ("how do I cook rice?", "how is rice cooked?")),
    ("sts", ("a man plays the guitar", "someone is playing a guitar on a stage tonight")),
    ("binary", "dull"),
    ("sst", "the music is fun but the end is long and bad and the actors are bored"),
    ("sts", ("x", "y")),
    ("qqp", ("a", "b c d e f g")),
    ("sst", "ok"),
    ("binary", "a fine and long review of a film that goes on"),
]


@pytest.fixture(scope="module")
def module() -> MultiTaskModule:
    torch.manual_seed(0)
    bce = TaskSpec(name="binary", num_labels=2, loss="bce", text_columns=("sentence",))
    module = MultiTaskModule(
        tasks=["sst", "qqp", "sts", bce],
        encoder_config=TINY_BERT,
        adapter={"size": 8, "num_heads": 2, "init": "random"},
        pair_encoding={"sts": "siamese", "default": "cross"},
    )
    module.predict_max_length = 32  # shorter than some test sentences: predict truncates as training does
    return module.eval()


@pytest.fixture
def items() -> list[tuple[str, Any]]:
    return list(MIXED_ITEMS)


@pytest.fixture
def one_torch_thread():
    """Tiny models gain nothing from intra-op threads, which contend on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

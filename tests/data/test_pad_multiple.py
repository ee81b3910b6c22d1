"""``pad_to_multiple_of``: every batch's sequence length rounded up to the multiple (the GPU configs' 8),
with the extra positions masked, so that a model scores the batch exactly as without them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from pal_lightning.core.batch import ATTENTION_MASK, INPUT_IDS
from pal_lightning.core.errors import PalUserError
from pal_lightning.data import MultiTaskDataModule
from pal_lightning.data.tokenize import Encoded, pad_batch
from pal_lightning.module.multitask import MultiTaskModule
from pal_lightning.testing import TINY_BERT


def test_pad_batch_rounds_the_width_up_and_masks_the_extra_positions() -> None:
    ids = np.array([101, 7, 8, 102, 101, 9, 102], dtype=np.int64)
    enc = Encoded(input_ids=ids, token_type_ids=np.zeros_like(ids), offsets=np.array([0, 4, 7]))
    plain = pad_batch(enc, np.array([0, 1]), pad_id=0)
    padded = pad_batch(enc, np.array([0, 1]), pad_id=0, multiple_of=8)
    assert plain[INPUT_IDS].shape == (2, 4) and padded[INPUT_IDS].shape == (2, 8)
    for key in plain:
        assert torch.equal(padded[key][:, :4], plain[key]) and not padded[key][:, 4:].any()
    already = pad_batch(enc, np.array([0]), pad_id=0, multiple_of=4)
    assert already[INPUT_IDS].shape == (1, 4)


def test_every_loader_pads_to_the_multiple_and_the_model_scores_the_same(data_dir: Path, make_dm) -> None:
    plain, padded = (make_dm(data_dir, sampling="round_robin", pad_to_multiple_of=m) for m in (1, 8))
    plain.setup("fit")
    padded.setup("fit")
    widths = set()
    for batch in [
        *list(padded.train_dataloader())[:6],
        *padded.val_dataloader(),
        padded.train_batch("qqp", [0, 1]),
    ]:
        for key, value in batch.items():
            if key.startswith(INPUT_IDS):
                assert value.shape[1] % 8 == 0, (key, value.shape)
                widths.add(value.shape[1])
    assert widths
    torch.manual_seed(0)
    model = MultiTaskModule(encoder_config=TINY_BERT, adapter={"size": 8, "num_heads": 2}).eval()
    for a, b in zip(plain.val_dataloader(), padded.val_dataloader(), strict=True):
        assert a["task"] == b["task"] and a[INPUT_IDS].shape[1] <= b[INPUT_IDS].shape[1]
        assert torch.equal(a[ATTENTION_MASK].sum(1), b[ATTENTION_MASK].sum(1))
        with torch.no_grad():
            torch.testing.assert_close(model.batch_loss(a), model.batch_loss(b), rtol=1e-5, atol=1e-6)


def test_a_multiple_below_one_is_refused(data_dir: Path) -> None:
    with pytest.raises(PalUserError, match="pad_to_multiple_of"):
        MultiTaskDataModule(data_dir=str(data_dir), pad_to_multiple_of=0)

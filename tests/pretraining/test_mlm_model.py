"""load_mlm_model on every family: whether the masked-language-model head came from the checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pal_lightning.testing import BERT_VOCAB_SIZE, FAMILY_TYPES, save_tiny_encoder, tiny_family_config


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
@pytest.mark.parametrize("with_head", [False, True])
def test_head_from_checkpoint_in_every_family(model_type: str, with_head: bool, tmp_path: Path) -> None:
    """A checkpoint without a head (AutoModel's) trains a new one, whatever the family names its head
    (cls., lm_head., vocab_*, head./decoder., generator_*)."""
    from pal_lightning.pretraining.mlm import load_mlm_model

    config = tiny_family_config(model_type, vocab_size=BERT_VOCAB_SIZE, max_positions=128)
    folder = save_tiny_encoder(tmp_path / "enc", with_head=with_head, encoder_config=config)
    _, head_from_checkpoint = load_mlm_model(str(folder))
    assert head_from_checkpoint is with_head


@pytest.mark.parametrize("model_type", ["distilbert", "modernbert"])
def test_no_weight_decay_on_any_familys_layer_norms(model_type: str, tmp_path: Path) -> None:
    """MLMPretrainModule's docstring: no weight decay on biases and LayerNorm weights, whatever the family
    names its norms (sa_layer_norm, attn_norm, final_norm, ...)."""
    import lightning.pytorch as pl
    from torch import nn

    from pal_lightning.pretraining.mlm import MLMPretrainModule

    config = tiny_family_config(model_type, vocab_size=BERT_VOCAB_SIZE, max_positions=128)
    module = MLMPretrainModule(str(save_tiny_encoder(tmp_path / "enc", encoder_config=config)))
    module.trainer = pl.Trainer(max_steps=4, logger=False, enable_checkpointing=False)
    optimizer: Any = module.configure_optimizers()["optimizer"]  # type: ignore[call-overload,index]
    decayed = {id(p) for g in optimizer.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    norms = [m for m in module.model.modules() if isinstance(m, nn.LayerNorm)]
    assert norms
    assert not any(id(p) in decayed for m in norms for p in m.parameters())

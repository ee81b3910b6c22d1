"""Every encoder family through the whole module: a fit with GEM and SimCSE, MLM pre-training; one
per-task method per family. Every method saved, loaded and exported on a family:
``tests/modeling/test_conformance.py``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pal_lightning import MultiTaskModule  # noqa: E402
from pal_lightning.core.errors import PalUserError  # noqa: E402
from pal_lightning.testing import BERT_VOCAB_SIZE, FAMILY_TYPES, tiny_family_config  # noqa: E402

#: The method each family is run with here.
METHOD = {
    "bert": "lora",
    "roberta": "pals",
    "xlm-roberta": "houlsby",
    "electra": "low_rank",
    "distilbert": "lora",
    "mpnet": "pals",
    "deberta-v2": "pfeiffer",
    "modernbert": "pals",
}
SIZES = {
    "pals": {"size": 8, "num_heads": 2},
    "low_rank": {"size": 8},
    "lora": {"size": 4},
    "houlsby": {"size": 4},
    "pfeiffer": {"size": 4},
}


@pytest.mark.parametrize(
    "model_type", [t for t in FAMILY_TYPES if t != "bert"]
)  # BERT's: tests/module/test_simcse_step.py
def test_a_fit_with_gem_and_simcse(model_type: str, tmp_path: Path) -> None:
    """GEM's memories and SimCSE's views on every family; SimCSE needs the family's own dropout to act in
    training mode (its fields are named per family), so two training-mode passes must differ."""
    from pal_lightning.data import MultiTaskDataModule
    from pal_lightning.gem import GEMCallback
    from pal_lightning.modeling.simcse import SimCSEConfig
    from pal_lightning.testing import quiet_trainer, write_cs224n_data

    torch.manual_seed(0)
    config = tiny_family_config(model_type, vocab_size=BERT_VOCAB_SIZE, max_positions=128)
    adapter = {"method": METHOD[model_type], **SIZES[METHOD[model_type]]}
    if model_type == "modernbert":  # its checkpoints turn dropout off: unsupervised SimCSE is refused
        with pytest.raises(PalUserError, match="every dropout rate of this modernbert encoder is 0"):
            MultiTaskModule(encoder_config=config, adapter=adapter, simcse=SimCSEConfig())
        config = {**config, "mlp_dropout": 0.1}  # the fix the message names: a config with dropout
    model = MultiTaskModule(encoder_config=config, adapter=adapter, simcse=SimCSEConfig())
    ids = torch.randint(5, 100, (2, 12))
    model.train()
    views = [model.encoder(ids, torch.ones_like(ids), task="sst") for _ in range(2)]
    assert not torch.allclose(views[0], views[1])  # the two views of SimCSE differ: dropout acts
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    data = MultiTaskDataModule(
        data_dir=str(write_cs224n_data(tmp_path / "data")), cache_dir=False, batch_size=4, max_length=32
    )
    gem = GEMCallback(memory_size=8, memory_batch_size=2)
    trainer = quiet_trainer(max_steps=4, limit_val_batches=0, callbacks=[gem])
    trainer.fit(model, datamodule=data)
    assert trainer.global_step == 4 and sum(gem.memory.seen.values()) == 4 * 4
    assert gem.last_stats["gem/constraints"] >= 1  # memories of other tasks constrained the last step
    changed = {n.split(".")[1] for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert {"backbone", "adapters"} <= changed


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
def test_mlm_pretraining_loads_the_family_with_a_head(model_type: str, tmp_path: Path) -> None:
    from pal_lightning.modeling import MultiTaskEncoder
    from pal_lightning.pretraining.mlm import load_mlm_model
    from pal_lightning.testing import save_tiny_encoder

    config = tiny_family_config(model_type, vocab_size=BERT_VOCAB_SIZE, max_positions=128)
    folder = save_tiny_encoder(tmp_path / "enc", encoder_config=config)
    model, _ = load_mlm_model(str(folder))
    ids = torch.randint(1000, 2000, (2, 10))
    labels = torch.full_like(ids, -100)
    labels[:, 3] = ids[:, 3]
    loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss
    loss.backward()
    assert torch.isfinite(loss)
    model.save_pretrained(tmp_path / "pretrained")  # what `pal-lightning pretrain` writes, head included
    encoder = MultiTaskEncoder.from_pretrained(tmp_path / "pretrained", ["a"])
    assert encoder.family.name == model_type
    assert encoder.loading_info is not None and encoder.loading_info.unexpected  # the head, reported

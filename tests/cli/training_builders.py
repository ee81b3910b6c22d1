"""Builders shared by the tests of two-stage training and masked-language pre-training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from pal_lightning.hub import packaged_minilm_dir
from pal_lightning.testing import TINY_BERT


def stage1_checkpoint(path: Path, model_args: dict[str, Any]) -> Path:
    """A stand-in stage-1 checkpoint (weights and hyper-parameters, as ``fit`` writes them) for ``init_from``."""
    from pal_lightning.module import MultiTaskModule

    torch.manual_seed(11)
    model = MultiTaskModule(**model_args)
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}, path)
    return path


def tiny_encoder(folder: Path, with_head: bool) -> Path:
    """A random 2-layer BERT (``TINY_BERT``) saved with the real MiniLM tokenizer, with or without an MLM head."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, BertModel

    source = packaged_minilm_dir()
    if source is None:
        pytest.skip("the offline MiniLM package (its tokenizer) is not installed")
    torch.manual_seed(0)
    config = BertConfig(**TINY_BERT)
    model = BertForMaskedLM(config) if with_head else BertModel(config)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return folder


def pretrain_config(tmp_path: Path, encoder: Path, data: Path, **model: object) -> Path:
    """A ``pretrain`` config: 3 steps of the tiny encoder on the fixture data, validation at the end."""
    config = {
        "seed_everything": 3,
        "trainer": {
            "accelerator": "cpu",
            "devices": 1,
            "max_steps": 3,
            "val_check_interval": 3,
            "num_sanity_val_steps": 0,
            "log_every_n_steps": 1,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "default_root_dir": str(tmp_path / "runs"),
        },
        "model": {"init_args": {"encoder": str(encoder), "lr": 1e-3, **model}},
        "data": {
            "init_args": {"data_dir": str(data), "batch_size": 8, "max_length": 32, "max_val_sentences": 16}
        },
    }
    path = tmp_path / "pretrain.yaml"
    path.write_text(yaml.safe_dump(config))
    return path

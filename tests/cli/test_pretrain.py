"""``pal-lightning pretrain`` end to end on a tiny encoder folder: MLM on the fixture data writes an
encoder folder (``save_pretrained`` layout) that ``MultiTaskModule(encoder=folder)`` loads, and resumes from
its last checkpoint."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from pal_lightning.cli.main import main
from pal_lightning.module.multitask import MultiTaskModule
from pal_lightning.testing import save_tiny_encoder, write_cs224n_data, write_tiny_pretrain_config


@pytest.mark.parametrize("with_head", [False, True])
def test_pretrain_writes_an_encoder_that_fine_tuning_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], with_head: bool
) -> None:
    from pal_lightning.pretraining.mlm import load_mlm_model

    data = write_cs224n_data(tmp_path / "data")
    encoder = save_tiny_encoder(tmp_path / "tiny_bert", with_head)
    assert load_mlm_model(str(encoder))[1] is with_head  # the checkpoint's own head, or a new one
    config = write_tiny_pretrain_config(tmp_path, encoder, data, whole_word=with_head)
    assert main(["pretrain", "--config", str(config)]) == 0
    out = tmp_path / "runs" / "version_0" / "encoder"
    assert f"wrote the pre-trained encoder to {out}" in capsys.readouterr().out
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (out / name).is_file(), name
    metrics = (tmp_path / "runs" / "version_0" / "metrics.csv").read_text()
    assert "val/mlm_loss" in metrics and "train/mlm_loss" in metrics

    saved = load_file(str(out / "model.safetensors"))
    before = load_file(str(encoder / "model.safetensors"))
    key = "bert.encoder.layer.0.attention.self.query.weight"
    start = before.get(key, before.get(key.removeprefix("bert.")))
    assert not torch.equal(saved[key], start)  # pre-training moved the encoder

    model = MultiTaskModule(tasks=["sst", "sts"], encoder=str(out), adapter={"size": 8, "num_heads": 2})
    loaded = dict(model.encoder.backbone.named_parameters())
    assert torch.equal(loaded[key.removeprefix("bert.")], saved[key])
    assert model.encoder.loading_info.missing_new  # only the new PAL weights were missing
    if not with_head:
        _resumes_from_last(tmp_path, config, capsys)


def _resumes_from_last(tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The run above continued from its last checkpoint two steps further, into version_1."""
    first = torch.load(tmp_path / "runs" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)
    assert first["global_step"] == 3
    capsys.readouterr()
    args = ["pretrain", "--config", str(config)]
    assert main([*args, "--ckpt_path", "last", "--trainer.max_steps", "5"]) == 0
    assert "last.ckpt" in capsys.readouterr().err  # it says which checkpoint it continues from
    second = torch.load(tmp_path / "runs" / "version_1" / "checkpoints" / "last.ckpt", weights_only=True)
    assert second["global_step"] == 5 and second["mlm_masked_batches"] == 5  # continued, not restarted
    assert (tmp_path / "runs" / "version_1" / "encoder" / "model.safetensors").is_file()
    assert main([*args, "--ckpt_path", str(tmp_path / "nothing.ckpt")]) == 2


def test_pretrain_on_a_folder_without_tokenizer_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_cs224n_data(tmp_path / "data")
    encoder = save_tiny_encoder(tmp_path / "tiny_bert", with_head=False)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        (encoder / name).unlink(missing_ok=True)
    config = write_tiny_pretrain_config(tmp_path, encoder, data)
    capsys.readouterr()  # the fixture's own output (save_pretrained's progress bar)
    assert main(["pretrain", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pal-lightning: error:") and "Encoder folder" in err and "has no tokenizer" in err
    assert "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "runs" / "version_0" / "encoder").exists()


def test_pretrain_never_overwrites_output_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_cs224n_data(tmp_path / "data")
    encoder = save_tiny_encoder(tmp_path / "tiny_bert", with_head=False)
    taken = tmp_path / "taken"
    shutil.copytree(encoder, taken)
    config = write_tiny_pretrain_config(tmp_path, encoder, data, output_dir=str(taken))
    before = (taken / "model.safetensors").read_bytes()
    capsys.readouterr()
    assert main(["pretrain", "--config", str(config)]) == 2
    assert "already holds files" in capsys.readouterr().err
    assert (taken / "model.safetensors").read_bytes() == before

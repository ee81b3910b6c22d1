"""``pal-lightning fit --config configs/quickstart.yaml --model.encoder <a local folder>`` trains an encoder
of another family, with the per-task method chosen on the command line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pal_lightning.cli.main import main
from pal_lightning.testing import (
    BERT_VOCAB_SIZE,
    save_tiny_encoder,
    tiny_family_config,
    write_cs224n_data,
    write_tiny_fit_config,
)

QUICKSTART = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"


# one family and method: every method on every family is tests/modeling/test_conformance.py's
@pytest.mark.parametrize(("model_type", "method"), [("deberta-v2", "bottleneck")])
def test_fit_a_local_encoder_of_another_family(
    model_type: str, method: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tiny_family_config(model_type, vocab_size=BERT_VOCAB_SIZE, max_positions=128)
    encoder = save_tiny_encoder(tmp_path / model_type, encoder_config=config)
    tiny = write_tiny_fit_config(tmp_path, write_cs224n_data(tmp_path / "data"))
    settings = yaml.safe_load(tiny.read_text())
    del settings["model"]["init_args"]["encoder_config"]  # the encoder comes from the folder
    del settings["model"]["init_args"]["adapter"]
    tiny.write_text(yaml.safe_dump(settings))
    args = ["fit", "--config", str(QUICKSTART), "--config", str(tiny), "--model.encoder", str(encoder)]
    args += ["--model.adapter.method", method, "--trainer.max_steps", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "CS224N overall (dev):" in out
    (hparams,) = (tmp_path / "runs").glob("version_0/hparams.yaml")
    saved = yaml.safe_load(hparams.read_text())
    assert saved["encoder"] == str(encoder) and saved["adapter"]["method"] == method

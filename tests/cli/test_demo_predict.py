"""``predict`` on the demo run works out of the box, and a missing test split names the option that leaves
it out (issue "A user's own task, end to end", item 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pal_lightning.cli.main import main
from pal_lightning.testing import write_cs224n_data, write_tiny_fit_config

ROOT = Path(__file__).resolve().parents[2]
HINT = 'To predict only the dev split: --data.predict_splits "[dev]".'


@pytest.mark.integration
def test_the_demo_run_predicts_its_dev_sets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    tiny = ["--trainer.max_steps", "1", "--data.init_args.limit_examples", "16"]
    tiny += ["--data.init_args.cache_dir", "false", "--trainer.enable_progress_bar", "false"]
    assert main(["fit", "--config", str(ROOT / "configs" / "demo.yaml"), *tiny]) == 0
    run = tmp_path / "runs" / "demo" / "version_0"
    capfd.readouterr()
    # the command that configs/demo.yaml's header gives
    code = main(["predict", "--config", str(run / "config.yaml"), "--ckpt_path", "best"])
    out, err = capfd.readouterr()
    assert code == 0, err[-2000:]
    written = sorted(p.name for p in (run / "predictions").iterdir())
    assert written == ["para-dev-output.csv", "sst-dev-output.csv", "sts-dev-output.csv"]
    assert "pal-lightning: wrote 3 prediction file(s)" in out


def test_a_missing_test_split_names_predict_splits(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    data = write_cs224n_data(tmp_path / "data")
    config = write_tiny_fit_config(tmp_path, data)
    assert main(["fit", "--config", str(config)]) == 0
    for test_file in data.glob("*-test-student.csv"):
        test_file.unlink()  # as in the packaged demo set: train and dev only
    run = tmp_path / "runs" / "version_0"
    capfd.readouterr()
    assert main(["predict", "--config", str(run / "config.yaml"), "--ckpt_path", "best"]) == 2
    errors = [line for line in capfd.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("pal-lightning: error: Data files not found in")
    assert errors[0].endswith(HINT), errors
    # the advice works
    args = ["predict", "--config", str(run / "config.yaml"), "--ckpt_path", "best"]
    assert main([*args, "--data.predict_splits", "[dev]"]) == 0
    assert (run / "predictions" / "sst-dev-output.csv").is_file()

"""Plain ``predict`` (the configured splits, by the prediction writer): on the demo run out of the box, into
another folder without log folders, and a missing test split names the option that leaves it out (issue "A
user's own task, end to end", items 8 and 10)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pal_lightning.cli.main import main

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


def test_predict_elsewhere_makes_no_log_folders_and_a_missing_test_split_names_predict_splits(
    tmp_path: Path, data_dir: Path, tiny_yaml: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert main(["fit", "--config", str(tiny_yaml), "--trainer.max_steps", "2"]) == 0  # one validation
    run = tmp_path / "runs" / "version_0"
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    out = tmp_path / "elsewhere"
    args = ["predict", "--config", str(run / "config.yaml"), "--ckpt_path", "best"]
    capfd.readouterr()
    assert main([*args, "--predictions.output_dir", str(out)]) == 0
    assert "pal-lightning: wrote 6 prediction file(s)" in capfd.readouterr().out
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(f"{t}-{s}-output.csv" for t in ("sst", "para", "sts") for s in ("dev", "test"))
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if not p.is_relative_to(out))
    assert after == before  # no predict/version_N in the run, no config.yaml or log folder anywhere
    for file in out.iterdir():
        assert b"\r" not in file.read_bytes()

    for test_file in data_dir.glob("*-test-student.csv"):
        test_file.unlink()  # as in the packaged demo set: train and dev only
    assert main(args) == 2
    errors = [line for line in capfd.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("pal-lightning: error: Data files not found in")
    assert errors[0].endswith(HINT), errors
    # the advice works
    assert main([*args, "--data.predict_splits", "[dev]"]) == 0
    assert (run / "predictions" / "sst-dev-output.csv").is_file()

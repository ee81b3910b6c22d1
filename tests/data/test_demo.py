"""The packaged demo set (data_dir: demo) and configs/demo.yaml on a tiny budget, then its predict command."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pal_lightning.data.sources.demo import demo_data_dir  # noqa: E402
from pal_lightning.data.sources.readers import read_split, resolve_data_dir  # noqa: E402
from pal_lightning.tasks.specs import get_task  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXPECTED_ROWS = {"train": 400, "dev": 200}


def test_demo_resolves_from_any_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo").mkdir()  # a local folder of that name is "./demo", not the packaged set
    folder = Path(__file__).resolve().parents[2] / "pal_lightning" / "data" / "sources" / "demo"
    assert resolve_data_dir("demo") == folder == demo_data_dir()
    assert resolve_data_dir("./demo") == Path("demo")
    monkeypatch.setenv("PAL_DATA_DIR", "demo")
    assert resolve_data_dir(None) == folder


@pytest.mark.parametrize("task", ["sst", "qqp", "sts"])
def test_demo_files_are_clean_real_rows_and_small(task: str) -> None:
    folder = demo_data_dir()
    for split, n in EXPECTED_ROWS.items():
        raw = read_split(get_task(task), split, folder, on_bad_row="error")
        assert len(raw) == n and raw.skipped == 0
        assert len(set(raw.ids)) == n and all(len(i) == 25 for i in raw.ids)  # the CS224N id hashes
    total = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    assert total < 1_000_000
    assert "licence" in (folder / "SOURCES.md").read_text().lower()


def test_demo_rows_are_lines_of_the_cs224n_files() -> None:
    source = Path(os.environ.get("PAL_DATA_DIR", "/work/shared/data/cs224n-minbert"))
    if not (source / "sts-train.csv").is_file():
        pytest.skip("the CS224N files are not on this machine (PAL_DATA_DIR)")
    for name in ("ids-sst-train.csv", "quora-dev.csv", "sts-train.csv"):
        original = set((source / name).read_text(encoding="utf-8").splitlines())
        demo = (demo_data_dir() / name).read_text(encoding="utf-8").splitlines()
        assert set(demo) <= original, name


@pytest.mark.integration
def test_demo_config_fits_on_a_tiny_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pal_lightning.cli.main import main

    monkeypatch.chdir(tmp_path)  # the config works from any working directory
    options = "--trainer.max_steps 1 --data.init_args.steps_per_epoch 1 --trainer.check_val_every_n_epoch 1"
    options += " --data.init_args.limit_examples 8 --data.init_args.cache_dir false"
    args = ["fit", "--config", str(ROOT / "configs" / "demo.yaml"), *options.split()]
    args += ["--trainer.enable_progress_bar", "false"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "CS224N overall (dev):" in out
    run = tmp_path / "runs" / "demo" / "version_0"
    scores = json.loads((run / "scores.json").read_text())["best"]["scores"]
    assert {"val/sst/accuracy", "val/qqp/accuracy", "val/sts/pearson", "val/overall"} <= set(scores)
    assert (run / "model" / "model.safetensors").is_file()
    # the predict command that configs/demo.yaml's header gives: the dev sets (the demo has no test split)
    assert main(["predict", "--config", str(run / "config.yaml"), "--ckpt_path", "best"]) == 0
    written = sorted(p.name for p in (run / "predictions").iterdir())
    assert written == ["para-dev-output.csv", "sst-dev-output.csv", "sts-dev-output.csv"]
    assert "pal-lightning: wrote 3 prediction file(s)" in capsys.readouterr().out

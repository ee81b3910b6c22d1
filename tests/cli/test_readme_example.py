"""The README's subclassing example runs as written (on a tiny model), and its commands name real files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from pal_lightning.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _block_after(marker: str) -> str:
    match = re.search(re.escape(marker) + r"\s*```python\n(.*?)```", README, re.S)
    assert match, f"no python block after {marker!r} in README.md"
    return match.group(1)


def test_subclass_example_trains_through_class_path(
    tiny_yaml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "my_models.py").write_text(_block_after("<!-- readme-example: subclass -->"))
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ["fit", "--config", str(tiny_yaml), "--model.class_path", "my_models.FocalLossModule"]
    assert main([*args, "--model.init_args.gamma", "1.5"]) == 0
    assert "CS224N overall (dev):" in capsys.readouterr().out
    saved = yaml.safe_load((tmp_path / "runs" / "version_0" / "config.yaml").read_text())
    assert saved["model"]["class_path"] == "my_models.FocalLossModule"
    assert saved["model"]["init_args"]["gamma"] == 1.5


def test_readme_commands_name_shipped_configs() -> None:
    named = set(re.findall(r"configs/([a-z_]+\.yaml)", README))
    assert "quickstart.yaml" in named and "ddp.yaml" in named
    missing = sorted(n for n in named if not (ROOT / "configs" / n).is_file())
    assert not missing
    # CI (.ci/run) mirrors the README's install and test commands
    ci = (ROOT / ".ci" / "run").read_text()
    for line in ('pip install -e ".[dev,offline,export,peers]"', "python -m pytest -q"):
        assert line in README and line in ci

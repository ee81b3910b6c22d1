"""Messages that point the right way (issue 18, item 6): each names the option or file to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from pal_lightning.cli.main import USER_ERROR_EXIT, main
from pal_lightning.testing import write_cs224n_data


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("pal-lightning: error:")]
    return line


def test_max_steps_zero_says_what_to_set(
    tiny_yaml: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fit", "--config", str(tiny_yaml), "--trainer.max_steps", "0"]) == USER_ERROR_EXIT
    line = _error(capsys)
    assert "trainer.max_steps is 0, which trains nothing" in line and "--trainer.max_steps 1200" in line
    assert not (tmp_path / "runs").exists()


def test_yaml_syntax_error_names_the_file(
    tiny_yaml: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text("trainer:\n  max_steps: [1, 2\n")
    assert main(["fit", "--config", str(tiny_yaml), "--config", str(bad)]) == USER_ERROR_EXIT
    line = _error(capsys)
    assert f"Config file {bad} is not valid YAML" in line and "line 3, column 1" in line
    assert "<unicode string>" not in line


def test_bad_batch_size_names_the_option(tiny_yaml: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "--config", str(tiny_yaml), "--data.batch_size", "-4"]) == USER_ERROR_EXIT
    assert "batch_size (--data.batch_size) must be at least 1, got -4" in _error(capsys)


def test_write_cs224n_data_takes_a_str(tmp_path: Path) -> None:
    root = write_cs224n_data(str(tmp_path / "data"))
    assert root == tmp_path / "data" and (root / "ids-sst-train.csv").is_file()

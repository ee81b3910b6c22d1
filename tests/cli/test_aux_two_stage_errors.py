"""Bad input of the auxiliary-task and two-stage options, through the command line: one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from pal_lightning.cli.main import main


@pytest.mark.parametrize(
    ("option", "fragment"),
    [
        ("--model.init_args.auxiliary=[snli]", "auxiliary names ['snli'], which are not among the tasks"),
        (
            "--model.init_args.init_from=nowhere/joint.ckpt",
            "init_from checkpoint nowhere/joint.ckpt does not exist",
        ),
        ("--data.init_args.task_multipliers={snli: 0.5}", "task_multipliers name unknown tasks ['snli']"),
    ],
)
def test_one_line_and_exit_2(
    tiny_yaml: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, fragment: str
) -> None:
    assert main(["fit", "--config", str(tiny_yaml), option]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pal-lightning: error:") and fragment in err
    assert "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()  # nothing written

"""The CLI as a user runs it: the ``pal-lightning`` console script in a subprocess (``python -m
pal_lightning`` where it is not installed; torchrun and DDP's rank 1 start that form), and a command
forked from the CLI driver (``forked_cli``: what the console script runs, ``sys.exit(main())``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

from .conftest import ForkedCli

USER_MODULE = '''
"""A user's own module, loaded by the CLI through class_path."""
from pathlib import Path

from pal_lightning import MultiTaskModule


class ScaledLossModule(MultiTaskModule):
    """Multiplies every task loss by ``loss_scale`` and counts the calls."""

    def __init__(self, *args, loss_scale: float = 1.0, marker: str = "marker.txt", **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_scale = loss_scale
        self.marker = marker
        self.calls = 0

    def compute_loss(self, task, output, labels):
        self.calls += int(self.training)
        return self.loss_scale * super().compute_loss(task, output, labels)

    def on_fit_end(self):
        Path(self.marker).write_text(f"{type(self).__name__} {self.loss_scale} {self.calls}")
'''


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    )
    env.pop("PAL_DEBUG", None)
    return env


def test_fit_a_user_subclass_through_class_path(tiny_yaml: Path, tmp_path: Path) -> None:
    (tmp_path / "user_models.py").write_text(textwrap.dedent(USER_MODULE))
    marker = tmp_path / "marker.txt"
    script = shutil.which("pal-lightning", path=str(Path(sys.executable).parent))
    cmd = [
        *([script] if script else [sys.executable, "-m", "pal_lightning"]), "fit", "--config", str(tiny_yaml),
        "--model.class_path", "user_models.ScaledLossModule",
        "--model.init_args.loss_scale", "0.5", "--model.init_args.marker", str(marker),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "CS224N overall (dev):" in proc.stdout
    assert marker.read_text() == "ScaledLossModule 0.5 4"  # the 4 training steps went through the subclass
    saved = yaml.safe_load((tmp_path / "runs" / "version_0" / "config.yaml").read_text())
    assert saved["model"]["class_path"] == "user_models.ScaledLossModule"
    assert saved["model"]["init_args"]["loss_scale"] == 0.5
    assert saved["model"]["init_args"]["adapter"]["num_heads"] == 2  # the config's other values carried over


def test_console_script_reports_an_unknown_key_in_one_line(
    tiny_yaml: Path, tmp_path: Path, forked_cli: ForkedCli
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"model": {"init_args": {"learning_rate_typo": 0.1}}}))
    (proc,) = forked_cli.run([(tmp_path, ["fit", "--config", str(tiny_yaml), "--config", str(bad)])])
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("pal-lightning: error:")]
    assert len(errors) == 1 and "learning_rate_typo" in errors[0], proc.stderr
    assert not (tmp_path / "runs").exists()

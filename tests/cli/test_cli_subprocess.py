"""The CLI as a user runs it, in real processes: the ``pal-lightning`` console script (``python -m
pal_lightning`` where it is not installed) fits the quickstart on fixture data with a user's own model
class given by ``class_path``, with a quiet console (progress, the scores and where the files went,
without Lightning's noise a user cannot act on) (a user mistake in a real process: test_help.py).
Every other command line of tests/cli runs forked from the CLI driver (``forked_cli``) or in-process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from pal_lightning.cli.main import main
from pal_lightning.testing import TINY_BERT, write_cs224n_data

from .conftest import subprocess_env

ROOT = Path(__file__).resolve().parents[2]
NOISE = ("Tip:", "litlogger", "GPU available", "TPU available", "LeafSpec", "Restoring states", "Traceback")
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


def _command(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """The console script (or ``python -m pal_lightning``) and its environment, ``tmp_path`` importable."""
    script = shutil.which("pal-lightning", path=str(Path(sys.executable).parent))
    env = subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    return [script] if script else [sys.executable, "-m", "pal_lightning"], env


def test_the_quickstart_with_a_user_subclass_fits_with_a_quiet_console(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "user_models.py").write_text(textwrap.dedent(USER_MODULE))
    data = write_cs224n_data(tmp_path / "data")
    train = data / "ids-sst-train.csv"
    train.write_text(train.read_text() + "99\tbad\tno label here\tX\n")  # one bad row: one warning
    tiny = {
        "trainer": {"accelerator": "cpu", "max_steps": 4, "check_val_every_n_epoch": 1},
        "model": {"init_args": {"encoder_config": TINY_BERT, "adapter": {"size": 8, "num_heads": 2}}},
        "data": {
            "init_args": {
                "data_dir": str(data),
                "batch_size": 4,
                "eval_batch_size": 16,
                "max_length": 32,
                "steps_per_epoch": 2,
                "cache_dir": str(tmp_path / "cache"),  # prepare_data caches, setup reloads: still one warning
            }
        },
    }
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(tiny))
    command, env = _command(tmp_path)
    marker = tmp_path / "marker.txt"
    command += [
        "fit", "--config", str(ROOT / "configs" / "quickstart.yaml"), "--config", str(tmp_path / "tiny.yaml"),
        "--trainer.default_root_dir", str(tmp_path / "runs"), "--model.class_path", "user_models.ScaledLossModule",
        "--model.init_args.loss_scale", "0.5", "--model.init_args.marker", str(marker),
    ]  # fmt: skip
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    console = proc.stdout + proc.stderr
    assert proc.returncode == 0, console[-3000:]
    for noise in NOISE:
        assert noise not in console, noise
    assert console.count("bad row") == 1, console
    run = tmp_path / "runs" / "version_0"
    assert "Epoch 0" in proc.stdout  # progress
    table = proc.stdout.index("CS224N overall (dev):")
    assert table > proc.stdout.rindex("Epoch ")  # the bar is not redrawn under the scores
    assert f"best checkpoint: {run / 'checkpoints'}" in proc.stdout and f"run folder: {run}" in proc.stdout
    assert marker.read_text() == "ScaledLossModule 0.5 4"  # the 4 training steps went through the subclass
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["model"]["class_path"] == "user_models.ScaledLossModule"
    assert saved["model"]["init_args"]["loss_scale"] == 0.5
    assert saved["model"]["init_args"]["adapter"]["num_heads"] == 2  # the configs' other values carried over

    # predict says where it wrote
    monkeypatch.syspath_prepend(str(tmp_path))
    capfd.readouterr()
    assert main(["predict", "--config", str(run / "config.yaml"), "--ckpt_path", "best"]) == 0
    out, err = capfd.readouterr()
    assert f"pal-lightning: wrote 6 prediction file(s) to {run / 'predictions'}: " in out
    for noise in NOISE:
        assert noise not in out + err, noise

"""A signal in the middle of a gradient-accumulation window: the stop waits for the window's optimizer
step, so that ``last.ckpt`` holds no half-accumulated step and the resume is exact (in process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pal_lightning.cli.main import main


def test_a_signal_mid_accumulation_stops_after_the_window_and_resume_is_exact(
    tiny_yaml: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["fit", "--config", str(tiny_yaml), "--trainer.accumulate_grad_batches", "2"]
    common += ["--trainer.max_steps", "3", "--model.init_args.dropout", "0.2"]
    assert main(common) == 0  # the uninterrupted run: version_0
    # SIGTERM at the end of the first batch of the first window (global_step still 0)
    signal_at = {"class_path": "pal_lightning.testing.callbacks.SignalAtStep", "init_args": {"step": 0}}
    assert main([*common, "--trainer.callbacks", json.dumps([signal_at])]) == 143  # version_1
    runs = tiny_yaml.parent / "runs"
    stopped = torch.load(runs / "version_1" / "checkpoints" / "last.ckpt", weights_only=True)
    assert stopped["global_step"] == 1  # the window's step was taken before stopping
    assert "stopped by SIGTERM after step 1;" in capsys.readouterr().err
    assert main([*common, "--ckpt_path", str(runs / "version_1" / "checkpoints" / "last.ckpt")]) == 0
    final = torch.load(runs / "version_2" / "checkpoints" / "last.ckpt", weights_only=True)
    reference = torch.load(runs / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)
    assert final["global_step"] == reference["global_step"] == 3
    for name, value in reference["state_dict"].items():
        assert torch.allclose(final["state_dict"][name], value, atol=1e-6, rtol=0), name

"""A fit always ends with dev scores: a run too short to reach a configured validation is validated once
at its end (issue "A user's own task, end to end", item 5), with the score table, scores.json and the
best and last checkpoints as after any validation, last.ckpt a link to the best one that resumes (under
DDP, where every rank takes part: the stage-2 run of test_ddp_stage2_pretrain.py; a fit whose own
validations reach its end is not validated again: the fit test of test_cli.py; validation turned off:
test_console.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pal_lightning.cli.main import main

STALE_ADVICE = ("no validation ran", "set it to at most", "could not find the monitored key")


def _scores(run: Path) -> dict:
    return json.loads((run / "scores.json").read_text())


@pytest.mark.parametrize(
    ("short", "resume"),
    [
        # the shipped configs' way: validation every N epochs, never reached by a short --trainer.max_steps
        (["--trainer.check_val_every_n_epoch", "4"], False),
        # max_steps reached in the middle of an epoch (validation is due at its end)
        (["--data.init_args.steps_per_epoch", "10"], True),
    ],
    ids=["every-4-epochs", "mid-epoch"],
)
def test_a_short_fit_is_validated_once_at_its_end(
    tmp_path: Path, tiny_yaml: Path, short: list[str], resume: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    assert main(["fit", "--config", str(tiny_yaml), "--trainer.max_steps", "3", *short]) == 0
    out, err = capfd.readouterr()
    run = tmp_path / "runs" / "version_0"
    scores = _scores(run)
    assert scores["complete"] is True and scores["overall"] is not None
    assert [h["step"] for h in scores["history"]] == [3]
    assert "CS224N overall (dev):" in out and "[best validation at step 3, 3 steps" in out
    checkpoints = run / "checkpoints"
    assert (checkpoints / "best.ckpt").is_file() and (checkpoints / "last.ckpt").is_file()
    assert scores["best_model_path"] == str(
        checkpoints / "best-step3-overall{:.4f}.ckpt".format(scores["overall"])
    )
    assert (run / "model").is_dir()  # the saved model of the best checkpoint
    for stale in STALE_ADVICE:
        assert stale not in out + err, stale
    # one validation, at the last step: best and last hold the same state, stored once
    best = Path(scores["best_model_path"])
    assert (checkpoints / "last.ckpt").samefile(best) and (checkpoints / "best.ckpt").samefile(best)
    if resume:  # and that last.ckpt resumes like any other
        args = [
            "fit",
            "--config",
            str(run / "config.yaml"),
            "--ckpt_path",
            "last",
            "--trainer.max_steps",
            "4",
        ]
        assert main(args) == 0
        resumed = tmp_path / "runs" / "version_1" / "checkpoints" / "last.ckpt"
        assert torch.load(resumed, weights_only=True)["global_step"] == 4

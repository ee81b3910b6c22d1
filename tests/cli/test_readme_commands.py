"""The README's quickstart -> predict -> task-weights sequence runs as written (issue 18, item 2).

The quickstart config runs with the real encoder (all-MiniLM-L6-v2, offline) on fixture data and a
tiny step budget (the only change: an extra ``--config`` with sizes, as a user would shorten it);
then the README's predict command and its task-weights code block run verbatim, from the same
folder, on what that fit wrote.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import torch
import yaml

from pal_lightning.cli.main import main
from pal_lightning.testing import write_cs224n_data

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.S | re.M)
    assert match, f"no section {title!r} in README.md"
    return match.group(1)


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def _command(block: str) -> list[str]:
    """The ``pal-lightning`` command of a bash block as arguments (continuations joined, comments cut)."""
    line = " ".join(part.split("#")[0].strip() for part in block.replace("\\\n", " ").splitlines()).strip()
    words = shlex.split(line)
    assert words[0] == "pal-lightning", line
    return words[1:]


def test_quickstart_predict_and_task_weights_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    data = write_cs224n_data(tmp_path / "data")
    short = {
        "trainer": {"accelerator": "cpu", "max_steps": 2, "check_val_every_n_epoch": 1},
        "data": {
            "init_args": {
                "data_dir": str(data),
                "batch_size": 4,
                "eval_batch_size": 16,
                "max_length": 32,
                "steps_per_epoch": 2,
                "cache_dir": False,
            }
        },
    }
    (tmp_path / "short.yaml").write_text(yaml.safe_dump(short))
    (fit_block,) = [b for b in _blocks(_section("The main job"), "bash") if "pal-lightning fit" in b]
    fit = _command(fit_block.split("\n", 1)[1])  # after the `export PAL_DATA_DIR=...` line
    fit = [str(ROOT / a) if a.startswith("configs/") else a for a in fit]  # the repository's configs
    assert main([*fit, "--config", "short.yaml"]) == 0
    assert "CS224N overall (dev):" in capsys.readouterr().out
    assert (tmp_path / "runs" / "quickstart" / "version_0" / "checkpoints" / "best.ckpt").is_file()

    (predict_block,) = _blocks(_section("Predictions"), "bash")
    assert main(_command(predict_block)) == 0
    out = capsys.readouterr().out
    predictions = tmp_path / "runs" / "quickstart" / "version_0" / "predictions"
    assert f"wrote 6 prediction file(s) to {predictions}" in out
    assert (predictions / "sst-test-output.csv").is_file()

    # the resume command of "Checkpoints, resuming and failures", two steps further
    (resume_block,) = [
        b for b in _blocks(_section("Checkpoints, resuming and failures"), "bash") if "--ckpt_path last" in b
    ]
    resume = [str(ROOT / a) if a.startswith("configs/") else a for a in _command(resume_block)]
    assert main([*resume, "--config", "short.yaml", "--trainer.max_steps", "4"]) == 0
    last = tmp_path / "runs" / "quickstart" / "version_0" / "checkpoints" / "last.ckpt"
    assert f"resuming from {last}" in capsys.readouterr().err
    resumed = tmp_path / "runs" / "quickstart" / "version_1" / "checkpoints" / "last.ckpt"
    assert torch.load(resumed, weights_only=True)["global_step"] == 4

    (weights_block,) = _blocks(_section("Task-only weights"), "python")
    exec(compile(weights_block, "README.md (Task-only weights)", "exec"), {})  # noqa: S102 - the README's code
    assert (tmp_path / "sts-adapter.safetensors").is_file()


def test_task_weights_of_another_pair_encoding_name_the_option(tmp_path: Path) -> None:
    from pal_lightning import MultiTaskModule, PalUserError, load_task_weights, save_task_weights
    from pal_lightning.testing import TINY_BERT

    tiny = {"bert_config": TINY_BERT, "adapter": {"size": 8, "num_heads": 2}, "tasks": ["sst", "qqp", "sts"]}
    saved = save_task_weights(MultiTaskModule(**tiny, pair_encoding="siamese"), tmp_path / "w.safetensors")
    with pytest.raises(PalUserError, match="pair_encoding it was trained with .*this model has 'cross'"):
        load_task_weights(MultiTaskModule(**tiny), saved)
    assert load_task_weights(MultiTaskModule(**tiny, pair_encoding="siamese"), saved) == ["sst", "qqp", "sts"]


def _readme_commands() -> list[str]:
    lines = []
    for block in _blocks(README, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#")[0].strip()
            if line.startswith("pal-lightning "):
                lines.append(line)
    return lines


def test_every_readme_command_parses(capsys: pytest.CaptureFixture[str]) -> None:
    """Each ``pal-lightning`` command of the README resolves its configuration (``--print_config``):
    shipped config files, option names and values as written. Commands that need files of an
    earlier run (``--config runs/...``) or the user's own text file run in the tests above."""
    commands = _readme_commands()
    assert len(commands) >= 10
    checked = 0
    for line in commands:
        args = shlex.split(line)[1:]
        if any(a.startswith("runs/") and "config" in b for b, a in zip(args, args[1:], strict=False)):
            continue  # --config runs/<run>/config.yaml: a run's own file (test above)
        if any(a.startswith("--predict.") for a in args):
            continue  # predict --predict.input: new sentences from the user's file
        args = [str(ROOT / a) if a.startswith("configs/") else a for a in args]
        assert main([*args, "--print_config"]) == 0, line
        assert "model:" in capsys.readouterr().out, line
        checked += 1
    assert checked >= 10

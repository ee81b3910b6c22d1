"""The main job, then the task-only weights code of docs/models.md, as written and with the real encoder
(issue 18, item 2).

The task-weights block builds a fresh ``MultiTaskModule`` with the default encoder (all-MiniLM-L6-v2,
offline), so the checkpoint it splits must come from that encoder too: the README's main-job command runs
here with the real encoder on fixture data and a tiny step budget (the only change: an extra ``--config``
with sizes, as a user would shorten it), then the block runs verbatim from the same folder. The other
commands of the pages (predict, resume, ...) run once, on a tiny encoder, in ``test_readme_blocks.py``.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from pal_lightning.cli.main import main
from pal_lightning.testing import write_cs224n_data

from .test_readme_blocks import ROOT, command_lines, fenced, section


def _pal_lightning(line: str) -> list[str]:
    """A ``pal-lightning`` command line as arguments, the repository's configs by absolute path."""
    words = shlex.split(line)
    assert words[0] == "pal-lightning", line
    return [str(ROOT / a) if a.startswith("configs/") else a for a in words[1:]]


def test_quickstart_then_task_weights_as_written(
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
    (fit,) = [c for b in fenced(section("The main job"), "bash") for c in command_lines(b) if "fit" in c]
    assert main([*_pal_lightning(fit), "--config", "short.yaml"]) == 0
    assert "CS224N overall (dev):" in capsys.readouterr().out
    assert (tmp_path / "runs" / "quickstart" / "version_0" / "checkpoints" / "best.ckpt").is_file()

    (weights_block,) = fenced(section("Task-only weights"), "python")
    exec(compile(weights_block, "docs/models.md (Task-only weights)", "exec"), {})  # noqa: S102 - the page's code
    assert (tmp_path / "sts-adapter.safetensors").is_file()


def test_task_weights_of_another_pair_encoding_name_the_option(tmp_path: Path) -> None:
    from pal_lightning import MultiTaskModule, PalUserError, load_task_weights, save_task_weights
    from pal_lightning.testing import TINY_BERT

    tiny = {"bert_config": TINY_BERT, "adapter": {"size": 8, "num_heads": 2}, "tasks": ["sst", "qqp", "sts"]}
    saved = save_task_weights(MultiTaskModule(**tiny, pair_encoding="siamese"), tmp_path / "w.safetensors")
    with pytest.raises(PalUserError, match="pair_encoding it was trained with .*this model has 'cross'"):
        load_task_weights(MultiTaskModule(**tiny), saved)
    assert load_task_weights(MultiTaskModule(**tiny, pair_encoding="siamese"), saved) == ["sst", "qqp", "sts"]

"""Task-only weights as a folder per task (weights + config), on tiny random encoders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pal_lightning import MultiTaskModule, PalUserError, TaskSpec
from pal_lightning.modeling.task_io.folders import load_task_folders, save_task_folders
from pal_lightning.testing import TINY_BERT


def tiny(seed: int, tasks: list | None = None) -> MultiTaskModule:
    torch.manual_seed(seed)
    return MultiTaskModule(
        tasks=tasks or ["sst", "qqp", "sts"],
        encoder_config=TINY_BERT,
        adapter={"size": 8, "num_heads": 2, "init": "random"},
    )


def task_state(module: MultiTaskModule, task: str) -> dict[str, torch.Tensor]:
    return {
        k: v.clone()
        for k, v in module.state_dict().items()
        if k.startswith((f"encoder.adapters.{task}.", f"heads.{task}."))
    }


def test_round_trip_of_chosen_tasks(tmp_path: Path) -> None:
    source, target = tiny(0), tiny(1)
    untouched = task_state(target, "qqp")
    written = save_task_folders(source, tmp_path / "adapters", tasks=["sst", "sts"])
    assert written == [tmp_path / "adapters" / "sst", tmp_path / "adapters" / "sts"]
    config = json.loads((tmp_path / "adapters" / "sst" / "config.json").read_text())
    assert config["task"]["num_labels"] == 5 and config["label_names"][-1] == "positive"
    assert config["adapter"]["size"] == 8

    assert load_task_folders(target, tmp_path / "adapters") == ["sst", "sts"]
    for task in ("sst", "sts"):
        ours, theirs = task_state(source, task), task_state(target, task)
        assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    after = task_state(target, "qqp")
    assert all(torch.equal(untouched[k], after[k]) for k in untouched)  # not in the folder: unchanged


def test_refusals(tmp_path: Path) -> None:
    source = tiny(0)
    save_task_folders(source, tmp_path / "a", tasks=["sst"])
    before = (tmp_path / "a" / "sst" / "task_weights.safetensors").read_bytes()
    with pytest.raises(PalUserError, match="already holds saved weights of \\['sst'\\]"):
        save_task_folders(tiny(3), tmp_path / "a", tasks=["qqp", "sst"])
    assert not (tmp_path / "a" / "qqp").exists()  # checked before anything was written
    assert (tmp_path / "a" / "sst" / "task_weights.safetensors").read_bytes() == before
    with pytest.raises(PalUserError, match="holds no task folders"):
        load_task_folders(source, tmp_path / "empty")
    with pytest.raises(PalUserError, match="not in"):
        load_task_folders(source, tmp_path / "a", tasks=["qqp"])
    other_sst = TaskSpec(name="sst", num_labels=5, label_range=(0, 4), label_column="label")
    with pytest.raises(PalUserError, match="another definition"):
        load_task_folders(tiny(0, tasks=[other_sst]), tmp_path / "a")

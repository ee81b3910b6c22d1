"""Class names of a user's own task, end to end: a string-labelled csv beside no CS224N task is fit,
scored under a neutral overall with its class names, predicted into a file of names and probabilities,
saved with the names in config.json and the card, and reloaded so that ``predict`` gives names."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pal_lightning import MultiTaskModule, TaskSpec  # noqa: E402
from pal_lightning.callbacks import PredictionWriter  # noqa: E402
from pal_lightning.callbacks.prediction_writer import probability_columns  # noqa: E402
from pal_lightning.callbacks.score_report import ScoreReport  # noqa: E402
from pal_lightning.data import MultiTaskDataModule  # noqa: E402
from pal_lightning.module.pretrained import CONFIG_NAME  # noqa: E402
from pal_lightning.testing import TINY_BERT, quiet_trainer  # noqa: E402

NAMES = ["business", "politics", "sci/tech", "sports"]  # sorted, as the train split's words are


def topics_task(folder: Path) -> TaskSpec:
    words = {
        "business": "market shares",
        "politics": "vote senate",
        "sci/tech": "chip laptop",
        "sports": "goal match",
    }
    for split, n in (("train", 24), ("dev", 8)):
        rows = [
            (f"{words[NAMES[i % 4]]} {i}", NAMES[(i * 3) % 4] if split == "dev" else NAMES[i % 4])
            for i in range(n)
        ]
        with (folder / f"{split}.csv").open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows(rows)
    return TaskSpec(
        name="topics",
        num_labels=4,
        format="hf",
        files={"train": "train.csv", "dev": "dev.csv"},
        text_columns=("text",),
        label_column="label",
        id_column=None,
    )


def tiny(spec: TaskSpec) -> MultiTaskModule:
    torch.manual_seed(0)
    return MultiTaskModule(tasks=[spec], bert_config=TINY_BERT, adapter={"size": 8, "num_heads": 2}, lr=1e-3)


def test_probability_columns_are_safe_and_distinct() -> None:
    assert probability_columns(["sci/tech", "somewhat negative", "sci tech", ""]) == [
        "p_sci_tech",
        "p_somewhat_negative",
        "p_sci_tech_2",
        "p_label",
    ]


def test_a_string_labelled_task_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = topics_task(tmp_path)
    dm = MultiTaskDataModule(
        tasks=[spec], data_dir=tmp_path, cache_dir=False, max_length=16, batch_size=8, predict_splits=["dev"]
    )
    model = tiny(spec)
    trainer = quiet_trainer(max_steps=3, callbacks=[ScoreReport()], default_root_dir=tmp_path)
    trainer.fit(model, datamodule=dm)
    out = capsys.readouterr().out
    assert "Overall (dev):" in out and "CS224N overall" not in out  # no CS224N task in this run
    assert "topics classes: 0 business, 1 politics, 2 sci/tech, 3 sports" in out
    assert model.label_names == {"topics": NAMES}  # taken from the data at setup
    (scores,) = tmp_path.rglob("scores.json")
    assert json.loads(scores.read_text())["label_names"] == {"topics": NAMES}
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    from_ckpt = MultiTaskModule.load_from_checkpoint(tmp_path / "last.ckpt", weights_only=True)
    assert from_ckpt.predict("topics", ["goal match"]).label_names == NAMES  # no data module needed

    preds = tmp_path / "preds"
    quiet_trainer(callbacks=[PredictionWriter(output_dir=preds)]).predict(
        model, datamodule=dm, return_predictions=False
    )
    raw = (preds / "topics-dev-output.csv").read_bytes()
    assert b"\r" not in raw
    rows = list(csv.reader(raw.decode().splitlines()))
    assert rows[0] == ["id", "label", "p_business", "p_politics", "p_sci_tech", "p_sports"]
    assert len(rows) == 9 and all(r[1] in NAMES for r in rows[1:])
    assert all(abs(sum(float(p) for p in r[2:]) - 1) < 1e-5 for r in rows[1:])
    assert all(r[1] == NAMES[max(range(4), key=lambda c: float(r[2 + c]))] for r in rows[1:])

    folder = model.save_pretrained(tmp_path / "model")
    config = json.loads((folder / CONFIG_NAME).read_text())
    assert config["label_names"] == {"topics": NAMES}
    assert config["task_labels"]["topics"]["id2label"] == {str(i): n for i, n in enumerate(NAMES)}
    assert config["task_labels"]["topics"]["label2id"] == {n: i for i, n in enumerate(NAMES)}
    card = (folder / "README.md").read_text()
    assert "business, politics, sci/tech, sports" in card and "CS224N" not in card
    loaded = MultiTaskModule.from_pretrained(folder)
    again = loaded.predict("topics", ["goal match tonight", "vote in the senate"])
    assert again.label_names == NAMES and all(label in NAMES for label in again.labels)


def test_names_of_the_spec_reach_predict_and_the_saved_config(tmp_path: Path) -> None:
    spec = TaskSpec(name="yesno", num_labels=2, label_names=("no", "yes"), text_columns=("text",))
    model = tiny(spec)
    assert model.predict("yesno", ["a"]).label_names == ["no", "yes"]
    folder = model.save_pretrained(tmp_path / "m")
    config = json.loads((folder / CONFIG_NAME).read_text())
    assert config["task_labels"] == {
        "yesno": {"id2label": {"0": "no", "1": "yes"}, "label2id": {"no": 0, "yes": 1}}
    }
    # an older folder with task_labels alone (no label_names) still names the classes
    del config["label_names"]
    config["tasks"][0]["label_names"] = []
    (folder / CONFIG_NAME).write_text(json.dumps(config))
    assert MultiTaskModule.from_pretrained(folder).predict("yesno", ["b"]).label_names == ["no", "yes"]


def test_a_checkpoint_task_saved_before_label_names_still_fits() -> None:
    from pal_lightning.module.checkpoint_check import task_differences
    from pal_lightning.tasks.specs import task_to_dict

    ours = task_to_dict(TaskSpec(name="mine", num_labels=4))
    older = {k: v for k, v in ours.items() if k != "label_names"}  # written before the field existed
    assert task_differences([older], [ours], resuming=False) == []
    other = dict(older, num_labels=5, label_range=[0.0, 4.0])
    assert task_differences([other], [ours], resuming=False) == [
        "the task definition of ['mine'] differs (labels, files or columns)"
    ]


def test_the_overall_is_named_after_its_tasks() -> None:
    from pal_lightning.callbacks.score_report import format_classes, score_headline

    def headline(tasks: list[str]) -> str:
        return score_headline({"scores": {"val/overall": 0.5}, "tasks_covered": tasks}, "val/overall", 1.0)

    assert headline(["sst", "qqp", "sts", "topics"]) == "CS224N overall (dev): 0.5000"
    assert headline(["glue_cola", "glue_rte"]) == "GLUE score (dev): 0.5000"
    assert headline(["topics"]) == headline(["sst", "topics"]) == "Overall (dev): 0.5000"
    assert format_classes({"topics": ["a b", "c"]}) == "\n  topics classes: 0 a b, 1 c"

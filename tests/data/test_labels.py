"""A user's own classification task: labels 0..K-1 without a label_range, and labels given as names, end to
end (fit, scores, prediction files, saved config and card, ``predict`` after a reload)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from pal_lightning import MultiTaskModule
from pal_lightning.callbacks import PredictionWriter
from pal_lightning.callbacks.prediction_writer import probability_columns
from pal_lightning.callbacks.score_report import ScoreReport
from pal_lightning.core.errors import PalUserError
from pal_lightning.data import MultiTaskDataModule
from pal_lightning.data.sources import hf as hf_sources
from pal_lightning.data.sources.readers import label_names_for, read_split
from pal_lightning.data.sources.validate import names_of_values
from pal_lightning.module.pretrained import CONFIG_NAME
from pal_lightning.tasks.specs import TaskSpec
from pal_lightning.testing import TINY_BERT, quiet_trainer

TOPICS = ["sports", "politics", "science", "business"]


def write_csv(path: Path, labels: list[object]) -> Path:
    rows = [f"text number {i},{label}" for i, label in enumerate(labels)]
    path.write_text("text,label\n" + "\n".join(rows) + "\n")
    return path


def test_a_4_class_task_takes_labels_0_to_3_without_a_label_range(tmp_path: Path, topics) -> None:
    write_csv(tmp_path / "train.csv", [0, 1, 2, 3] * 5)
    raw = read_split(topics(), "train", tmp_path)
    assert raw.skipped == 0 and sorted(set(raw.labels.tolist())) == [0, 1, 2, 3]
    assert topics().label_range == (0.0, 3.0)


def test_label_range_defaults_and_checks(topics) -> None:
    reg = TaskSpec(
        name="r", kind="pair_regression", num_labels=1, text_columns=("a", "b"), metrics=("pearson",)
    )
    assert reg.label_range == (0.0, 1.0)  # regression keeps its 0..1 default
    assert TaskSpec(name="s", label_range=(0, 1)).label_range == (0.0, 1.0)  # a narrower given range stays
    # a copy with more classes follows them, unless its range was set on purpose
    assert topics().replace(num_labels=6).label_range == (0.0, 5.0)
    assert topics(label_range=(1, 2)).replace(num_labels=6).label_range == (1.0, 2.0)
    with pytest.raises(ValueError, match=r"reaches outside its classes 0\.\.3"):
        topics(label_range=(0, 4))
    with pytest.raises(ValueError, match="one name per class"):
        topics(label_names=("a", "b"))
    with pytest.raises(ValueError, match="distinct"):
        topics(label_names=("a", "b", "a", "c"))
    with pytest.raises(ValueError, match="no label_names"):
        TaskSpec(name="r2", kind="pair_regression", num_labels=1, text_columns=("a", "b"), label_names=("x",))


def test_string_labels_become_classes_in_sorted_order(tmp_path: Path, topics) -> None:
    write_csv(tmp_path / "train.csv", TOPICS * 3)
    write_csv(tmp_path / "dev.csv", ["science", "weather", "sports", "business", "politics"] * 4)
    spec = topics(files={"train": "train.csv", "dev": "dev.csv"})
    order = ["business", "politics", "science", "sports"]
    assert label_names_for(spec, tmp_path) == tuple(order)
    train = read_split(spec, "train", tmp_path)
    assert train.skipped == 0 and train.labels.tolist()[:4] == [order.index(t) for t in TOPICS]
    # a dev label that is not a class is a bad row naming it (here 4 of 20: over the threshold, one line)
    with pytest.raises(PalUserError) as err:
        read_split(spec, "dev", tmp_path)
    classes = "(business, politics, science, sports)"
    assert f"'weather' is not one of the task's classes {classes}" in str(err.value)
    dev = read_split(spec, "dev", tmp_path, max_bad_fraction=1)
    assert dev.skipped == 4 and dev.bad_rows[0] == (3, dev.bad_rows[0][1])  # file line 3: the second row


def test_label_names_of_the_spec_fix_the_order_and_allow_class_numbers(tmp_path: Path, topics) -> None:
    write_csv(tmp_path / "train.csv", ["sports", "politics", 2, "business"])
    spec = topics(label_names=tuple(TOPICS))
    assert read_split(spec, "train", tmp_path).labels.tolist() == [0, 1, 2, 3]


def test_more_names_than_classes_is_one_line(tmp_path: Path, topics) -> None:
    write_csv(tmp_path / "train.csv", [*TOPICS, "weather"])
    with pytest.raises(PalUserError, match=r"num_labels 4, but the labels of its train split .* are 5 names"):
        read_split(topics(), "train", tmp_path)


def test_a_column_of_numbers_with_a_stray_word_keeps_numbers() -> None:
    assert names_of_values(["0", "1", 1, "yes", "", None]) == ()
    assert names_of_values(["b", "a", "b", "3"]) == ("a", "b")


def test_class_label_features_give_their_names(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    features = datasets.Features(
        {"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])}
    )
    data = {"text": ["good", "bad", "fine"], "label": [1, 0, 1]}
    dd = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict(data, features=features),
            "validation": datasets.Dataset.from_dict(data, features=features),
        }
    )
    hf_sources.clear_loaded()
    spec = hf_sources.dataset_task(
        dd, tmp_path / "saved", name="polarity", text_columns=("text",), label_column="label", id_column=None
    )
    assert label_names_for(spec, tmp_path) == ("neg", "pos")
    assert read_split(spec, "dev", tmp_path).labels.tolist() == [1, 0, 1]


def test_json_lines_with_string_labels(tmp_path: Path, topics) -> None:
    rows = [{"text": f"t{i}", "label": name} for i, name in enumerate(TOPICS * 2)]
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    raw = read_split(topics(files={"train": "train.jsonl"}), "train", tmp_path)
    assert raw.labels.tolist()[:4] == [3, 1, 2, 0]


def test_class_names_in_messages_stay_on_one_line() -> None:
    """A fuzzed file's label cells can hold line breaks and NUL bytes; the message naming them is one line."""
    from pal_lightning.data.sources.validate import describe_names

    shown = describe_names(["sports", " 0 ", "0\n0", "\x000"])
    assert shown == "sports, ' 0 ', '0\\n0', '\\x000'" and "\n" not in shown


# --- end to end: fit, score, predict, save and reload a task whose labels are names

NAMES = ["business", "politics", "sci/tech", "sports"]  # sorted, as the train split's words are


def write_topics(folder: Path) -> None:
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


def tiny(spec: TaskSpec) -> MultiTaskModule:
    torch.manual_seed(0)
    return MultiTaskModule(
        tasks=[spec], encoder_config=TINY_BERT, adapter={"size": 8, "num_heads": 2}, optim={"lr": 1e-3}
    )


def test_probability_columns_are_safe_and_distinct() -> None:
    columns = probability_columns(["sci/tech", "somewhat negative", "sci tech", ""])
    assert columns == ["p_sci_tech", "p_somewhat_negative", "p_sci_tech_2", "p_label"]


def test_a_string_labelled_task_end_to_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], topics
) -> None:
    write_topics(tmp_path)
    spec = topics()
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
    differs = "the task definition of ['mine'] differs (labels, files or columns)"
    assert task_differences([other], [ours], resuming=False) == [differs]


def test_the_overall_is_named_after_its_tasks() -> None:
    from pal_lightning.callbacks.score_report import format_classes, score_headline

    def headline(tasks: list[str]) -> str:
        return score_headline({"scores": {"val/overall": 0.5}, "tasks_covered": tasks}, "val/overall", 1.0)

    assert headline(["sst", "qqp", "sts", "topics"]) == "CS224N overall (dev): 0.5000"
    assert headline(["glue_cola", "glue_rte"]) == "GLUE score (dev): 0.5000"
    assert headline(["topics"]) == headline(["sst", "topics"]) == "Overall (dev): 0.5000"
    assert format_classes({"topics": ["a b", "c"]}) == "\n  topics classes: 0 a b, 1 c"


def test_an_evaluation_view_reads_the_class_names_of_its_task(tmp_path: Path, topics) -> None:
    """A view has no train split of its own: its dev rows are read with its task's classes (the head's)."""
    write_topics(tmp_path)
    (tmp_path / "ood.csv").write_text("text,label\nshares fall,business\ngoal again,sports\n")
    spec = topics(eval_views={"topics_ood": {"files": {"dev": "ood.csv"}}})
    dm = MultiTaskDataModule(tasks=[spec], data_dir=tmp_path, cache_dir=False, max_length=16)
    ood = dm.load_split("topics_ood", "dev")
    assert ood.skipped == 0 and ood.labels.tolist() == [NAMES.index("business"), NAMES.index("sports")]

"""A user's own classification task: labels 0..K-1 without a label_range, and labels given as names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sources import hf as hf_sources
from pal_lightning.data.sources.labels import names_of_values
from pal_lightning.data.sources.readers import label_names_for, read_split
from pal_lightning.tasks.specs import TaskSpec

TOPICS = ["sports", "politics", "science", "business"]


def topics(**fields: object) -> TaskSpec:
    """The README's own-task shape: 4 classes, local csv files read through datasets, no label_range."""
    values: dict[str, object] = dict(
        name="topics",
        num_labels=4,
        format="hf",
        files={"train": "train.csv", "dev": "dev.csv"},
        text_columns=("text",),
        label_column="label",
        id_column=None,
    )
    values.update(fields)
    return TaskSpec(**values)  # type: ignore[arg-type]


def write_csv(path: Path, labels: list[object]) -> Path:
    rows = [f"text number {i},{label}" for i, label in enumerate(labels)]
    path.write_text("text,label\n" + "\n".join(rows) + "\n")
    return path


def test_a_4_class_task_takes_labels_0_to_3_without_a_label_range(tmp_path: Path) -> None:
    write_csv(tmp_path / "train.csv", [0, 1, 2, 3] * 5)
    raw = read_split(topics(), "train", tmp_path)
    assert raw.skipped == 0 and sorted(set(raw.labels.tolist())) == [0, 1, 2, 3]
    assert topics().label_range == (0.0, 3.0)


def test_label_range_defaults_and_checks() -> None:
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


def test_string_labels_become_classes_in_sorted_order(tmp_path: Path) -> None:
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
    assert "'weather' is not one of the task's classes (business, politics, science, sports)" in str(
        err.value
    )
    dev = read_split(spec, "dev", tmp_path, max_bad_fraction=1)
    assert dev.skipped == 4 and dev.bad_rows[0] == (3, dev.bad_rows[0][1])  # file line 3: the second row


def test_label_names_of_the_spec_fix_the_order_and_allow_class_numbers(tmp_path: Path) -> None:
    write_csv(tmp_path / "train.csv", ["sports", "politics", 2, "business"])
    spec = topics(label_names=tuple(TOPICS))
    assert read_split(spec, "train", tmp_path).labels.tolist() == [0, 1, 2, 3]


def test_more_names_than_classes_is_one_line(tmp_path: Path) -> None:
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


def test_json_lines_with_string_labels(tmp_path: Path) -> None:
    rows = [{"text": f"t{i}", "label": name} for i, name in enumerate(TOPICS * 2)]
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    raw = read_split(topics(files={"train": "train.jsonl"}), "train", tmp_path)
    assert raw.labels.tolist()[:4] == [3, 1, 2, 0]


def test_class_names_in_messages_stay_on_one_line() -> None:
    """A fuzzed file's label cells can hold line breaks and NUL bytes; the message naming them is one line."""
    from pal_lightning.data.sources.labels import describe_names

    shown = describe_names(["sports", " 0 ", "0\n0", "\x000"])
    assert shown == "sports, ' 0 ', '0\\n0', '\\x000'" and "\n" not in shown

"""A user's own ``format: hf`` files: empty or header-only files give one line; relative paths resolve
against the data folder, then the working directory (never inside the packaged demo folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sources.demo import demo_data_dir
from pal_lightning.data.sources.readers import check_files_exist, read_split, resolve_data_dir
from pal_lightning.tasks.specs import TaskSpec, get_task


def own(files: dict[str, str]) -> TaskSpec:
    return TaskSpec(
        name="mine",
        num_labels=2,
        format="hf",
        files=files,
        text_columns=("text",),
        label_column="label",
        id_column=None,
    )


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "train.csv",
            "",
            r"train\.csv \(task 'mine', train\) is empty: not even a header row\. Put a header row",
        ),
        ("train.tsv", "\n\n", r"train\.tsv \(task 'mine', train\) is empty: not even a header row"),
        ("train.jsonl", "", r"train\.jsonl \(task 'mine', train\) is empty: no rows\. Put its rows in it"),
        ("train.csv", "text,label\n", r"train\.csv \(task 'mine', train\) has a header but no rows"),
        ("train.tsv", "text\tlabel\n", r"train\.tsv \(task 'mine', train\) has a header but no rows"),
        ("train.parquet", "", r"train\.parquet \(task 'mine', train\) is empty: no rows"),
    ],
)
def test_empty_and_header_only_files_are_one_line(
    tmp_path: Path, name: str, content: str, message: str
) -> None:
    (tmp_path / name).write_text(content)
    with pytest.raises(PalUserError, match=message) as err:
        read_split(own({"train": name}), "train", tmp_path)
    assert "\n" not in str(err.value) and str(tmp_path / name) in str(err.value)


def test_a_header_only_test_file_is_an_empty_unlabelled_split(tmp_path: Path) -> None:
    (tmp_path / "test.csv").write_text("text,label\n")
    raw = read_split(own({"test": "test.csv"}), "test", tmp_path)
    assert len(raw) == 0 and raw.labels is None


def test_an_unreadable_file_is_one_line_too(tmp_path: Path) -> None:
    (tmp_path / "train.jsonl").write_text("{not json\n{also not\n")
    with pytest.raises(
        PalUserError, match=r"train\.jsonl \(task 'mine', train\) cannot be read as json"
    ) as err:
        read_split(own({"train": "train.jsonl"}), "train", tmp_path)
    assert "\n" not in str(err.value)


def test_relative_files_beside_the_demo_come_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "train.csv").write_text("text,label\ngood,1\nbad,0\n")
    demo = resolve_data_dir("demo")
    assert demo == demo_data_dir()
    raw = read_split(own({"train": "mine/train.csv"}), "train", demo)
    assert raw.source == str(tmp_path / "mine" / "train.csv") and raw.labels.tolist() == [1, 0]
    # the demo's own files still come from the package
    assert Path(read_split(get_task("sst"), "dev", demo).source).parent == demo
    # a file found nowhere is named, with both places searched
    with pytest.raises(PalUserError, match=r"mine/dev: mine/dev\.csv.*then in the working directory") as err:
        check_files_exist([(own({"dev": "mine/dev.csv"}), "dev")], demo)
    assert str(tmp_path) in str(err.value)


def test_the_data_folder_comes_first_then_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here, data = tmp_path / "here", tmp_path / "data"
    for folder, label in ((here, 1), (data, 0)):
        folder.mkdir()
        (folder / "train.csv").write_text(f"text,label\nsame text,{label}\n")
    (here / "only_here.csv").write_text("text,label\nelsewhere,1\n")
    monkeypatch.chdir(here)
    assert read_split(own({"train": "train.csv"}), "train", data).labels.tolist() == [0]
    assert read_split(own({"train": "only_here.csv"}), "train", data).texts == [["elsewhere"]]

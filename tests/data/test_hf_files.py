"""A user's own ``format: hf`` files (pal_lightning.data.sources.hf): empty or header-only files give
one line; tab-separated files are read without quote processing, ``delimiter``/``quoting`` set both; a
tab-separated ``.csv`` is one line; relative paths resolve against the data folder, then the working
directory (never inside the packaged demo folder), and a missing one is named as given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sources.demo import demo_data_dir
from pal_lightning.data.sources.readers import check_files_exist, read_split, resolve_data_dir
from pal_lightning.data.tokenize import encode_split
from pal_lightning.tasks.specs import TaskSpec, get_task


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "train.csv",
            "",
            r"train\.csv \(task 'topics', train\) is empty: not even a header row\. Put a header row",
        ),
        ("train.tsv", "\n\n", r"train\.tsv \(task 'topics', train\) is empty: not even a header row"),
        ("train.jsonl", "", r"train\.jsonl \(task 'topics', train\) is empty: no rows\. Put its rows in it"),
        ("train.csv", "text,label\n", r"train\.csv \(task 'topics', train\) has a header but no rows"),
        ("train.tsv", "text\tlabel\n", r"train\.tsv \(task 'topics', train\) has a header but no rows"),
        ("train.parquet", "", r"train\.parquet \(task 'topics', train\) is empty: no rows"),
    ],
)
def test_empty_and_header_only_files_are_one_line(
    tmp_path: Path, name: str, content: str, message: str, topics
) -> None:
    (tmp_path / name).write_text(content)
    with pytest.raises(PalUserError, match=message) as err:
        read_split(topics(files={"train": name}), "train", tmp_path)
    assert "\n" not in str(err.value) and str(tmp_path / name) in str(err.value)


def test_a_header_only_test_file_is_an_empty_unlabelled_split(tmp_path: Path, topics, tokenizer) -> None:
    (tmp_path / "test.csv").write_text("text,label\n")
    raw = read_split(topics(files={"test": "test.csv"}), "test", tmp_path)
    assert len(raw) == 0 and raw.labels is None
    # and it tokenises to no examples (the tokenizer is not asked: it fails on an empty batch)
    for columns, encoding, sides in ((1, "cross", [""]), (2, "cross", [""]), (2, "siamese", ["a", "b"])):
        raw.texts = [[] for _ in range(columns)]
        data = encode_split(raw, tokenizer, 16, encoding)
        assert len(data) == 0 and sorted(data.encodings) == sides
        assert all(len(e) == 0 for e in data.encodings.values()) and data.lengths.tolist() == []


def test_an_unreadable_file_is_one_line_too(tmp_path: Path, topics) -> None:
    (tmp_path / "train.jsonl").write_text("{not json\n{also not\n")
    with pytest.raises(
        PalUserError, match=r"train\.jsonl \(task 'topics', train\) cannot be read as json"
    ) as err:
        read_split(topics(files={"train": "train.jsonl"}), "train", tmp_path)
    assert "\n" not in str(err.value)


def test_relative_files_beside_the_demo_come_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, topics
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "train.csv").write_text("text,label\ngood,1\nbad,0\n")
    demo = resolve_data_dir("demo")
    assert demo == demo_data_dir()
    raw = read_split(topics(files={"train": "mine/train.csv"}), "train", demo)
    assert raw.source == str(tmp_path / "mine" / "train.csv") and raw.labels.tolist() == [1, 0]
    # the demo's own files still come from the package
    assert Path(read_split(get_task("sst"), "dev", demo).source).parent == demo
    # a file found nowhere is named as given, with where it was looked for: not the package's demo folder,
    # nor the CS224N starter code, whose files the demo's tasks (present) would need
    with pytest.raises(PalUserError) as err:
        requests = [(topics(files={"dev": "mine/dev.csv"}), "dev"), (get_task("sst"), "dev")]
        check_files_exist(requests, demo)
    message = str(err.value)
    assert f"topics/dev: mine/dev.csv (looked for {tmp_path / 'mine' / 'dev.csv'})" in message
    assert str(demo) not in message and "starter code" not in message and "\n" not in message


def test_the_data_folder_comes_first_then_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, topics
) -> None:
    here, data = tmp_path / "here", tmp_path / "data"
    for folder, label in ((here, 1), (data, 0)):
        folder.mkdir()
        (folder / "train.csv").write_text(f"text,label\nsame text,{label}\n")
    (here / "only_here.csv").write_text("text,label\nelsewhere,1\n")
    monkeypatch.chdir(here)
    assert read_split(topics(files={"train": "train.csv"}), "train", data).labels.tolist() == [0]
    assert read_split(topics(files={"train": "only_here.csv"}), "train", data).texts == [["elsewhere"]]


def _mrpc_like(path: Path) -> Path:
    """A GLUE MRPC-shaped tab-separated file whose texts hold ``"`` (MRPC's own train.tsv, line 93 and more)."""
    path.write_text(
        "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
        '1\t1\t2\the called " the witness " , of\tReferring to him as " the witness "\n'
        '0\t3\t4\t"Quoted at the start\tand "open at the end\n'
        "1\t5\t6\tplain\ttext\n"
    )
    return path


def _pair(files: dict[str, str], **fields: object) -> TaskSpec:
    return TaskSpec(
        name="pairs",
        kind="pair_classification",
        format="hf",
        files=files,
        text_columns=("#1 String", "#2 String"),
        label_column="Quality",
        id_column="#1 ID",
        **fields,  # type: ignore[arg-type]
    )


def test_a_tab_separated_file_is_read_without_quote_processing(tmp_path: Path) -> None:
    _mrpc_like(tmp_path / "train.tsv")
    raw = read_split(_pair({"train": "train.tsv"}), "train", tmp_path)
    assert raw.skipped == 0 and raw.ids == ["1", "3", "5"] and raw.labels.tolist() == [1, 0, 1]
    assert raw.texts[0][:2] == ['he called " the witness " , of', '"Quoted at the start']
    assert raw.texts[1][1] == 'and "open at the end'
    # quoting: true asks for CSV quoting, delimiter for another separator
    (tmp_path / "quoted.tsv").write_text('Quality\t#1 ID\t#1 String\t#2 String\n1\t7\t"a\tb"\tc\n')
    quoted = read_split(_pair({"train": "quoted.tsv"}, quoting=True), "train", tmp_path)
    assert quoted.texts == [["a\tb"], ["c"]]
    (tmp_path / "semi.csv").write_text('Quality;#1 ID;#1 String;#2 String\n0;8;say "hi";"x;y"\n')
    semi = read_split(_pair({"train": "semi.csv"}, delimiter=";"), "train", tmp_path)
    assert semi.texts == [['say "hi"'], ["x;y"]] and semi.ids == ["8"]
    with pytest.raises(ValueError, match="delimiter must be one character, got ';;'"):
        _pair({"train": "semi.csv"}, delimiter=";;")
    with pytest.raises(ValueError, match="quoting must be true or false, got 'false'"):
        _pair({"train": "semi.csv"}, quoting="false")


def test_a_tab_separated_csv_is_one_line_saying_how_to_read_it(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    _mrpc_like(tmp_path / "train.csv")
    with pytest.raises(PalUserError) as err:
        read_split(_pair({"train": "train.csv"}), "train", tmp_path)
    message = str(err.value)
    assert "\n" not in message and "looks tab-separated" in message and "delimiter" in message
    assert str(tmp_path / "train.csv") in message
    # told so, it reads
    assert len(read_split(_pair({"train": "train.csv"}, delimiter="\t"), "train", tmp_path)) == 3
    # a csv datasets cannot parse is one line too, with pandas' reason, and datasets prints nothing
    capfd.readouterr()
    (tmp_path / "bad.csv").write_text('a,b\n1,2\n3,"4\n')
    with pytest.raises(
        PalUserError, match=r"bad\.csv \(task 'pairs', train\) cannot be read as csv: (?!An error)"
    ):
        read_split(_pair({"train": "bad.csv"}), "train", tmp_path)
    assert "error" not in capfd.readouterr().err.lower()


def test_local_csv_and_json(tmp_path: Path) -> None:
    (tmp_path / "train.csv").write_text(
        "premise,hypothesis,label\nA cat,A pet,1\nA dog,,0\nSky,Blue,2\nX,Y,9\n"
    )
    rows = [{"q": "first", "score": 0.5, "uid": "u1"}, {"q": "second", "score": "oops", "uid": "u2"}]
    (tmp_path / "dev.json").write_text("\n".join(json.dumps(r) for r in rows))
    spec = TaskSpec(
        name="nli",
        kind="pair_classification",
        num_labels=3,
        label_range=(0, 2),
        format="hf",
        hf_path="csv",
        files={"train": "train.csv"},
        text_columns=("premise", "hypothesis"),
        label_column="label",
        id_column=None,
    )
    train = read_split(spec, "train", tmp_path, max_bad_fraction=1)
    assert train.texts == [["A cat", "Sky"], ["A pet", "Blue"]]
    assert train.labels.tolist() == [1, 2] and train.skipped == 2
    reg = TaskSpec(
        name="reg",
        kind="pair_regression",
        num_labels=1,
        label_range=(0, 1),
        metrics=("pearson",),
        format="hf",
        files={"dev": "dev.json"},
        text_columns=("q", "q"),
        label_column="score",
        id_column="uid",
    )
    dev = read_split(reg, "dev", tmp_path, max_bad_fraction=1)
    assert dev.ids == ["u1"] and dev.labels.tolist() == [0.5]


def test_words_pandas_calls_missing_are_text_and_classes(tmp_path: Path, topics) -> None:
    """``None``, ``NA``, ``null`` are a text or a class name, as in the CS224N reader; an empty field is still bad."""
    (tmp_path / "train.csv").write_text(
        "text,label\ngreat match,sports\nNone,politics\nNA,None\nvote today,politics\nnull,None\n,sports\n"
    )
    spec = topics(num_labels=3, files={"train": "train.csv"})
    raw = read_split(spec, "train", tmp_path, max_bad_fraction=1)
    assert raw.texts == [["great match", "None", "NA", "vote today", "null"]]
    assert raw.labels.tolist() == [2, 1, 0, 1, 0]  # None, politics, sports: sorted
    assert raw.bad_rows == [(7, "missing field 'text'")]


def test_ids_and_texts_of_a_csv_are_read_as_written(tmp_path: Path, topics) -> None:
    """pandas would read a column of numbers as numbers: ``007`` as 7, every id as ``7.0`` beside an empty one."""
    (tmp_path / "train.csv").write_text("uid,text,label\n007,1.50,1\n0008,vote,0\n,goal,1\n12e3,goal,0\n")
    spec = topics(num_labels=2, files={"train": "train.csv"}, id_column="uid")
    raw = read_split(spec, "train", tmp_path, max_bad_fraction=1)
    assert raw.ids == ["007", "0008", "12e3"] and raw.texts == [["1.50", "vote", "goal"]]
    assert raw.labels.tolist() == [1, 0, 0] and raw.bad_rows == [(4, "empty id")]

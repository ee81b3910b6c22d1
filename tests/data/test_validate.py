"""The row checks (pal_lightning.data.sources.validate): a bad row is reported at the file's own line number,
and a split with more unusable rows than max_bad_rows_fraction stops the run with one line; fewer warn."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.data import MultiTaskDataModule
from pal_lightning.data.sources.readers import DEFAULT_MAX_BAD_FRACTION, read_split


def write_rows(path: Path, good: int, bad: int) -> Path:
    """``good`` rows labelled 0..3 (cycling), then ``bad`` rows labelled 7 (outside the classes)."""
    rows = [f"text {i},{i % 4}" for i in range(good)] + [f"bad {i},7" for i in range(bad)]
    path.write_text("text,label\n" + "\n".join(rows) + "\n")
    return path


def test_49_percent_bad_rows_stop_with_one_line_naming_count_file_lines_and_fix(
    tmp_path: Path, topics
) -> None:
    path = write_rows(tmp_path / "train.csv", good=102, bad=98)
    with pytest.raises(PalUserError) as err:
        read_split(topics(), "train", tmp_path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: 98 of 200 rows (49%) of task 'topics' (train) cannot be used")
    # the first bad row is the 103rd data row: file line 104, the header being line 1
    assert "lines 104 (label 7 outside the range [0, 3]), 105 (" in message
    assert "and 93 more" in message and "--data.max_bad_rows_fraction" in message


def test_below_the_threshold_a_warning_and_the_rows_are_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, topics
) -> None:
    write_rows(tmp_path / "train.csv", good=99, bad=1)
    with caplog.at_level(logging.WARNING):
        raw = read_split(topics(), "train", tmp_path)
    assert len(raw) == 99 and raw.skipped == 1 and raw.rows == 100
    assert "skipped 1 bad row(s) of 100" in caplog.text and "lines 101 (" in caplog.text
    assert "Pass --data.on_bad_row error" in caplog.text  # the command line's spelling first
    assert DEFAULT_MAX_BAD_FRACTION == 0.05
    # the option raises the threshold, or lowers it (never below 2 rows: a tiny file's stray rows warn)
    write_rows(tmp_path / "train.csv", good=51, bad=49)
    assert read_split(topics(), "train", tmp_path, max_bad_fraction=0.5).skipped == 49
    write_rows(tmp_path / "train.csv", good=97, bad=3)
    with pytest.raises(PalUserError, match="3 of 100 rows"):
        read_split(topics(), "train", tmp_path, max_bad_fraction=0.01)
    write_rows(tmp_path / "train.csv", good=8, bad=2)  # 20 %, but 2 rows
    assert read_split(topics(), "train", tmp_path).skipped == 2


def test_the_data_module_option_applies_to_cached_splits_too(tmp_path: Path, topics) -> None:
    write_rows(tmp_path / "train.csv", good=27, bad=3)  # 10 %
    write_rows(tmp_path / "dev.csv", good=8, bad=0)
    common = dict(tasks=[topics()], data_dir=tmp_path, cache_dir=tmp_path / "cache", max_length=16)
    lenient = MultiTaskDataModule(**common, max_bad_rows_fraction=0.2)
    assert len(lenient.load_split("topics", "train")) == 27  # read and cached
    strict = MultiTaskDataModule(**common)
    with pytest.raises(PalUserError, match="3 of 30 rows"):
        strict.load_split("topics", "train")  # served from the cache: still refused
    assert strict.hparams["max_bad_rows_fraction"] == DEFAULT_MAX_BAD_FRACTION


def test_an_empty_label_cell_of_a_csv_is_named_as_such(tmp_path: Path, topics) -> None:
    # datasets reads an empty csv cell as None, like a missing field
    (tmp_path / "train.csv").write_text(
        "text,label\n" + "".join(f"t{i},{i % 4}\n" for i in range(40)) + "x,\n"
    )
    raw = read_split(topics(), "train", tmp_path)
    assert raw.bad_rows == [(42, "no label (an empty or missing field)")]


def test_the_first_data_row_of_a_csv_is_line_2(tmp_path: Path, topics) -> None:
    (tmp_path / "train.csv").write_text("text,label\n,1\na fine film,0\n")
    with pytest.raises(PalUserError, match=r"train\.csv, line 2: bad row \(missing field .text.\)"):
        read_split(topics(files={"train": "train.csv"}), "train", tmp_path, on_bad_row="error")


def test_json_lines_count_from_line_1(tmp_path: Path, topics) -> None:
    (tmp_path / "train.jsonl").write_text('{"text": "", "label": 1}\n{"text": "ok", "label": 0}\n')
    with pytest.raises(PalUserError, match=r"train\.jsonl, line 1: bad row"):
        read_split(topics(files={"train": "train.jsonl"}), "train", tmp_path, on_bad_row="error")

"""Readers: every format, every kind of bad row, text clean-up, missing files."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sources.readers import read_split
from pal_lightning.data.sources.text import ptb_detokenize, undo_double_quoting
from pal_lightning.tasks.specs import get_task
from pal_lightning.testing import write_lines


def test_undo_double_quoting():
    assert undo_double_quoting('"What is ""staff work"" here?"') == 'What is "staff work" here?'
    assert undo_double_quoting('"Plain question?"') == "Plain question?"
    # not an escaped field: left alone
    assert (
        undo_double_quoting('"Which is the best RO water purifier?')
        == '"Which is the best RO water purifier?'
    )
    assert undo_double_quoting('"a" and "b"') == '"a" and "b"'
    assert undo_double_quoting("no quotes") == "no quotes"


def test_ptb_detokenize():
    assert ptb_detokenize(" The Rock 's new `` Conan '' -LRB- 2002 -RRB- , ok .") == (
        'The Rock\'s new "Conan" (2002), ok.'
    )
    assert ptb_detokenize("it ca n't be co-writer\\/director") == "it can't be co-writer/director"
    assert ptb_detokenize("plain text") == "plain text"


def test_cs224n_reader_skips_every_bad_row_kind(data_dir, caplog):
    with caplog.at_level(logging.WARNING, logger="pal_lightning.data.sources.validate"):
        sst = read_split(get_task("sst"), "train", data_dir)
        qqp = read_split(get_task("qqp"), "train", data_dir)
        sts = read_split(get_task("sts"), "train", data_dir)
    assert (len(sst), sst.rows, sst.skipped) == (40, 42, 2)
    reasons = " ".join(r for _, r in sst.bad_rows)
    assert "outside" in reasons and "empty text" in reasons
    assert (len(qqp), qqp.rows, qqp.skipped) == (61, 63, 2)
    qreasons = [r for _, r in qqp.bad_rows]
    assert "empty" in qreasons[0] and "non-numeric" in qreasons[1]
    assert (len(sts), sts.skipped) == (30, 1)
    # line numbers are physical file lines (header = line 1)
    assert sst.bad_rows[0][0] == 42
    # one warning per file, naming count and lines
    warnings = [r.getMessage() for r in caplog.records]
    assert sum("ids-sst-train.csv" in m for m in warnings) == 1
    assert any("skipped 2 bad row(s) of 42" in m and "42" in m for m in warnings)
    # types and cleaning
    assert sst.labels.dtype == np.int64 and qqp.labels.dtype == np.int64 and sts.labels.dtype == np.float64
    assert "(x)." in sst.texts[0][0] and not sst.texts[0][0].startswith(" ")
    i = qqp.ids.index("qqpquote")
    assert qqp.texts[0][i] == 'What is "staff work" here?'
    assert qqp.labels[i] == 1


def test_error_policy_names_file_and_line(data_dir):
    with pytest.raises(PalUserError, match=r"ids-sst-train\.csv, line 42: bad row \(label"):
        read_split(get_task("sst"), "train", data_dir, on_bad_row="error")
    with pytest.raises(PalUserError, match=r"quora-train\.csv, line \d+: bad row \(empty"):
        read_split(get_task("qqp"), "train", data_dir, on_bad_row="error")


def test_detokenize_switch(data_dir):
    raw = read_split(get_task("sst"), "train", data_dir, detokenize=False)
    assert "-LRB-" in raw.texts[0][0]


def test_test_student_files_have_no_labels_and_two_index_columns(data_dir):
    sst = read_split(get_task("sst"), "test", data_dir)
    assert sst.labels is None and len(sst) == 9 and sst.ids[0] == "ssttest000"
    qqp = read_split(get_task("qqp"), "test", data_dir)
    assert qqp.labels is None and len(qqp.texts) == 2


def test_missing_label_column_in_train_is_an_error(tmp_path):
    write_lines(tmp_path / "ids-sst-train.csv", ["\tid\tsentence", "0\ta\tsome text"])
    with pytest.raises(PalUserError, match="sentiment"):
        read_split(get_task("sst"), "train", tmp_path)


def test_missing_file_error_names_file_dir_and_fix(tmp_path):
    with pytest.raises(PalUserError) as err:
        read_split(get_task("sts"), "dev", tmp_path)
    msg = str(err.value)
    assert "sts-dev.csv" in msg and str(tmp_path.resolve()) in msg
    assert "--data.data_dir" in msg and "PAL_DATA_DIR" in msg


def test_non_integer_class_label_and_duplicate_id(tmp_path):
    write_lines(
        tmp_path / "ids-sst-train.csv",
        ["\tid\tsentence\tsentiment", "0\ta\tgood\t1.5", "1\tb\tfine\t2", "2\tb\tagain\t3"],
    )
    raw = read_split(get_task("sst"), "train", tmp_path, max_bad_fraction=1)
    assert raw.ids == ["b"]
    assert "not an integer" in raw.bad_rows[0][1] and "duplicate id" in raw.bad_rows[1][1]


def test_glue_tsv_reader(tmp_path):
    # GLUE files are read without quote processing: a lone quote is just a character.
    write_lines(
        tmp_path / "train_full.tsv", ["sentence\tlabel", 'a "quoted word \t1', "bad one \t0", "x \t3"]
    )
    write_lines(tmp_path / "test.tsv", ["index\tsentence", "0\tfirst", "1\tsecond"])
    spec = get_task("sst2")
    train = read_split(spec, "train", tmp_path, max_bad_fraction=1)
    assert train.texts[0] == ['a "quoted word', "bad one"]
    assert train.labels.tolist() == [1, 0] and train.skipped == 1
    assert train.ids == ["0", "1"]  # row numbers when the task has no id column
    test = read_split(spec, "test", tmp_path)
    assert test.labels is None and test.texts[0] == ["first", "second"]


def test_hidden_test_labels_make_an_unlabelled_split(tmp_path):
    write_lines(tmp_path / "test.tsv", ["sentence\tlabel", "first\t-1", "second\t-1"])
    spec = get_task("sst2").replace(files={"test": "test.tsv"})
    test = read_split(spec, "test", tmp_path)
    assert test.labels is None and len(test) == 2 and test.skipped == 0
    write_lines(tmp_path / "test.tsv", ["sentence\tlabel", "first\t1", "second\t0"])
    assert read_split(spec, "test", tmp_path).labels.tolist() == [1, 0]

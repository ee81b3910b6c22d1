"""The input and output files of ``pal-lightning predict --predict.input``: messages name file lines (the
header is line 1, as the data layer's bad-row warnings count), ids default to 0-based row numbers, and
probability columns stay distinct."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.inference.files import output_rows, read_input
from pal_lightning.tasks.specs import get_task

SPECS = {name: get_task(name) for name in ("sst", "qqp", "sts")}


def test_column_names_stay_distinct() -> None:
    predictions = SimpleNamespace(
        scores=None,
        probabilities=np.array([[0.25, 0.5, 0.25]]),
        label_names=["very good", "very-good", "ok!"],
        labels=["ok!"],
    )
    header, rows = output_rows(["a"], predictions)
    assert header == ["id", "label", "p_very_good", "p_very_good_2", "p_ok"]
    assert rows == [["a", "ok!", "0.250000", "0.500000", "0.250000"]]


def test_rows_become_task_input_items_and_messages_name_file_lines(tmp_path: Path) -> None:
    source = tmp_path / "in.tsv"
    source.write_text('task\tsentence\tsentence1\tsentence2\nsst\t"two\nlines"\t\t\nqqp\t\ta?\tb?\n')
    rows = read_input(source, SPECS)
    assert rows.items() == [("sst", "two\nlines"), ("qqp", ("a?", "b?"))] and rows.ids == ["0", "1"]
    source.write_text('task,sentence\nsst,"two\nlines"\nsst,\n')
    with pytest.raises(PalUserError, match="Line 4 of .* has an empty sentence"):
        read_input(source, SPECS)
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text(
        json.dumps({"id": "a", "sentence": "fine"}) + "\n\n" + json.dumps({"sentence": " "}) + "\n"
    )
    with pytest.raises(PalUserError, match="Line 3 of .* has an empty sentence"):
        read_input(jsonl, SPECS, "sst")
    jsonl.write_text(json.dumps({"id": "a", "sentence": "fine"}) + "\n")
    assert read_input(jsonl, SPECS, "sst").items() == [("sst", "fine")]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_byte_order_mark_is_not_part_of_the_first_column(tmp_path: Path, suffix: str) -> None:
    # Excel's "CSV UTF-8" starts the file with one: the first column (here the id) must still be found
    source = tmp_path / f"in{suffix}"
    text = "id,sentence\n7,fine\n" if suffix == ".csv" else json.dumps({"id": "7", "sentence": "fine"}) + "\n"
    source.write_text("\ufeff" + text, encoding="utf-8")
    rows = read_input(source, SPECS, "sst")
    assert rows.ids == ["7"] and rows.items() == [("sst", "fine")]


def test_mixed_probability_columns_stay_distinct_across_tasks() -> None:
    # task "a" class "b_c" and task "a_b" class "c" both make p_a_b_c: each must keep its own column
    from pal_lightning.inference.files import mixed_output_rows
    from pal_lightning.module.inference import Prediction

    first = Prediction("a", 0, "b_c", np.array([0.75, 0.25], np.float32), None, ["b_c", "d"])
    second = Prediction("a_b", 1, "e", np.array([0.5, 0.5], np.float32), None, ["c", "e"])
    header, rows = mixed_output_rows(["0", "1"], [first, second])
    assert len(set(header)) == len(header)
    assert header[4:] == ["p_a_b_c", "p_a_d", "p_a_b_c_2", "p_a_b_e"]
    assert rows == [
        ["0", "a", "b_c", "", "0.750000", "0.250000", "", ""],
        ["1", "a_b", "e", "", "", "", "0.500000", "0.500000"],
    ]

"""A bad row of a user's own csv file (``format: hf``) is reported at the file's own line number."""

from __future__ import annotations

from pathlib import Path

import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sources.readers import read_split
from pal_lightning.tasks.specs import TaskSpec


def _topics(files: dict[str, str]) -> TaskSpec:
    return TaskSpec(
        name="topics",
        kind="single_classification",
        num_labels=2,
        format="hf",
        files=files,
        text_columns=("text",),
        label_column="label",
        id_column=None,
    )


def test_the_first_data_row_of_a_csv_is_line_2(tmp_path: Path) -> None:
    (tmp_path / "train.csv").write_text("text,label\n,1\na fine film,0\n")
    with pytest.raises(PalUserError, match=r"train\.csv, line 2: bad row \(missing field .text.\)"):
        read_split(_topics({"train": "train.csv"}), "train", tmp_path, on_bad_row="error")


def test_json_lines_count_from_line_1(tmp_path: Path) -> None:
    (tmp_path / "train.jsonl").write_text('{"text": "", "label": 1}\n{"text": "ok", "label": 0}\n')
    with pytest.raises(PalUserError, match=r"train\.jsonl, line 1: bad row"):
        read_split(_topics({"train": "train.jsonl"}), "train", tmp_path, on_bad_row="error")

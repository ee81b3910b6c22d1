"""The source registry (pal_lightning.data.sources.registry): a task's ``format`` names the source that reads
its rows; an unknown one is one line, a registered one reads like the built-in ones, and no code outside
the registry branches on a format."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.options import DataConfig
from pal_lightning.data.sources import RowSource, register_source
from pal_lightning.data.sources.readers import read_split
from pal_lightning.data.sources.registry import _SOURCES, Location, Row, source_for
from pal_lightning.tasks.specs import TaskSpec, task_to_dict

PACKAGE = Path(__file__).resolve().parents[2] / "pal_lightning"


def test_an_unknown_format_is_one_line_naming_the_formats() -> None:
    spec = TaskSpec(name="mine", format="xml", files={"train": "t.xml"})
    with pytest.raises(
        PalUserError, match=r"unknown format 'xml'; choose from \['cs224n', 'glue_tsv', 'hf'"
    ) as err:
        source_for(spec)
    assert "\n" not in str(err.value)
    with pytest.raises(PalUserError, match="unknown format 'xml'"):  # before any file is read
        DataConfig(tasks=[task_to_dict(spec)])


class _Lines(RowSource):
    """One text per line, its label after a ``|``."""

    def rows(self, spec: TaskSpec, loc: Location, data_dir: Path, split: str) -> Iterator[Row]:
        for number, line in enumerate(Path(loc.location).read_text().splitlines(), start=1):
            text, label = line.split("|")
            yield number, {"text": text, "label": label}, ["text", "label"]


def test_a_registered_source_reads_its_format(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pal_lightning.data.sources.registry._SOURCES", dict(_SOURCES))
    register_source("lines", _Lines())
    with pytest.raises(ValueError, match="already registered"):
        register_source("lines", _Lines())
    (tmp_path / "train.txt").write_text("good|1\n|0\nbad|0\n")
    spec = TaskSpec(
        name="mine",
        format="lines",
        files={"train": "train.txt"},
        text_columns=("text",),
        label_column="label",
        id_column=None,
    )
    raw = read_split(spec, "train", tmp_path)
    assert (
        raw.texts == [["good", "bad"]]
        and raw.labels.tolist() == [1, 0]
        and raw.bad_rows == [(2, "empty text in 'text'")]
    )


def test_no_code_outside_the_registry_branches_on_a_format() -> None:
    branch = re.compile(r"\.format\s*(==|!=|in\b|not in\b)")
    found = [
        f"{path.relative_to(PACKAGE)}: {line.strip()}"
        for path in PACKAGE.rglob("*.py")
        for line in path.read_text(encoding="utf-8").splitlines()
        if branch.search(line)
    ]
    assert found == []

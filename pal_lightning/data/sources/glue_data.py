"""The built-in GLUE tasks read from GLUE's own download (``<data folder>/<TASK>/*.tsv``, else a sibling
``glue-<task>``) when the data folder holds one, instead of the hub's ``nyu-mll/glue``. Rows come out in the
hub's columns (``label`` as the hub's class number, ``idx``), so the row checks are the same. The files'
quirks: no quote processing; CoLA's train and dev have no header; MRPC's headers start with a byte-order
mark; RTE, QNLI and MNLI write label names; the id is ``index`` (QQP: ``id``), else the row number."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sources.delimited import tsv_records
from pal_lightning.data.sources.registry import Location, Row, RowSource
from pal_lightning.tasks.glue import is_glue_task
from pal_lightning.tasks.specs import TaskSpec

_NLI = ("entailment", "neutral", "contradiction")
_ENTAILMENT = ("entailment", "not_entailment")


@dataclass(frozen=True)
class GlueLayout:
    """Where one GLUE configuration's files are and which of their columns hold what."""

    folder: str
    files: dict[str, tuple[str, ...]]
    """Candidate file names of each hub split."""
    text: tuple[str, ...]
    """The file's text columns, in the order of the hub's."""
    label: str | None
    label_names: tuple[str, ...] | None = None
    """Names in the hub's class order, for files that write names."""
    id_column: str = "index"
    headerless: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The columns of the hub splits whose files have no header row."""


_FILES = {"train": ("train.tsv", "train_full.tsv"), "validation": ("dev.tsv",), "test": ("test.tsv",)}
_COLA_COLUMNS = ("source", "label", "mark", "sentence")
_COLA_HEADERLESS: dict[str, tuple[str, ...]] = {"train": _COLA_COLUMNS, "validation": _COLA_COLUMNS}
_MNLI_FILES: dict[str, tuple[str, ...]] = {
    "train": ("train.tsv",),
    "validation_matched": ("dev_matched.tsv",),
    "validation_mismatched": ("dev_mismatched.tsv",),
    "test_matched": ("test_matched.tsv",),
    "test_mismatched": ("test_mismatched.tsv",),
}

#: The layout of each GLUE configuration (the ``hf_name`` of its built-in task) in GLUE's download.
GLUE_LAYOUTS: dict[str, GlueLayout] = {
    "cola": GlueLayout("CoLA", _FILES, ("sentence",), "label", headerless=_COLA_HEADERLESS),
    "sst2": GlueLayout("SST-2", _FILES, ("sentence",), "label"),
    "mrpc": GlueLayout("MRPC", _FILES, ("#1 String", "#2 String"), "Quality"),
    "qqp": GlueLayout("QQP", _FILES, ("question1", "question2"), "is_duplicate", id_column="id"),
    "stsb": GlueLayout("STS-B", _FILES, ("sentence1", "sentence2"), "score"),
    "mnli": GlueLayout("MNLI", _MNLI_FILES, ("sentence1", "sentence2"), "gold_label", _NLI),
    "qnli": GlueLayout("QNLI", _FILES, ("question", "sentence"), "label", _ENTAILMENT),
    "rte": GlueLayout("RTE", _FILES, ("sentence1", "sentence2"), "label", _ENTAILMENT),
    "wnli": GlueLayout("WNLI", _FILES, ("sentence1", "sentence2"), "label"),
    "ax": GlueLayout("diagnostic", {"test": ("diagnostic.tsv",)}, ("sentence1", "sentence2"), None),
}


def local_file(spec: TaskSpec, split: str, data_dir: Path) -> Path | None:
    """The file of GLUE's download that ``split`` of an unchanged built-in GLUE task reads (the first place
    looked when missing, for messages), or ``None``."""
    if not is_glue_task(spec) or spec.hf_name not in GLUE_LAYOUTS:
        return None
    layout = GLUE_LAYOUTS[spec.hf_name]
    names = layout.files.get(spec.files.get(split, ""))
    if not names or not any((data_dir / other.folder).is_dir() for other in GLUE_LAYOUTS.values()):
        return None
    for folder in (data_dir / layout.folder, data_dir.parent / f"glue-{layout.folder.lower()}"):
        for name in names:
            if (folder / name).is_file():
                return folder / name
    return data_dir / layout.folder / names[0]


class GlueDownload(RowSource):
    """The files of GLUE's download, for the built-in GLUE tasks."""

    kind = "glue_data"

    def locate(self, spec: TaskSpec, split: str, data_dir: Path) -> Location | None:
        path = local_file(spec, split, data_dir)
        return None if path is None else Location(self.kind, str(path), self)

    def rows(self, spec: TaskSpec, loc: Location, data_dir: Path, split: str) -> Iterator[Row]:
        assert spec.hf_name is not None
        layout, path = GLUE_LAYOUTS[spec.hf_name], loc.location
        columns = layout.headerless.get(spec.files.get(split, split))
        records = tsv_records(path, "Restore the file from GLUE's download.", encoding="utf-8-sig")
        header = list(columns) if columns is not None else next(records, (0, [], []))[1]
        out_columns = _out_columns(spec, layout, header, path)
        for position, (line, values, _) in enumerate(r for r in records if r[1]):  # a blank line is no row
            yield line, _row(spec, layout, header, values, position), out_columns

    def missing(self, spec: TaskSpec, split: str, loc: Location, data_dir: Path) -> str | None:
        path = Path(loc.location)
        return None if path.is_file() else f"{spec.name}/{split}: {path.relative_to(data_dir)}"

    def missing_hint(self, spec: TaskSpec, data_dir: Path) -> str:
        present = sorted(lay.folder for lay in GLUE_LAYOUTS.values() if (data_dir / lay.folder).is_dir())
        return (
            f" GLUE tasks are read from the layout of GLUE's download, {data_dir}/<TASK>/{{train,dev,test}}.tsv "
            f"(a folder glue-<task> beside it also counts); this folder has {', '.join(present) or 'none'}. "
            "Add the task's folder, or leave the task out."
        )


def _out_columns(spec: TaskSpec, layout: GlueLayout, header: Sequence[str], path: str) -> list[str]:
    missing = [c for c in layout.text if c not in header]
    if missing:
        raise PalUserError(
            f"{path} (task {spec.name!r}) lacks the column(s) {missing} of GLUE's {layout.folder} files; its "
            f"header is {list(header)}. Point the data folder at an unchanged copy of GLUE's download."
        )
    out = [*spec.text_columns, str(spec.id_column)]
    return out + ["label"] if layout.label is not None and layout.label in header else out


def _row(
    spec: TaskSpec, layout: GlueLayout, header: Sequence[str], values: Sequence[str], position: int
) -> dict[str | None, Any]:
    """One row in the hub's columns; a missing field is ``None`` (a bad row)."""
    by_name: dict[str, str] = dict(zip(header, values, strict=False))
    row: dict[str | None, Any] = {
        hub: by_name.get(column) for hub, column in zip(spec.text_columns, layout.text, strict=True)
    }
    row[spec.id_column] = by_name[layout.id_column] if layout.id_column in by_name else str(position)
    if layout.label is not None and layout.label in header:
        value, names = by_name.get(layout.label), layout.label_names or ()
        row["label"] = names.index(value.strip()) if value is not None and value.strip() in names else value
    if len(values) > len(header):
        row[None] = list(values[len(header) :])
    return row

"""The built-in GLUE tasks read from the files of GLUE's own download (``glue_data/<TASK>/*.tsv``).

When the data folder holds a task folder of that download (``CoLA``, ``SST-2``, ``MRPC``, ..., ``diagnostic``),
every unchanged built-in GLUE task and view reads its splits there (``<data folder>/<TASK>``, else a sibling
``glue-<task>``; a train file is ``train.tsv``, else ``train_full.tsv``) instead of the hub's ``nyu-mll/glue``.
The rows come out in the hub's columns (text columns, ``label`` as the hub's class number, ``idx``), so the
specs and row checks are the same for both. The files' quirks, as GLUE's own readers handle them: no quote
processing; CoLA's train and dev files have no header; MRPC's headers start with a byte-order mark; RTE,
QNLI and MNLI write label names; the id is the ``index`` (QQP: ``id``) column, else the 0-based row number.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sources.locate import Location
from pal_lightning.data.sources.registry import Row, RowSource
from pal_lightning.tasks.glue import is_glue_task
from pal_lightning.tasks.specs import TaskSpec

_NLI = ("entailment", "neutral", "contradiction")
_ENTAILMENT = ("entailment", "not_entailment")


@dataclass(frozen=True)
class GlueLayout:
    """Where one GLUE configuration's files are and which of their columns hold what."""

    folder: str
    """The task's folder in GLUE's download (``CoLA``, ``STS-B``, ...)."""
    files: dict[str, tuple[str, ...]]
    """The candidate file names of each hub split (``train``, ``validation``, ``test_matched`` ...)."""
    text: tuple[str, ...]
    """The file's text columns, in the order of the hub's text columns."""
    label: str | None
    """The file's label column (absent from test files)."""
    label_names: tuple[str, ...] | None = None
    """Label names in the hub's class order, for files that write names; ``None``: numbers as they are."""
    id_column: str = "index"
    """The file's id column, where it has one (else the row number is the id)."""
    headerless: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The columns of the hub splits whose files have no header row (CoLA's train and dev)."""


def _splits(dev: str = "dev.tsv", test: str = "test.tsv") -> dict[str, tuple[str, ...]]:
    return {"train": ("train.tsv", "train_full.tsv"), "validation": (dev,), "test": (test,)}


_COLA_COLUMNS = ("source", "label", "mark", "sentence")
_MNLI_FILES: dict[str, tuple[str, ...]] = {
    "train": ("train.tsv",),
    "validation_matched": ("dev_matched.tsv",),
    "validation_mismatched": ("dev_mismatched.tsv",),
    "test_matched": ("test_matched.tsv",),
    "test_mismatched": ("test_mismatched.tsv",),
}

#: The file layout of each GLUE configuration (the ``hf_name`` of its built-in task), from GLUE's download.
GLUE_LAYOUTS: dict[str, GlueLayout] = {
    "cola": GlueLayout(
        "CoLA",
        _splits(),
        ("sentence",),
        "label",
        headerless={"train": _COLA_COLUMNS, "validation": _COLA_COLUMNS},
    ),
    "sst2": GlueLayout("SST-2", _splits(), ("sentence",), "label"),
    "mrpc": GlueLayout("MRPC", _splits(), ("#1 String", "#2 String"), "Quality"),
    "qqp": GlueLayout("QQP", _splits(), ("question1", "question2"), "is_duplicate", id_column="id"),
    "stsb": GlueLayout("STS-B", _splits(), ("sentence1", "sentence2"), "score"),
    "mnli": GlueLayout("MNLI", _MNLI_FILES, ("sentence1", "sentence2"), "gold_label", _NLI),
    "qnli": GlueLayout("QNLI", _splits(), ("question", "sentence"), "label", _ENTAILMENT),
    "rte": GlueLayout("RTE", _splits(), ("sentence1", "sentence2"), "label", _ENTAILMENT),
    "wnli": GlueLayout("WNLI", _splits(), ("sentence1", "sentence2"), "label"),
    "ax": GlueLayout("diagnostic", {"test": ("diagnostic.tsv",)}, ("sentence1", "sentence2"), None),
}


def _folders(layout: GlueLayout, data_dir: Path) -> list[Path]:
    """Where a task's files may be: ``<data_dir>/<TASK>``, then the sibling ``glue-<task>``."""
    return [data_dir / layout.folder, data_dir.parent / f"glue-{layout.folder.lower()}"]


def is_glue_folder(data_dir: Path) -> bool:
    """Whether ``data_dir`` holds a task folder of GLUE's download (one is enough)."""
    return any((data_dir / layout.folder).is_dir() for layout in GLUE_LAYOUTS.values())


def local_file(spec: TaskSpec, split: str, data_dir: Path) -> Path | None:
    """The file of GLUE's download that ``split`` of ``spec`` reads, or ``None`` when it reads no such file.

    ``None`` unless ``spec`` is a built-in GLUE task or view, unchanged, and ``data_dir`` is a folder of
    GLUE's download (:func:`is_glue_folder`). The path is returned even when the file is missing (the
    first place it is looked for), so that the check of the files names what is expected.
    """
    if not is_glue_task(spec) or spec.hf_name not in GLUE_LAYOUTS:
        return None
    layout = GLUE_LAYOUTS[spec.hf_name]
    names = layout.files.get(spec.files.get(split, ""))
    if not names or not is_glue_folder(data_dir):
        return None
    for folder in _folders(layout, data_dir):
        for name in names:
            if (folder / name).is_file():
                return folder / name
    return data_dir / layout.folder / names[0]


def missing_hint(data_dir: Path) -> str:
    """What a folder of GLUE's download holds, for the message about its missing files."""
    present = sorted(layout.folder for layout in GLUE_LAYOUTS.values() if (data_dir / layout.folder).is_dir())
    return (
        f" GLUE tasks are read from the layout of GLUE's download, {data_dir}/<TASK>/{{train,dev,test}}.tsv "
        f"(a folder glue-<task> beside it also counts); this folder has {', '.join(present) or 'none'}. Add the "
        "task's folder, or leave the task out."
    )


class GlueDownload(RowSource):
    """The files of GLUE's download, for the built-in GLUE tasks (chosen by the ``hf`` format's source)."""

    kind = "glue_data"

    def locate(self, spec: TaskSpec, split: str, data_dir: Path) -> Location | None:
        path = local_file(spec, split, data_dir)
        return None if path is None else Location(self.kind, str(path), reader=self)

    def rows(self, spec: TaskSpec, loc: Location, data_dir: Path, split: str) -> Iterator[Row]:
        return iter_rows(spec, loc.location, split)

    def missing(self, spec: TaskSpec, split: str, loc: Location, data_dir: Path) -> str | None:
        path = Path(loc.location)
        return None if path.is_file() else f"{spec.name}/{split}: {path.relative_to(data_dir)}"

    def missing_hint(self, spec: TaskSpec, data_dir: Path) -> str:
        return missing_hint(data_dir)


def _hub_split(spec: TaskSpec, split: str) -> str:
    return spec.files.get(split, split)


def iter_rows(spec: TaskSpec, path: str, split: str) -> Iterator[Row]:
    """Yield ``(line number, row, columns)`` of a GLUE file in the hub's columns (module docstring).

    Raises:
        PalUserError: when the file lacks a column its task's files have, or cannot be read as TSV.
    """
    assert spec.hf_name is not None
    layout = GLUE_LAYOUTS[spec.hf_name]
    columns = layout.headerless.get(_hub_split(spec, split))
    with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        try:
            header = list(columns) if columns is not None else next(reader, [])
            out_columns = _out_columns(spec, layout, header, path)
            for position, values in enumerate(_data_rows(reader)):
                yield reader.line_num, _row(spec, layout, header, values, position), out_columns
        except csv.Error as err:
            raise PalUserError(
                f"{path}, line {reader.line_num}: cannot be read as tab-separated text ({err}). Restore the file "
                "from GLUE's download."
            ) from err


def _data_rows(reader: Iterator[list[str]]) -> Iterator[list[str]]:
    """The non-empty rows (a blank line is no row, as for ``csv.DictReader``)."""
    return (values for values in reader if values)


def _out_columns(spec: TaskSpec, layout: GlueLayout, header: Sequence[str], path: str) -> list[str]:
    """The hub's column names the rows carry; checks the file's header against its task's layout."""
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
    """One row in the hub's columns; a field the row lacks is ``None`` (a bad row for the checks)."""
    by_name: dict[str, str] = dict(zip(header, values, strict=False))
    row: dict[str | None, Any] = {
        hub: by_name.get(column) for hub, column in zip(spec.text_columns, layout.text, strict=True)
    }
    row[spec.id_column] = by_name[layout.id_column] if layout.id_column in by_name else str(position)
    if layout.label is not None and layout.label in header:
        row["label"] = _label(layout, by_name.get(layout.label))
    if len(values) > len(header):
        row[None] = list(values[len(header) :])
    return row


def _label(layout: GlueLayout, value: str | None) -> Any:
    """The hub's class number of a label name; a number, or a name not in the list, as it is."""
    if value is None or layout.label_names is None:
        return value
    name = value.strip()
    return layout.label_names.index(name) if name in layout.label_names else value

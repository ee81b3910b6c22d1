"""Readers for the supported file formats, with strict row validation.

Three formats (``TaskSpec.format``):

``cs224n``
    The CS224N minBERT files: tab-separated despite the ``.csv`` name, a header row,
    standard CSV quoting (read with ``csv.DictReader(f, delimiter="\\t")`` as the starter
    code does). Test-student files have no label column and may carry extra unnamed
    index columns, which are ignored.
``glue_tsv``
    GLUE TSV files (``sentence<TAB>label``, test files ``index<TAB>sentence``), read
    without quote processing, as GLUE writes them.
``hf``
    Anything :func:`datasets.load_dataset` reads. ``hf_path`` is a builder name
    (``csv``, ``json``, ``parquet``) with ``files[split]`` a path relative to the data
    directory, or a hub dataset id with ``files[split]`` naming the hub split
    (default ``train``/``validation``/``test`` for ``train``/``dev``/``test``).

Every row is checked (text present, id present and unique, label parseable, integral for
classes and inside ``TaskSpec.label_range``). A classification label may be a class name
(:mod:`~pal_lightning.data.sources.labels`: the task's ``label_names``, else its training split's).
Bad rows are skipped with one warning per file naming the count and the first line numbers, or stop
the run (``on_bad_row="error"``) naming the file and line. Nothing is dropped silently: the counts of
loaded and skipped rows of every file are logged, and a split with more bad rows than
``max_bad_fraction`` of its rows (:data:`DEFAULT_MAX_BAD_FRACTION`) stops the run, since that many
usually means a wrong setting (columns, labels) rather than a few broken rows.

A relative file name is looked up in the data folder, then in the working directory; with the packaged
demo set as the data folder, files that are not the demo's own are read from the working directory
(:func:`resolve_file`).
"""

from __future__ import annotations

import csv
import logging
import math
import os
import re
from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pal_lightning.core.distributed import is_main_process
from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sources import glue_data
from pal_lightning.data.sources import hf as hf_sources
from pal_lightning.data.sources.labels import describe_names, is_number, name_index, names_of_values
from pal_lightning.data.sources.text import ptb_detokenize, undo_double_quoting
from pal_lightning.tasks.specs import BUILTIN_TASKS, TaskSpec

log = logging.getLogger(__name__)

#: Split names used throughout the data code.
SPLITS = ("train", "dev", "test")
#: Values of ``on_bad_row``.
BAD_ROW_POLICIES = ("skip", "error")
#: Builders of ``datasets`` that read local files.
HF_FILE_BUILDERS = ("csv", "json", "parquet", "text")
#: Default hub split name for each of our splits.
HF_DEFAULT_SPLITS = {"train": "train", "dev": "validation", "test": "test"}
#: How many bad line numbers a skip warning lists.
MAX_REPORTED_BAD_ROWS = 5
#: The share of a split's rows that may be bad (skipped with a warning) before the run stops. Real files
#: hold far fewer (the CS224N Quora train file: 2 of 14,139 rows); a wrong setting (a label range, a column,
#: a delimiter) makes a large share bad. 5 %, not less, so that a small file with one or two broken rows
#: (2 of 42) still trains.
DEFAULT_MAX_BAD_FRACTION = 0.05
#: Bad rows a split may always hold, whatever its size: one or two broken rows of a tiny file (1 of 10 is
#: 10 %) are a warning, not a wrong setting.
ALWAYS_TOLERATED_BAD_ROWS = 2
#: What undecodable bytes become when a file is read with ``errors="surrogateescape"``.
_UNDECODABLE = re.compile("[\udc80-\udcff]")


@dataclass
class RawSplit:
    """The validated rows of one split of one task, column by column."""

    task: str
    """Task name."""
    split: str
    """``train``, ``dev`` or ``test``."""
    source: str
    """Where the rows came from (a file path or a hub id), for messages."""
    ids: list[str]
    """Example ids (the id column, or the 0-based row number when the task has none)."""
    texts: list[list[str]]
    """One list per text column (one for single sentences, two for pairs), cleaned."""
    labels: np.ndarray | None
    """int64 classes or float64 scores; ``None`` for an unlabelled split."""
    rows: int = 0
    """Data rows in the source (loaded + skipped)."""
    bad_rows: list[tuple[int, str]] = field(default_factory=list)
    """(line number, reason) of every skipped row."""

    @property
    def skipped(self) -> int:
        """Number of rows dropped by validation."""
        return len(self.bad_rows)

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class Source:
    """Where one split of one task is read from."""

    kind: str
    """``file`` (a local path), ``glue_data`` (a file of GLUE's download, read by
    :mod:`~pal_lightning.data.sources.glue_data`) or ``hub`` (a ``datasets`` hub id)."""
    location: str
    """The local path, or the hub id."""
    hf_split: str | None = None
    """For hub sources: the split name on the hub."""

    @property
    def is_file(self) -> bool:
        return self.kind != "hub"


def resolve_data_dir(data_dir: str | os.PathLike[str] | None) -> Path:
    """The data directory: the argument, else ``$PAL_DATA_DIR``, else ``./data``.

    The value ``demo`` is the small demo set shipped with the package
    (:mod:`pal_lightning.data.sources.demo`), from any working directory; a local folder named ``demo``
    is ``./demo``.
    """
    from pal_lightning.data.sources.demo import DEMO_DATA, demo_data_dir

    value = str(data_dir) if data_dir is not None and str(data_dir) != "" else None
    if value is None:
        value = os.environ.get("PAL_DATA_DIR", "").strip() or "data"
    return demo_data_dir() if value == DEMO_DATA else Path(value).expanduser()


def resolve_source(spec: TaskSpec, split: str, data_dir: Path) -> Source | None:
    """Where ``split`` of ``spec`` comes from, or ``None`` when the task has no such split."""
    glue_file = glue_data.local_file(spec, split, data_dir)  # a built-in GLUE task, GLUE's own files
    if glue_file is not None:
        return Source("glue_data", str(glue_file))
    if spec.format == "hf" and spec.hf_path and spec.hf_path not in HF_FILE_BUILDERS:
        hf_split = spec.files.get(split, HF_DEFAULT_SPLITS[split] if not spec.files else None)
        if hf_split is None:
            return None
        return Source("hub", spec.hf_path, hf_split)
    name = spec.files.get(split)
    if not name:
        return None
    return Source("file", str(resolve_file(name, data_dir)))


def resolve_file(name: str, data_dir: Path) -> Path:
    """Where a task's file ``name`` is: an absolute path as it is; a relative one in ``data_dir`` when it
    is there, else in the working directory. The packaged demo folder holds only the demo's files, so with
    ``data_dir: demo`` any other relative name is the working directory's (a user's own task beside the
    demo); otherwise a file found nowhere is named in ``data_dir``, where the CS224N files belong."""
    from pal_lightning.data.sources.demo import demo_data_dir

    path = Path(name).expanduser()
    if path.is_absolute():
        return path
    in_data = data_dir / path
    here = Path.cwd() / path
    if in_data.is_file() or (not here.is_file() and data_dir != demo_data_dir()):
        return in_data
    return here


def check_files_exist(requests: Sequence[tuple[TaskSpec, str]], data_dir: Path) -> None:
    """Raise one :class:`PalUserError` listing every missing file of ``requests`` (task, split).

    Raises:
        PalUserError: naming the files expected, the directory searched and how to point at it.
    """
    missing: list[str] = []
    hint = ""
    for spec, split in requests:
        src = resolve_source(spec, split, data_dir)
        if src is not None and src.kind == "glue_data" and not Path(src.location).is_file():
            missing.append(f"{spec.name}/{split}: {Path(src.location).relative_to(data_dir)}")
            hint = glue_data.missing_hint(data_dir)
        elif src is not None and src.is_file and not Path(src.location).is_file():
            relative = not Path(spec.files[split]).expanduser().is_absolute()
            missing.append(f"{spec.name}/{split}: {spec.files[split] if relative else src.location}")
        elif src is not None and not src.is_file:
            assert src.hf_split is not None
            hf_sources.load_split(spec, src.hf_split, data_dir, split)  # one line if the split is missing
    if missing:
        builtin = [s.name for s, _ in requests if s.format == "cs224n" and BUILTIN_TASKS.get(s.name) == s]
        origin = f" The CS224N files are in {hf_sources.STARTER_DATA}." if builtin else ""
        raise PalUserError(
            f"Data files not found in {data_dir.resolve()} (nor in the working directory {Path.cwd()}): "
            + "; ".join(missing)
            + ". Point at the folder holding them with --data.data_dir PATH (data_dir=... in Python) "
            "or the environment variable PAL_DATA_DIR; without either, ./data is searched. A relative name "
            "in a task's files is looked up in that folder, then in the working directory." + origin + hint
        )


def source_exists(spec: TaskSpec, src: Source | None, data_dir: Path) -> bool:
    """Whether a split's source is there: its file exists, or its dataset has the split."""
    if src is None:
        return False
    if src.is_file:
        return Path(src.location).is_file()
    assert src.hf_split is not None
    return hf_sources.has_split(spec, src.hf_split, data_dir)


# --------------------------------------------------------------------------- row sources


def _iter_delimited(path: str, quoted: bool) -> Iterator[tuple[int, dict[str | None, Any], list[str]]]:
    """Yield ``(line number, row, header)`` of a tab-separated file with a header row; ``quoted``: standard
    CSV quoting (the CS224N starter files), else none (plain TSV).

    Bytes that are not UTF-8 are kept as surrogate escapes (``errors="surrogateescape"``), so that
    the row holding them is reported as a bad row with its line number instead of the whole read
    failing with a ``UnicodeDecodeError``.
    """
    with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_MINIMAL if quoted else csv.QUOTE_NONE)
        try:  # csv.Error (e.g. a field over csv.field_size_limit()) stops the reader: no later row is safe
            header = list(reader.fieldnames or [])
            for row in reader:
                # line_num is the last physical line of the record (1-based, header is line 1).
                yield reader.line_num, row, header
        except csv.Error as err:
            raise PalUserError(
                f"{path}, line {reader.line_num}: cannot be read as tab-separated text ({err}). Fix the file "
                "(a field this long usually means a quote that is never closed)."
            ) from err


def _iter_hf(
    spec: TaskSpec, src: Source, data_dir: Path, split: str
) -> Iterator[tuple[int, dict[str | None, Any], list[str]]]:
    """Yield ``(line, row, columns)`` of a ``datasets`` source: for a local csv/tsv file the file's own line
    number (its header is line 1, so the first row is line 2), for a json-lines file the line; for other
    sources (parquet, a hub split, a ``save_to_disk`` folder) the 1-based row number. ``datasets`` does not
    report lines, so the number is exact for files without quoted multi-line fields."""
    ds, first = _load_hf(spec, src, data_dir, split)
    if ds is None:  # a header and no rows
        return
    columns = list(ds.column_names)
    for i, row in enumerate(ds):
        yield i + first, row, columns


def _load_hf(spec: TaskSpec, src: Source, data_dir: Path, split: str) -> tuple[Any, int]:
    """The ``datasets.Dataset`` of a split and the line of its first row (``None`` for a local file with a
    header and no rows).

    Raises:
        PalUserError: for an empty local file, or one ``datasets`` cannot read (one line, not its traceback).
    """
    if not src.is_file:
        assert src.hf_split is not None
        return hf_sources.load_split(spec, src.hf_split, data_dir, split), 1
    import datasets

    builder = spec.hf_path or _builder_for(src.location)
    first = 2 if builder == "csv" else 1  # the header line
    lines = _first_lines(src.location, builder)
    fix = f"or leave {split} out of the task's files"
    if lines == 0:
        what = "not even a header row" if builder == "csv" else "no rows"
        raise PalUserError(
            f"{src.location} (task {spec.name!r}, {split}) is empty: {what}. Put "
            + ("a header row, then one example per line, in it, " if builder == "csv" else "its rows in it, ")
            + fix
            + "."
        )
    if lines == 1 and builder == "csv":
        return None, first
    kwargs: dict[str, Any] = {}
    if builder == "csv" and src.location.endswith((".tsv", ".tab")):
        kwargs["delimiter"] = "\t"
    try:
        ds = datasets.load_dataset(builder, data_files={"data": src.location}, split="data", **kwargs)
    except Exception as err:  # noqa: BLE001 - pandas, pyarrow and datasets raise many types
        raise PalUserError(
            f"{src.location} (task {spec.name!r}, {split}) cannot be read as {builder}: "
            f"{hf_sources.one_line(err)}. Fix the file (a header row, then one example per line), {fix}."
        ) from err
    return ds, first


def _first_lines(path: str, builder: str) -> int:
    """How many non-blank lines a local text file starts with, up to 2 (``2`` for a binary format)."""
    if builder not in ("csv", "json"):
        return 2 if Path(path).stat().st_size else 0
    count = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            count += bool(line.strip())
            if count == 2:
                break
    return count


def _builder_for(path: str) -> str:
    ext = Path(path).suffix.lower()
    if ext in (".csv", ".tsv", ".tab"):
        return "csv"
    if ext in (".json", ".jsonl"):
        return "json"
    if ext == ".parquet":
        return "parquet"
    raise PalUserError(
        f"Cannot tell the format of {path}: set hf_path to 'csv', 'json' or 'parquet' in the TaskSpec."
    )


# --------------------------------------------------------------------------- validation


def _parse_label(
    value: Any, spec: TaskSpec, names: Sequence[str] = ()
) -> tuple[float | int | None, str | None]:
    """Parse one label: ``(value, None)`` or ``(None, reason)``; a class is one of ``names`` or an index."""
    if value is None:
        return None, "no label (an empty or missing field)"
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, str):
        value = value.strip()
        if not value:
            return None, "empty label"
    index = name_index(value, names)
    if index is not None:
        return index, None
    if names and not is_number(value):
        return None, f"label {str(value)[:30]!r} is not one of the task's classes ({describe_names(names)})"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None, f"non-numeric label {str(value)[:30]!r}"
    if not math.isfinite(number):
        return None, f"non-numeric label {str(value)[:30]!r}"
    low, high = spec.label_range
    if not low <= number <= high:
        return None, f"label {value!r} outside the range [{low:g}, {high:g}]"
    if spec.is_regression:
        return number, None
    if not number.is_integer():
        return None, f"class label {value!r} is not an integer"
    if not 0 <= number < spec.num_labels:
        return None, f"class label {value!r} outside 0..{spec.num_labels - 1}"
    return int(number), None


def _is_unlabelled_marker(value: Any, spec: TaskSpec) -> bool:
    """Empty, missing, or -1 outside the label range: how test files hide their labels."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return True
    try:
        number = float(value)
    except (TypeError, ValueError):
        return False
    return number == -1 and spec.label_range[0] > -1


def _undecodable(row: dict[str | None, Any]) -> bool:
    """Whether a row holds bytes that were not valid UTF-8."""
    for value in row.values():
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, str) and _UNDECODABLE.search(v) for v in values):
            return True
    return False


def _clean_text(text: str, spec: TaskSpec, detokenize: bool) -> str:
    if spec.unquote:
        text = undo_double_quoting(text)
    if detokenize and spec.ptb_detokenize:
        text = ptb_detokenize(text)
    return text.strip()


def read_split(
    spec: TaskSpec,
    split: str,
    data_dir: Path,
    on_bad_row: str = "skip",
    detokenize: bool = True,
    max_bad_fraction: float = DEFAULT_MAX_BAD_FRACTION,
) -> RawSplit:
    """Read and validate one split of one task.

    Args:
        spec: the task.
        split: ``train``, ``dev`` or ``test``.
        data_dir: directory that relative file names are resolved against.
        on_bad_row: ``skip`` (drop bad rows, warn once with count and first lines) or ``error``.
        detokenize: undo PTB tokens for tasks with ``ptb_detokenize``.
        max_bad_fraction: the share of the rows that may be skipped; more stops the run.

    Raises:
        PalUserError: missing or empty file, missing column, a bad row with ``on_bad_row="error"``, or
            more bad rows than ``max_bad_fraction`` allows.
    """
    if on_bad_row not in BAD_ROW_POLICIES:
        raise PalUserError(f"on_bad_row must be one of {BAD_ROW_POLICIES}, got {on_bad_row!r}.")
    src = resolve_source(spec, split, data_dir)
    if src is None:
        raise PalUserError(f"Task {spec.name!r} has no {split!r} file; add it to the TaskSpec's files.")
    if src.is_file:
        check_files_exist([(spec, split)], data_dir)
    where = src.location if src.is_file else f"{src.location}[{src.hf_split}]"
    rows = _SplitRows(spec, split, detokenize, label_names_for(spec, data_dir))
    for line, row, header in _iter_rows(spec, src, data_dir, split):
        if rows.labelled is None:
            rows.labelled = _check_header(spec, split, header, where)
        reason = rows.add(row, header)
        if reason is not None:
            if on_bad_row == "error":
                raise PalUserError(
                    f"{where}, line {line}: bad row ({reason}) in task {spec.name!r}. Fix the file, or pass "
                    "--data.on_bad_row skip (on_bad_row='skip') to drop such rows with a warning."
                )
            rows.bad.append((line, reason))
    if rows.labelled is None:  # no data row at all
        _check_not_empty(spec, split, src, where)
    name = Path(src.location).name if src.is_file else where
    out = RawSplit(
        spec.name, split, where, rows.ids, rows.texts, rows.label_array(name), rows.count, rows.bad
    )
    check_bad_rows(where, out.bad_rows, out.rows, spec.name, split, max_bad_fraction)
    return out


def check_bad_rows(
    where: str,
    bad_rows: Sequence[tuple[int, str]],
    rows: int,
    task: str,
    split: str,
    max_fraction: float,
    warn: bool = True,
) -> None:
    """Stop when more than ``max_fraction`` of a split's ``rows``, and more than
    :data:`ALWAYS_TOLERATED_BAD_ROWS`, are bad; else warn about them (:func:`warn_bad_rows`) when ``warn``.

    Raises:
        PalUserError: naming the count, the file, the first bad lines and the fix.
    """
    if len(bad_rows) <= max(max_fraction * rows, ALWAYS_TOLERATED_BAD_ROWS):
        if warn:
            warn_bad_rows(Path(where).name, bad_rows, rows, task, split)
        return
    raise PalUserError(
        f"{where}: {len(bad_rows)} of {rows} rows ({len(bad_rows) / rows:.0%}) of task {task!r} ({split}) cannot "
        f"be used, more than max_bad_rows_fraction {max_fraction:g} allows; lines {_shown_lines(bad_rows)}. "
        "Fix the file or the task's settings (text_columns, label_column, num_labels, label_names, "
        "label_range), or raise --data.max_bad_rows_fraction (max_bad_rows_fraction=... in Python; 1 never "
        "stops) to skip such rows with a warning."
    )


def _shown_lines(bad_rows: Sequence[tuple[int, str]]) -> str:
    """The first :data:`MAX_REPORTED_BAD_ROWS` bad lines with their reasons, and how many more."""
    shown = ", ".join(f"{ln} ({why})" for ln, why in bad_rows[:MAX_REPORTED_BAD_ROWS])
    extra = len(bad_rows) - MAX_REPORTED_BAD_ROWS
    return shown + (f" and {extra} more" if extra > 0 else "")


def warn_bad_rows(name: str, bad_rows: Sequence[tuple[int, str]], rows: int, task: str, split: str) -> None:
    """The one warning about the skipped rows of a split (on rank 0; nothing when none was skipped).

    Args:
        name: the file name (or hub id) to show.
        bad_rows: ``(line, reason)`` of every skipped row; the first :data:`MAX_REPORTED_BAD_ROWS` are named.
        rows: data rows in the source, loaded and skipped.
    """
    if not bad_rows or not is_main_process():
        return
    log.warning(
        "%s: skipped %d bad row(s) of %d (task %s, %s); lines %s. Pass on_bad_row='error' to stop instead.",
        name,
        len(bad_rows),
        rows,
        task,
        split,
        _shown_lines(bad_rows),
    )


def _iter_rows(
    spec: TaskSpec, src: Source, data_dir: Path, split: str
) -> Iterator[tuple[int, dict[str | None, Any], list[str]]]:
    """The rows of a split's source, by its task's format (a file of GLUE's download by its task)."""
    if src.kind == "glue_data":
        return glue_data.iter_rows(spec, src.location, split)
    if spec.format == "hf":
        return _iter_hf(spec, src, data_dir, split)
    return _iter_delimited(src.location, quoted=spec.format == "cs224n")


def _check_not_empty(spec: TaskSpec, split: str, src: Source, where: str) -> None:
    """Stop on a source without a data row, unless it is a test split (a header alone is allowed)."""
    if src.is_file and spec.format != "hf" and not _has_header(src.location):
        raise PalUserError(
            f"{where} (task {spec.name!r}, {split}) is empty: not even a header row. Restore the file "
            "(a header row, then one example per line), or point --data.data_dir at a complete copy."
        )
    if split != "test":
        raise PalUserError(
            f"{where} (task {spec.name!r}, {split}) has a header but no rows. Restore the file, or "
            "point --data.data_dir at a complete copy of the data."
        )


class _SplitRows:
    """The valid rows of a split so far, column by column, and the line and reason of each bad one.

    Each row goes through the checks in order; the first that fails names the row's problem:
    undecodable bytes, too many fields, a missing or empty text, a bad label (labelled splits), an
    empty or repeated id (tasks with an id column).
    """

    def __init__(self, spec: TaskSpec, split: str, detokenize: bool, names: Sequence[str] = ()) -> None:
        self.spec, self.split, self.detokenize = spec, split, detokenize
        #: The class names a label may be given by (:func:`label_names_for`).
        self.names = tuple(names)
        self.ids: list[str] = []
        self.seen: set[str] = set()
        self.texts: list[list[str]] = [[] for _ in spec.text_columns]
        self.labels: list[float | int | None] = []
        self.bad: list[tuple[int, str]] = []
        self.count = 0
        #: Whether the split has a label column (``None`` until the header is read).
        self.labelled: bool | None = None

    def add(self, row: dict[str | None, Any], header: Sequence[str]) -> str | None:
        """Keep ``row`` if it passes every check; else return why not (the row is not kept)."""
        self.count += 1
        reason = _encoding_problem(row) or _field_count_problem(row, header)
        if reason is not None:
            return reason
        texts, reason = _row_texts(row, self.spec, self.detokenize)
        if reason is not None:
            return reason
        label = None
        if self.labelled:
            label, reason = _row_label(row, self.spec, self.split, self.names)
            if reason is not None:
                return reason
        ex_id, reason = _row_id(row, self.spec, self.count - 1, self.seen)
        if reason is not None:
            return reason
        self.seen.add(ex_id)
        self.ids.append(ex_id)
        for column, text in zip(self.texts, texts, strict=True):
            column.append(text)
        if self.labelled:
            self.labels.append(label)
        return None

    def label_array(self, name: str) -> np.ndarray | None:
        """The labels as an array, or ``None`` for an unlabelled split.

        A test split where some rows hide their label (GLUE writes -1) is unlabelled as a whole,
        with a warning when other rows do carry one.
        """
        if not self.labelled:
            return None
        if self.split == "test" and any(v is None for v in self.labels):
            given = sum(v is not None for v in self.labels)
            if given and is_main_process():
                log.warning(
                    "%s: only %d of %d test rows carry a label; the test split is treated as unlabelled.",
                    name,
                    given,
                    len(self.labels),
                )
            return None
        return np.asarray(self.labels, dtype=np.float64 if self.spec.is_regression else np.int64)


def _encoding_problem(row: dict[str | None, Any]) -> str | None:
    if _undecodable(row):
        return "bytes that are not valid UTF-8 (save the file as UTF-8)"
    return None


def _field_count_problem(row: dict[str | None, Any], header: Sequence[str]) -> str | None:
    """More non-empty fields than the header names (``csv.DictReader`` puts them under ``None``)."""
    extra = row.get(None)
    if extra is not None and any(v not in ("", None) for v in extra):
        return f"{len(header) + len(extra)} fields, the header has {len(header)}"
    return None


def _row_texts(row: dict[str | None, Any], spec: TaskSpec, detokenize: bool) -> tuple[list[str], str | None]:
    """The cleaned texts of the task's text columns, or the first missing or empty one."""
    texts: list[str] = []
    for col in spec.text_columns:
        raw = row.get(col)
        if raw is None:
            return texts, f"missing field {col!r}"
        text = _clean_text(str(raw), spec, detokenize)
        if not text:
            return texts, f"empty text in {col!r}"
        texts.append(text)
    return texts, None


def _row_label(
    row: dict[str | None, Any], spec: TaskSpec, split: str, names: Sequence[str] = ()
) -> tuple[float | int | None, str | None]:
    """The row's label; a hidden test label (empty, or GLUE's -1) is ``None`` and not a bad row."""
    raw_label = row.get(spec.label_column)
    if split == "test" and _is_unlabelled_marker(raw_label, spec):
        return None, None
    return _parse_label(raw_label, spec, names)


def _row_id(
    row: dict[str | None, Any], spec: TaskSpec, index: int, seen: Container[str]
) -> tuple[str, str | None]:
    """The row's id: its id column (present, unique), or its 0-based row number without one."""
    if spec.id_column is None:
        return str(index), None
    raw_id = row.get(spec.id_column)
    ex_id = "" if raw_id is None else str(raw_id).strip()
    if not ex_id:
        return ex_id, "empty id"
    if ex_id in seen:
        return ex_id, f"duplicate id {ex_id!r}"
    return ex_id, None


def _has_header(path: str) -> bool:
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return bool(f.readline().strip())


def _check_header(spec: TaskSpec, split: str, header: Sequence[str], where: str) -> bool:
    """Check the required columns exist; return whether the split carries labels."""
    required = list(spec.text_columns) + ([spec.id_column] if spec.id_column else [])
    missing = [c for c in required if c not in header]
    has_label = spec.label_column is not None and spec.label_column in header
    if split != "test" and not has_label:
        missing.append(str(spec.label_column))
    if missing:
        raise PalUserError(
            f"{where} (task {spec.name!r}, {split}) lacks the column(s) {missing}; its columns are "
            f"{list(header)}. Fix text_columns/label_column/id_column in the TaskSpec, or the file."
        )
    return has_label


# --------------------------------------------------------------------------- class names

#: The class names found in training splits, by (task, source, label column, file size and time).
_FOUND_NAMES: dict[tuple[str, ...], tuple[str, ...]] = {}


def label_names_for(spec: TaskSpec, data_dir: Path) -> tuple[str, ...]:
    """The class names of ``spec``: its ``label_names``, else those of its training split (a ``ClassLabel``
    feature's names, or the label column's words sorted), else ``()`` (labels are class indices).

    Raises:
        PalUserError: when the training split names more or fewer classes than ``num_labels``.
    """
    if spec.is_regression or spec.label_names:
        return tuple(spec.label_names)
    src = resolve_source(spec, "train", data_dir)
    if src is None or spec.label_column is None or not source_exists(spec, src, data_dir):
        return ()
    # size and modification time: cheap, and enough to see a file replaced within one process
    stamp = f"{os.stat(src.location).st_size}:{os.stat(src.location).st_mtime_ns}" if src.is_file else ""
    key = (spec.name, spec.format, src.location, str(src.hf_split), spec.label_column, stamp)
    if key not in _FOUND_NAMES:
        _FOUND_NAMES[key] = _train_label_names(spec, src, data_dir)
    names = _FOUND_NAMES[key]
    if names and len(names) != spec.num_labels:
        raise PalUserError(
            f"Task {spec.name!r} has num_labels {spec.num_labels}, but the labels of its train split "
            f"({src.location}) are {len(names)} names: {describe_names(names)}. Set num_labels to "
            f"{len(names)}, or give the classes in order with label_names: [...] (a name that is not a class "
            "then makes a bad row)."
        )
    return names


def _train_label_names(spec: TaskSpec, src: Source, data_dir: Path) -> tuple[str, ...]:
    """The class names a training split spells (see :func:`label_names_for`)."""
    column = str(spec.label_column)
    if spec.format != "hf" or (src.is_file and src.kind != "file"):  # read row by row, as read_split does
        return names_of_values(row.get(column) for _, row, _ in _iter_rows(spec, src, data_dir, "train"))
    ds, _ = _load_hf(spec, src, data_dir, "train")
    if ds is None or column not in ds.column_names:
        return ()
    names = getattr(ds.features.get(column), "names", None)  # a datasets.ClassLabel
    if names:
        return tuple(str(n) for n in names)
    return names_of_values(ds[column])

"""The checks every row goes through, and the one warning (or error) about the rows that fail them.

Every row is checked (text present, id present and unique, label parseable, integral for classes and
inside ``TaskSpec.label_range``); a classification label may be a class name
(:mod:`~pal_lightning.data.sources.labels`). Bad rows are skipped with one warning per file naming the
count and the first line numbers, or stop the run (``on_bad_row="error"``); a split with more bad rows
than ``max_bad_fraction`` of its rows (:data:`DEFAULT_MAX_BAD_FRACTION`) stops the run, since that many
usually means a wrong setting (columns, labels) rather than a few broken rows.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Container, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pal_lightning.core.distributed import is_main_process
from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sources.labels import describe_names, is_number, name_index
from pal_lightning.data.sources.text import ptb_detokenize, undo_double_quoting
from pal_lightning.tasks.specs import TaskSpec

log = logging.getLogger(__name__)

#: Values of ``on_bad_row``.
BAD_ROW_POLICIES = ("skip", "error")

#: How many bad line numbers a skip warning lists.
MAX_REPORTED_BAD_ROWS = 5

#: The share of a split's rows that may be bad (skipped with a warning) before the run stops: a wrong
#: setting (a label range, a column, a delimiter) makes a large share bad, real files very few.
DEFAULT_MAX_BAD_FRACTION = 0.05

#: Bad rows a split may always hold, whatever its size (one or two of a tiny file are no wrong setting).
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


class SplitRows:
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
    """Bytes that were not valid UTF-8 (kept as surrogate escapes by the readers)."""
    for value in row.values():
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, str) and _UNDECODABLE.search(v) for v in values):
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


def _clean_text(text: str, spec: TaskSpec, detokenize: bool) -> str:
    if spec.unquote:
        text = undo_double_quoting(text)
    if detokenize and spec.ptb_detokenize:
        text = ptb_detokenize(text)
    return text.strip()


def check_header(spec: TaskSpec, split: str, header: Sequence[str], where: str) -> bool:
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
        "%s: skipped %d bad row(s) of %d (task %s, %s); lines %s. Pass --data.on_bad_row error (on_bad_row='error' in Python) to stop instead.",
        name,
        len(bad_rows),
        rows,
        task,
        split,
        _shown_lines(bad_rows),
    )

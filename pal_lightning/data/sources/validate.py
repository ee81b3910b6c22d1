"""The checks every row goes through (text present, id present and unique, label a class or inside
``label_range``; a class given by index or by name: the task's ``label_names``, else its training split's),
and the one warning (or error) about the rows that fail them. A split with more bad rows than
``max_bad_fraction`` stops the run: that many usually means a wrong setting, not broken rows."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pal_lightning.core.distributed import is_main_process
from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sources.text import ptb_detokenize, undo_double_quoting
from pal_lightning.tasks.specs import TaskSpec

log = logging.getLogger(__name__)

SHOWN_NAMES = 8


def is_number(value: Any) -> bool:
    """Whether ``value`` reads as a finite number (``3``, ``"0.5"``, ``True``)."""
    if isinstance(value, bool):
        return True
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def is_empty(value: Any) -> bool:
    """A missing or blank value."""
    return value is None or (isinstance(value, str) and not value.strip())


def names_of_values(values: Iterable[Any]) -> tuple[str, ...]:
    """The distinct words of a label column, sorted, when most non-empty values are words; else ``()``."""
    texts = [str(v).strip() for v in values if not is_empty(v)]
    words = [t for t in texts if not is_number(t)]
    if len(words) * 2 <= len(texts):
        return ()
    return tuple(sorted(set(words)))


def describe_names(names: Sequence[str]) -> str:
    """``a, b, c`` and how many more; odd names quoted with escapes, so a message stays one line."""
    shown = ", ".join(n if n.isprintable() and n == n.strip() else repr(n) for n in names[:SHOWN_NAMES])
    return shown + (f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else "")


BAD_ROW_POLICIES = ("skip", "error")


def check_on_bad_row(value: str) -> None:
    """A PalUserError unless ``value`` is one of :data:`BAD_ROW_POLICIES`."""
    if value not in BAD_ROW_POLICIES:
        raise PalUserError(f"on_bad_row must be one of {BAD_ROW_POLICIES}, got {value!r}.")


MAX_REPORTED_BAD_ROWS = 5

DEFAULT_MAX_BAD_FRACTION = 0.05

#: bad rows a split may always hold, whatever its size
ALWAYS_TOLERATED_BAD_ROWS = 2

_UNDECODABLE = re.compile("[\udc80-\udcff]")


@dataclass
class RawSplit:
    """The validated rows of one split of one task, column by column."""

    task: str
    split: str
    source: str
    """Where the rows came from (a file path or a hub id), for messages."""
    ids: list[str]
    texts: list[list[str]]
    """One list per text column, cleaned."""
    labels: np.ndarray | None
    """int64 classes or float64 scores; ``None`` for an unlabelled split."""
    rows: int = 0
    """Data rows in the source (loaded + skipped)."""
    bad_rows: list[tuple[int, str]] = field(default_factory=list)
    """(line number, reason) of every skipped row."""

    @property
    def skipped(self) -> int:
        return len(self.bad_rows)

    def __len__(self) -> int:
        return len(self.ids)


class _BadRow(Exception):
    pass


class SplitRows:
    """The valid rows of a split so far, and the line and reason of each bad one."""

    def __init__(self, spec: TaskSpec, split: str, detokenize: bool, names: Sequence[str] = ()) -> None:
        self.spec, self.split, self.detokenize = spec, split, detokenize
        #: class index by name, built once (not per row)
        self.names = {name: index for index, name in enumerate(names)}
        self.ids: list[str] = []
        self.seen: set[str] = set()
        self.texts: list[list[str]] = [[] for _ in spec.text_columns]
        self.labels: list[float | int | None] = []
        self.bad: list[tuple[int, str]] = []
        self.count = 0
        #: ``None`` until the header is read
        self.labelled: bool | None = None

    def add(self, row: dict[str | None, Any], header: Sequence[str]) -> str | None:
        """Keep ``row`` if it passes every check (in order); else return why not."""
        self.count += 1
        try:
            texts, label, ex_id = self._check(row, header)
        except _BadRow as bad:
            return str(bad)
        self.seen.add(ex_id)
        self.ids.append(ex_id)
        for column, text in zip(self.texts, texts, strict=True):
            column.append(text)
        if self.labelled:
            self.labels.append(label)
        return None

    def _check(self, row: dict[str | None, Any], header: Sequence[str]) -> tuple[list[str], Any, str]:
        spec = self.spec
        for value in row.values():
            values = value if isinstance(value, list) else [value]
            if any(isinstance(v, str) and _UNDECODABLE.search(v) for v in values):
                raise _BadRow("bytes that are not valid UTF-8 (save the file as UTF-8)")
        extra = row.get(None)
        if extra is not None and any(v not in ("", None) for v in extra):
            raise _BadRow(f"{len(header) + len(extra)} fields, the header has {len(header)}")
        texts = []
        for col in spec.text_columns:
            if row.get(col) is None:
                raise _BadRow(f"missing field {col!r}")
            text = _clean_text(str(row[col]), spec, self.detokenize)
            if not text:
                raise _BadRow(f"empty text in {col!r}")
            texts.append(text)
        label, raw = None, row.get(spec.label_column)
        # a hidden test label (empty, or GLUE's -1) is None and not a bad row
        if self.labelled and not (self.split == "test" and _is_unlabelled_marker(raw, spec)):
            label = _parse_label(raw, spec, self.names)
        if spec.id_column is None:
            return texts, label, str(self.count - 1)
        raw_id = row.get(spec.id_column)
        ex_id = "" if raw_id is None else str(raw_id).strip()
        if not ex_id:
            raise _BadRow("empty id")
        if ex_id in self.seen:
            raise _BadRow(f"duplicate id {ex_id!r}")
        return texts, label, ex_id

    def label_array(self, name: str) -> np.ndarray | None:
        """The labels, or ``None`` for an unlabelled split (a test split where some rows hide theirs)."""
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


def _parse_label(value: Any, spec: TaskSpec, names: Mapping[str, int]) -> float | int:
    if value is None:
        raise _BadRow("no label (an empty or missing field)")
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, str):
        value = value.strip()
        if not value:
            raise _BadRow("empty label")
    if isinstance(value, str) and value in names:
        return names[value]
    if not is_number(value):
        if names:
            raise _BadRow(
                f"label {str(value)[:30]!r} is not one of the task's classes ({describe_names(list(names))})"
            )
        raise _BadRow(f"non-numeric label {str(value)[:30]!r}")
    number = float(value)
    low, high = spec.label_range
    if not low <= number <= high:
        raise _BadRow(f"label {value!r} outside the range [{low:g}, {high:g}]")
    if spec.is_regression:
        return number
    if not number.is_integer():
        raise _BadRow(f"class label {value!r} is not an integer")
    if not 0 <= number < spec.num_labels:
        raise _BadRow(f"class label {value!r} outside 0..{spec.num_labels - 1}")
    return int(number)


def _is_unlabelled_marker(value: Any, spec: TaskSpec) -> bool:
    return is_empty(value) or (is_number(value) and float(value) == -1 and spec.label_range[0] > -1)


def _clean_text(text: str, spec: TaskSpec, detokenize: bool) -> str:
    if spec.unquote:
        text = undo_double_quoting(text)
    if detokenize and spec.ptb_detokenize:
        text = ptb_detokenize(text)
    return text.strip()


def check_header(spec: TaskSpec, split: str, header: Sequence[str], where: str) -> bool:
    """Check the required columns exist; whether the split carries labels."""
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
    """Stop when more than ``max_fraction`` of ``rows`` (and more than 2) are bad; else warn when ``warn``."""
    if len(bad_rows) <= max(max_fraction * rows, ALWAYS_TOLERATED_BAD_ROWS):
        if warn and bad_rows and is_main_process():
            log.warning(
                "%s: skipped %d bad row(s) of %d (task %s, %s); lines %s. Pass --data.on_bad_row error "
                "(on_bad_row='error' in Python) to stop instead.",
                Path(where).name,
                len(bad_rows),
                rows,
                task,
                split,
                _shown_lines(bad_rows),
            )
        return
    raise PalUserError(
        f"{where}: {len(bad_rows)} of {rows} rows ({len(bad_rows) / rows:.0%}) of task {task!r} ({split}) cannot "
        f"be used, more than max_bad_rows_fraction {max_fraction:g} allows; lines {_shown_lines(bad_rows)}. "
        "Fix the file or the task's settings (text_columns, label_column, num_labels, label_names, "
        "label_range), or raise --data.max_bad_rows_fraction (max_bad_rows_fraction=... in Python; 1 never "
        "stops) to skip such rows with a warning."
    )


def _shown_lines(bad_rows: Sequence[tuple[int, str]]) -> str:
    shown = ", ".join(f"{ln} ({why})" for ln, why in bad_rows[:MAX_REPORTED_BAD_ROWS])
    extra = len(bad_rows) - MAX_REPORTED_BAD_ROWS
    return shown + (f" and {extra} more" if extra > 0 else "")

"""Reading one split of one task: its rows from the source its format names, checked row by row
(:mod:`.validate`), and the class names its labels may use."""

from __future__ import annotations

import os
from pathlib import Path

from pal_lightning.core.errors import PalUserError
from pal_lightning.data.sources.registry import (
    SPLITS,
    check_files_exist,
    resolve_data_dir,
    resolve_source,
    source_exists,
)
from pal_lightning.data.sources.validate import (
    DEFAULT_MAX_BAD_FRACTION,
    RawSplit,
    SplitRows,
    check_bad_rows,
    check_header,
    check_on_bad_row,
    describe_names,
)
from pal_lightning.tasks.specs import TaskSpec

__all__ = [  # what the data code imports from here
    "DEFAULT_MAX_BAD_FRACTION",
    "SPLITS",
    "RawSplit",
    "check_bad_rows",
    "check_files_exist",
    "label_names_for",
    "read_split",
    "resolve_data_dir",
    "resolve_source",
]


def read_split(
    spec: TaskSpec,
    split: str,
    data_dir: Path,
    on_bad_row: str = "skip",
    detokenize: bool = True,
    max_bad_fraction: float = DEFAULT_MAX_BAD_FRACTION,
    names_of: TaskSpec | None = None,
) -> RawSplit:
    """Read and validate ``split`` of ``spec``; ``on_bad_row``: ``skip`` (warn once) or ``error``; ``names_of``:
    the task whose class names the labels may use (an evaluation view's task), default ``spec``.

    Raises:
        PalUserError: missing or empty file, missing column, a bad row with ``on_bad_row="error"``, or
            more bad rows than ``max_bad_fraction`` allows.
    """
    check_on_bad_row(on_bad_row)
    loc = resolve_source(spec, split, data_dir)
    if loc is None:
        raise PalUserError(f"Task {spec.name!r} has no {split!r} file; add it to the TaskSpec's files.")
    if loc.is_file:
        check_files_exist([(spec, split)], data_dir)
    where = loc.location if loc.is_file else f"{loc.location}[{loc.hf_split}]"
    rows = SplitRows(spec, split, detokenize, label_names_for(names_of or spec, data_dir))
    for line, row, header in loc.reader.rows(spec, loc, data_dir, split):
        if rows.labelled is None:
            rows.labelled = check_header(spec, split, header, where)
        reason = rows.add(row, header)
        if reason is not None:
            if on_bad_row == "error":
                raise PalUserError(
                    f"{where}, line {line}: bad row ({reason}) in task {spec.name!r}. Fix the file, or pass "
                    "--data.on_bad_row skip (on_bad_row='skip') to drop such rows with a warning."
                )
            rows.bad.append((line, reason))
    if rows.labelled is None:  # no data row at all
        if not loc.reader.has_header(loc):
            raise PalUserError(
                f"{where} (task {spec.name!r}, {split}) is empty: not even a header row. Restore the file "
                "(a header row, then one example per line), or point --data.data_dir at a complete copy."
            )
        if split != "test":
            raise PalUserError(
                f"{where} (task {spec.name!r}, {split}) has a header but no rows. Restore the file, or "
                "point --data.data_dir at a complete copy of the data."
            )
    name = Path(loc.location).name if loc.is_file else where
    out = RawSplit(
        spec.name, split, where, rows.ids, rows.texts, rows.label_array(name), rows.count, rows.bad
    )
    check_bad_rows(where, out.bad_rows, out.rows, spec.name, split, max_bad_fraction)
    return out


_FOUND_NAMES: dict[tuple[str, ...], tuple[str, ...]] = {}


def label_names_for(spec: TaskSpec, data_dir: Path) -> tuple[str, ...]:
    """``spec.label_names``, else those its training split spells, else ``()`` (class indices).

    Raises:
        PalUserError: when the training split names more or fewer classes than ``num_labels``.
    """
    if spec.is_regression or spec.label_names:
        return tuple(spec.label_names)
    loc = resolve_source(spec, "train", data_dir)
    if loc is None or spec.label_column is None or not source_exists(spec, loc, data_dir):
        return ()
    # size and time: cheap, and enough to see a file replaced within one process
    stamp = f"{os.stat(loc.location).st_size}:{os.stat(loc.location).st_mtime_ns}" if loc.is_file else ""
    reading = (spec.format, str(spec.label_column), repr(spec.delimiter), repr(spec.quoting))
    key = (spec.name, loc.location, str(loc.hf_split), stamp, *reading)
    if key not in _FOUND_NAMES:
        _FOUND_NAMES[key] = loc.reader.label_names(spec, loc, data_dir)
    names = _FOUND_NAMES[key]
    if names and len(names) != spec.num_labels:
        raise PalUserError(
            f"Task {spec.name!r} has num_labels {spec.num_labels}, but the labels of its train split "
            f"({loc.location}) are {len(names)} names: {describe_names(names)}. Set num_labels to "
            f"{len(names)}, or give the classes in order with label_names: [...] (a name that is not a class "
            "then makes a bad row)."
        )
    return names

"""Files of sentences in, prediction files out: what ``pal-lightning predict --predict.input FILE`` reads and writes.

An input file is a CSV/TSV with a header (tab-separated when the header holds a tab) or JSON lines. Each row
gives its task's text column(s), or ``text`` (``text_a``/``text_b``, ``question1``/``question2``); an ``id``
column is copied (else the row number is the id); without a task named, a ``task`` column names each row's.
Messages name the file's line (the header is line 1).

Output: comma-separated, one row per input row in order: ``id,label,p_<label>...`` (``id,score`` for
regression), or for a mixed file ``id,task,label,score,p_<task>_<label>...``, empty where they do not apply.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pal_lightning.core.columns import probability_columns
from pal_lightning.core.errors import PalUserError
from pal_lightning.core.files import atomic_write

#: The column that names each row's task in a mixed input file.
TASK_COLUMN = "task"
#: Other column names accepted for single sentences and for pairs, after the task's own.
SINGLE_COLUMNS = (("sentence",), ("text",))
PAIR_COLUMNS = (("sentence1", "sentence2"), ("text_a", "text_b"), ("question1", "question2"))


@dataclass
class InputRows:
    """The rows of an input file, in file order: each row's id, task and input (a text or a pair)."""

    ids: list[str]
    tasks: list[str]
    inputs: list[str | tuple[str, str]]

    def items(self) -> list[tuple[str, Any]]:
        """``(task, input)`` per row: what :func:`~pal_lightning.module.inference.predict_items` takes."""
        return list(zip(self.tasks, self.inputs, strict=True))


def read_records(path: Path) -> tuple[list[str], list[tuple[int, dict[str, Any]]]]:
    """Column names and ``(line, row)`` of a CSV/TSV with a header, or of a JSON-lines file.

    Raises:
        PalUserError: for a missing or unreadable file, a line that is not a JSON object, or no rows.
    """
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte order mark (Excel's CSV UTF-8) dropped
    except FileNotFoundError:
        raise PalUserError(f"Input file {path} does not exist. Pass an existing CSV or JSONL file.") from None
    except (OSError, UnicodeDecodeError) as err:
        raise PalUserError(f"Cannot read {path} as UTF-8 text ({err}).") from None
    rows: list[tuple[int, dict[str, Any]]] = []
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        for line, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except ValueError as err:
                raise PalUserError(
                    f"{path} line {line} is not JSON ({err}). Write one JSON object per line."
                ) from None
            if not isinstance(row, dict):
                raise PalUserError(f"{path} line {line} is not a JSON object. Write one object per line.")
            rows.append((line, row))
        names = list(dict.fromkeys(k for _, r in rows for k in r))
    else:
        delimiter = "\t" if "\t" in text.split("\n", 1)[0] else ","
        reader = csv.DictReader(io.StringIO(text), delimiter=delimiter)
        rows = [(reader.line_num, row) for row in reader]  # line_num: the record's last line, header is 1
        names = [c for c in (reader.fieldnames or []) if c]
    if not rows:
        raise PalUserError(
            f"Input file {path} holds no rows to predict. Add a header line and one row per input."
        )
    return names, rows


def text_columns(path: Path, names: Sequence[str], spec: Any) -> tuple[str, ...]:
    """The columns among ``names`` that hold ``spec``'s text(s).

    Raises:
        PalUserError: when the file has none (e.g. a pair task given single sentences).
    """
    candidates = [tuple(spec.text_columns), *(PAIR_COLUMNS if spec.is_pair else SINGLE_COLUMNS)]
    columns = next((c for c in candidates if all(n in names for n in c)), None)
    if columns is None:
        kind = "sentence pairs" if spec.is_pair else "single sentences"
        fix = (
            "Give two text columns, e.g. sentence1,sentence2."
            if spec.is_pair
            else "Give a text column named sentence or text."
        )
        raise PalUserError(
            f"Task {spec.name!r} takes {kind}, but {path} has no column(s) {' and '.join(spec.text_columns)} "
            f"(its columns: {', '.join(names) or 'none'}). {fix}"
        )
    return columns


def read_input(path: str | os.PathLike[str], specs: Mapping[str, Any], task: str | None = None) -> InputRows:
    """Ids, tasks and inputs of ``path``: every row of ``task``, or of its ``task`` column (one of ``specs``).

    Raises:
        PalUserError: for a file :func:`read_records` refuses, a task the model does not know (naming the
            known ones), missing text columns, or an empty text.
    """
    path = Path(path)
    names, records = read_records(path)
    tasks = [task if task else str(row.get(TASK_COLUMN) or "").strip() for _, row in records]
    for (line, _), name in zip(records, tasks, strict=True):
        if name not in specs:
            raise PalUserError(
                f"Line {line} of {path} has task {name!r}, which this model does not predict: its tasks are "
                f"{', '.join(specs)}. Fix the task column."
            )
    columns = {name: text_columns(path, names, specs[name]) for name in dict.fromkeys(tasks)}
    ids: list[str] = []
    inputs: list[str | tuple[str, str]] = []
    for k, ((line, row), name) in enumerate(zip(records, tasks, strict=True)):
        spec = specs[name]
        values = tuple("" if row.get(c) is None else str(row.get(c)) for c in columns[name])
        if not all(v.strip() for v in values):
            raise PalUserError(
                f"Line {line} of {path} has an empty {'/'.join(columns[name])}. Fill it in or remove the row."
            )
        id_column = spec.id_column if spec.id_column in names else ("id" if "id" in names else None)
        ids.append(str(row[id_column]) if id_column and row.get(id_column) is not None else str(k))
        inputs.append((values[0], values[1]) if spec.is_pair else values[0])
    return InputRows(ids, tasks, inputs)


def six(value: Any) -> str:
    """A number with 6 decimals."""
    return f"{float(value):.6f}"


def output_rows(ids: Sequence[str], predictions: Any) -> tuple[list[str], list[list[Any]]]:
    """Header and rows of one task's output: ``id,label,p_<name>...``, or ``id,score``."""
    if predictions.scores is not None:
        return ["id", "score"], [[i, six(s)] for i, s in zip(ids, predictions.scores, strict=True)]
    probs = predictions.probabilities
    names = predictions.label_names or [str(c) for c in range(probs.shape[1])]
    rows = [[i, label, *map(six, row)] for i, label, row in zip(ids, predictions.labels, probs, strict=True)]
    return ["id", "label", *probability_columns(names)], rows


def mixed_output_rows(ids: Sequence[str], predictions: Sequence[Any]) -> tuple[list[str], list[list[Any]]]:
    """Header and rows of a mixed file's output: ``id,task,label,score`` then ``p_<task>_<label>`` per class
    of each classification task present (in order of first appearance), empty where they do not apply."""
    classes: dict[str, list[str]] = {}
    for p in predictions:
        if p.probabilities is not None and p.task not in classes:
            names = p.label_names or [str(c) for c in range(len(p.probabilities))]
            classes[p.task] = [f"{p.task}_{n}" for n in names]
    # made distinct over every task at once: task a's class b_c and task a_b's class c are both p_a_b_c
    distinct = iter(probability_columns([n for names in classes.values() for n in names]))
    columns = {task: [next(distinct) for _ in names] for task, names in classes.items()}
    header = ["id", "task", "label", "score", *(c for cs in columns.values() for c in cs)]
    out = []
    for row_id, p in zip(ids, predictions, strict=True):
        cells = {"id": row_id, "task": p.task}
        if p.score is not None:
            cells["score"] = six(p.score)
        else:
            cells["label"] = p.label
            cells.update(zip(columns[p.task], map(six, p.probabilities), strict=True))
        out.append([cells.get(name, "") for name in header])
    return header, out


def write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Write a comma-separated file with ``\\n`` line ends, atomically
    (:func:`pal_lightning.core.files.atomic_write`)."""
    with atomic_write(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")  # the csv module's default ends lines with \r\n
        writer.writerow(header)
        writer.writerows(rows)

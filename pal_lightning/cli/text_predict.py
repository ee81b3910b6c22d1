"""``pal-lightning predict --predict.input FILE``: predictions for a user's own sentences.

The plain ``pal-lightning predict`` scores the configured data splits and writes CS224N files. With
``--predict.input`` it instead reads a CSV (comma- or tab-separated, with a header) or JSON-lines file
of new sentences, predicts one task with :meth:`MultiTaskModule.predict`, and writes one output row
per input row::

    pal-lightning predict --predict.model runs/demo/version_0/model --predict.task sst \\
        --predict.input reviews.csv [--predict.output out.csv] [--predict.overwrite true]

The model is a ``save_pretrained`` folder or hub id (``--predict.model``), or a Lightning checkpoint
(``--ckpt_path``). Input columns: the task's own text column(s) (``sentence``; ``sentence1`` and
``sentence2`` for pairs), or ``text`` (``text_a``/``text_b``, ``question1``/``question2``); an ``id``
column is copied to the output, otherwise the 0-based row number is the id. Output columns: ``id``,
``label`` and one ``p_<label>`` probability per class, or ``id`` and ``score`` for regression. Column
names are safe identifiers: every run of characters other than letters, digits and ``_`` in a label
becomes one ``_`` (``p_somewhat_negative``); numbers have 6 decimals; lines end with ``\n`` alone.

Without ``--predict.task``, a file with a ``task`` column is a *mixed* stream: each row is predicted with
its own task, rows of several tasks in one batch (``module.predict([(task, text), ...])``,
:mod:`pal_lightning.module.inference`). Each row takes its task's text column(s) as above (a file
may hold ``sentence`` for single-sentence rows and ``sentence1``/``sentence2`` for pair rows). The output
(default ``<input>-predictions.csv``) keeps the input's row order: ``id``, ``task``, ``label`` (empty for a
regression row), ``score`` (empty for a classification row), then ``p_<task>_<label>`` per class of each
classification task present, empty on other tasks' rows. With ``--predict.task`` a ``task`` column is
ignored, as before.
"""

from __future__ import annotations

import argparse
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

#: The option that switches ``pal-lightning predict`` to new sentences.
INPUT_OPTION = "--predict.input"
#: The column that names each row's task in a mixed input file (used when ``--predict.task`` is not given).
TASK_COLUMN = "task"
#: Other column names accepted for single sentences and for pairs, after the task's own.
SINGLE_COLUMNS = (("sentence",), ("text",))
PAIR_COLUMNS = (("sentence1", "sentence2"), ("text_a", "text_b"), ("question1", "question2"))


def wants_text_predict(argv: Sequence[str]) -> bool:
    """Whether a command line is ``predict`` with ``--predict.input``."""
    args = list(argv)
    return bool(args) and args[0] == "predict" and any(a.split("=", 1)[0] == INPUT_OPTION for a in args)


@dataclass
class InputRows:
    """The rows of an input file: ids and text columns (one, or two for pairs)."""

    ids: list[str]
    texts: list[tuple[str, ...]]
    columns: tuple[str, ...]


def _read_records(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """(column names, rows) of a CSV/TSV with a header, or of a JSON-lines file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PalUserError(f"Input file {path} does not exist. Pass an existing CSV or JSONL file.") from None
    except (OSError, UnicodeDecodeError) as err:
        raise PalUserError(f"Cannot read {path} as UTF-8 text ({err}).") from None
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        rows: list[dict[str, Any]] = []
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as err:
                raise PalUserError(
                    f"{path} line {n} is not JSON ({err}). Write one JSON object per line."
                ) from None
            if not isinstance(row, dict):
                raise PalUserError(f"{path} line {n} is not a JSON object. Write one object per line.")
            rows.append(row)
        names = list(dict.fromkeys(k for r in rows for k in r))
        return names, rows
    first = text.split("\n", 1)[0]
    delimiter = "\t" if "\t" in first else ","
    reader = csv.DictReader(io.StringIO(text), delimiter=delimiter)
    return [c for c in (reader.fieldnames or []) if c], list(reader)


def read_input(path: str | os.PathLike[str], spec: Any) -> InputRows:
    """Ids and texts of ``path`` for task ``spec``.

    Raises:
        PalUserError: for a missing or empty file, missing text columns (e.g. a pair task given single
            sentences) or an empty text.
    """
    path = Path(path)
    names, rows = _read_nonempty(path)
    return _rows_of_task(path, names, rows, spec)


def _read_nonempty(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """:func:`_read_records`, refusing a file without rows."""
    names, rows = _read_records(path)
    if not rows:
        raise PalUserError(
            f"Input file {path} holds no rows to predict. Add a header line and one row per input."
        )
    return names, rows


def _rows_of_task(
    path: Path,
    names: list[str],
    rows: list[dict[str, Any]],
    spec: Any,
    numbers: Sequence[int] | None = None,
) -> InputRows:
    """Ids and texts of ``rows`` (all of task ``spec``), from the task's text columns among ``names``.

    ``numbers``: each row's 0-based number in the file (the id without an id column, and the row a
    message names); by default its index in ``rows``.
    """
    candidates = [tuple(spec.text_columns), *(PAIR_COLUMNS if spec.is_pair else SINGLE_COLUMNS)]
    columns = next((c for c in candidates if all(n in names for n in c)), None)
    if columns is None:
        wanted = " and ".join(spec.text_columns)
        kind = "sentence pairs" if spec.is_pair else "single sentences"
        raise PalUserError(
            f"Task {spec.name!r} takes {kind}, but {path} has no column(s) {wanted} (its columns: "
            f"{', '.join(names) or 'none'}). "
            + (
                "Give two text columns, e.g. sentence1,sentence2."
                if spec.is_pair
                else "Give a text column named sentence or text."
            )
        )
    id_column = spec.id_column if spec.id_column in names else ("id" if "id" in names else None)
    ids, texts = [], []
    for k, row in enumerate(rows):
        i = k if numbers is None else numbers[k]
        values = tuple("" if row.get(c) is None else str(row.get(c)) for c in columns)
        if not all(v.strip() for v in values):
            raise PalUserError(
                f"Row {i} of {path} has an empty {'/'.join(columns)}. Fill it in or remove the row."
            )
        ids.append(str(row[id_column]) if id_column and row.get(id_column) is not None else str(i))
        texts.append(values)
    return InputRows(ids, texts, columns)


def output_rows(ids: Sequence[str], predictions: Any) -> tuple[list[str], list[list[Any]]]:
    """Header and rows of the output file: ``id,label,p_<name>...`` or ``id,score``, numbers with 6 decimals."""
    if predictions.scores is not None:
        return ["id", "score"], [[i, f"{float(s):.6f}"] for i, s in zip(ids, predictions.scores, strict=True)]
    probs = predictions.probabilities
    names = predictions.label_names or [str(c) for c in range(probs.shape[1])]
    header = ["id", "label", *probability_columns(names)]
    rows = [
        [i, label, *(f"{float(p):.6f}" for p in row)]
        for i, label, row in zip(ids, predictions.labels, probs, strict=True)
    ]
    return header, rows


@dataclass
class MixedRows:
    """The rows of a mixed input file: each row's id, task and text(s), in file order."""

    ids: list[str]
    tasks: list[str]
    texts: list[tuple[str, ...]]


def has_task_column(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` (read as :func:`read_input` reads it) has a ``task`` column."""
    return TASK_COLUMN in _read_records(Path(path))[0]


def read_mixed_input(path: str | os.PathLike[str], specs: Mapping[str, Any]) -> MixedRows:
    """Ids, tasks and texts of a file whose ``task`` column names each row's task (one of ``specs``).

    Each task's rows are read as :func:`read_input` reads a one-task file (the task's own columns, or the
    other accepted names), so the messages are the same.

    Raises:
        PalUserError: for a task the model does not know (naming the known ones), or as :func:`read_input`.
    """
    path = Path(path)
    names, rows = _read_nonempty(path)
    tasks = [str(row.get(TASK_COLUMN) or "").strip() for row in rows]
    unknown = next((i for i, task in enumerate(tasks) if task not in specs), None)
    if unknown is not None:
        raise PalUserError(
            f"Row {unknown} of {path} has task {tasks[unknown]!r}, which this model does not predict: its "
            f"tasks are {', '.join(specs)}. Fix the task column."
        )
    ids: list[str] = [""] * len(rows)
    texts: list[tuple[str, ...]] = [()] * len(rows)
    for task in dict.fromkeys(tasks):
        at = [i for i, t in enumerate(tasks) if t == task]
        part = _rows_of_task(path, names, [rows[i] for i in at], specs[task], at)
        for k, i in enumerate(at):
            ids[i], texts[i] = part.ids[k], part.texts[k]
    return MixedRows(ids, tasks, texts)


def mixed_output_rows(rows: MixedRows, predictions: Sequence[Any]) -> tuple[list[str], list[list[Any]]]:
    """Header and rows of a mixed file's output: ``id,task,label,score`` then ``p_<task>_<label>`` per class
    of each classification task present (in order of first appearance), empty where they do not apply."""
    columns: dict[str, list[str]] = {}
    for p in predictions:
        if p.probabilities is not None and p.task not in columns:
            names = p.label_names or [str(c) for c in range(len(p.probabilities))]
            columns[p.task] = probability_columns([f"{p.task}_{n}" for n in names])
    header = ["id", "task", "label", "score", *(c for cs in columns.values() for c in cs)]
    out = []
    for row_id, p in zip(rows.ids, predictions, strict=True):
        cells = {"id": row_id, "task": p.task}
        if p.score is not None:
            cells["score"] = f"{float(p.score):.6f}"
        else:
            cells["label"] = p.label
            cells.update(zip(columns[p.task], (f"{float(x):.6f}" for x in p.probabilities), strict=True))
        out.append([cells.get(name, "") for name in header])
    return header, out


def write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Write a comma-separated file with ``\\n`` line ends, atomically
    (:func:`pal_lightning.core.files.atomic_write`)."""
    with atomic_write(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")  # the csv module's default ends lines with \r\n
        writer.writerow(header)
        writer.writerows(rows)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pal-lightning predict",
        description="Predict one task for the sentences of a CSV or JSONL file.",
        exit_on_error=False,
    )
    parser.add_argument(
        "--predict.input", dest="input", required=True, help="CSV/TSV with a header, or JSONL"
    )
    parser.add_argument(
        "--predict.task",
        dest="task",
        help="the task to predict, e.g. sst (default: each row's own, from the file's task column)",
    )
    parser.add_argument("--predict.model", dest="model", help="a save_pretrained folder or hub id")
    parser.add_argument("--ckpt_path", dest="ckpt", help="a Lightning checkpoint of MultiTaskModule instead")
    parser.add_argument(
        "--predict.output",
        dest="output",
        help="output CSV (default: <input>-<task>-predictions.csv, or <input>-predictions.csv for a task column)",
    )
    parser.add_argument("--predict.overwrite", dest="overwrite", default="false", choices=["true", "false"])
    parser.add_argument("--predict.batch_size", dest="batch_size", type=int, default=64)
    return parser


def load_model(model: str | None, ckpt: str | None) -> Any:
    """The module from a ``save_pretrained`` folder / hub id, or from a checkpoint.

    Raises:
        PalUserError: when neither or both are given, or the source cannot be loaded.
    """
    from pal_lightning.module.multitask import MultiTaskModule

    if bool(model) == bool(ckpt):
        raise PalUserError(
            "Give the model with exactly one of --predict.model <folder written by fit, e.g. "
            "runs/<name>/version_N/model, or a hub id> and --ckpt_path <file.ckpt>."
        )
    if model:
        return MultiTaskModule.from_pretrained(model)
    path = Path(str(ckpt))
    if not path.is_file():
        raise PalUserError(f"Checkpoint {path} does not exist. Pass the path of a .ckpt file to --ckpt_path.")
    from pal_lightning.core.checkpoint_io import AtomicCheckpointIO

    # one-line errors for a file that is no checkpoint, truncated, or refused by weights_only loading
    checkpoint = AtomicCheckpointIO().load_checkpoint(path, map_location="cpu", weights_only=True)
    module = MultiTaskModule.load_from_checkpoint(path, map_location="cpu", weights_only=True)
    max_length = (checkpoint.get("datamodule_hyper_parameters") or {}).get("max_length")
    if max_length:
        module.predict_max_length = int(max_length)
    return module


def run(argv: Sequence[str]) -> int:
    """Run ``pal-lightning predict --predict.input ...`` (``argv`` starts with ``predict``).

    Raises:
        PalUserError: for every user mistake (the caller prints it on one line and exits with 2).
    """
    args = list(argv)[1:]
    if "--config" in args or any(a.startswith("--config=") for a in args):
        raise PalUserError(
            "--config is not used with --predict.input: the model comes from --predict.model (a folder "
            "written by fit, runs/<name>/version_N/model) or --ckpt_path."
        )
    ns = _parser().parse_args(args)
    if ns.batch_size < 1:
        raise PalUserError(f"--predict.batch_size must be >= 1, got {ns.batch_size}.")
    source = Path(ns.input)
    if ns.task is None and not has_task_column(source):
        raise PalUserError(
            f"Which task? Pass --predict.task (e.g. sst) for every row, or add a {TASK_COLUMN!r} column to "
            f"{source} naming each row's task."
        )
    default = f"{source.stem}-{ns.task}-predictions.csv" if ns.task else f"{source.stem}-predictions.csv"
    output = Path(ns.output) if ns.output else source.with_name(default)
    if output.exists() and ns.overwrite != "true":
        raise PalUserError(
            f"{output} already exists. Nothing was predicted. Choose another --predict.output or pass "
            "--predict.overwrite true to replace it."
        )
    if output.resolve() == source.resolve():
        raise PalUserError("--predict.output is the input file. Choose another output path.")
    module = load_model(ns.model, ns.ckpt)
    if ns.task is None:
        return _run_mixed(module, source, output, ns.batch_size)
    spec = module.predict_spec(ns.task)  # unknown task: one line naming the model's tasks
    rows = read_input(source, spec)
    texts: list[Any] = [t if spec.is_pair else t[0] for t in rows.texts]
    predictions = module.predict(ns.task, texts, batch_size=ns.batch_size)
    header, out_rows = output_rows(rows.ids, predictions)
    write_csv(output, header, out_rows)
    print(f"pal-lightning: wrote {len(out_rows)} predictions of {ns.task!r} to {output}", flush=True)
    return 0


def _run_mixed(module: Any, source: Path, output: Path, batch_size: int) -> int:
    """Predict each row of ``source`` with its own task (mixed batches) and write ``output`` in row order."""
    rows = read_mixed_input(source, module.task_specs)
    items = [
        (task, text if module.task_specs[task].is_pair else text[0])
        for task, text in zip(rows.tasks, rows.texts, strict=True)
    ]
    predictions = module.predict(items, batch_size=batch_size)
    header, out_rows = mixed_output_rows(rows, predictions)
    write_csv(output, header, out_rows)
    tasks = ", ".join(dict.fromkeys(rows.tasks))
    print(f"pal-lightning: wrote {len(out_rows)} predictions ({tasks}) to {output}", flush=True)
    return 0

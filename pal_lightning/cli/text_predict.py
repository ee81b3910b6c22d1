"""``pal-lightning predict --predict.input FILE``: predictions for a user's own sentences, from a
``save_pretrained`` folder or hub id (``--predict.model``) or a checkpoint (``--ckpt_path``), for one task
(``--predict.task``) or each row's own (the file's ``task`` column; several tasks share batches). Files
read and written: :mod:`pal_lightning.inference.files`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from pal_lightning.core.errors import PalUserError
from pal_lightning.inference.files import (
    TASK_COLUMN,
    mixed_output_rows,
    output_rows,
    read_input,
    read_records,
    write_csv,
)

#: The option that switches ``pal-lightning predict`` to new sentences.
INPUT_OPTION = "--predict.input"


def wants_text_predict(argv: list[str]) -> bool:
    """Whether a command line is ``predict`` with ``--predict.input``."""
    return argv[:1] == ["predict"] and any(a.split("=", 1)[0] == INPUT_OPTION for a in argv)


_OPTIONS = {  # option: (its name in the namespace, help)
    INPUT_OPTION: ("input", "CSV/TSV with a header, or JSONL"),
    "--predict.task": (
        "task",
        "the task to predict, e.g. sst (default: each row's own, from the file's task column)",
    ),
    "--predict.model": ("model", "a save_pretrained folder or hub id"),
    "--ckpt_path": ("ckpt", "a Lightning checkpoint of MultiTaskModule instead"),
    # fit's option for the model's class (saved_class.CLASS_OPTION; not imported: it would import torch)
    "--model.class_path": (
        "model_class",
        "the class a model was saved from, if a subclass of MultiTaskModule (e.g. my_pkg.models.MyModule; "
        "imported, so on PYTHONPATH or installed)",
    ),
    "--predict.output": (
        "output",
        "output CSV (default: <input>-<task>-predictions.csv, or <input>-predictions.csv for a task column)",
    ),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pal-lightning predict",
        description="Predict one task for the sentences of a CSV or JSONL file.",
        exit_on_error=False,
        allow_abbrev=False,  # as the main CLI: --predict.out is a typo, not --predict.output
    )
    for option, (name, text) in _OPTIONS.items():
        parser.add_argument(option, dest=name, required=option == INPUT_OPTION, help=text)
    parser.add_argument("--predict.overwrite", dest="overwrite", default="false", choices=["true", "false"])
    parser.add_argument("--predict.batch_size", dest="batch_size", type=int, default=64)
    return parser


def run(argv: Sequence[str]) -> int:
    """Run ``pal-lightning predict --predict.input ...`` (``argv`` starts with ``predict``); user mistakes raise
    :class:`PalUserError`."""
    args = list(argv)[1:]
    if "--config" in args or any(a.startswith("--config=") for a in args):
        raise PalUserError(
            "--config is not used with --predict.input: the model comes from --predict.model (a folder "
            "written by fit, runs/<name>/version_N/model) or --ckpt_path."
        )
    # parse_known_args: argparse's own "unrecognized arguments" prints its usage and exits, whatever
    # exit_on_error says; main() prints the ArgumentError as one line
    ns, unknown = _parser().parse_known_args(args)
    if unknown:
        raise argparse.ArgumentError(None, f"unrecognized arguments: {' '.join(unknown)}")
    if ns.batch_size < 1:
        raise PalUserError(f"--predict.batch_size must be >= 1, got {ns.batch_size}.")
    source = Path(ns.input)
    if ns.task is None and TASK_COLUMN not in read_records(source)[0]:
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
    from pal_lightning.inference.pipeline import load_model
    from pal_lightning.module.inference import TaskPredictions, predict_items

    module = load_model(ns.model, ns.ckpt, ns.model_class)
    if ns.task is not None:
        module.predict_spec(ns.task)  # unknown task: one line naming the model's tasks
    rows = read_input(source, module.task_specs, ns.task)
    predictions = predict_items(module, rows.items(), ns.batch_size)
    if ns.task is None:
        header, out_rows = mixed_output_rows(rows.ids, predictions)
        what = f"({', '.join(dict.fromkeys(rows.tasks))})"
    else:
        header, out_rows = output_rows(rows.ids, TaskPredictions.of(ns.task, predictions))
        what = f"of {ns.task!r}"
    write_csv(output, header, out_rows)
    print(f"pal-lightning: wrote {len(out_rows)} predictions {what} to {output}", flush=True)
    return 0

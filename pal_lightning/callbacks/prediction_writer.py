"""Write ``<task>-<split>-output.csv`` files from ``predict_step`` outputs (``{"task", "split", "ids",
"predictions"}``, with ``"probabilities"`` for classification).

The CS224N starter's tasks get its format (``para-*`` files for Quora; ``Predicted_Similiary`` sic) with at
most 6 decimals: ``id \\t Predicted_Sentiment \\n`` then ``<id> , <prediction> \\n``. A task whose classes
have names gets ``id,label,p_<name>...``. Existing files are refused (unless ``overwrite=True``) before any
batch is predicted. Under DDP rank 0 gathers the rows, drops duplicate ids and writes alone.
"""

from __future__ import annotations

import logging
import numbers
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import BasePredictionWriter

from pal_lightning.core.batch import IDS, PREDICTIONS, PROBABILITIES, SPLIT, TASK
from pal_lightning.core.columns import probability_columns
from pal_lightning.core.contracts import ExampleOrder, PredictionLayout, datamodule_of, satisfies
from pal_lightning.core.distributed import gather_objects, is_main_process
from pal_lightning.core.errors import PalUserError
from pal_lightning.core.files import atomic_write
from pal_lightning.inference.files import write_csv

log = logging.getLogger(__name__)

#: Header column of each built-in task, as the CS224N starter writes it.
STARTER_HEADERS: dict[str, str] = {
    "sst": "Predicted_Sentiment",
    "cfimdb": "Predicted_Sentiment",
    "sst2": "Predicted_Sentiment",
    "qqp": "Predicted_Is_Paraphrase",
    "sts": "Predicted_Similiary",
}
#: Header column of any other task.
DEFAULT_HEADER = "Predicted_Label"
#: File-name prefix of a task where the CS224N starter names it otherwise (its Quora files are "para").
STARTER_FILE_PREFIXES: dict[str, str] = {"qqp": "para"}


def output_file_name(task: str, split: str) -> str:
    """``<task>-<split>-output.csv``, with ``para`` for Quora as the starter names it."""
    return f"{STARTER_FILE_PREFIXES.get(task, task)}-{split}-output.csv"


#: Decimals of a score in a prediction file (those of ``pal-lightning predict --predict.input``'s numbers).
SCORE_DECIMALS = 6


def format_value(value: Any) -> str:
    """A class as an int, a score rounded to :data:`SCORE_DECIMALS` decimals (trailing zeros dropped)."""
    if isinstance(value, numbers.Integral):  # bool, int and numpy ints
        return str(int(value))
    text = f"{float(value):.{SCORE_DECIMALS}f}"
    text = text.rstrip("0").rstrip(".") if "." in text else text
    return "0" if text == "-0" else text


def write_prediction_file(path: Path, header: str, rows: Sequence[tuple[str, Any]]) -> None:
    """Write one file in the starter's format, atomically (:func:`pal_lightning.core.files.atomic_write`)."""
    with atomic_write(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(f"id \t {header} \n")
        for ex_id, value in rows:
            f.write(f"{ex_id} , {format_value(value)} \n")


def write_named_file(
    path: Path,
    names: Sequence[str],
    rows: Sequence[tuple[str, Any]],
    probabilities: Mapping[str, Sequence[float]],
) -> None:
    """Write ``id,label,p_<name>...`` (the probability columns when ``probabilities`` has every row)."""
    with_p = bool(rows) and all(ex_id in probabilities for ex_id, _ in rows)
    header = ["id", "label", *(probability_columns(names) if with_p else [])]
    p = probabilities if with_p else {}
    lines = [[i, names[int(v)], *(format_value(float(x)) for x in p.get(i, []))] for i, v in rows]
    write_csv(path, header, lines)


def predicted_pairs(dm: PredictionLayout) -> list[tuple[str, str]]:
    """The ``(task, split)`` pairs ``dm`` predicts: its ``predicted_pairs()``, else every task and split."""
    if hasattr(dm, "predicted_pairs"):
        return list(dm.predicted_pairs())
    return [(t, s) for t in dm.task_names for s in dm.predict_splits]


def _as_list(values: Any) -> Any:
    return values.detach().cpu().tolist() if isinstance(values, torch.Tensor) else values


def _merge_ranks(local: dict[Any, Any]) -> dict[Any, Any]:
    """Every rank's ``{key: list or dict}``, merged in rank order (lists extended, dicts updated)."""
    merged: dict[Any, Any] = {}
    for part in gather_objects(local):
        for key, values in part.items():
            if isinstance(values, list):
                merged.setdefault(key, []).extend(values)
            else:
                merged.setdefault(key, {}).update(values)
    return merged


class PredictionWriter(BasePredictionWriter):
    """Collect predictions and write ``<task>-<split>-output.csv`` files (CS224N format).

    Args:
        output_dir: folder of the files; default ``<trainer.log_dir>/predictions`` (or
            ``<default_root_dir>/predictions`` without a logger).
        overwrite: replace existing prediction files instead of refusing to run.
        headers: header column per task, overriding :data:`STARTER_HEADERS`.
    """

    def __init__(
        self,
        output_dir: str | os.PathLike[str] | None = None,
        overwrite: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(write_interval="batch")
        self.output_dir = Path(output_dir) if output_dir is not None else None
        self.overwrite = overwrite
        self.headers = {**STARTER_HEADERS, **(dict(headers) if headers else {})}
        self._rows: dict[tuple[str, str], list[tuple[str, Any]]] = {}
        # class probabilities by (task, split) and id, for the files of tasks whose classes have names
        self._probs: dict[tuple[str, str], dict[str, list[float]]] = {}
        self._gathered_probs: dict[tuple[str, str], dict[str, list[float]]] = {}
        #: Paths written by the last prediction run (rank 0).
        self.written: list[Path] = []
        self._out_dir: Path | None = None

    def resolve_output_dir(self, trainer: pl.Trainer) -> Path:
        """The folder files go to (see the class docstring)."""
        if self.output_dir is not None:
            return self.output_dir
        return Path(trainer.log_dir or trainer.default_root_dir) / "predictions"

    def expected_files(self, trainer: pl.Trainer) -> list[Path] | None:
        """Files the run will write, when the data module tells which tasks and splits it serves."""
        dm = datamodule_of(trainer)
        if not satisfies(dm, PredictionLayout) or not dm.task_names or not dm.predict_splits:
            return None
        return [self.resolve_output_dir(trainer) / output_file_name(t, s) for t, s in predicted_pairs(dm)]

    def _check_no_overwrite(self, paths: Sequence[Path], out_dir: Path) -> None:
        existing = [p for p in paths if p.exists()]
        if existing and not self.overwrite:
            raise PalUserError(
                f"Prediction files already exist in {out_dir}: {', '.join(p.name for p in existing)}. "
                "Nothing was predicted. Choose another output_dir, move the files, or pass overwrite=True "
                "(--predictions.overwrite true on the command line) to replace them."
            )

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "predict":
            return
        # Lightning warns that it cannot track batch indices of pre-batched loaders; this writer
        # takes ids from the predictions and never uses them.
        warnings.filterwarnings("ignore", message="Couldn't infer the batch indices fetched")
        self._rows, self._probs, self.written = {}, {}, []
        # resolved here, on every rank: under DDP trainer.log_dir is a broadcast that rank 0 alone
        # (which writes the files) would wait on forever
        out_dir = self._out_dir = self.resolve_output_dir(trainer)
        expected = self.expected_files(trainer)
        if expected is None:  # tasks unknown: any prediction file in the folder is refused
            expected = sorted(out_dir.glob("*-output.csv")) if out_dir.is_dir() else []
        self._check_no_overwrite(expected, out_dir)

    def write_on_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        prediction: Any,
        batch_indices: Sequence[int] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        if not isinstance(prediction, Mapping) or not {TASK, IDS, PREDICTIONS} <= set(prediction):
            raise PalUserError(
                "PredictionWriter needs predict_step to return {'task', 'split', 'ids', 'predictions'}; "
                f"got {type(prediction).__name__}."
            )
        split = prediction.get(SPLIT) or (batch.get(SPLIT) if isinstance(batch, Mapping) else None) or "test"
        key = (str(prediction[TASK]), str(split))
        ids = [str(i) for i in prediction[IDS]]
        self._rows.setdefault(key, []).extend(zip(ids, _as_list(prediction[PREDICTIONS]), strict=True))
        if (probs := prediction.get(PROBABILITIES)) is not None:
            self._probs.setdefault(key, {}).update(zip(ids, _as_list(probs), strict=True))

    def on_predict_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # every rank takes part in both gathers
        gathered, self._gathered_probs = _merge_ranks(self._rows), _merge_ranks(self._probs)
        if is_main_process(trainer):
            self.written = self._write_all(trainer, gathered)
        self._rows, self._probs, self._gathered_probs = {}, {}, {}

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # say where the files went; at teardown, so that the stopped progress bar stays above it
        if stage == "predict" and is_main_process(trainer) and self.written:
            folders = sorted({str(p.parent) for p in self.written})
            print(
                f"pal-lightning: wrote {len(self.written)} prediction file(s) to {', '.join(folders)}: "
                + ", ".join(p.name for p in self.written),
                flush=True,
            )

    def class_names(self, trainer: pl.Trainer) -> dict[str, list[str]]:
        """The class names of the tasks written with names: the module's (``label_names``: given, saved or
        read from the data), else the data module's (``label_names()``); the starter's tasks are left out.
        The module's win: its head's class ``i`` is its name ``i``, whatever order other data lists."""
        found: dict[str, list[str]] = dict(getattr(trainer.lightning_module, "label_names", None) or {})
        dm = datamodule_of(trainer)
        dm_names = getattr(dm, "label_names", None)
        if callable(dm_names):
            for task, names in dm_names().items():
                found.setdefault(task, names)
        for view, info in dict(getattr(dm, "eval_views", None) or {}).items():  # scored by their task's head
            parent = getattr(info, "parent", None)
            if parent in found:
                found.setdefault(view, found[parent])
        return {task: list(n) for task, n in found.items() if task not in STARTER_HEADERS and n}

    def _order(
        self, trainer: pl.Trainer, task: str, split: str, rows: list[tuple[str, Any]]
    ) -> list[tuple[str, Any]]:
        """Drop duplicate ids (first kept) and put rows in file order when the data module knows it."""
        unique = dict(reversed(rows))  # the first of each id wins
        dm = datamodule_of(trainer)
        if satisfies(dm, ExampleOrder):
            try:
                file_order = list(dm.example_ids(task, split))
            except Exception:  # noqa: BLE001 - ordering is cosmetic; fall back to sorted ids
                file_order = []
            if file_order and set(file_order) == set(unique):
                return [(i, unique[i]) for i in file_order]
        return sorted(unique.items())

    def _write_all(
        self, trainer: pl.Trainer, gathered: dict[tuple[str, str], list[tuple[str, Any]]]
    ) -> list[Path]:
        out_dir = self._out_dir or self.resolve_output_dir(trainer)
        targets = {key: out_dir / output_file_name(*key) for key in gathered}
        # Check every target before writing any, so a refusal leaves nothing half-written.
        self._check_no_overwrite(list(targets.values()), out_dir)
        written = []
        names = self.class_names(trainer)
        for (task, split), path in sorted(targets.items()):
            rows = self._order(trainer, task, split, gathered[(task, split)])
            if task in names:
                write_named_file(path, names[task], rows, self._gathered_probs.get((task, split), {}))
            else:
                write_prediction_file(path, self.headers.get(task, DEFAULT_HEADER), rows)
            written.append(path)
            log.info("Wrote %d predictions to %s", len(rows), path)
        return written

"""The accuracy matrix R of the GEM paper during a sequential run (:class:`ContinualEvaluation`)."""

from __future__ import annotations

import copy
import csv
import json
import logging
import math
import os
from typing import Any

import lightning.pytorch as pl

from pal_lightning.callbacks.score_report import TeardownPrinter
from pal_lightning.core.contracts import PhasedData, TaskPredictor, datamodule_of, require
from pal_lightning.core.distributed import is_main_process
from pal_lightning.core.errors import PalUserError
from pal_lightning.core.files import atomic_write, free_name
from pal_lightning.module.evaluation import evaluate_loader
from pal_lightning.tasks.continual_metrics import continual_metrics

log = logging.getLogger(__name__)

BASELINE = "baseline"


def _finite_or_none(value: Any) -> Any:
    """``value`` with every non-finite float of it replaced by ``None`` (JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_or_none(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


#: The short names of :func:`continual_metrics`' figures, as the GEM paper writes them.
SHORT_NAMES = {
    "average_accuracy": "ACC",
    "backward_transfer": "BWT",
    "forward_transfer": "FWT",
    "forgetting": "forgetting",
}


def format_continual(
    tasks: list[str],
    metrics: list[str],
    rows: list[tuple[str, list[float]]],
    summary: dict[str, float] | None,
    where: str,
) -> str:
    """The printed report: the matrix ``rows`` (``(after, scores)``; ``R`` below its baseline row) of
    ``tasks`` scored by their main ``metrics``, then ACC, BWT, FWT and forgetting (or why not yet)."""
    width = max(10, *(len(t) + 2 for t in tasks))
    lines = [
        f"Continual evaluation ({where}): R, a row after each phase; "
        + ", ".join(f"{t} {m}" for t, m in zip(tasks, metrics, strict=True)),
        f"  {'after':<10}" + "".join(f"{t:>{width}}" for t in tasks),
    ]
    lines += [f"  {after:<10}" + "".join(f"{v:>{width}.4f}" for v in values) for after, values in rows]
    if summary is None:
        done = max(0, len(rows) - 1)
        lines.append(
            f"  ACC, BWT, FWT: after all {len(tasks)} phases ({done} evaluated; the run ended before)"
        )
    else:
        # a transfer has a direction: its sign always shown
        shown = [
            f"{SHORT_NAMES.get(k, k)} {v:{'+' if 'transfer' in k else ''}.4f}" for k, v in summary.items()
        ]
        lines.append("  " + "   ".join(shown))
    return "\n".join(lines)


def _task_predictor(pl_module: pl.LightningModule) -> TaskPredictor:
    return require(pl_module, TaskPredictor, "ContinualEvaluation", "use a MultiTaskModule (or a subclass).")


class ContinualEvaluation(TeardownPrinter):
    """Score every phase task before training and after each phase of a sequential schedule.

    Logs ``continual/R/<after>/<task>`` and ``continual/<metric>`` (ACC, BWT, FWT, forgetting), writes
    ``<filename>.csv``/``.json`` into the run folder and prints R and the figures when the fit ends; the
    rows so far are checkpointed (exact resume).

    Args:
        limit_eval_examples: score each task on its split's first N examples (``None``: all).
        split: the labelled split to score.
        filename: stem of the CSV and JSON files written into ``trainer.log_dir``.
    """

    def __init__(
        self, limit_eval_examples: int | None = 1000, split: str = "dev", filename: str = "continual"
    ):
        if limit_eval_examples is not None and limit_eval_examples < 1:
            raise PalUserError(f"limit_eval_examples must be >= 1 or None, got {limit_eval_examples}.")
        self.limit_eval_examples = limit_eval_examples
        self.split = split
        self.filename = filename
        self.tasks: list[str] = []  # the columns of R
        self.phases: list[list[Any]] = []  # [task, start, end] in training batches
        self.baseline: list[float] | None = None
        self.R: list[list[float]] = []  # R[i][j]: main metric of task j after phase i
        self.history: list[dict[str, Any]] = []  # {"after": ..., "scores": {task: {metric: value}}}
        self._paths: tuple[str, str] | None = None
        self._data: PhasedData | None = None
        self._steps_per_epoch = 0  # read once per fit: the data module computes it from its phase plan

    def state_dict(self) -> dict[str, Any]:
        return copy.deepcopy({k: getattr(self, k) for k in ("tasks", "phases", "baseline", "R", "history")})

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.tasks, self.history = list(state_dict.get("tasks", [])), list(state_dict.get("history", []))
        self.phases = [list(p) for p in state_dict.get("phases", [])]
        baseline = state_dict.get("baseline")
        self.baseline = None if baseline is None else [float(x) for x in baseline]
        self.R = [[float(x) for x in row] for row in state_dict.get("R", [])]

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._data = self._phased_data(trainer)
        self._steps_per_epoch = int(self._data.steps_per_epoch)
        data_phases = self._data.phases
        phases: list[list[Any]] = [[p.task, int(p.start), int(p.end)] for p in data_phases]
        if self.phases and self.phases != phases:
            raise PalUserError(
                f"ContinualEvaluation: the checkpoint's phases {self.phases} differ from the data module's "
                f"{phases}; resume with the same schedule, task_order and steps_per_task."
            )
        self.phases = phases
        self.tasks = [p.task for p in data_phases]
        self._paths = self._free_paths(trainer)
        if self.baseline is None:
            self._score(trainer, pl_module, BASELINE)
        elif is_main_process(trainer):
            self._write()  # a resumed run: the new run directory gets the rows so far

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self.phases or len(self.R) >= len(self.phases):
            return
        done = trainer.current_epoch * self._steps_per_epoch + batch_idx + 1
        phase = self.phases[len(self.R)]
        if done == phase[2]:
            self._score(trainer, pl_module, phase[0])

    def _score(self, trainer: pl.Trainer, pl_module: pl.LightningModule, after: str) -> None:
        scores = self.evaluate(trainer, pl_module)
        row = self._row(pl_module, scores)
        if self.baseline is None:
            self.baseline = row
        else:
            self.R.append(row)
        self._record(trainer, after, scores, row)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Print R, ACC, BWT, FWT and forgetting beside the score report (rank 0)."""
        if self.baseline is None or not is_main_process(trainer):
            return
        specs = _task_predictor(pl_module).task_specs
        rows = [(BASELINE, self.baseline), *((p[0], r) for p, r in zip(self.phases, self.R, strict=False))]
        limit = "all" if self.limit_eval_examples is None else f"first {self.limit_eval_examples}"
        where = f"{self.split}, {limit} examples per task"
        text = format_continual(
            self.tasks, [specs[t].main_metric for t in self.tasks], rows, self.metrics, where
        )
        saved = (
            ""
            if self._paths is None
            else f"\n  saved to {self._paths[0]} and {os.path.basename(self._paths[1])}"
        )
        self.print_at_teardown(f"\n{text}{saved}")

    def _phased_data(self, trainer: pl.Trainer) -> PhasedData:
        fix = "use a MultiTaskDataModule with schedule='sequential' (--data.init_args.schedule sequential)."
        data = require(datamodule_of(trainer), PhasedData, "ContinualEvaluation", fix)
        if not data.phases:
            raise PalUserError(f"ContinualEvaluation needs the phases of a sequential schedule: {fix}")
        return data

    def evaluate(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, dict[str, float]]:
        """``{task: {metric: value}}`` on the evaluation split (a collective under DDP)."""
        data = self._data if self._data is not None else self._phased_data(trainer)
        loader = data.eval_dataloader(self.split, self.tasks, self.limit_eval_examples)
        specs = [_task_predictor(pl_module).task_specs[t] for t in self.tasks]
        forward_context = trainer.precision_plugin.forward_context()
        return evaluate_loader(pl_module, loader, specs, forward_context).metrics

    def _row(self, pl_module: pl.LightningModule, scores: dict[str, dict[str, float]]) -> list[float]:
        specs = _task_predictor(pl_module).task_specs
        return [scores.get(t, {}).get(specs[t].main_metric, math.nan) for t in self.tasks]

    @property
    def metrics(self) -> dict[str, float] | None:
        """ACC, BWT, FWT and forgetting once every phase was evaluated, else ``None``."""
        if not self.phases or len(self.R) < len(self.phases):
            return None
        return continual_metrics(self.R, self.baseline)

    def _record(
        self, trainer: pl.Trainer, after: str, scores: dict[str, dict[str, float]], row: list[float]
    ) -> None:
        self.history.append({"after": after, "scores": scores})
        values = {f"continual/R/{after}/{t}": v for t, v in zip(self.tasks, row, strict=True)}
        summary = self.metrics
        if summary is not None:
            values.update({f"continual/{k}": v for k, v in summary.items()})
        for logger in trainer.loggers:  # rank-zero only inside the loggers
            logger.log_metrics(values, step=trainer.global_step)
        if is_main_process(trainer):
            log.info(
                "continual: after %s: %s",
                after,
                {t: round(v, 4) for t, v in zip(self.tasks, row, strict=True)},
            )
            if summary is not None:
                log.info("continual: %s", {k: round(v, 4) for k, v in summary.items()})
            self._write()

    def _free_paths(self, trainer: pl.Trainer) -> tuple[str, str]:
        log_dir = trainer.log_dir or trainer.default_root_dir
        stem = self.filename
        if is_main_process(trainer):
            stem = free_name(log_dir, self.filename, (".csv", ".json"))
        stem = trainer.strategy.broadcast(stem)
        return os.path.join(log_dir, f"{stem}.csv"), os.path.join(log_dir, f"{stem}.json")

    def _write(self) -> None:
        assert self._paths is not None
        csv_path, json_path = self._paths
        os.makedirs(os.path.dirname(csv_path) or ".", exist_ok=True)
        rows = ([[BASELINE, *self.baseline]] if self.baseline is not None else []) + [
            [p[0], *r] for p, r in zip(self.phases, self.R, strict=False)
        ]
        with atomic_write(csv_path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["after", *self.tasks])
            writer.writerows([[after, *(f"{v:.6f}" for v in values)] for after, *values in rows])
        summary = self.metrics
        payload = {
            "tasks": self.tasks,
            "split": self.split,
            "limit_eval_examples": self.limit_eval_examples,
            "phases": self.phases,
            "baseline": self.baseline,
            "R": self.R,
            "complete": summary is not None,
            "metrics": summary,
            "history": [{"after": h["after"], "scores": h["scores"]} for h in self.history],
        }
        with atomic_write(json_path, "w", encoding="utf-8") as f:
            json.dump(_finite_or_none(payload), f, indent=2)
            f.write("\n")

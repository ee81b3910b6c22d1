"""The score report: the best validation's table printed at the end of ``fit`` and saved as ``scores.json``;
:class:`TeardownPrinter`, the reports printed when the run ends, after Lightning's progress bar is gone."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn

from pal_lightning.core.contracts import ParameterReporter, ScoredTasks, last_stage_scores, satisfies
from pal_lightning.core.distributed import is_main_process
from pal_lightning.core.files import atomic_write_text
from pal_lightning.core.private_api import validate_during_fit
from pal_lightning.tasks.catalogue import overall_name
from pal_lightning.tasks.metrics import PARTIAL_SUFFIX

SCORES_FILE = "scores.json"


def _to_float(value: Any) -> float | None:
    try:
        return float(value) if math.isfinite(float(value)) else None
    except (TypeError, ValueError):
        return None


def task_coverage(scores: Mapping[str, float], scored: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """``(covered, missing)`` of the ``scored`` tasks (``None``: all present) by ``<stage>/<task>/...`` keys."""
    present = {key.split("/")[1] for key in scores if len(key.split("/")) == 3}
    names = list(scored) if scored is not None else sorted(present)
    return [t for t in names if t in present], [t for t in names if t not in present]


def evaluation_entry(scores: dict[str, float], pl_module: Any) -> dict[str, Any]:
    """``{"scores", "complete", "tasks_covered", "tasks_missing"}`` of one evaluation of ``pl_module``."""
    covered, missing = task_coverage(scores, scored_tasks_of(pl_module))
    return {"scores": scores, "complete": not missing, "tasks_covered": covered, "tasks_missing": missing}


def format_scores(
    scores: dict[str, float], monitor: str = "val/overall", auxiliary: Sequence[str] = (), column: str = "dev"
) -> str:
    """The table of ``<stage>/<task>/<metric>`` scores, ``monitor`` (or its partial mean) last, ``auxiliary``
    tasks marked ``*``, ``column`` heading the values."""
    parts = [(key.split("/"), value) for key, value in sorted(scores.items())]
    rows = [(p[1], p[2], value) for p, value in parts if len(p) == 3 and not p[2].endswith("loss")]
    lines = [f"  {'task':<10} {'metric':<10} {column:>8}"]
    lines += [
        f"  {task + ('*' if task in auxiliary else ''):<10} {metric:<10} {value:>8.4f}"
        for task, metric, value in rows
    ]
    if monitor in scores:
        lines.append(f"  {'overall':<21} {scores[monitor]:>8.4f}")
    elif monitor + PARTIAL_SUFFIX in scores:
        covered = sorted({task for task, _, _ in rows if task not in auxiliary})
        label = f"overall (partial: {', '.join(covered)})"
        lines.append(f"  {label:<21} {scores[monitor + PARTIAL_SUFFIX]:>8.4f}")
    shown = [t for t in auxiliary if any(task == t for task, _, _ in rows)]
    if shown:
        lines.append(f"  * auxiliary (trained, not in the overall): {', '.join(shown)}")
    return "\n".join(lines)


def format_classes(names: Mapping[str, Sequence[str]]) -> str:
    """Lines ``  topics classes: 0 business, 1 sports`` of the tasks whose classes have names."""
    return "".join(
        f"\n  {task} classes: " + ", ".join(f"{i} {name}" for i, name in enumerate(labels))
        for task, labels in names.items()
    )


def class_names_of(trainer: pl.Trainer) -> dict[str, list[str]]:
    """The data module's ``label_names()``, or ``{}``."""
    found = getattr(getattr(trainer, "datamodule", None), "label_names", None)
    return {t: list(n) for t, n in found().items()} if callable(found) else {}


def best_validation(history: Sequence[dict[str, Any]], monitor: str) -> dict[str, Any] | None:
    """The first entry of ``history`` with the highest ``monitor``, else (only partial ones) the last, or ``None``."""
    with_monitor = [h for h in history if monitor in h["scores"]]
    if with_monitor:
        return max(with_monitor, key=lambda h: h["scores"][monitor])
    return history[-1] if history else None


def stage_monitor(monitor: str, stage: str) -> str:
    """``monitor`` for another stage: ``val/overall`` -> ``test/overall``."""
    return stage + monitor[monitor.index("/") :] if "/" in monitor else monitor


def auxiliary_tasks(pl_module: pl.LightningModule) -> list[str]:
    """The module's ``auxiliary`` hyper-parameter as a list."""
    hparams = getattr(pl_module, "hparams", {})
    value = hparams.get("auxiliary") if hasattr(hparams, "get") else None
    return [value] if isinstance(value, str) else list(value or [])


def scored_tasks_of(pl_module: pl.LightningModule) -> list[str] | None:
    """The tasks of the module's overall score, else ``None``."""
    return pl_module.scored_tasks if satisfies(pl_module, ScoredTasks) else None


def parameter_counts(pl_module: pl.LightningModule) -> dict[str, Any] | None:
    """The counts of the module's ``parameter_report()``, else ``None``."""
    if not satisfies(pl_module, ParameterReporter):
        return None
    try:
        report = pl_module.parameter_report()
    except Exception:  # noqa: BLE001 - a user model without the expected structure: no counts
        return None
    return {
        "adapter": report.method,
        "adapter_size": report.adapter_size,
        "base_encoder": report.base_encoder,
        "stored_per_task": dict(report.stored_per_task),
        "total": report.total,
        "ratio": report.ratio,
        "trainable": report.trainable,
    }


class TeardownPrinter(Callback):
    """A callback whose reports print at ``teardown``: printed earlier, a live progress bar would redraw
    below them. Call :meth:`print_at_teardown` on rank 0 only."""

    def print_at_teardown(self, text: str) -> None:
        """Print ``text`` when the run ends."""
        self.__dict__.setdefault("_at_teardown", []).append(text)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        for text in self.__dict__.pop("_at_teardown", []):
            print(text, flush=True)


class ScoreReport(TeardownPrinter):
    """Print the best dev scores at the end of fit and save them as ``scores.json`` in the log directory.

    The best validation has the highest ``monitor``; a partial one (only ``<monitor>_partial``) is never
    picked over a complete one. ``validate`` and ``test`` print the same table.

    Args:
        monitor: the metric that picks the best validation (higher is better).
        filename: name of the JSON file written into ``trainer.log_dir``.
        validate_at_end: validate once at the end of a fit that would otherwise have no validation.
    """

    def __init__(
        self, monitor: str = "val/overall", filename: str = SCORES_FILE, validate_at_end: bool = True
    ) -> None:
        self.monitor = monitor
        self.filename = filename
        self.validate_at_end = validate_at_end
        self.history: list[dict[str, Any]] = []
        self._validated = False
        self._start = time.perf_counter()

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.history = []
        self._validated = False
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Validate at the end of a fit that ran none (before the checkpoint callbacks, which Lightning calls last)."""
        if (
            self.validate_at_end
            and not self._validated
            and trainer.enable_validation
            and fit_ends_now(trainer)
        ):
            validate_during_fit(trainer, pl_module)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking and trainer.state.fn == TrainerFn.VALIDATING:
            self.report_evaluation(trainer, pl_module, "val")
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING:
            return
        self._validated = True
        scores = validation_scores(trainer, pl_module)
        if scores:
            entry = {"step": trainer.global_step, "epoch": trainer.current_epoch}
            self.history.append({**entry, **evaluation_entry(scores, pl_module)})

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.report_evaluation(trainer, pl_module, "test")

    def report_evaluation(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """``validate``/``test``: print the score table and write ``scores.json``."""
        log_dir = trainer.log_dir  # every rank: a broadcast under DDP
        if not is_main_process(trainer):
            return
        monitor = stage_monitor(self.monitor, stage)
        scores = validation_scores(trainer, pl_module, stage)
        entry = evaluation_entry(scores, pl_module)
        split = validation_split_name(trainer) if stage == "val" else stage
        limit = trainer.limit_val_batches if stage == "val" else trainer.limit_test_batches
        self.print_at_teardown(
            f"\n{score_headline(entry, monitor, limit, split)}  [{split} set, checkpoint {trainer.ckpt_path}]\n"
            + _table(trainer, pl_module, scores, monitor, split)
            + (f"\n  scores saved to {Path(log_dir) / self.filename}" if log_dir is not None else "")
        )
        if log_dir is not None:
            payload = {
                "stage": stage,
                **_overall(entry, monitor),
                "ckpt_path": trainer.ckpt_path,
                "scores": scores,
            }
            self._save(trainer, log_dir, payload)

    def _save(self, trainer: pl.Trainer, log_dir: str, payload: dict[str, Any]) -> None:
        names = class_names_of(trainer)
        if names:
            payload["label_names"] = names
        atomic_write_text(Path(log_dir) / self.filename, json.dumps(payload, indent=2))

    def best(self) -> dict[str, Any] | None:
        """The recorded validation with the highest ``monitor`` (:func:`best_validation`)."""
        return best_validation(self.history, self.monitor)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        log_dir = trainer.log_dir  # every rank: a broadcast under DDP
        if not is_main_process(trainer):
            return
        wall_s = time.perf_counter() - self._start
        best = self.best()
        ckpt = getattr(trainer.checkpoint_callback, "best_model_path", "") or None
        if best is None:
            self.print_at_teardown(
                f"pal-lightning: fit finished after {trainer.global_step} steps ({wall_s:.0f} s) without "
                f"dev scores: {no_scores_reason(trainer, self._validated, self.validate_at_end)}."
            )
        else:
            which = "best" if self.monitor in best["scores"] else "last"
            split = validation_split_name(trainer)
            head = score_headline(best, self.monitor, trainer.limit_val_batches, split)
            self.print_at_teardown(
                f"\n{head}  [{which} validation at step {best['step']}, {trainer.global_step} steps, {wall_s:.0f} s]\n"
                + _table(trainer, pl_module, best["scores"], self.monitor, split)
                + (f"\n  best checkpoint: {ckpt}" if ckpt else "")
                + (f"\n  run folder: {log_dir}" if log_dir is not None else "")
            )
        if log_dir is None:
            return
        payload = {
            **_overall(best, self.monitor),
            "tasks_auxiliary": auxiliary_tasks(pl_module),
            "parameters": parameter_counts(pl_module),
            "best": best,
            "last": self.history[-1] if self.history else None,
            "history": self.history,
            "steps": trainer.global_step,
            "wall_s": wall_s,
            "best_model_path": ckpt,
        }
        self._save(trainer, log_dir, payload)


def _table(trainer: pl.Trainer, pl_module: Any, scores: dict[str, float], monitor: str, split: str) -> str:
    return format_scores(scores, monitor, auxiliary_tasks(pl_module), column=split) + format_classes(
        class_names_of(trainer)
    )


def _overall(entry: Mapping[str, Any] | None, monitor: str) -> dict[str, Any]:
    """The ``scores.json`` fields of an evaluation: the overall, or null with the partial mean and its tasks."""
    scores = entry["scores"] if entry else {}
    return {
        "monitor": monitor,
        "complete": bool(entry and entry.get("complete") and monitor in scores),
        "overall": scores.get(monitor),
        "overall_partial": scores.get(monitor + PARTIAL_SUFFIX),
        "tasks_covered": entry.get("tasks_covered") if entry else [],
        "tasks_missing": entry.get("tasks_missing") if entry else [],
    }


def fit_ends_now(trainer: pl.Trainer) -> bool:
    """At ``on_train_epoch_end``: whether the fit ends after this epoch."""
    max_steps, max_epochs = trainer.max_steps, trainer.max_epochs
    steps_done = max_steps is not None and max_steps >= 0 and trainer.global_step >= max_steps
    epochs_done = max_epochs is not None and max_epochs >= 0 and trainer.current_epoch + 1 >= max_epochs
    return steps_done or epochs_done or trainer.should_stop


def no_scores_reason(trainer: pl.Trainer, validated: bool, validate_at_end: bool = True) -> str:
    """Why a fit ended without a dev score, and what to do about it."""
    later = "or score a checkpoint later: pal-lightning validate --config <run>/config.yaml --ckpt_path last"
    if not trainer.limit_val_batches:
        return f"--trainer.limit_val_batches is 0, which turns validation off; set it to 1.0, {later}"
    if validated:
        return (
            "the validation gave no finite score (empty dev files, or a model that diverged); check the "
            f"dev files of --data.data_dir, {later}"
        )
    if not validate_at_end:
        return f"no validation fell within the run and ScoreReport(validate_at_end=False) added none; {later}"
    return f"there was no validation data (no dev batches); check the dev files of --data.data_dir, {later}"


def validation_scores(
    trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str = "val"
) -> dict[str, float]:
    """The finite ``<stage>/*`` scores of the evaluation that just ended."""
    # last_scores when kept: trainer.callback_metrics also holds keys of earlier validations
    fresh = last_stage_scores(pl_module, stage)
    source = fresh if fresh is not None else trainer.callback_metrics
    found = {k: _to_float(v) for k, v in source.items() if k.startswith(f"{stage}/")}
    return {k: v for k, v in found.items() if v is not None}


def validation_split_name(trainer: Any) -> str:
    """``"validation"`` when the data module carves it from train (``validation_fraction``), else ``"dev"``."""
    config = getattr(getattr(trainer, "datamodule", None), "config", None)
    return "validation" if getattr(config, "validation_fraction", None) else "dev"


def score_headline(entry: Mapping[str, Any], monitor: str, limit: Any, split: str = "dev") -> str:
    """The line above the score table: the named overall score, or the partial mean and what it misses."""
    scores = entry["scores"]
    if monitor in scores:
        return f"{overall_name(entry.get('tasks_covered') or [])} ({split}): {scores[monitor]:.4f}"
    if monitor + PARTIAL_SUFFIX in scores:
        return partial_headline(scores[monitor + PARTIAL_SUFFIX], entry, limit, split)
    return f"{split} scores"


def partial_headline(value: float, entry: Mapping[str, Any], limit: Any, split: str = "dev") -> str:
    """The headline of a partial evaluation; ``limit`` is the trainer's ``limit_val/test_batches``."""
    covered = ", ".join(entry.get("tasks_covered") or []) or "?"
    missing = ", ".join(entry.get("tasks_missing") or []) or "?"
    flag = "--trainer.limit_test_batches" if split == "test" else "--trainer.limit_val_batches"
    # an int counts batches (1 = one batch), a float is a fraction (1.0 = all of them)
    limited = limit is not None and not (isinstance(limit, float) and limit == 1.0)
    why = (
        f"{flag} {limit} stopped the evaluation before them; leave it at 1.0 for the overall score"
        if limited
        else f"no labelled {split} batches of them"
    )
    what = "validation" if split in ("dev", "validation") else f"the {split} evaluation"
    return (
        f"No overall score: {what} did not reach {missing} ({why}). Partial mean over {covered}: {value:.4f}"
    )

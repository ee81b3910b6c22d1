"""The score report: the best validation's table printed at the end of ``fit`` and saved as ``scores.json``.

The best validation is the one with the highest ``val/overall`` (the CS224N score, or the mean of the
tasks' main metrics). A validation that reached only some scored tasks has only ``val/overall_partial``:
it is never picked over a complete one, and is reported as partial, naming the tasks left out. A fit
that would end without any validation is validated once at the end of its last epoch (every rank).
``validate`` and ``test`` print the same table.
"""

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
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def task_coverage(scores: Mapping[str, float], scored: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """``(covered, missing)``: which of the ``scored`` tasks (``None``: all present) have ``<stage>/<task>/...`` keys."""
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
    """A plain-text table of ``val/<task>/<metric>`` scores with ``monitor`` (or its partial mean) last;
    ``auxiliary`` tasks (not in the overall) are marked ``*``; ``column`` heads the values (the split)."""
    rows: list[tuple[str, str, float]] = []
    for key, value in sorted(scores.items()):
        parts = key.split("/")
        if len(parts) == 3 and not parts[2].endswith("loss"):
            rows.append((parts[1], parts[2], value))
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
    """One line per task whose classes have names, in class order: ``  topics classes: 0 business, 1 sports``."""
    return "".join(
        f"\n  {task} classes: " + ", ".join(f"{i} {name}" for i, name in enumerate(labels))
        for task, labels in names.items()
    )


def class_names_of(trainer: pl.Trainer) -> dict[str, list[str]]:
    """The class names the data module read (``label_names()``: given in the task, or the words of the train
    split's labels); ``{}`` for tasks labelled by numbers or a data module that does not say."""
    found = getattr(getattr(trainer, "datamodule", None), "label_names", None)
    return {t: list(n) for t, n in found().items()} if callable(found) else {}


def best_validation(history: Sequence[dict[str, Any]], monitor: str) -> dict[str, Any] | None:
    """The entry of ``history`` with the highest ``monitor`` score (the first of equal ones), else the last
    (a partial validation has no ``monitor``); ``None`` for an empty history."""
    with_monitor = [h for h in history if monitor in h["scores"]]
    if with_monitor:
        return max(with_monitor, key=lambda h: h["scores"][monitor])
    return history[-1] if history else None


def stage_monitor(monitor: str, stage: str) -> str:
    """``monitor`` for another stage: ``val/overall`` -> ``test/overall``; a name without a stage as is."""
    return stage + monitor[monitor.index("/") :] if "/" in monitor else monitor


def auxiliary_tasks(pl_module: pl.LightningModule) -> list[str]:
    """The module's auxiliary tasks (its ``auxiliary`` hyper-parameter), or none."""
    hparams = getattr(pl_module, "hparams", {})
    value = hparams.get("auxiliary") if hasattr(hparams, "get") else None
    return [value] if isinstance(value, str) else list(value or [])


def scored_tasks_of(pl_module: pl.LightningModule) -> list[str] | None:
    """The tasks that make the module's overall score (:class:`~pal_lightning.core.contracts.ScoredTasks`), else ``None``."""
    return pl_module.scored_tasks if satisfies(pl_module, ScoredTasks) else None


def parameter_counts(pl_module: pl.LightningModule) -> dict[str, Any] | None:
    """Shared, per-task and total parameter counts of a module with ``parameter_report()``, else ``None``."""
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


class ScoreReport(Callback):
    """Print the best dev scores at the end of fit and save them as ``scores.json`` in the log directory.

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
        self._pending: list[str] = []

    def _say(self, text: str) -> None:
        # printed at teardown, after the progress bar has stopped: a live bar redraws itself below
        # anything printed while it runs, which would put it under the score table
        self._pending.append(text)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        for text in self._pending:
            print(text, flush=True)
        self._pending = []

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.history = []
        self._validated = False
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Validate now when this is the fit's last epoch and no validation ran in it (before the checkpoint
        callbacks' hook: Lightning calls the callbacks that monitor a metric last)."""
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
        """``validate``/``test``: print the score table as ``fit`` does and write ``scores.json`` to the log dir."""
        log_dir = trainer.log_dir  # every rank: a broadcast under DDP
        if not is_main_process(trainer):
            return
        monitor = stage_monitor(self.monitor, stage)
        scores = validation_scores(trainer, pl_module, stage)
        entry = evaluation_entry(scores, pl_module)
        split = validation_split_name(trainer) if stage == "val" else stage
        limit = trainer.limit_val_batches if stage == "val" else trainer.limit_test_batches
        self._say(
            f"\n{score_headline(entry, monitor, limit, split)}  [{split} set, checkpoint {trainer.ckpt_path}]\n"
            + format_scores(scores, monitor, auxiliary_tasks(pl_module), column=split)
            + format_classes(class_names_of(trainer))
            + (f"\n  scores saved to {Path(log_dir) / self.filename}" if log_dir is not None else "")
        )
        if log_dir is None:
            return
        payload = {
            "stage": stage,
            "monitor": monitor,
            "complete": bool(entry["complete"] and monitor in scores),
            "overall": scores.get(monitor),
            "overall_partial": scores.get(monitor + PARTIAL_SUFFIX),
            "tasks_covered": entry["tasks_covered"],
            "tasks_missing": entry["tasks_missing"],
            "ckpt_path": trainer.ckpt_path,
            "scores": scores,
        }
        self._save(trainer, log_dir, payload)

    def _save(self, trainer: pl.Trainer, log_dir: str, payload: dict[str, Any]) -> None:
        names = class_names_of(trainer)
        if names:  # the classes of tasks labelled by name, in class order
            payload["label_names"] = names
        atomic_write_text(Path(log_dir) / self.filename, json.dumps(payload, indent=2))

    def best(self) -> dict[str, Any] | None:
        """The recorded validation with the highest monitored score (:func:`best_validation`)."""
        return best_validation(self.history, self.monitor)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # every rank: under DDP trainer.log_dir is a broadcast, which rank 0 alone would wait on forever
        log_dir = trainer.log_dir
        if not is_main_process(trainer):
            return
        wall_s = time.perf_counter() - self._start
        best = self.best()
        ckpt = getattr(trainer.checkpoint_callback, "best_model_path", "") or None
        if best is None:
            self._say(
                f"pal-lightning: fit finished after {trainer.global_step} steps ({wall_s:.0f} s) without "
                f"dev scores: {no_scores_reason(trainer, self._validated, self.validate_at_end)}."
            )
        else:
            overall = best["scores"].get(self.monitor)
            split = validation_split_name(trainer)
            head = score_headline(best, self.monitor, trainer.limit_val_batches, split)
            self._say(
                f"\n{head}  [{'best' if overall is not None else 'last'} validation at step {best['step']}, "
                f"{trainer.global_step} steps, {wall_s:.0f} s]\n"
                + format_scores(best["scores"], self.monitor, auxiliary_tasks(pl_module), column=split)
                + format_classes(class_names_of(trainer))
                + (f"\n  best checkpoint: {ckpt}" if ckpt else "")
                + (f"\n  run folder: {log_dir}" if log_dir is not None else "")
            )
        if log_dir is None:
            return
        payload = {
            "monitor": self.monitor,
            # an overall over every scored task, or null with the partial mean and its tasks named
            "complete": bool(best and best.get("complete") and self.monitor in best["scores"]),
            "overall": best["scores"].get(self.monitor) if best else None,
            "overall_partial": best["scores"].get(self.monitor + PARTIAL_SUFFIX) if best else None,
            "tasks_covered": best.get("tasks_covered") if best else [],
            "tasks_missing": best.get("tasks_missing") if best else [],
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


def fit_ends_now(trainer: pl.Trainer) -> bool:
    """At ``on_train_epoch_end``: whether the fit ends after this epoch (``max_steps`` or ``max_epochs``
    reached, or a stop requested)."""
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
    """The finite ``<stage>/*`` scores of the evaluation that just ended (``pl_module.last_scores`` when kept:
    ``trainer.callback_metrics`` also holds keys of earlier validations)."""
    fresh = last_stage_scores(pl_module, stage)
    source = fresh if fresh is not None else trainer.callback_metrics
    scores = {}
    for key, value in source.items():
        if key.startswith(f"{stage}/"):
            number = _to_float(value)
            if number is not None:
                scores[key] = number
    return scores


def validation_split_name(trainer: Any) -> str:
    """What ``fit`` and ``validate`` score: ``"validation"`` when the data module carves it from train
    (``validation_fraction``; dev is then the test set), else ``"dev"``."""
    config = getattr(getattr(trainer, "datamodule", None), "config", None)
    return "validation" if getattr(config, "validation_fraction", None) else "dev"


def score_headline(entry: Mapping[str, Any], monitor: str, limit: Any, split: str = "dev") -> str:
    """The line above the score table: the overall score (named by :func:`overall_name` after the tasks it
    covers, ``tasks_covered``), or a partial mean naming what it leaves out."""
    scores = entry["scores"]
    if monitor in scores:
        return f"{overall_name(entry.get('tasks_covered') or [])} ({split}): {scores[monitor]:.4f}"
    if monitor + PARTIAL_SUFFIX in scores:
        return partial_headline(scores[monitor + PARTIAL_SUFFIX], entry, limit, split)
    return f"{split} scores"


def partial_headline(value: float, entry: Mapping[str, Any], limit: Any, split: str = "dev") -> str:
    """The first line printed for a partial evaluation: the tasks covered, those missing, and why
    (``limit``: the trainer's ``limit_val_batches``, or ``limit_test_batches`` for ``split="test"``)."""
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

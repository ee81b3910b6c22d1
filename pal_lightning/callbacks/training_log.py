"""``metrics.csv`` rows that show a multi-task run at work (:class:`TrainingLog`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback

from pal_lightning.core.batch import ATTENTION_MASK, IDS, LABELS, TASK, TASKS
from pal_lightning.core.contracts import EpochTaskProbabilities, TaskPredictor, datamodule_of, satisfies
from pal_lightning.core.distributed import is_main_process
from pal_lightning.module.multitask import TASK_LOSSES

NO_DECAY = "_no_decay"


def distinct_learning_rates(param_groups: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """``{group name: lr}`` without ``<name>_no_decay`` groups of the same rate as ``<name>``."""
    rates = {str(g.get("name", f"group{i}")): float(g["lr"]) for i, g in enumerate(param_groups)}
    return {
        name: lr
        for name, lr in rates.items()
        if not (name.endswith(NO_DECAY) and rates.get(name[: -len(NO_DECAY)]) == lr)
    }


def gradient_norm(parameters: Sequence[torch.nn.Parameter]) -> float | None:
    """The L2 norm of all gradients together (``None`` when no parameter has one)."""
    grads = [p.grad.detach().float().norm() for p in parameters if p.grad is not None]
    return float(torch.stack(grads).norm()) if grads else None


def batch_accuracy(pl_module: Any, task: str, output: torch.Tensor | None, labels: Any) -> float | None:
    """Accuracy of a classification batch from the head ``output``, else ``None``."""
    spec = (
        pl_module.task_specs.get(task) if output is not None and satisfies(pl_module, TaskPredictor) else None
    )
    if spec is None or spec.is_regression or not isinstance(labels, torch.Tensor) or labels.numel() == 0:
        return None
    predicted = pl_module.predict_from_output(task, output)
    return float((predicted.reshape(-1) == labels.reshape(-1).to(predicted.device)).float().mean())


def batch_tasks(pl_module: Any, batch: Any) -> list[str]:
    """The tasks a mixed batch holds, in order of first appearance (``[]`` for another batch)."""
    if not isinstance(batch, Mapping) or TASKS not in batch:
        return []
    tasks = batch[TASKS]
    if isinstance(tasks, torch.Tensor):  # indices into the model's task list
        names = list(getattr(pl_module, "task_specs", {}))
        return [names[i] for i in dict.fromkeys(tasks.tolist())]
    return [str(t) for t in dict.fromkeys(tasks)]


def _tokens(batch: Mapping[str, Any]) -> torch.Tensor | int:
    # left on the device: read only when a row is written
    masks = (v for k, v in batch.items() if k.startswith(ATTENTION_MASK) and isinstance(v, torch.Tensor))
    return sum((mask.sum() for mask in masks), 0)


class TrainingLog(Callback):
    """Log every ``log_every_n_steps`` optimizer steps (rank 0) the step's task index, per-task losses,
    accuracy and step counts, examples and tokens per second, ``train/grad_norm`` (after GEM, before
    clipping) and ``lr/<group>`` (one of equal ``_no_decay`` twins); ``sampling/p_<task>`` at epoch starts."""

    def __init__(self) -> None:
        self.steps_per_task: dict[str, int] = {}
        self._restored: dict[str, int] = {}  # counts of the checkpoint a resumed fit starts from
        self._grad_norm: float | None = None
        self._rates: dict[str, float] = {}
        self._stepped = False
        self._batch: Any = None
        self._output: torch.Tensor | None = None
        self._hook: Any = None
        self._examples = 0
        self._tokens: torch.Tensor | int = 0  # on the device until a row is written
        self._since = time.perf_counter()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        tasks = getattr(pl_module, "task_specs", {}) or {}
        self.steps_per_task = {t: self._restored.get(t, 0) for t in tasks}
        self._restored = {}
        self._since = time.perf_counter()
        if self._hook is None:
            self._hook = pl_module.register_forward_hook(self._capture)

    def state_dict(self) -> dict[str, Any]:
        return {"steps_per_task": dict(self.steps_per_task)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restored = {str(t): int(n) for t, n in state_dict.get("steps_per_task", {}).items()}

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _capture(self, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
        # the first forward of this step's own batch (not GEM's memory batches)
        if self._output is None and args and args[0] is self._batch and isinstance(output, torch.Tensor):
            self._output = output.detach()

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        data = datamodule_of(trainer)
        if not satisfies(data, EpochTaskProbabilities) or not is_main_process(trainer):
            return
        try:
            p = data.task_probabilities_for_epoch(trainer.current_epoch)
        except Exception:  # noqa: BLE001 - a schedule without probabilities (sequential phases)
            return
        self._write(trainer, {f"sampling/p_{task}": float(v) for task, v in p.items()})

    @staticmethod
    def _logging_step(trainer: pl.Trainer, step: int) -> bool:
        # log_every_n_steps is set at run time: the Trainer type does not declare it
        return is_main_process(trainer) and step % max(1, int(getattr(trainer, "log_every_n_steps", 1))) == 0

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        self._stepped = True
        # this step's rates: by the batch end the scheduler has moved on
        self._rates = distinct_learning_rates(optimizer.param_groups)
        # only on logging steps: the norm costs a device synchronisation
        log_now = self._logging_step(trainer, trainer.global_step)
        self._grad_norm = gradient_norm(list(pl_module.parameters())) if log_now else None

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._batch, self._output = batch, None
        if isinstance(batch, Mapping):
            self._examples += len(batch.get(IDS, ()))
            self._tokens += _tokens(batch)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        task = batch.get(TASK) if isinstance(batch, Mapping) else None
        present = [task] if task is not None else batch_tasks(pl_module, batch)
        if not present:
            return
        for name in present:
            self.steps_per_task[name] = self.steps_per_task.get(name, 0) + 1
        if not self._stepped:  # inside a gradient-accumulation window
            return
        self._stepped = False
        # global_step already counts this batch's optimizer step: the row describes step - 1
        step = trainer.global_step - 1
        if not self._logging_step(trainer, step):
            return
        now = time.perf_counter()
        elapsed = max(now - self._since, 1e-9)
        tasks = list(self.steps_per_task)
        row: dict[str, float] = {
            "train/examples_per_s": self._examples * trainer.world_size / elapsed,
            "train/tokens_per_s": float(self._tokens) * trainer.world_size / elapsed,
        }
        if task is not None:
            row["train/task_index"] = float(tasks.index(task))
            loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
            if isinstance(loss, torch.Tensor):
                row[f"train/{task}/loss"] = float(loss.detach())
            accuracy = batch_accuracy(pl_module, task, self._output, batch.get(LABELS))
            if accuracy is not None:
                row[f"train/{task}/accuracy"] = accuracy
        else:  # a mixed batch: the loss of each task it held
            losses = outputs.get(TASK_LOSSES, {}) if isinstance(outputs, Mapping) else {}
            row.update({f"train/{t}/loss": float(v) for t, v in losses.items()})
        self._batch, self._output = None, None
        row.update({f"train/steps/{t}": float(n) for t, n in self.steps_per_task.items()})
        if self._grad_norm is not None:
            row["train/grad_norm"] = self._grad_norm
        row.update({f"lr/{k}": v for k, v in self._rates.items()})
        self._write(trainer, row, step)
        self._examples, self._tokens, self._since = 0, 0, now

    @staticmethod
    def _write(trainer: pl.Trainer, metrics: dict[str, float], step: int | None = None) -> None:
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step if step is None else step)

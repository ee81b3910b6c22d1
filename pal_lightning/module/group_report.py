"""The optimizer's parameter groups at fit start: a table beside Lightning's model summary, and a warning
naming the parameters a subclass added that fell into a default group."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelSummary
from lightning.pytorch.utilities import rank_zero_info
from torch import nn

from pal_lightning.core.distributed import is_main_process
from pal_lightning.core.private_api import attached_trainer

#: Parameters named in the warning; more are counted.
SHOWN = 8
#: Where the warning's fix is documented.
DOCS = "docs/models.md, 'Parameters of your own'"


def peak_lr(group: Mapping[str, Any]) -> float:
    """A group's peak learning rate: the scheduler's ``initial_lr`` (``lr`` is already scaled) else ``lr``."""
    return float(group.get("initial_lr", group["lr"]))


def group_name(group: Mapping[str, Any], index: int) -> str:
    """A group's ``name``, else ``group<index>`` (a ``configure_optimizers`` of one's own may name none)."""
    return str(group.get("name") or f"group{index}")


def format_group_table(groups: Sequence[Mapping[str, Any]]) -> str:
    """The lines of the table of ``groups``: name, tensors, parameters, peak lr, weight decay."""
    lines = [
        "Optimizer parameter groups (peak learning rates):",
        f"  {'group':<24} {'tensors':>8} {'parameters':>12} {'lr':>10} {'weight decay':>13}",
    ]
    for i, group in enumerate(groups):
        params = list(group["params"])
        lines.append(
            f"  {group_name(group, i):<24} {len(params):>8} {sum(p.numel() for p in params):>12,} "
            f"{peak_lr(group):>10.3g} {float(group.get('weight_decay', 0.0)):>13.3g}"
        )
    return "\n".join(lines)


def unplaced_warning(
    owner: str, unplaced: Sequence[tuple[str, nn.Parameter]], groups: Sequence[Mapping[str, Any]]
) -> str:
    """The warning naming each parameter of ``unplaced`` with the group of ``groups`` it fell into."""
    where = {id(p): (group_name(g, i), g) for i, g in enumerate(groups) for p in g["params"]}
    parts = []
    for name, p in unplaced[:SHOWN]:
        label, group = where[id(p)]
        parts.append(
            f"{name} ({p.numel():,} values) -> {label!r} (lr {peak_lr(group):.3g}, weight decay "
            f"{float(group.get('weight_decay', 0.0)):.3g})"
        )
    more = f" and {len(unplaced) - SHOWN} more" if len(unplaced) > SHOWN else ""
    return (
        f"{owner}: {len(unplaced)} trainable parameter(s) belong to no part the optimizer groups know (the "
        f"encoder, its adapters, the heads) and went into a default group: {'; '.join(parts)}{more}. "
        f"Place them by overriding parameter_group_of(name, parameter) ({DOCS})."
    )


def report_parameter_groups(module: pl.LightningModule, unplaced: Sequence[tuple[str, nn.Parameter]]) -> None:
    """At fit start, on rank 0: the table of the trainer's optimizer groups when Lightning's model summary
    is on (``enable_model_summary``), and :func:`unplaced_warning` for those of ``unplaced`` (parameters
    no part of the model claims) that sit in one of the groups."""
    trainer = attached_trainer(module)
    if trainer is None or not is_main_process(trainer):
        return
    groups = [g for optimizer in trainer.optimizers for g in optimizer.param_groups]
    if any(isinstance(callback, ModelSummary) for callback in getattr(trainer, "callbacks", [])):
        rank_zero_info(format_group_table(groups))
    grouped = {id(p) for g in groups for p in g["params"]}
    # a configure_optimizers of one's own may leave some out of every group
    fallen = [(n, p) for n, p in unplaced if id(p) in grouped]
    if fallen:
        warnings.warn(unplaced_warning(type(module).__name__, fallen, groups), UserWarning, stacklevel=2)

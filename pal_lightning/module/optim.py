"""The optimizer and its schedule: AdamW over per-kind parameter groups, linear warmup then decay; at fit start
the groups' table, beside Lightning's model summary, and a warning naming the parameters a subclass added that
fell into a default group."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelSummary
from lightning.pytorch.utilities import rank_zero_info
from torch import nn

from pal_lightning.core.contracts import EpochSteps, datamodule_of, satisfies
from pal_lightning.core.distributed import is_main_process
from pal_lightning.core.errors import PalUserError
from pal_lightning.core.private_api import (
    attached_trainer,
    clip_gradients_unchecked,
    optimizer_unscales_itself,
)
from pal_lightning.modeling.param_groups import GroupRates, OwnGroup, as_placement, build_parameter_groups
from pal_lightning.modeling.param_groups import Placement as Placement  # parameter_group_of's answer

if TYPE_CHECKING:
    from lightning.pytorch.utilities.types import OptimizerLRSchedulerConfig

    from pal_lightning.modeling.encoder import MultiTaskEncoder
    from pal_lightning.module.optim_config import OptimConfig


def linear_warmup_decay(step: int, warmup: int, total: int) -> float:
    """Learning-rate factor at optimizer step ``step`` (0-based): ``(s + 1) / (warmup + 1)`` while
    warming up, then ``(total - s) / (total - warmup)``, 0 from ``total`` on (no step gets a zero rate)."""
    if total < 1 or warmup < 0:
        raise ValueError(
            f"linear_warmup_decay needs total >= 1 and warmup >= 0, got total={total}, warmup={warmup}"
        )
    if step < warmup:
        return (step + 1) / (warmup + 1)
    if step >= total:
        return 0.0
    return (total - step) / (total - warmup)


def adamw(params: Iterable[Any], fused: bool = True, **options: Any) -> torch.optim.AdamW:
    """``torch.optim.AdamW(params, **options)``, fused where the device has the kernel, else (or with
    ``fused=False``) the multi-tensor ``foreach`` one."""
    params = list(params)
    if fused:
        try:
            return torch.optim.AdamW(params, fused=True, **options)
        except RuntimeError:  # "`fused=True` requires all the params to be ... of supported devices"
            pass
    options.setdefault("foreach", True)
    return torch.optim.AdamW(params, **options)


def fused_allowed(trainer: Any) -> bool:
    """Whether ``trainer``'s precision plugin has no loss scaler (a fused optimizer would unscale inside
    ``step()``, after GEM and the non-finite guard saw scaled gradients)."""
    return getattr(getattr(trainer, "precision_plugin", None), "scaler", None) is None


def warmup_decay_optimizer(
    module: Any, groups: Any, total: int, warmup: int, **options: Any
) -> OptimizerLRSchedulerConfig:
    """``configure_optimizers``' result: :func:`adamw` over ``groups`` (fused where :func:`fused_allowed`)
    with a per-step :func:`linear_warmup_decay` schedule."""
    optimizer = adamw(groups, fused=fused_allowed(attached_trainer(module)), **options)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, partial(linear_warmup_decay, warmup=warmup, total=total)
    )
    return {
        "optimizer": optimizer,
        "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
    }


def clips_unscaled(plugin: Any, optimizer: Any) -> bool:
    """Whether Lightning would refuse to clip a fused ``optimizer``'s gradients needlessly (no scaler)."""
    from lightning.pytorch.plugins.precision import MixedPrecision

    return (
        isinstance(plugin, MixedPrecision) and plugin.scaler is None and optimizer_unscales_itself(optimizer)
    )


def total_training_steps(trainer: pl.Trainer) -> int:
    """Optimizer steps of the whole run: ``max_steps``, else ``ceil(steps_per_epoch / accumulate) * max_epochs``."""
    # not trainer.estimated_stepping_batches: it loads the train dataloader, breaking mid-epoch resume (#20550)
    if trainer.max_steps is not None and trainer.max_steps > 0:
        return int(trainer.max_steps)
    datamodule = datamodule_of(trainer)
    steps = datamodule.steps_per_epoch if satisfies(datamodule, EpochSteps) else None
    max_epochs = trainer.max_epochs
    if steps is None or max_epochs is None or max_epochs < 1:
        raise PalUserError(
            "Cannot size the learning-rate schedule: set trainer.max_steps, or train with a DataModule "
            "that has `steps_per_epoch` and set trainer.max_epochs."
        )
    accumulate = max(1, int(trainer.accumulate_grad_batches))
    return max(1, math.ceil(int(steps) / accumulate) * int(max_epochs))


def warmup_steps_of(total: int, warmup_steps: int | None, warmup_ratio: float) -> int:
    """Warmup length in optimizer steps: ``warmup_steps`` when set, else ``round(warmup_ratio * total)``."""
    return warmup_steps if warmup_steps is not None else int(round(warmup_ratio * total))


class FusedClippingMixin(pl.LightningModule):
    """A ``LightningModule`` whose gradient clipping also works with the fused AdamW under ``bf16-mixed``."""

    def configure_gradient_clipping(
        self,
        optimizer: Any,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Lightning's clipping, also for the fused AdamW under ``bf16-mixed``."""
        plugin = self.trainer.precision_plugin
        if gradient_clip_val and clips_unscaled(plugin, optimizer):
            clip_gradients_unchecked(plugin, optimizer, gradient_clip_val, gradient_clip_algorithm)
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)


def parameter_groups(
    module: nn.Module, encoder: MultiTaskEncoder, config: OptimConfig
) -> list[dict[str, Any]]:
    """AdamW parameter groups of ``module``'s trainable parameters (``build_parameter_groups``) at ``config``'s
    rates, each placed where ``module.parameter_group_of`` says, else by where it sits."""
    rates = GroupRates(
        lr=config.lr,
        adapter_lr=config.peak_adapter_lr,
        head_lr=config.head_lr,
        weight_decay=config.weight_decay,
        layer_lr_decay=config.layer_lr_decay,
        num_layers=encoder.num_layers,
    )
    return build_parameter_groups(
        module.named_parameters(),
        pretrained={id(p) for _, p in encoder.pretrained_parameters()},
        adapters={id(p) for _, p in encoder.new_parameters()},
        no_decay={
            id(p) for m in module.modules() if isinstance(m, nn.LayerNorm) for p in m.parameters(False)
        },
        rates=rates,
        placed=placements(module),
    )


def placements(module: nn.Module) -> dict[int, str | OwnGroup]:
    """Parameter id -> the kind or group of its own that ``module.parameter_group_of(name, parameter)``
    chose, for the trainable parameters it places (answers ``None`` are left out)."""
    choose = getattr(module, "parameter_group_of", None)
    if choose is None:
        return {}
    chosen = {}
    for name, p in module.named_parameters():
        where = as_placement(name, choose(name, p)) if p.requires_grad else None
        if where is not None:
            chosen[id(p)] = where
    return chosen


def unplaced_parameters(module: nn.Module, encoder: MultiTaskEncoder) -> list[tuple[str, nn.Parameter]]:
    """The trainable parameters of no part the groups know (the encoder's pretrained weights and adapters,
    ``module.heads``) that ``parameter_group_of`` leaves to the default group (the heads')."""
    heads = getattr(module, "heads", None)
    known = {id(p) for _, p in (*encoder.pretrained_parameters(), *encoder.new_parameters())}
    known |= {id(p) for p in heads.parameters()} if isinstance(heads, nn.Module) else set()
    known |= set(placements(module))
    return [(n, p) for n, p in module.named_parameters() if p.requires_grad and id(p) not in known]


def configure_optimizers(
    module: pl.LightningModule, groups: list[dict[str, Any]], steps: Callable[[], int], config: OptimConfig
) -> OptimizerLRSchedulerConfig:
    """AdamW over ``groups`` with a per-step :func:`linear_warmup_decay` schedule over ``steps()`` steps
    (``config``'s warmup)."""
    if not groups:
        raise PalUserError(
            "No trainable parameters: optim.freeze_encoder with adapter='none' and frozen heads?"
        )
    total = steps()
    warmup = warmup_steps_of(total, config.warmup_steps, config.warmup_ratio)
    return warmup_decay_optimizer(
        module, groups, total, warmup, lr=config.lr, weight_decay=config.weight_decay
    )


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

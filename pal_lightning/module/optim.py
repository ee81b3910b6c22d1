"""The optimizer and its schedule: AdamW over per-kind parameter groups, linear warmup then decay."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import lightning.pytorch as pl
import torch
from torch import nn

from pal_lightning.core.contracts import EpochSteps, datamodule_of, satisfies
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
    module: nn.Module, encoder: MultiTaskEncoder, hp: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """AdamW parameter groups of ``module``'s trainable parameters (``build_parameter_groups``), each
    placed where ``module.parameter_group_of`` says, else by where it sits."""
    adapter_lr = hp.get("adapter_lr")
    rates = GroupRates(
        lr=hp["lr"],
        adapter_lr=hp["head_lr"] if adapter_lr is None else adapter_lr,
        head_lr=hp["head_lr"],
        weight_decay=hp["weight_decay"],
        layer_lr_decay=hp.get("layer_lr_decay", 1.0),
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
    module: pl.LightningModule, groups: list[dict[str, Any]], steps: Callable[[], int], hp: Mapping[str, Any]
) -> OptimizerLRSchedulerConfig:
    """AdamW over ``groups`` with a per-step :func:`linear_warmup_decay` schedule over ``steps()`` steps."""
    if not groups:
        raise PalUserError("No trainable parameters: freeze_encoder with adapter='none' and frozen heads?")
    total = steps()
    warmup = warmup_steps_of(total, hp["warmup_steps"], hp["warmup_ratio"])
    return warmup_decay_optimizer(module, groups, total, warmup, lr=hp["lr"], weight_decay=hp["weight_decay"])

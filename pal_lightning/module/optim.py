"""The optimizer and its learning-rate schedule: AdamW over per-kind parameter groups, warmup then decay.

:func:`linear_warmup_decay` and :func:`total_training_steps` are the pure parts; :class:`OptimizerMixin`
gives the module ``parameter_groups``, ``total_training_steps`` and ``configure_optimizers``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from pal_lightning.core.contracts import EpochSteps, datamodule_of, satisfies
from pal_lightning.core.errors import PalUserError
from pal_lightning.core.private_api import (
    attached_trainer,
    clip_gradients_unchecked,
    optimizer_unscales_itself,
)
from pal_lightning.modeling.param_groups import GroupRates, build_parameter_groups

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from pal_lightning.modeling.encoder import MultiTaskBert

    _ModuleBase = pl.LightningModule
else:
    _ModuleBase = object


def linear_warmup_decay(step: int, warmup: int, total: int) -> float:
    """Learning-rate factor at optimizer step ``step`` (0-based): linear warmup, then linear decay to 0.

    ::

        f(s) = (s + 1) / (warmup + 1)                 for s < warmup
        f(s) = (total - s) / (total - warmup)         for warmup <= s < total
        f(s) = 0                                      for s >= total

    Unlike the common ``s / warmup`` this never gives the first step a zero
    learning rate, and the last of the ``total`` steps still moves the weights
    (``f(total - 1) = 1 / (total - warmup) > 0``); the peak ``f(warmup) = 1``.

    Raises:
        ValueError: for ``total < 1`` or a negative ``warmup``.
    """
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
    """``torch.optim.AdamW(params, **options)``, with torch's fused kernel where the parameters' device has one.

    Why: on the CPU torch's default is the for-loop AdamW, a dozen element-wise passes over every
    tensor; the fused kernel makes one, which is far faster on a CPU (benchmarks/RESULTS.md, CPU profile).
    The update is the same AdamW; its float rounding differs from the for-loop's in the last bits.
    Where the kernel is missing (torch < 2.4 on the CPU, other devices), torch refuses ``fused=True``
    at construction and the multi-tensor (``foreach``) implementation is used; ``fused=False`` asks for
    it directly (with a loss scaler, under ``16-mixed``: see :func:`fused_allowed`).
    """
    params = list(params)
    if fused:
        try:
            return torch.optim.AdamW(params, fused=True, **options)
        except RuntimeError:  # "`fused=True` requires all the params to be ... of supported devices"
            pass
    # Not fused (a mixed-precision plugin, or no kernel): the multi-tensor implementation, a few
    # passes over all tensors at once, rather than the CPU's default for-loop over each tensor.
    options.setdefault("foreach", True)
    return torch.optim.AdamW(params, **options)


def fused_allowed(trainer: Any) -> bool:
    """Whether ``trainer``'s precision plugin works with a fused optimizer (``True`` without a trainer).

    A fused optimizer unscales fp16 gradients inside ``step()``; under ``16-mixed`` Lightning's plugin
    would then not unscale before ``on_before_optimizer_step``, and GEM and the non-finite guard would
    see scaled gradients. So: not with a loss scaler. ``32-true``, the ``*-true`` half precisions and
    ``bf16-mixed`` (a ``scaler`` attribute that is ``None``) scale nothing, and the fused kernel is
    used; Lightning's refusal to clip gradients with it under ``bf16-mixed`` is lifted by
    :meth:`FusedClippingMixin.configure_gradient_clipping`.
    """
    return getattr(getattr(trainer, "precision_plugin", None), "scaler", None) is None


def clips_unscaled(plugin: Any, optimizer: Any) -> bool:
    """Whether Lightning's mixed-precision check would refuse to clip ``optimizer``'s gradients needlessly.

    ``MixedPrecision.clip_gradients`` refuses any optimizer that "unscales inside ``step()``" (fused
    ones), because under fp16 the gradients it would clip are still multiplied by the loss scale.
    With no scaler (``bf16-mixed``) nothing is scaled: the gradients are the true ones, and clipping
    them is exactly what ``32-true`` does.
    """
    from lightning.pytorch.plugins.precision import MixedPrecision

    return (
        isinstance(plugin, MixedPrecision) and plugin.scaler is None and optimizer_unscales_itself(optimizer)
    )


def check_schedule_options(warmup_ratio: float, warmup_steps: int | None, layer_lr_decay: float) -> None:
    """Refuse schedule options outside their range, at construction rather than when ``fit`` starts.

    Raises:
        PalUserError: naming the option, its range and the value given.
    """
    if not 0.0 <= warmup_ratio <= 1.0:
        raise PalUserError(f"warmup_ratio must lie in [0, 1], got {warmup_ratio}.")
    if warmup_steps is not None and warmup_steps < 0:
        raise PalUserError(f"warmup_steps must be >= 0 (or None to use warmup_ratio), got {warmup_steps}.")
    if not 0.0 < layer_lr_decay <= 1.0:
        raise PalUserError(f"layer_lr_decay must lie in (0, 1] (1 = no decay), got {layer_lr_decay}.")


def check_rates(**rates: float | None) -> None:
    """Refuse a learning rate that is not a finite number > 0 (``None`` allowed: it means a default).

    ``weight_decay`` may be 0 and ``dropout`` must lie in [0, 1). A NaN passes every ``<``/``>``
    comparison as false, so each check is written as what a good value satisfies.

    Raises:
        PalUserError: naming the option, its range and the value given.
    """
    for name, value in rates.items():
        if value is None:
            continue
        if name == "dropout":
            good, what = 0.0 <= value < 1.0, "a probability in [0, 1)"
        elif name == "weight_decay":
            good, what = math.isfinite(value) and value >= 0.0, "a finite number >= 0"
        else:
            good, what = math.isfinite(value) and value > 0.0, "a finite number > 0"
        if not good:
            raise PalUserError(f"{name} must be {what}, got {value} (--model.{name}).")


def total_training_steps(trainer: pl.Trainer) -> int:
    """Optimizer steps of the whole run: ``max_steps`` if set, else from the DataModule.

    ``ceil(steps_per_epoch / accumulate_grad_batches) * max_epochs`` (Lightning steps the
    optimizer on the last batch of an epoch even when the accumulation window is not full).
    ``trainer.estimated_stepping_batches`` is deliberately not used: it loads the train
    dataloader inside ``configure_optimizers`` and breaks mid-epoch resume (Lightning #20550).

    Raises:
        PalUserError: when neither ``max_steps`` nor a DataModule with ``steps_per_epoch`` and
            ``max_epochs`` is available.
    """
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
    if warmup_steps is not None:
        return warmup_steps
    return int(round(warmup_ratio * total))


class FusedClippingMixin(_ModuleBase):
    """A LightningModule mixin: gradient clipping that also works with the fused AdamW under ``bf16-mixed``."""

    def configure_gradient_clipping(
        self,
        optimizer: Any,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Lightning's clipping, also for the fused AdamW under ``bf16-mixed`` (see :func:`clips_unscaled`)."""
        plugin = self.trainer.precision_plugin
        if gradient_clip_val and clips_unscaled(plugin, optimizer):
            clip_gradients_unchecked(plugin, optimizer, gradient_clip_val, gradient_clip_algorithm)
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)


class OptimizerMixin(FusedClippingMixin):
    """AdamW with per-kind parameter groups and a per-step warmup/decay schedule, for the module.

    Reads the hyper-parameters ``lr``, ``head_lr``, ``adapter_lr``, ``layer_lr_decay``, ``weight_decay``,
    ``warmup_steps`` and ``warmup_ratio``, and the module's ``encoder`` (a
    :class:`~pal_lightning.modeling.MultiTaskBert`).
    """

    encoder: MultiTaskBert

    def parameter_groups(self) -> list[dict[str, Any]]:
        """AdamW parameter groups of the trainable parameters, each with its peak learning rate.

        By default {pretrained, new} x {decay, no decay}: pretrained encoder weights use ``lr``, new
        parameters (adapters, heads) ``head_lr``. ``adapter_lr`` gives the adapters their own groups and
        ``layer_lr_decay < 1`` one group per encoder layer
        (:func:`pal_lightning.modeling.param_groups.build_parameter_groups`). Biases and LayerNorm
        weights get no weight decay (decaying a LayerNorm gain towards 0 shrinks the activations, and
        biases do not scale with the input).
        """
        hp = self.hparams
        encoder = self.encoder
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
            self.named_parameters(),
            pretrained={id(p) for _, p in encoder.pretrained_parameters()},
            adapters={id(p) for _, p in encoder.new_parameters()},
            no_decay={
                id(p) for m in self.modules() if isinstance(m, nn.LayerNorm) for p in m.parameters(False)
            },
            rates=rates,
        )

    def total_training_steps(self) -> int:
        """Optimizer steps of the whole run (:func:`total_training_steps` of this module's trainer)."""
        return total_training_steps(self.trainer)

    def configure_optimizers(self) -> Any:
        """AdamW over :meth:`parameter_groups` with a per-step :func:`linear_warmup_decay` schedule."""
        groups = self.parameter_groups()
        if not groups:
            raise PalUserError(
                "No trainable parameters: freeze_encoder with adapter='none' and frozen heads?"
            )
        hp = self.hparams
        fused = fused_allowed(attached_trainer(self))
        optimizer = adamw(groups, fused=fused, lr=hp["lr"], weight_decay=hp["weight_decay"])
        total = self.total_training_steps()
        warmup = warmup_steps_of(total, hp["warmup_steps"], hp["warmup_ratio"])
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, partial(linear_warmup_decay, warmup=warmup, total=total)
        )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
        }

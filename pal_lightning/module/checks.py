"""Refuse ``MultiTaskModule`` options that are out of range or conflict, at construction, not at the first batch."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.heads import POOLING_MODES, check_loss
from pal_lightning.modeling.simcse import SimCSEConfig
from pal_lightning.module.compile import check_compile_options
from pal_lightning.tasks.specs import TaskSpec


def check_model_options(
    hp: Mapping[str, Any], specs: Mapping[str, TaskSpec], simcse: SimCSEConfig | None
) -> None:
    """Refuse the module's hyper-parameters ``hp`` where one is out of range or two conflict.

    Raises:
        PalUserError: naming the option and the fix.
    """
    check_compile_options(hp["compile"], hp["compile_mode"])
    if not 0.0 <= hp["warmup_ratio"] <= 1.0:
        raise PalUserError(f"warmup_ratio must lie in [0, 1], got {hp['warmup_ratio']}.")
    if hp["warmup_steps"] is not None and hp["warmup_steps"] < 0:
        raise PalUserError(
            f"warmup_steps must be >= 0 (or None to use warmup_ratio), got {hp['warmup_steps']}."
        )
    if not 0.0 < hp["layer_lr_decay"] <= 1.0:
        raise PalUserError(f"layer_lr_decay must lie in (0, 1] (1 = no decay), got {hp['layer_lr_decay']}.")
    for name in ("lr", "head_lr", "adapter_lr", "weight_decay", "dropout"):
        value = hp[name]
        if value is None:  # a default
            continue
        if name == "dropout":  # each check says what a good value satisfies, so NaN fails
            good, what = 0.0 <= value < 1.0, "a probability in [0, 1)"
        elif name == "weight_decay":
            good, what = math.isfinite(value) and value >= 0.0, "a finite number >= 0"
        else:
            good, what = math.isfinite(value) and value > 0.0, "a finite number > 0"
        if not good:
            raise PalUserError(f"{name} must be {what}, got {value} (--model.{name}).")
    if hp["pooling"] not in POOLING_MODES:
        raise PalUserError(f"Unknown pooling {hp['pooling']!r}: choose one of {POOLING_MODES}.")
    if simcse is not None:
        simcse.check(specs)
    sharing = hp["layer_sharing"]
    if hp["freeze_encoder"] and isinstance(sharing, str) and "I" in sharing.upper():
        raise PalUserError(
            f"layer_sharing {sharing!r} has individual (I) layers, which freeze_encoder would freeze: "
            "set freeze_encoder: false (mark the layers to keep fixed with F), or use F/S letters only."
        )
    if hp["max_nonfinite_steps"] < 1:
        raise PalUserError(f"max_nonfinite_steps must be >= 1, got {hp['max_nonfinite_steps']}.")
    for spec in specs.values():
        check_loss(spec)

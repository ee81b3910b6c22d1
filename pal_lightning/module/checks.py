"""Refuse ``MultiTaskModule`` options that are out of range or cannot work together, at construction rather
than at the first batch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.heads import POOLING_MODES, check_loss
from pal_lightning.modeling.simcse import SimCSEConfig
from pal_lightning.module.compile import check_compile_options
from pal_lightning.module.nonfinite_guard import check_max_nonfinite_steps
from pal_lightning.module.optim import check_rates, check_schedule_options
from pal_lightning.tasks.specs import TaskSpec


def check_model_options(
    hp: Mapping[str, Any], specs: Mapping[str, TaskSpec], simcse: SimCSEConfig | None
) -> None:
    """Refuse the module's hyper-parameters ``hp`` where one is out of range or two conflict.

    Raises:
        PalUserError: naming the option and the fix.
    """
    check_compile_options(hp["compile"], hp["compile_mode"])
    check_schedule_options(hp["warmup_ratio"], hp["warmup_steps"], hp["layer_lr_decay"])
    check_rates(**{k: hp[k] for k in ("lr", "head_lr", "adapter_lr", "weight_decay", "dropout")})
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
    check_max_nonfinite_steps(hp["max_nonfinite_steps"])
    for spec in specs.values():
        check_loss(spec)

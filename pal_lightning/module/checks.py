"""Refuse ``MultiTaskModule`` options that are out of range or conflict, at construction, not at the first batch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.heads import POOLING_MODES, check_loss
from pal_lightning.modeling.simcse import SimCSEConfig
from pal_lightning.module.compile import check_compile_options
from pal_lightning.module.optim_config import OptimConfig
from pal_lightning.tasks.specs import TaskSpec


def check_model_options(
    hp: Mapping[str, Any], specs: Mapping[str, TaskSpec], simcse: SimCSEConfig | None, optim: OptimConfig
) -> None:
    """Refuse the module's hyper-parameters ``hp`` (``optim``: its optimizer group, already checked alone)
    where one is out of range or two conflict.

    Raises:
        PalUserError: naming the option and the fix.
    """
    check_compile_options(hp["compile"], hp["compile_mode"])
    dropout = hp["dropout"]
    if dropout is not None and not 0.0 <= dropout < 1.0:  # says what a good value satisfies, so NaN fails
        raise PalUserError(f"dropout must be a probability in [0, 1), got {dropout} (--model.dropout).")
    if hp["pooling"] not in POOLING_MODES:
        raise PalUserError(f"Unknown pooling {hp['pooling']!r}: choose one of {POOLING_MODES}.")
    if simcse is not None:
        simcse.check(specs)
    sharing = hp["layer_sharing"]
    if optim.freeze_encoder and isinstance(sharing, str) and "I" in sharing.upper():
        raise PalUserError(
            f"layer_sharing {sharing!r} has individual (I) layers, which optim.freeze_encoder would freeze: "
            "set optim.freeze_encoder: false (mark the layers to keep fixed with F), or use F/S letters only."
        )
    if hp["max_nonfinite_steps"] < 1:
        raise PalUserError(f"max_nonfinite_steps must be >= 1, got {hp['max_nonfinite_steps']}.")
    for spec in specs.values():
        check_loss(spec)

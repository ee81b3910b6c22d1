"""A quiet ``Trainer`` for tests: one CPU device, nothing logged, saved or printed unless asked for."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import lightning.pytorch as pl

#: What :func:`quiet_trainer` passes to ``Trainer`` unless overridden.
QUIET_TRAINER = {
    "accelerator": "cpu",
    "devices": 1,
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
    "num_sanity_val_steps": 0,
}


def quiet_trainer(**overrides: Any) -> pl.Trainer:
    """A ``lightning.pytorch.Trainer`` for tests: one CPU device, no logger, no checkpoints, no progress
    bar or model summary, no sanity validation (:data:`QUIET_TRAINER`); ``overrides`` win."""
    import lightning.pytorch as pl

    return pl.Trainer(**{**QUIET_TRAINER, **overrides})

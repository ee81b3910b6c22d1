"""Lightning callbacks of pal-lightning."""

from __future__ import annotations

from pal_lightning.callbacks.prediction_writer import PredictionWriter

__all__ = ["PredictionWriter"]

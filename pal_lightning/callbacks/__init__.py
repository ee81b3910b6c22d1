"""Lightning callbacks of pal-lightning."""

from __future__ import annotations

from pal_lightning.callbacks.gem import EpisodicMemory, GEMCallback
from pal_lightning.callbacks.prediction_writer import PredictionWriter

__all__ = ["EpisodicMemory", "GEMCallback", "PredictionWriter"]

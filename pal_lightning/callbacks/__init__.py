"""Lightning callbacks of pal-lightning (the command line adds most of them itself)."""

from __future__ import annotations

from pal_lightning.callbacks.continual_evaluation import ContinualEvaluation
from pal_lightning.callbacks.prediction_writer import PredictionWriter
from pal_lightning.callbacks.rng_state import RNGStateCallback

__all__ = ["ContinualEvaluation", "PredictionWriter", "RNGStateCallback"]

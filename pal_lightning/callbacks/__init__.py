"""Lightning callbacks of pal-lightning (the command line adds most of them itself).

* :class:`ContinualEvaluation`: the accuracy matrix ``R[i][j]`` of a sequential (continual) run.
* :class:`PredictionWriter`: CS224N prediction files, gathered across ranks, never overwritten.
* :class:`RNGStateCallback`: every rank's random generators in checkpoints (exact resume).

GEM's callback is :class:`pal_lightning.gem.GEMCallback`; the crash-safe checkpoint plugin is
:class:`pal_lightning.core.checkpoint_io.AtomicCheckpointIO`.
"""

from __future__ import annotations

from pal_lightning.callbacks.continual_evaluation import ContinualEvaluation
from pal_lightning.callbacks.prediction_writer import PredictionWriter
from pal_lightning.callbacks.rng_state import RNGStateCallback

__all__ = ["ContinualEvaluation", "PredictionWriter", "RNGStateCallback"]

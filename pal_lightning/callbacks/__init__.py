"""Lightning callbacks (and the checkpoint plugin) of pal-lightning.

* :class:`GEMCallback`: Gradient Episodic Memory / A-GEM projection of each update.
* :class:`ContinualEvaluation`: the accuracy matrix ``R[i][j]`` of a sequential (continual) run.
* :class:`PredictionWriter`: CS224N prediction files, gathered across ranks, never overwritten.
* :class:`RNGStateCallback`: every rank's random generators in checkpoints (exact resume).
* :class:`AtomicCheckpointIO`: checkpoint writes that never leave a half-written file behind.
"""

from __future__ import annotations

from pal_lightning.callbacks.continual_evaluation import ContinualEvaluation
from pal_lightning.callbacks.prediction_writer import PredictionWriter
from pal_lightning.callbacks.rng_state import RNGStateCallback
from pal_lightning.core.checkpoint_io import AtomicCheckpointIO
from pal_lightning.gem import EpisodicMemory, GEMCallback, agem_project, project_gradient

__all__ = [
    "AtomicCheckpointIO",
    "ContinualEvaluation",
    "EpisodicMemory",
    "GEMCallback",
    "PredictionWriter",
    "RNGStateCallback",
    "agem_project",
    "project_gradient",
]

"""The multi-task LightningModule and its training concerns (optimizer, guard, evaluation, checkpoint
check, compilation, SimCSE step), and a trained model's life after training: save/load, inference,
export, and starting a fit from another run's weights.

Each concern pairs pure functions (testable without a Trainer) with a small mixin that
:class:`~pal_lightning.module.multitask.MultiTaskModule` inherits.
"""

from pal_lightning.module.multitask import MultiTaskModule

__all__ = ["MultiTaskModule"]

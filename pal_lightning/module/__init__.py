"""The multi-task LightningModule: its training concerns (pure functions, each with a small mixin that
:class:`~pal_lightning.module.multitask.MultiTaskModule` inherits) and a trained model's save/load,
inference and export."""

from pal_lightning.module.multitask import MultiTaskModule

__all__ = ["MultiTaskModule"]

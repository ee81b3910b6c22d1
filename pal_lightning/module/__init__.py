"""The multi-task LightningModule, the parts it is composed of (plain objects and functions), and a trained
model's save/load, inference and export."""

from pal_lightning.module.multitask import MultiTaskModule

__all__ = ["MultiTaskModule"]

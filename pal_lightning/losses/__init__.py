"""Auxiliary training losses as pure functions of embeddings (no model, no data code)."""

from pal_lightning.losses.simcse import gather_rows, simcse_loss

__all__ = ["gather_rows", "simcse_loss"]

"""The CLI's progress bar: Lightning's rich bar without "Epoch 0/-2" on step-limited runs."""

from __future__ import annotations

from pal_lightning.core.private_api import ProgressBarHooks


class RunProgressBar(ProgressBarHooks):
    """:class:`~lightning.pytorch.callbacks.RichProgressBar` whose epoch label suits ``max_steps`` runs.

    A run limited by ``max_steps`` has ``max_epochs=-1``, which Lightning shows as "Epoch 0/-2";
    here it reads "Epoch 0 (max 1200 steps)".
    """

    def epoch_description(self, current_epoch: int) -> str:
        max_epochs = self.trainer.max_epochs
        if max_epochs is not None and max_epochs >= 0:
            return super().epoch_description(current_epoch)
        max_steps = self.trainer.max_steps
        label = f"Epoch {current_epoch}" + (
            f" (max {max_steps} steps)" if max_steps and max_steps > 0 else ""
        )
        return f"{label:{len(self.validation_description)}}"

"""Reports printed when the run ends (:class:`TeardownPrinter`), after Lightning's progress bar is gone."""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback


class TeardownPrinter(Callback):
    """A callback whose reports print at ``teardown``: printed earlier, a live progress bar would redraw
    below them. Call :meth:`print_at_teardown` on rank 0 only."""

    def print_at_teardown(self, text: str) -> None:
        """Print ``text`` when the run ends."""
        self.__dict__.setdefault("_at_teardown", []).append(text)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        for text in self.__dict__.pop("_at_teardown", []):
            print(text, flush=True)

"""The package's data module: the configured sampling rule, then a floor under every task's probability."""

from __future__ import annotations

from typing import Any

import my_mtl.sampling  # noqa: F401  (registers capped_inverse: data.init_args.sampling may name it)
from pal_lightning import MultiTaskDataModule
from pal_lightning.core.errors import PalUserError


class FlooredData(MultiTaskDataModule):
    """Every task drawn with probability at least ``min_probability``: the rule's probabilities ``p`` become
    ``(1 - T m) p + m`` for ``T`` tasks (still summing to 1; the sampler draws and the log shows these)."""

    def __init__(self, *args: Any, min_probability: float = 0.0, **options: Any) -> None:
        super().__init__(*args, **options)
        if not 0.0 <= min_probability <= 1.0 / len(self.task_names):
            raise PalUserError(
                f"min_probability must be in [0, 1/{len(self.task_names)}] for {len(self.task_names)} tasks, "
                f"got {min_probability} (--data.init_args.min_probability 0.1)."
            )
        self.min_probability = min_probability

    def task_probabilities_for_epoch(self, epoch: int) -> dict[str, float]:
        p = super().task_probabilities_for_epoch(epoch)  # the configured rule's (capped_inverse, ...)
        m, n = self.min_probability, len(p)
        return {task: (1.0 - n * m) * value + m for task, value in p.items()}

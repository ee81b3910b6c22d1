"""TrainingLog reads nothing from the device on a training step that writes no row."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pal_lightning.callbacks.training_log import TrainingLog


class _DeviceReads(TorchDispatchMode):
    """Counts the tensor reads that make the host wait for the device (``.item()``, ``int(t)``, ``bool(t)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.reads += func is torch.ops.aten._local_scalar_dense.default
        return func(*args, **(kwargs or {}))


def test_token_counts_stay_on_the_device_until_a_row_is_written() -> None:
    log = TrainingLog()
    batches: list[dict[str, Any]] = [
        {"ids": ["a", "b"], "attention_mask": torch.tensor([[1, 1, 0], [1, 0, 0]])},
        {
            "ids": ["c"],
            "attention_mask_a": torch.tensor([[1, 1, 1]]),
            "attention_mask_b": torch.tensor([[1, 0]]),
        },
    ]
    with _DeviceReads() as reads:
        for i, batch in enumerate(batches):
            log.on_train_batch_start(None, None, batch, i)  # type: ignore[arg-type]
    assert reads.reads == 0
    assert log._examples == 3
    assert float(log._tokens) == 3 + 4  # non-padding positions, counted by hand

"""Every rank's random generators in checkpoints, restored on resume (:class:`RNGStateCallback`)."""

from __future__ import annotations

import logging
import random
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from pal_lightning.core import distributed
from pal_lightning.core.distributed import gather_objects

log = logging.getLogger(__name__)


def collect_rng_state() -> dict[str, Any]:
    """The generator states of this process, as weights_only-safe values."""
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    version, py_state, gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": [str(name), [int(k) for k in keys], int(pos), int(has_gauss), float(cached)],
        "python": [int(version), [int(v) for v in py_state], gauss],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = [s.cpu() for s in torch.cuda.get_rng_state_all()]
    return state


def apply_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`collect_rng_state` returned."""
    torch.set_rng_state(torch.as_tensor(state["torch"], dtype=torch.uint8).cpu())
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), int(pos), int(has_gauss), float(cached)))
    version, py_state, gauss = state["python"]
    random.setstate((int(version), tuple(int(v) for v in py_state), gauss))
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available():
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all([torch.as_tensor(s, dtype=torch.uint8) for s in cuda])
        else:
            log.warning(
                "The checkpoint holds CUDA generator states of %d device(s), this process sees %d: "
                "CUDA generators are not restored.",
                len(cuda),
                torch.cuda.device_count(),
            )


class RNGStateCallback(Callback):
    """Checkpoint the torch, numpy, python and CUDA generators of every rank; restore them on resume.

    Lightning restores weights, optimizer and loop position but not the generators, so a resumed run
    would draw other dropout masks. States are plain values (``torch.load(weights_only=True)``).
    """

    def __init__(self) -> None:
        self._pending: dict[str, Any] | None = None
        self.restored = False

    def state_dict(self) -> dict[str, Any]:
        states = gather_objects(collect_rng_state())
        return {"world_size": len(states), "states": states}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        states = state_dict.get("states") or []
        rank, world = distributed.rank(), distributed.world_size()
        if len(states) != world and distributed.is_main_process():
            log.warning(
                "The checkpoint holds the random states of %d rank(s) but this run has %d: the resumed "
                "run will not repeat the original one exactly.",
                len(states),
                world,
            )
        self._pending = states[rank] if rank < len(states) else None
        self.restored = False

    def _restore(self) -> None:
        if self._pending is not None:
            apply_rng_state(self._pending)
            self._pending = None
            self.restored = True

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._restore()

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._restore()

"""The package's callback: what each rank trained, written when ``fit`` ends."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback


class TaskVarianceLog(Callback):
    """Write ``<out>/rank<r>.json`` at the end of ``fit``: every step's task and learned variances
    ``exp(log_vars)``, the final log-variances, the optimizer group holding them and a digest of every weight
    (parameters by name, the module's own included)."""

    def __init__(self, out: str) -> None:
        self.out = out
        self.steps: list[dict[str, Any]] = []

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        variances = torch.exp(pl_module.log_vars.detach()).tolist()
        self.steps.append({"step": trainer.global_step, "task": batch["task"], "variances": variances})

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        digest = hashlib.sha256()
        for name, param in sorted(pl_module.named_parameters()):
            digest.update(name.encode())
            digest.update(param.detach().double().cpu().numpy().tobytes())
        [group] = [
            g for g in trainer.optimizers[0].param_groups if any(p is pl_module.log_vars for p in g["params"])
        ]
        record = {
            "rank": trainer.global_rank,
            "world": trainer.world_size,
            "steps": self.steps,
            "log_vars": pl_module.log_vars.detach().tolist(),
            "log_vars_group": {
                "name": group.get("name"),
                "size": len(group["params"]),
                "weight_decay": group["weight_decay"],
            },
            "digest": digest.hexdigest(),
        }
        Path(self.out).mkdir(parents=True, exist_ok=True)
        (Path(self.out) / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))

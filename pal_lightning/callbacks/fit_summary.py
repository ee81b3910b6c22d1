"""One line at the start of ``fit``: what is trained, how big it is, and where the run's files go.

It replaces Lightning's model-summary table (off by default in the CLI), whose per-module rows and
"Total FLOPs: 0" say little about a multi-task model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from pal_lightning.core.distributed import is_main_process
from pal_lightning.modeling.methods.config import DEFAULT_ADAPTER

#: AdapterConfig's defaults (fields left out of the one-line summary when a run keeps them).
_ADAPTER_DEFAULTS: dict[str, Any] = DEFAULT_ADAPTER.to_dict()


def describe_fit(pl_module: pl.LightningModule, log_dir: str | None, max_steps: int | None) -> str:
    """``pal-lightning: fit MultiTaskModule on sst, qqp, sts (adapter pals, encoder X): N parameters, ...``."""
    total = sum(p.numel() for p in pl_module.parameters())
    trainable = sum(p.numel() for p in pl_module.parameters() if p.requires_grad)
    hparams: Mapping[str, Any] = getattr(pl_module, "hparams", {}) or {}
    tasks = list(getattr(pl_module, "task_specs", {}) or [])
    details = []
    adapter = hparams.get("adapter")
    if isinstance(adapter, Mapping):  # the method, and the options that differ from the defaults
        options = [f"{k} {v}" for k, v in adapter.items() if k != "method" and v != _ADAPTER_DEFAULTS.get(k)]
        details.append(f"adapter {adapter.get('method')}" + (f" ({', '.join(options)})" if options else ""))
    elif adapter is not None:
        details.append(f"adapter {adapter}")
    if hparams.get("bert_config") is not None:
        details.append("randomly initialised encoder")
    elif hparams.get("encoder") is not None:
        details.append(f"encoder {hparams['encoder']}")
    auxiliary = hparams.get("auxiliary") or []
    if auxiliary:
        details.append(f"auxiliary {', '.join(auxiliary)}")
    what = type(pl_module).__name__ + (f" on {', '.join(tasks)}" if tasks else "")
    if details:
        what += f" ({'; '.join(details)})"
    steps = f"; {max_steps} steps" if max_steps is not None and max_steps > 0 else ""
    where = f"; run folder {log_dir}" if log_dir else ""
    return f"pal-lightning: fit {what}: {total:,} parameters, {trainable:,} trainable{steps}{where}"


class FitSummary(Callback):
    """Print :func:`describe_fit` once, on global rank 0, when ``fit`` starts."""

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        log_dir = trainer.log_dir  # every rank: a broadcast under DDP
        if is_main_process(trainer):
            print(describe_fit(pl_module, log_dir, trainer.max_steps), flush=True)

"""Run by test_gem_ddp.py: 2-process gloo DDP fits with GEMCallback on fixture files, each rank writing
``rank<r>.json`` (a fingerprint of its parameters, its memories, GEM's counters).

Usage: python gem_ddp_script.py DATA_DIR OUT_DIR [MODE [MODEL_TYPE]], or DATA_DIR then OUT_DIR MODE
MODEL_TYPE for each of several fits, run one after the other in the same two processes (a fresh interpreter
costs about 6 s of imports). MODE ``interleaved``, or ``continual``: a sequential schedule (SST, Quora,
STS; 2 batches each), GEM on the past tasks and :class:`ContinualEvaluation` (the ranks also record R; rank
0 saves ``final.pt``). MODEL_TYPE: the family of the tiny random encoder (``bert``, ``modernbert``, ...).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import lightning.pytorch as pl
import torch

from pal_lightning.callbacks import ContinualEvaluation
from pal_lightning.data import MultiTaskDataModule
from pal_lightning.gem import GEMCallback
from pal_lightning.gem.gram import flatten
from pal_lightning.gem.rows import MemorySource, constraint_gradients
from pal_lightning.module.multitask import MultiTaskModule
from pal_lightning.testing import (
    BERT_VOCAB_SIZE,
    TINY_BERT,
    quiet_trainer,
    tiny_family_config,
    without_dropout,
)
from pal_lightning.testing.callbacks import ConstraintRows


class Record(pl.Callback):
    def __init__(self, gem: GEMCallback, out: Path, continual: ContinualEvaluation | None = None) -> None:
        self.gem = gem
        self.out = out
        self.continual = continual
        self.stats: list[dict[str, float]] = []
        self.row_errors: list[float] = []
        self.recorded = ConstraintRows(gem)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:  # noqa: ANN001
        stats = dict(self.gem.last_stats)
        stats.pop("gem/projection_ms", None)  # wall time differs between ranks
        self.stats.append(stats)
        if self.recorded.rows is not None and self.continual is None:  # (no dropout in this mode: exact rows)
            self.row_errors.append(self._row_error(trainer, pl_module))
        self.recorded.rows = None

    def _row_error(self, trainer, pl_module) -> float:  # noqa: ANN001
        """The rows GEM used (each rank's share, summed across ranks) against the whole draw
        computed by this rank alone, as one process would: the largest relative difference."""
        gem = self.gem
        params = gem.participating_parameters(pl_module)
        source = MemorySource(pl_module, trainer.datamodule, trainer.precision_plugin.forward_context)
        tasks = gem.constraining_tasks(gem._window_tasks)
        want = gem.memory_batch_size * trainer.world_size
        step = trainer.global_step
        ref = constraint_gradients(source, gem.memory, gem.mode, tasks, step, want, params, gem.batch_tasks)
        assert self.recorded.rows is not None and len(self.recorded.rows) == len(ref)
        pairs = [
            (flatten(a, params), flatten(b, params)) for a, b in zip(self.recorded.rows, ref, strict=True)
        ]
        return max(float((a - b).abs().max() / b.abs().max()) for a, b in pairs)

    def on_fit_end(self, trainer, pl_module) -> None:  # noqa: ANN001
        digest = hashlib.sha256()
        for name, p in sorted(pl_module.named_parameters()):
            digest.update(name.encode())
            digest.update(p.detach().cpu().numpy().tobytes())
        record = {
            "world": trainer.world_size,
            "steps": trainer.global_step,
            "params": digest.hexdigest(),
            "finite": all(bool(torch.isfinite(p).all()) for p in pl_module.parameters()),
            "memory": self.gem.state_dict(),
            "stats": self.stats,
            "row_errors": self.row_errors,
        }
        if self.continual is not None:
            record["baseline"] = self.continual.baseline
            record["R"] = self.continual.R
            if trainer.is_global_zero:
                torch.save(pl_module.state_dict(), self.out / "final.pt")
        (self.out / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))


def main(data_dir: str, out: str, mode: str = "interleaved", model_type: str = "bert") -> None:
    torch.set_num_threads(1)
    pl.seed_everything(0)
    exact = mode != "continual"  # no dropout: the memory rows can be recomputed exactly
    tiny = TINY_BERT if model_type == "bert" else tiny_family_config(model_type, vocab_size=BERT_VOCAB_SIZE)
    config = without_dropout(tiny) if exact else tiny
    model = MultiTaskModule(
        encoder_config=config, adapter={"size": 8, "num_heads": 2}, dropout=0.0 if exact else 0.1
    )
    continual = None
    if mode == "continual":
        dm = MultiTaskDataModule(
            data_dir=data_dir,
            cache_dir=False,
            batch_size=3,
            max_length=32,
            schedule="sequential",
            steps_per_task=2,
        )
        gem = GEMCallback(memory_size=5, memory_batch_size=3, constraints="past")
        continual = ContinualEvaluation(limit_eval_examples=None)
        max_steps = 6
    else:
        dm = MultiTaskDataModule(data_dir=data_dir, cache_dir=False, batch_size=3, max_length=32)
        # 3 x 2 ranks wanted, 5 stored: shares 3 + 2; GEM's rows in one pass (its default on CUDA only),
        # checked against the per-task rows of the whole draw (the CPU's default) by _row_error
        gem = GEMCallback(memory_size=5, memory_batch_size=3, one_pass=True)
        max_steps = 6  # the last step has two constraining tasks (the batched rows)
    callbacks = [gem, Record(gem, Path(out), continual)] + ([continual] if continual is not None else [])
    trainer = quiet_trainer(
        devices=2,
        strategy="ddp_find_unused_parameters_true",
        max_steps=max_steps,
        gradient_clip_val=1.0,
        default_root_dir=out,
        limit_val_batches=0,
        callbacks=callbacks,
    )
    trainer.fit(model, datamodule=dm)


if __name__ == "__main__":
    data_dir, *runs = sys.argv[1:]
    if len(runs) <= 3:
        main(data_dir, *runs)
    else:
        assert len(runs) % 3 == 0, "several fits: OUT_DIR MODE MODEL_TYPE for each"
        for k in range(0, len(runs), 3):
            main(data_dir, *runs[k : k + 3])

"""Run by test_ddp.py (python ddp_script.py OUT_DIR): a 2-process gloo fit, validate and predict, then a fit on
mixed batches; each rank writes rank<r>.json (and mixed/rank<r>.json) with the batches it saw, then
metrics<r>.json: the task metrics computed over both ranks' uneven shares of seeded predictions."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import lightning.pytorch as pl
import torch
from torch import nn

from pal_lightning.callbacks import PredictionWriter
from pal_lightning.data import MultiTaskDataModule
from pal_lightning.tasks.metrics import build_task_metrics
from pal_lightning.tasks.specs import get_task
from pal_lightning.testing import quiet_trainer, write_cs224n_quirks


class Recorder(pl.LightningModule):
    def __init__(self, out: str) -> None:
        super().__init__()
        self.out = out
        self.emb = nn.Embedding(30522, 1)
        self.train_seen: list = []
        self.val_seen: list = []

    def training_step(self, batch, batch_idx):
        task = batch["task"] if "task" in batch else list(batch["tasks"])  # a mixed batch: each row's task
        self.train_seen.append([self.current_epoch, task, list(batch["ids"])])
        return self.emb(batch["input_ids"]).mean() ** 2

    def validation_step(self, batch, batch_idx):
        self.val_seen.append([batch["task"], list(batch["ids"])])

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        preds = [len(i) % 2 for i in batch["ids"]]
        return {"task": batch["task"], "split": batch["split"], "ids": batch["ids"], "predictions": preds}

    def on_fit_end(self) -> None:
        path = Path(self.out) / f"rank{self.global_rank}.json"
        state = self.trainer.datamodule.train_batch_sampler
        use_distributed_sampler = self.trainer._accelerator_connector.use_distributed_sampler
        record = {"train": self.train_seen, "val": self.val_seen, "world": self.trainer.world_size}
        record.update(sampler_world=state.num_replicas, use_distributed_sampler=use_distributed_sampler)
        path.write_text(json.dumps(record))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(root: Path, out: Path, mixing: str) -> None:
    """One DDP fit of ``mixing`` batches on ``root``'s fixture data, the ranks' records in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    options = {"batch_size": 3, "eval_batch_size": 4, "sampling": "sqrt", "batch_mixing": mixing}
    dm = MultiTaskDataModule(data_dir=str(root / "data"), cache_dir=str(root / "cache"), **options)
    mixed = mixing == "mixed"
    trainer = quiet_trainer(
        devices=2,
        strategy="ddp",
        max_epochs=1 if mixed else 2,
        max_steps=6 if mixed else -1,  # mixed: a few steps show the shares (no validation needed)
        callbacks=[] if mixed else [PredictionWriter(output_dir=root / "preds")],
    )
    model = Recorder(str(out))
    trainer.fit(model, datamodule=dm)
    if not mixed:
        trainer.predict(model, datamodule=dm, return_predictions=False)


def metric_data(n: int = 200) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Seeded (prediction, gold) of sst, qqp and sts; sts with many ties."""
    g = torch.Generator().manual_seed(0)
    sts_gold = torch.randint(0, 11, (n,), generator=g).float() / 2
    sts_pred = (sts_gold + torch.randn(n, generator=g)).clamp(0, 5)
    labels = {"sst": 5, "qqp": 2}
    data = {
        t: (torch.randint(0, k, (n,), generator=g), torch.randint(0, k, (n,), generator=g))
        for t, k in labels.items()
    }
    return {**data, "sts": (sts_pred, sts_gold)}


def sync_metrics(out: Path) -> None:
    """Each rank updates every task's metrics with its own uneven share (130/70 rows, batches of 16);
    ``compute()`` must merge both ranks' states into the full-set values."""
    rank, result = torch.distributed.get_rank(), {}
    for task, (pred, gold) in metric_data().items():
        pred, gold = (pred[:130], gold[:130]) if rank == 0 else (pred[130:], gold[130:])
        metrics = build_task_metrics(get_task(task))
        for i in range(0, len(pred), 16):
            metrics.update(pred[i : i + 16], gold[i : i + 16])
        result[task] = {k: float(v) for k, v in metrics.compute().items()}
    rows = {task: [pred.tolist(), gold.tolist()] for task, (pred, gold) in metric_data().items()}
    (out / f"metrics{rank}.json").write_text(json.dumps({"scores": result, "rows": rows}))


def main(out: str) -> None:
    torch.set_num_threads(1)
    root = Path(out)
    data = root / "data"
    if int(os.environ.get("LOCAL_RANK", "0")) == 0 and not data.exists():
        write_cs224n_quirks(data)
    fit(root, root, "per_task")
    fit(root, root / "mixed", "mixed")
    if not torch.distributed.is_initialized():  # the fits' MASTER_ADDR, RANK, ... are still set
        torch.distributed.init_process_group("gloo")
    sync_metrics(root)


if __name__ == "__main__":
    main(sys.argv[1])

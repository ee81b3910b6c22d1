"""Benchmark: the tokens a quickstart training run pads to, per-task against mixed batches, with and
without length grouping, on the real CS224N training files. No model runs: the figures are counted.

A step's encoder pass holds ``rows x width`` token positions: ``rows`` the batch's sequences (a siamese
pair's two sentences are two rows, in one pass, in both modes) and ``width`` the longest of them (what
the batch pads to with ``pad_to_multiple_of: 1``). For each way of making batches this prints, over the
quickstart's 1,200 steps (4 epochs of 300, annealed sampling, batch 32, seed 42):

* ``positions``: padded token positions, the quantity a CPU step's arithmetic follows;
* ``real``: the tokens that are not padding, and ``padding`` the share of positions that are;
* ``tasks_per_batch``: the mean number of tasks in a batch (1 per task; the mixing mixed batches buy).

and the ratios to per-task batches with grouping (the quickstart). Usage::

    PAL_DATA_DIR=/path/to/cs224n-minbert HF_HUB_OFFLINE=1 python benchmarks/mixed_padding.py \\
        [--json benchmarks/results_speed/mixed_padding.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

DEFAULT_JSON = Path(__file__).parent / "results_speed" / "mixed_padding.json"
QUICKSTART = Path(__file__).parents[1] / "configs" / "quickstart.yaml"
WAYS = {  # name: (batch_mixing, group_by_length)
    "per_task_grouped": ("per_task", True),
    "per_task_plain": ("per_task", False),
    "mixed_plain": ("mixed", False),
    "mixed_grouped": ("mixed", True),
}


def count(way: str, epochs: int, data_dir: str | None) -> dict[str, Any]:
    from pal_lightning.data import MultiTaskDataModule
    from pal_lightning.data.sampling.mixed import MixedBatch

    config = yaml.safe_load(QUICKSTART.read_text())
    options = dict(config["data"]["init_args"])
    mixing, grouped = WAYS[way]
    options.update(
        data_dir=data_dir,
        batch_mixing=mixing,
        group_by_length=grouped,
        cache_dir=False,
        tokenizer=config["model"]["init_args"]["encoder"],
        pair_encoding=config["model"]["init_args"]["pair_encoding"],
    )
    dm = MultiTaskDataModule(**options)
    dm.setup("fit")
    splits = {t: dm.load_split(t, "train") for t in dm.task_names}
    sampler = dm.train_dataloader().batch_sampler
    sides = {t: [enc.lengths for enc in s.encodings.values()] for t, s in splits.items()}
    positions = real = 0
    tasks_per_batch = []
    for e in range(epochs):
        sampler.set_epoch(e)
        for batch in sampler:
            parts = batch.parts if isinstance(batch, MixedBatch) else (batch,)
            lengths = [side[list(p.indices)] for p in parts for side in sides[p.task]]
            rows = sum(len(x) for x in lengths)
            width = max(int(x.max()) for x in lengths)
            positions += rows * width
            real += int(sum(x.sum() for x in lengths))
            tasks_per_batch.append(len(parts))
    return {
        "positions": positions,
        "real": real,
        "padding": 1 - real / positions,
        "tasks_per_batch": float(np.mean(tasks_per_batch)),
        "steps": len(tasks_per_batch),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--data-dir", default=None, help="default: $PAL_DATA_DIR")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args()
    start = time.perf_counter()
    rows = {way: count(way, args.epochs, args.data_dir) for way in WAYS}
    base = rows["per_task_grouped"]["positions"]
    for row in rows.values():
        row["positions_vs_per_task_grouped"] = row["positions"] / base
    print(
        f"{'way':<18} {'positions':>11} {'real':>10} {'padding':>8} {'tasks/batch':>11} {'vs quickstart':>13}"
    )
    for way, row in rows.items():
        print(
            f"{way:<18} {row['positions']:>11,} {row['real']:>10,} {row['padding']:>8.3f} "
            f"{row['tasks_per_batch']:>11.2f} {row['positions_vs_per_task_grouped']:>12.2f}x"
        )
    record = {
        "benchmark": "mixed_padding",
        "config": str(QUICKSTART.relative_to(QUICKSTART.parents[1])),
        "epochs": args.epochs,
        "rows": rows,
        "seconds": time.perf_counter() - start,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

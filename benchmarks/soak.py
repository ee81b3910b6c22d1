"""Soak test: 3,000 training steps of a tiny model with GEM through the CLI stack; resident memory must stay flat.

A memory leak that costs a few kB per step (a tensor kept in a list, a growing metric state, an
ever-longer log buffer) is invisible in a unit test and fatal in a day-long run. This benchmark runs
``PalLightningCLI`` (in-process, with every default callback: checkpoints, the random-state saver,
score report, loggers) on a tiny random BERT (2 layers, width 32, the real vocabulary) with
:class:`~pal_lightning.gem.GEMCallback` (3 tasks, constraints ``others``), validating and
writing ``last.ckpt`` every ``--val-every`` steps, and samples the process's resident set size (RSS)
after every ``--sample-every`` optimizer steps.

    growth = (RSS_end - RSS_start) / RSS_start       target: growth < 0.10

``RSS_start`` is taken after ``--warmup`` steps (allocator pools, lazily built kernels and the first
validation and checkpoint are in place by then), ``RSS_end`` after the last step. The JSON also holds
the samples and the least-squares slope in MB per 1,000 steps, a check that the end value is no fluke.

Usage::

    python benchmarks/soak.py                         # 3,000 steps on synthetic CS224N-format files
    python benchmarks/soak.py --steps 500 --json /tmp/soak.json
    python benchmarks/soak.py --data-dir $PAL_DATA_DIR  # the real files (tokenised once, cached)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import lightning.pytorch as pl  # noqa: E402
import psutil  # noqa: E402
import yaml  # noqa: E402

from pal_lightning.cli.fit import PalLightningCLI, default_trainer_settings  # noqa: E402
from pal_lightning.testing import TINY_BERT, write_cs224n_data  # noqa: E402


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


class RSSRecorder(pl.Callback):
    """RSS after every ``every`` optimizer steps (and at ``warmup``)."""

    def __init__(self, every: int, warmup: int) -> None:
        self.every = every
        self.warmup = warmup
        self.samples: list[tuple[int, float]] = []
        self.start: tuple[int, float] | None = None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        step = trainer.global_step
        if step == self.warmup:
            self.start = (step, rss_mb())
        if step % self.every == 0 or step == trainer.max_steps:
            self.samples.append((step, rss_mb()))


def slope_per_1000(samples: list[tuple[int, float]]) -> float:
    """Least-squares slope of RSS (MB) against steps, per 1,000 steps."""
    if len(samples) < 2:
        return 0.0
    xs, ys = [s for s, _ in samples], [m for _, m in samples]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return 1000 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0


def config(root: Path, data_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "seed_everything": 0,
        "trainer": {
            "accelerator": "cpu",
            "devices": 1,
            "max_steps": args.steps,
            "val_check_interval": args.val_every,
            "check_val_every_n_epoch": None,
            "limit_val_batches": 4,
            "default_root_dir": str(root / "runs"),
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "log_every_n_steps": 50,
            "num_sanity_val_steps": 0,
            "gradient_clip_val": 1.0,
            "callbacks": [
                {
                    "class_path": "pal_lightning.gem.GEMCallback",
                    "init_args": {"memory_size": 256, "memory_batch_size": 16, "constraints": "others"},
                }
            ],
        },
        "model": {
            "class_path": "pal_lightning.MultiTaskModule",
            "init_args": {
                "tasks": ["sst", "qqp", "sts"],
                "adapter": {"num_heads": 2, "size": 8},
                "pair_encoding": {"sts": "siamese", "default": "cross"},
                "encoder_config": TINY_BERT,
                "optim": {"lr": 1e-4, "head_lr": 1e-3},
            },
        },
        "data": {
            "class_path": "pal_lightning.MultiTaskDataModule",
            "init_args": {
                "data_dir": str(data_dir),
                "batch_size": 8,
                "eval_batch_size": 32,
                "max_length": 48,
                "cache_dir": str(root / "cache"),
                "sampling": "annealed",
            },
        },
        "last_checkpoint": {"every_n_train_steps": args.val_every},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=300, help="steps before the start RSS is taken")
    parser.add_argument("--sample-every", type=int, default=100)
    parser.add_argument("--val-every", type=int, default=500, help="validation and last.ckpt every N steps")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data-dir", type=Path, default=None, help="CS224N files (default: synthetic)")
    parser.add_argument("--json", type=Path, default=None, help="write the result here")
    parser.add_argument("--target", type=float, default=0.10, help="largest allowed relative growth")
    args = parser.parse_args(argv)
    if not 0 < args.warmup < args.steps:
        parser.error("--warmup must lie between 0 and --steps")

    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="pal-soak-") as tmp:
        root = Path(tmp)
        data_dir = args.data_dir or write_cs224n_data(root / "data", n_train=400, n_dev=60)
        cfg = root / "soak.yaml"
        cfg.write_text(yaml.safe_dump(config(root, data_dir, args), sort_keys=False))
        recorder = RSSRecorder(args.sample_every, args.warmup)
        callbacks = default_trainer_settings()["callbacks"] + [recorder]
        rss_before = rss_mb()
        t0 = time.perf_counter()
        PalLightningCLI(
            args=["fit", "--config", str(cfg)],
            trainer_defaults={"callbacks": callbacks},
        )
        wall = time.perf_counter() - t0
    assert recorder.start is not None, "the run stopped before the warm-up ended"
    start, end = recorder.start[1], recorder.samples[-1][1]
    growth = (end - start) / start
    after_warmup = [s for s in recorder.samples if s[0] >= args.warmup]
    result = {
        "steps": args.steps,
        "warmup_steps": args.warmup,
        "rss_process_start_mb": round(rss_before, 1),
        "rss_start_mb": round(start, 1),
        "rss_end_mb": round(end, 1),
        "rss_max_mb": round(max(m for _, m in recorder.samples), 1),
        "growth": round(growth, 4),
        "slope_mb_per_1000_steps": round(slope_per_1000(after_warmup), 2),
        # a leak keeps growing; a warm-up effect (the first validations and checkpoints) levels off
        "slope_second_half_mb_per_1000_steps": round(
            slope_per_1000([x for x in recorder.samples if x[0] >= args.steps // 2]), 2
        ),
        "target": args.target,
        "passed": growth < args.target,
        "wall_s": round(wall, 1),
        "ms_per_step": round(1000 * wall / args.steps, 1),
        "samples": [[s, round(m, 1)] for s, m in recorder.samples],
        "torch_threads": args.threads,
    }
    print(
        f"RSS after {args.warmup} steps {start:.1f} MB, after {args.steps} steps {end:.1f} MB: growth "
        f"{100 * growth:+.2f}% (target < {100 * args.target:.0f}%), slope "
        f"{result['slope_mb_per_1000_steps']:+.2f} MB / 1000 steps, {wall:.0f} s"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())

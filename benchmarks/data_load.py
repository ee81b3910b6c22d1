"""Benchmark: read + validate + tokenise all real train and dev files, cold and from the cache.

Cold: a fresh, empty cache folder (every file is read, validated and tokenised with
the fast tokenizer's batched call, then written to the cache). Cached: a new data
module on the same cache folder (only the .npz arrays are loaded; the tokenizer is
still loaded to fingerprint it). Library imports are timed separately and excluded.

Usage::

    PAL_DATA_DIR=/work/shared/data/cs224n-minbert HF_HUB_OFFLINE=1 \\
        python benchmarks/data_load.py --json data_load.json

Targets on a 2-core machine: cold <= 20 s, cached <= 3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path


def load_all(data_dir: str, cache_dir: str, tasks: list[str]) -> tuple[float, dict[str, int]]:
    from pal_lightning.data import MultiTaskDataModule

    start = time.perf_counter()
    dm = MultiTaskDataModule(tasks=tasks, data_dir=data_dir, cache_dir=cache_dir)
    counts = {}
    for task in tasks:
        for split in ("train", "dev"):
            counts[f"{task}-{split}"] = len(dm.load_split(task, split))
    return time.perf_counter() - start, counts


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=os.environ.get("PAL_DATA_DIR"), help="default: $PAL_DATA_DIR")
    parser.add_argument("--tasks", nargs="+", default=["sst", "qqp", "sts"])
    parser.add_argument("--repeats", type=int, default=3, help="cold/cached runs; the best is reported")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if not args.data_dir:
        parser.error("pass --data-dir or set PAL_DATA_DIR")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    t0 = time.perf_counter()
    import transformers  # noqa: F401

    import pal_lightning.data  # noqa: F401  (torch, lightning, transformers)

    import_s = time.perf_counter() - t0
    cold, cached = [], []
    counts: dict[str, int] = {}
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="pal-bench-cache-") as cache:
            seconds, counts = load_all(args.data_dir, cache, args.tasks)
            cold.append(seconds)
            cached.append(load_all(args.data_dir, cache, args.tasks)[0])
    result = {
        "benchmark": "data_load",
        "tasks": args.tasks,
        "examples": counts,
        "total_examples": sum(counts.values()),
        "import_s": round(import_s, 3),
        "cold_s": round(min(cold), 3),
        "cached_s": round(min(cached), 3),
        "cold_runs_s": [round(x, 3) for x in cold],
        "cached_runs_s": [round(x, 3) for x in cached],
        "targets_s": {"cold": 20.0, "cached": 3.0},
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }
    print(
        f"{result['total_examples']} examples ({', '.join(args.tasks)}; train+dev): "
        f"cold {result['cold_s']:.2f} s (target <= 20), cached {result['cached_s']:.2f} s (target <= 3), "
        f"imports {result['import_s']:.2f} s (excluded)"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()

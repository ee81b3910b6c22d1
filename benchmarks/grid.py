"""Run a grid of methods x seeds through ``pal-lightning fit``, several runs at once, and collect scores.

``benchmarks/reproduce.py`` runs the shipped configs one after another at a reduced budget on
a CPU; this script is for a machine with room for several runs side by side (a GPU, where a
MiniLM step is bound by kernel launches and one process leaves most of the device idle). Each
method is a list of config files (a base and overlays, applied in order) plus command-line
overrides; every method runs once per seed. Results land in ``runs.jsonl`` (one JSON object per
finished run: method, seed, status, wall time, the dev scores of its ``scores.json``) as they
arrive, so a grid cut short by ``--deadline`` still leaves every finished run.

Runs are ordered seed-major (every method's first seed, then every method's second seed, ...),
so a partial grid holds complete pairs for the paired comparisons of ``--compare``.

Usage::

    python benchmarks/grid.py --spec spec.json --out runs/grid --jobs 8 --deadline 480

with ``spec.json`` like::

    {"seeds": [42, 43, 44],
     "common_args": ["--data.init_args.cache_dir=false"],
     "methods": {
        "shared": {"configs": ["configs/quickstart.yaml"], "args": ["--model.init_args.adapter=none"]},
        "pals":   {"configs": ["configs/quickstart.yaml"]}}}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_runs import fit_command, run_logged  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def grid_runs(spec: dict[str, Any]) -> list[tuple[str, int]]:
    """``(method, seed)`` pairs in seed-major order."""
    return [(m, s) for s in spec["seeds"] for m in spec["methods"]]


def run_one(
    method: str, seed: int, spec: dict[str, Any], out: Path, data_dir: Path, timeout: float
) -> dict[str, Any]:
    """One ``fit`` of ``method`` with ``seed``; returns its ``runs.jsonl`` record."""
    entry = spec["methods"][method]
    configs = [REPO / c for c in entry["configs"]]
    overlays = [a for c in configs[1:] for a in ("--config", str(c))]
    root = out / method / f"seed{seed}"
    args = [*overlays, *spec.get("common_args", []), *entry.get("args", [])]
    cmd = fit_command(configs[0], root, data_dir, seed, args)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    status, wall, run_dir = run_logged(cmd, root, root / "fit.log", env, REPO, timeout)
    record: dict[str, Any] = {"method": method, "seed": seed, "status": status, "wall_s": round(wall, 1)}
    scores_file = run_dir / "scores.json" if run_dir else None
    if scores_file is not None and scores_file.is_file():
        payload = json.loads(scores_file.read_text())
        result = payload.get("last") or payload.get("best") or {}
        record["scores"] = result.get("scores", {})
        record["step"] = result.get("step")
        record["run_dir"] = str(run_dir)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", type=Path, required=True, help="JSON file: seeds and methods")
    parser.add_argument("--out", type=Path, required=True, help="folder for the runs and runs.jsonl")
    parser.add_argument("--jobs", type=int, default=4, help="runs at once")
    parser.add_argument("--deadline", type=float, default=3600.0, help="seconds after which no run starts")
    parser.add_argument("--data-dir", type=Path, default=os.environ.get("PAL_DATA_DIR"))
    args = parser.parse_args(argv)
    if args.data_dir is None:
        parser.error("give --data-dir or set PAL_DATA_DIR")
    spec = json.loads(args.spec.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    lock = threading.Lock()
    sink = args.out / "runs.jsonl"

    def task(method: str, seed: int) -> None:
        left = args.deadline - (time.monotonic() - start)
        if left <= 30:
            record: dict[str, Any] = {"method": method, "seed": seed, "status": "not started (deadline)"}
        else:
            record = run_one(method, seed, spec, args.out, args.data_dir, timeout=left)
        line = json.dumps(record)
        with lock:
            with sink.open("a") as f:
                f.write(line + "\n")
            print(line, flush=True)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for method, seed in grid_runs(spec):
            pool.submit(task, method, seed)
    print(f"grid done in {time.monotonic() - start:.0f} s -> {sink}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Plain ``ddp`` against ``ddp_find_unused_parameters_true`` on 2 CPU processes (gloo): the same losses at
every step, and the step time of each.

Both fits run the demo (``configs/demo.yaml``: the packaged rows, all-MiniLM-L6-v2 with PALs) for the same
steps from the same seed, logging every step; the losses are read from each run's ``metrics.csv``
(``train/<task>/loss``, rank 0's, which under DDP is the rank's own batch) and the step time from its
``train/examples_per_s`` (the steps after the first ``--warmup``). The strategies run alternately,
``--repeats`` times each, so that a machine's drift falls on both.

    python benchmarks/ddp_strategies.py --steps 40 --out benchmarks/results_speed/ddp_strategies.json
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import tempfile
from pathlib import Path

from cli_runs import by_version, fit_command, run_logged

ROOT = Path(__file__).resolve().parents[1]
STRATEGIES = ("ddp_find_unused_parameters_true", "ddp")


def read_steps(metrics: Path) -> dict[int, dict[str, float]]:
    """Per logged step, its numeric ``train/*`` values."""
    steps: dict[int, dict[str, float]] = {}
    with metrics.open() as f:
        for row in csv.DictReader(f):
            values = {k: float(v) for k, v in row.items() if k.startswith("train/") and v not in ("", None)}
            if values and row.get("step"):
                steps.setdefault(int(float(row["step"])), {}).update(values)
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5, help="first steps left out of the step time")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results_speed/ddp_strategies.json")
    args = parser.parse_args()
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    runs: dict[str, list[dict[int, dict[str, float]]]] = {s: [] for s in STRATEGIES}
    walls: dict[str, list[float]] = {s: [] for s in STRATEGIES}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for strategy in STRATEGIES:
                root = Path(tmp) / f"{strategy}_{repeat}"
                options = [
                    "--trainer.accelerator=cpu",
                    "--trainer.devices=2",
                    f"--trainer.strategy={strategy}",
                    f"--trainer.max_steps={args.steps}",
                    "--trainer.log_every_n_steps=1",
                    "--trainer.check_val_every_n_epoch=1000",
                    "--checkpoint.save_top_k=0",
                ]
                cmd = fit_command(ROOT / "configs/demo.yaml", root, Path("demo"), 0, options)
                status, wall, run = run_logged(
                    cmd, root, Path(tmp) / f"{strategy}_{repeat}.log", env, ROOT, 1800
                )
                walls[strategy].append(wall)
                if status != "ok" or run is None:
                    raise SystemExit(
                        f"{strategy}: {status}\n{(Path(tmp) / f'{strategy}_{repeat}.log').read_text()[-3000:]}"
                    )
                runs[strategy].append(read_steps(by_version([run])[0] / "metrics.csv"))
    base, plain = runs[STRATEGIES[0]][0], runs[STRATEGIES[1]][0]
    loss_keys = sorted({k for v in base.values() for k in v if k.endswith("/loss")})
    diffs = [
        abs(base[s][k] - plain[s][k])
        for s in sorted(base)
        for k in loss_keys
        if k in base[s] and k in plain.get(s, {})
    ]
    compared_steps = sorted(s for s in base if any(k in base[s] for k in loss_keys))

    def step_seconds(strategy: str) -> float:
        rates = [
            v["train/examples_per_s"]
            for run in runs[strategy]
            for s, v in sorted(run.items())
            if s >= args.warmup and "train/examples_per_s" in v
        ]
        return 16 / statistics.median(rates)  # the demo's 16 rows a step per rank

    seconds = {s: step_seconds(s) for s in STRATEGIES}
    record = {
        "command": "python benchmarks/ddp_strategies.py "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "out"),
        "device": "cpu, 2 gloo processes, one torch thread each",
        "steps": args.steps,
        "losses_compared": len(diffs),
        "steps_compared": len(compared_steps),
        "max_abs_loss_difference": max(diffs) if diffs else None,
        "median_step_seconds": seconds,
        "ratio_ddp_over_find_unused_true": seconds["ddp"] / seconds[STRATEGIES[0]],
        "wall_seconds": walls,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()

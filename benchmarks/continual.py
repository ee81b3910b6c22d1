"""Continual learning at an equal budget: naive sequential fine-tuning against GEM and A-GEM.

Runs ``configs/continual_naive.yaml``, ``continual_gem.yaml`` and ``continual_agem.yaml`` (SST, then
Quora, then STS; MiniLM with PALs) through the ``pal-lightning`` CLI, one subprocess each, with the
same ``--steps-per-task`` training batches per phase, seed and evaluation subset. Each run's
``ContinualEvaluation`` writes the accuracy matrix ``R[i][j]`` (main metric of task ``j`` after the
phase of task ``i``; SST and Quora accuracy, STS Pearson) and the baseline row before training.
This script prints the matrices and

* ACC = mean_j R[T-1][j] (average final score),
* BWT = mean_{j<T-1} (R[T-1][j] - R[j][j]) (backward transfer; -BWT is forgetting),
* FWT = mean_{j>=1} (R[j-1][j] - b_j) (forward transfer against the scores before training),
* forgetting = mean_{j<T-1} (max_{l<T-1} R[l][j] - R[T-1][j]),

writes them as JSON (``--json``) and appends a section to ``benchmarks/RESULTS.md``. Target: GEM's
forgetting (-BWT) at most half of naive training's.

Usage::

    export PAL_DATA_DIR=/path/to/cs224n-minbert HF_HUB_OFFLINE=1
    python benchmarks/continual.py --json continual.json            # about 35 minutes on 2 CPU cores
    python benchmarks/continual.py --steps-per-task 4 --limit-eval 32 --results-md none --out /tmp/smoke
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/cli_runs.py, also when loaded by path
from cli_runs import fit_command, run_logged  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
METHODS = ("continual_naive", "continual_gem", "continual_agem")
DEFAULT_STEPS_PER_TASK = 60
DEFAULT_LIMIT_EVAL = 500


def shipped_callbacks(path: Path) -> list[dict[str, Any]]:
    """``trainer.callbacks`` of a config file, from the file it starts from (its ``config:`` key, relative
    to it) when it sets none itself; a dotted key or a nested block (configs/README.md)."""
    config = yaml.safe_load(path.read_text()) or {}
    callbacks = config.get("trainer.callbacks", (config.get("trainer") or {}).get("callbacks"))
    if callbacks is None and "config" in config:
        return shipped_callbacks(path.parent / config["config"])
    return callbacks or []


def derived_config(name: str, limit_eval: int, target: Path) -> Path:
    """The shipped config with the ContinualEvaluation limit set (callbacks are awkward to override
    from the command line); everything else is overridden by options of :func:`run_command`."""
    shipped = CONFIGS / f"{name}.yaml"
    callbacks = shipped_callbacks(shipped)
    found = False
    for cb in callbacks:
        if cb["class_path"].endswith("ContinualEvaluation"):
            cb.setdefault("init_args", {})["limit_eval_examples"] = limit_eval
            found = True
    if not found:
        raise SystemExit(f"{name}.yaml has no ContinualEvaluation callback")
    target.parent.mkdir(parents=True, exist_ok=True)
    # starts from the shipped file and replaces its callback list only
    derived = {"config": str(shipped.resolve()), "trainer.callbacks": callbacks}
    target.write_text(yaml.safe_dump(derived, sort_keys=False))
    return target


def run_command(name: str, config: Path, args: argparse.Namespace, root: Path) -> list[str]:
    options = [
        f"--data.init_args.steps_per_task={args.steps_per_task}",
        f"--data.init_args.batch_size={args.batch_size}",
        f"--data.init_args.max_length={args.max_length}",
    ]
    return fit_command(config, root, args.data_dir, args.seed, options, args.cli_args)


def _fmt(value: float | None, signed: bool = False) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def matrix_text(result: dict[str, Any]) -> str:
    """The baseline row and R as a small markdown table."""
    tasks = result["tasks"]
    lines = ["| after \\ task | " + " | ".join(tasks) + " |", "| --- |" + " ---: |" * len(tasks)]
    if result.get("baseline") is not None:
        lines.append("| (before) | " + " | ".join(_fmt(v) for v in result["baseline"]) + " |")
    for phase, row in zip(result["phases"], result["R"], strict=False):
        lines.append(f"| {phase[0]} | " + " | ".join(_fmt(v) for v in row) + " |")
    return "\n".join(lines)


def run_one(name: str, args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    out: Path = args.out
    root = out / "runs" / name
    config = derived_config(name, args.limit_eval, out / "configs" / f"{name}.yaml")
    cmd = run_command(name, config, args, root)
    log = out / "logs" / f"{name}.log"
    print(f"{name}: {' '.join(cmd[2:])}", flush=True)
    status, wall, run_dir = run_logged(cmd, root, log, env, REPO, args.timeout)
    result: dict[str, Any] = {"method": name, "status": status, "wall_s": round(wall, 1)}
    path = run_dir / "continual.json" if run_dir is not None else None
    if path is not None and path.is_file():
        payload = json.loads(path.read_text())
        result.update(
            run_dir=str(run_dir),
            tasks=payload["tasks"],
            phases=payload["phases"],
            baseline=payload["baseline"],
            R=payload["R"],
            metrics=payload["metrics"],
            complete=payload["complete"],
        )
        if not payload["complete"] and status == "ok":
            result["status"] = "incomplete R (see log)"
    elif status == "ok":
        result["status"] = "no continual.json (see log)"
    return result


def summary_lines(results: list[dict[str, Any]], target: dict[str, Any]) -> list[str]:
    lines = [
        "| method | ACC | BWT | FWT | forgetting | wall | status |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in results:
        m = r.get("metrics") or {}
        lines.append(
            f"| {r['method']} | {_fmt(m.get('average_accuracy'))} | {_fmt(m.get('backward_transfer'), True)} | "
            f"{_fmt(m.get('forward_transfer'), True)} | {_fmt(m.get('forgetting'), True)} | "
            f"{r['wall_s'] / 60:.1f} min | {r['status']} |"
        )
    if target.get("ratio") is not None:
        lines.append("")
        lines.append(
            f"GEM forgetting (-BWT) {target['gem_forgetting']:+.4f} vs naive {target['naive_forgetting']:+.4f}: "
            f"ratio {target['ratio']:.2f} (target <= 0.5: {'met' if target['met'] else 'missed'})."
        )
    elif target:
        lines.append("")
        lines.append(f"Target not evaluable: {target.get('note')}")
    return lines


def forgetting_target(results: list[dict[str, Any]]) -> dict[str, Any]:
    """GEM's -BWT over naive's -BWT (target <= 0.5)."""
    by = {r["method"]: (r.get("metrics") or {}).get("backward_transfer") for r in results}
    naive, gem = by.get("continual_naive"), by.get("continual_gem")
    if naive is None or gem is None:
        return {"note": "naive or GEM has no backward transfer"}
    naive_f, gem_f = -naive, -gem
    if naive_f <= 0:
        return {
            "naive_forgetting": naive_f,
            "gem_forgetting": gem_f,
            "ratio": None,
            "met": None,
            "note": f"naive training did not forget (-BWT = {naive_f:+.4f}); no ratio to compare",
        }
    ratio = gem_f / naive_f
    return {"naive_forgetting": naive_f, "gem_forgetting": gem_f, "ratio": ratio, "met": ratio <= 0.5}


def append_results(
    path: Path, results: list[dict[str, Any]], target: dict[str, Any], args: argparse.Namespace, command: str
) -> None:
    total = sum(r["wall_s"] for r in results)
    parts = [
        "",
        f"## Continual learning: SST, then Quora, then STS ({time.strftime('%Y-%m-%d')})",
        "",
        f"Written by `benchmarks/continual.py` on {platform.node() or 'this machine'} ({os.cpu_count()} CPU cores, "
        f"{total / 60:.1f} min in all). MiniLM with PALs, siamese pairs, batch {args.batch_size}, max_length "
        f"{args.max_length}, {args.steps_per_task} training batches per task (equal budget), seed {args.seed}; "
        f"every task scored on the first {args.limit_eval} examples of its dev split before training and "
        "after each phase (SST and Quora accuracy, STS Pearson).",
        "",
        "```bash",
        command,
        "```",
        "",
        *summary_lines(results, target),
    ]
    for r in results:
        if r.get("R"):
            parts += [
                "",
                f"R of {r['method']} (rows: after the phase of; columns: task):",
                "",
                matrix_text(r),
            ]
    parts.append("")
    with path.open("a", encoding="utf-8") as f:
        f.write("\n".join(parts))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--steps-per-task", type=int, default=DEFAULT_STEPS_PER_TASK, help="training batches per phase"
    )
    parser.add_argument(
        "--limit-eval", type=int, default=DEFAULT_LIMIT_EVAL, help="dev examples scored per task"
    )
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--only", default=None, help=f"comma-separated subset of {', '.join(METHODS)}")
    parser.add_argument(
        "--out", type=Path, default=REPO / "benchmarks" / "results" / "continual", help="run folder"
    )
    parser.add_argument("--json", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument(
        "--results-md",
        default=str(REPO / "benchmarks" / "RESULTS.md"),
        help="markdown file to append to; 'none' to skip",
    )
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="CS224N data folder (default $PAL_DATA_DIR)"
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds before a run is abandoned")
    parser.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    parser.add_argument("cli_args", nargs="*", help="extra pal-lightning options after --")
    args = parser.parse_args(argv)
    if args.steps_per_task < 1 or args.limit_eval < 1:
        parser.error("--steps-per-task and --limit-eval must be >= 1")
    args.methods = list(METHODS)
    if args.only:
        args.methods = [m.strip() for m in args.only.split(",") if m.strip()]
        unknown = [m for m in args.methods if m not in METHODS]
        if unknown:
            parser.error(f"unknown methods {unknown}; choose from {', '.join(METHODS)}")
    if args.data_dir is None:
        env = os.environ.get("PAL_DATA_DIR")
        if not env:
            parser.error("no data: pass --data-dir or set PAL_DATA_DIR to the CS224N data folder")
        args.data_dir = Path(env)
    args.data_dir = args.data_dir.resolve()
    args.out = args.out.resolve()
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = " ".join(["python benchmarks/continual.py", *(argv if argv is not None else sys.argv[1:])])
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    if args.dry_run:
        for name in args.methods:
            config = derived_config(name, args.limit_eval, args.out / "configs" / f"{name}.yaml")
            print(" ".join(run_command(name, config, args, args.out / "runs" / name)))
        return 0
    results = []
    for name in args.methods:
        r = run_one(name, args, env)
        results.append(r)
        print(f"{name}: {r['status']}, {r['wall_s'] / 60:.1f} min", flush=True)
        if r.get("R"):
            print(matrix_text(r), flush=True)
            m = r["metrics"] or {}
            print(
                f"  ACC {_fmt(m.get('average_accuracy'))}  BWT {_fmt(m.get('backward_transfer'), True)}  "
                f"FWT {_fmt(m.get('forward_transfer'), True)}  forgetting {_fmt(m.get('forgetting'), True)}",
                flush=True,
            )
    target = forgetting_target(results)
    print("\n".join(summary_lines(results, target)))
    payload = {
        "command": command,
        "steps_per_task": args.steps_per_task,
        "limit_eval": args.limit_eval,
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "seed": args.seed,
        "results": results,
        "target": target,
    }
    if args.json is not None:
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.json}")
    if args.results_md.lower() != "none":
        append_results(Path(args.results_md), results, target, args, command)
        print(f"appended to {args.results_md}")
    return 0 if all(r["status"] == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

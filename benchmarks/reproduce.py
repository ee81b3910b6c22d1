"""Reproduce the comparison of the PALs paper on the CS224N tasks at an equal step budget.

Runs a named grid of shipped configs through the ``pal-lightning`` CLI (one subprocess per run, so
every run starts from the same state), each for the same number of steps with the same seed, then
writes

* ``results.csv``: one row per run plus a ``single`` row that combines the three single-task runs
  (see :data:`COLUMNS`; ``notebooks/results.ipynb`` draws it), and
* ``results.md``: dev scores per task and the CS224N overall score, the published numbers of
  DESIGN.md section 6 beside them, parameters per task, stored parameters and wall time.

Usage::

    python benchmarks/reproduce.py                              # the default grid and budget
    python benchmarks/reproduce.py --steps 60 --only shared,pals_annealed --out /tmp/quick
    python benchmarks/reproduce.py --extra                      # add low_rank, pals_no_sharing, adapter_only

The CS224N overall score is ``(SST acc + Quora acc + (STS Pearson + 1) / 2) / 3``. Each single-task
run counts one task; the ``single`` method takes each task's score from its own run and stores
three full encoders.

Budget: ``--steps`` optimizer steps per run in ``--epochs`` epochs (so the annealed schedule moves
alpha from 1 to 0.2 over the run), validation once at the end. By default the Quora dev set is cut
to its first ``--qqp-dev-limit`` pairs (the file's order is random) because scoring all 15,214
pairs costs minutes per run on a CPU; ``--qqp-dev-limit 0`` scores the whole file.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/cli_runs.py, also when loaded by path
from cli_runs import by_version, fit_command, run_logged, version_dirs  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"

#: The grid run by default, in this order.
DEFAULT_GRID = (
    "shared",
    "single_sst",
    "single_qqp",
    "single_sts",
    "pals_round_robin",
    "pals_proportional",
    "pals_sqrt",
    "pals_annealed",
)
#: Variants added by ``--extra``.
EXTRA_GRID = ("low_rank", "pals_no_sharing", "adapter_only")
#: Single-task runs and the task each one scores.
SINGLES = {"single_sst": "sst", "single_qqp": "qqp", "single_sts": "sts"}

#: Columns of results.csv (the notebook reads them).
COLUMNS = (
    "method",  # grid name, or "single" for the three single-task runs together
    "config",  # config file(s) relative to the repository, ";"-separated for "single"
    "encoder",
    "sst_acc",  # SST-5 dev accuracy
    "qqp_acc",  # Quora dev accuracy
    "sts_pearson",  # STS dev Pearson correlation
    "overall",  # CS224N overall, when all three tasks were scored
    "params_per_task",  # task-specific parameters per task (adapter + head; a whole encoder + head for singles)
    "params_total",  # parameters stored to serve all of the method's tasks
    "stored_params_ratio",  # params_total / one base encoder
    "wall_s",  # wall time of the run(s), training and evaluation, in seconds
    "steps",  # optimizer steps of the run (of the three runs together for "single")
    "seed",
    "status",  # ok, or what went wrong
)

#: Published dev numbers (DESIGN.md section 6), all with BERT-base.
PUBLISHED = (
    ("handout, fine-tuned SST only", "single_sst", 0.515, None, None, None),
    ("PALs + annealed sampling (project report)", "pals_annealed", 0.519, 0.775, 0.448, None),
    ("PALs + annealed + SimCSE, 4 x T4 (poster)", "pals_annealed", 0.516, 0.862, 0.866, 0.770),
    ("course winner 2022-23 (PALs, annealed)", "pals_annealed", 0.520, 0.883, 0.871, 0.780),
)

DEFAULT_STEPS = 300
DEFAULT_EPOCHS = 3
DEFAULT_QQP_DEV_LIMIT = 4000


def cs224n_overall(sst: float | None, qqp: float | None, sts: float | None) -> float | None:
    """``(sst + qqp + (sts + 1) / 2) / 3``, or ``None`` unless all three are known."""
    if sst is None or qqp is None or sts is None:
        return None
    return (sst + qqp + (sts + 1.0) / 2.0) / 3.0


def prepare_data_dir(source: Path, target: Path, qqp_dev_limit: int) -> Path:
    """A data folder of links to ``source`` whose ``quora-dev.csv`` keeps only its first pairs.

    Returns ``source`` itself when no limit is asked for.
    """
    if qqp_dev_limit <= 0:
        return source
    target.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        if path.name == "quora-dev.csv" or not path.is_file():
            continue
        link = target / path.name
        if not link.exists():
            link.symlink_to(path.resolve())
    lines = (source / "quora-dev.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    cut = "".join(lines[: 1 + qqp_dev_limit])
    dev = target / "quora-dev.csv"
    if not dev.exists() or dev.read_text(encoding="utf-8") != cut:
        dev.write_text(cut, encoding="utf-8")
    return target


def run_steps(name: str, args: argparse.Namespace) -> int:
    """Optimizer steps of one run: ``--steps`` (rounded down to whole epochs), a third of it for a
    single-task run under ``--budget per-method`` (the three single runs then share one budget)."""
    steps = args.steps // 3 if args.budget == "per-method" and name in SINGLES else args.steps
    return max(1, steps // args.epochs) * args.epochs


def run_command(name: str, args: argparse.Namespace, data_dir: Path, root: Path) -> list[str]:
    """The ``pal-lightning fit`` command of one grid entry at the benchmark's budget."""
    steps_per_epoch = run_steps(name, args) // args.epochs
    options = [
        f"--trainer.max_steps={steps_per_epoch * args.epochs}",
        f"--trainer.check_val_every_n_epoch={args.epochs}",
        f"--data.init_args.steps_per_epoch={steps_per_epoch}",
        f"--data.init_args.max_length={args.max_length}",
    ]
    return fit_command(CONFIGS / f"{name}.yaml", root, data_dir, args.seed, options, args.cli_args)


def _finished_run(root: Path) -> Path | None:
    """The newest version folder under ``root`` holding a ``scores.json``."""
    done = [p for p in version_dirs(root) if (p / "scores.json").is_file()]
    return by_version(done)[-1] if done else None


def _metric(scores: dict[str, float], task: str, metric: str) -> float | None:
    value = scores.get(f"val/{task}/{metric}")
    return None if value is None or not math.isfinite(value) else float(value)


def row_from_run(
    name: str, run_dir: Path | None, wall_s: float, args: argparse.Namespace, status: str
) -> dict[str, Any]:
    """One results.csv row from a run's ``scores.json`` (blank scores when it failed)."""
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(
        method=name, config=f"configs/{name}.yaml", wall_s=round(wall_s, 1), seed=args.seed, status=status
    )
    row["steps"] = run_steps(name, args)
    if run_dir is None:
        return row
    payload = json.loads((run_dir / "scores.json").read_text())
    config_text = (run_dir / "config.yaml").read_text() if (run_dir / "config.yaml").is_file() else ""
    for line in config_text.splitlines():
        if line.strip().startswith("encoder:"):
            row["encoder"] = line.split(":", 1)[1].strip()
            break
    result = payload.get("last") or payload.get("best") or {}
    scores = result.get("scores", {})
    row["sst_acc"] = _metric(scores, "sst", "accuracy")
    row["qqp_acc"] = _metric(scores, "qqp", "accuracy")
    row["sts_pearson"] = _metric(scores, "sts", "pearson")
    row["overall"] = cs224n_overall(row["sst_acc"], row["qqp_acc"], row["sts_pearson"])
    params = payload.get("parameters") or {}
    per_task = params.get("stored_per_task") or {}
    base = params.get("base_encoder")
    if per_task and base:
        if name in SINGLES:  # a separately fine-tuned model stores a whole encoder for its task
            row["params_per_task"] = base + sum(per_task.values())
        else:
            row["params_per_task"] = round(sum(per_task.values()) / len(per_task))
        row["params_total"] = params.get("total")
        row["stored_params_ratio"] = params.get("ratio")
    return row


def combine_singles(rows: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The ``single`` row: each task's score from its own run, three encoders stored."""
    if not all(n in rows for n in SINGLES):
        return None
    parts = [rows[n] for n in SINGLES]
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(
        method="single",
        config=";".join(p["config"] for p in parts),
        encoder=parts[0]["encoder"],
        sst_acc=rows["single_sst"]["sst_acc"],
        qqp_acc=rows["single_qqp"]["qqp_acc"],
        sts_pearson=rows["single_sts"]["sts_pearson"],
        wall_s=round(sum(p["wall_s"] or 0 for p in parts), 1),
        steps=sum(p["steps"] or 0 for p in parts),  # the three runs together
        seed=parts[0]["seed"],
        status="ok" if all(p["status"] == "ok" for p in parts) else "incomplete",
    )
    row["overall"] = cs224n_overall(row["sst_acc"], row["qqp_acc"], row["sts_pearson"])
    if all(p["params_total"] for p in parts):
        row["params_per_task"] = round(sum(p["params_per_task"] for p in parts) / 3)
        row["params_total"] = sum(p["params_total"] for p in parts)
        row["stored_params_ratio"] = sum(p["stored_params_ratio"] for p in parts)
    return row


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row.get(k) is None else row[k]) for k in COLUMNS})


def _fmt(value: Any, kind: str = "score") -> str:
    if value is None or value == "":
        return ""
    if kind == "score":
        return f"{float(value):.3f}"
    if kind == "params":
        value = float(value)
        return f"{value / 1e6:.2f}M" if value >= 1e5 else f"{value / 1e3:.1f}k"
    if kind == "ratio":
        return f"{float(value):.2f}x"
    if kind == "time":
        return f"{float(value) / 60:.1f} min"
    return str(value)


def write_markdown(
    path: Path, rows: Sequence[dict[str, Any]], args: argparse.Namespace, command: str
) -> None:
    by_method = {r["method"]: r for r in rows}
    lines = [
        "# Reproduction: PALs and sampling schedules on SST, Quora and STS",
        "",
        f"Command: `{command}`",
        "",
        f"Budget: {args.steps} optimizer steps per run in {args.epochs} epochs"
        + (
            ", the three single-task runs sharing one budget (a third each)"
            if args.budget == "per-method"
            else " (each single-task run too)"
        )
        + f"; validation once at the end, seed {args.seed}, max_length {args.max_length}. "
        "Dev sets: SST and STS whole; Quora "
        + (f"its first {args.qqp_dev_limit:,} pairs." if args.qqp_dev_limit > 0 else "whole (15,212 pairs)."),
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores, torch threads per run: default.",
        "",
        "CS224N overall = (SST acc + Quora acc + (STS Pearson + 1) / 2) / 3. `single` takes each task's score "
        "from its own single-task run and stores three encoders. Params/task: task-specific parameters "
        "(adapter + head; a whole encoder + head for single-task runs). Stored: all parameters needed to "
        "serve the method's tasks, as a multiple of one encoder.",
        "",
        "| method | SST acc | Quora acc | STS r | overall | params/task | stored | wall | status |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['method']} | {_fmt(r['sst_acc'])} | {_fmt(r['qqp_acc'])} | {_fmt(r['sts_pearson'])} | "
            f"{_fmt(r['overall'])} | {_fmt(r['params_per_task'], 'params')} | "
            f"{_fmt(r['stored_params_ratio'], 'ratio')} | {_fmt(r['wall_s'], 'time')} | {r['status']} |"
        )
    lines += [
        "",
        "Published dev numbers (DESIGN.md section 6; BERT-base, full training, GPUs):",
        "",
        "| published system | compare with | SST | Quora | STS | overall |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for system, method, sst, qqp, sts, overall in PUBLISHED:
        lines.append(f"| {system} | {method} | {_fmt(sst)} | {_fmt(qqp)} | {_fmt(sts)} | {_fmt(overall)} |")
    checks = []
    pals, shared, single = by_method.get("pals_annealed"), by_method.get("shared"), by_method.get("single")
    if pals and shared and pals["overall"] is not None and shared["overall"] is not None:
        ok = pals["overall"] >= shared["overall"]
        checks.append(
            f"- pals_annealed vs shared overall: {pals['overall']:.3f} vs {shared['overall']:.3f} "
            f"({'at least as good' if ok else 'worse'})."
        )
    if pals and single and pals["overall"] is not None and single["overall"] is not None:
        gap = pals["overall"] - single["overall"]
        stored = ""
        if pals["params_total"] and single["params_total"]:
            stored = f", stored parameters {pals['params_total'] / single['params_total']:.2f}x of theirs"
        checks.append(
            f"- pals_annealed vs the three single-task runs: overall {gap:+.3f} "
            f"({'within' if gap >= -0.01 else 'not within'} 0.01){stored}."
        )
    if checks:
        lines += ["", "Targets:", "", *checks]
    path.write_text("\n".join(lines) + "\n")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--steps", type=int, default=DEFAULT_STEPS, help=f"optimizer steps per run (default {DEFAULT_STEPS})"
    )
    parser.add_argument(
        "--budget",
        choices=("per-run", "per-method"),
        default="per-run",
        help="per-run: every run gets --steps (default); per-method: the three single-task runs share them",
    )
    parser.add_argument(
        "--epochs", type=int, default=DEFAULT_EPOCHS, help="epochs per run: the annealing horizon E"
    )
    parser.add_argument(
        "--only", default=None, help="comma-separated grid names to run (default: the whole grid)"
    )
    parser.add_argument("--extra", action="store_true", help=f"also run {', '.join(EXTRA_GRID)}")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results", help="output folder")
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="CS224N data folder (default $PAL_DATA_DIR)"
    )
    parser.add_argument("--max-length", type=int, default=64, help="tokens per sequence (default 64)")
    parser.add_argument(
        "--qqp-dev-limit",
        type=int,
        default=DEFAULT_QQP_DEV_LIMIT,
        help="score the first N Quora dev pairs; 0 = all",
    )
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--resume", action="store_true", help="reuse runs already finished in --out")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds before a run is abandoned")
    parser.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    parser.add_argument(
        "cli_args", nargs="*", help="extra pal-lightning options after --, e.g. -- --model.init_args.lr=1e-4"
    )
    args = parser.parse_args(argv)
    if args.steps < args.epochs or args.epochs < 1:
        parser.error("--steps must be at least --epochs, and --epochs at least 1")
    known = DEFAULT_GRID + EXTRA_GRID
    grid = list(DEFAULT_GRID) + (list(EXTRA_GRID) if args.extra else [])
    if args.only:
        grid = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in grid if n not in known]
        if unknown:
            parser.error(f"unknown grid names {unknown}; choose from {', '.join(known)}")
    args.grid = grid
    if args.data_dir is None:
        env = os.environ.get("PAL_DATA_DIR")
        if not env:
            parser.error("no data: pass --data-dir or set PAL_DATA_DIR to the CS224N data folder")
        args.data_dir = Path(env)
    if not (args.data_dir / "quora-dev.csv").is_file():
        parser.error(f"{args.data_dir} does not hold the CS224N files (quora-dev.csv missing)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = " ".join(["python benchmarks/reproduce.py", *(argv if argv is not None else sys.argv[1:])])
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    data_dir = prepare_data_dir(args.data_dir.resolve(), out / "data", args.qqp_dev_limit)
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")

    rows: dict[str, dict[str, Any]] = {}
    for k, name in enumerate(args.grid, 1):
        root = out / "runs" / name
        cmd = run_command(name, args, data_dir, root)
        if args.dry_run:
            print(" ".join(cmd))
            continue
        finished = _finished_run(root) if args.resume else None
        if finished is not None:
            payload = json.loads((finished / "scores.json").read_text())
            print(f"[{k}/{len(args.grid)}] {name}: reusing {finished}", flush=True)
            rows[name] = row_from_run(name, finished, float(payload.get("wall_s") or 0.0), args, "ok")
        else:
            print(f"[{k}/{len(args.grid)}] {name}: {' '.join(cmd[2:])}", flush=True)
            log = out / "logs" / f"{name}.log"
            status, wall, run_dir = run_logged(cmd, root, log, env, REPO, args.timeout)
            if run_dir is not None and not (run_dir / "scores.json").is_file():
                run_dir = None
            if run_dir is None and status == "ok":
                status = "no scores.json (see log)"
            rows[name] = row_from_run(name, run_dir, wall, args, status)
        r = rows[name]
        print(
            f"    sst {_fmt(r['sst_acc']) or '-'}  qqp {_fmt(r['qqp_acc']) or '-'}  sts {_fmt(r['sts_pearson']) or '-'}"
            f"  overall {_fmt(r['overall']) or '-'}  {_fmt(r['wall_s'], 'time')}  {r['status']}",
            flush=True,
        )
        table = list(rows.values())
        single = combine_singles(rows)
        if single is not None:
            table.append(single)
        write_csv(out / "results.csv", table)
        write_markdown(out / "results.md", table, args, command)
    if args.dry_run:
        return 0
    print(f"wrote {out / 'results.csv'} and {out / 'results.md'}")
    print((out / "results.md").read_text())
    return 0 if all(r["status"] == "ok" for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

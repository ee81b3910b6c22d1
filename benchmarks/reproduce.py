"""Reproduce the comparison of the PALs paper on the CS224N tasks at an equal step budget.

Runs a named grid of shipped configs through the ``pal-lightning`` CLI (one subprocess per run, so
every run starts from the same state), each for the same number of steps with the same seed, then
writes

* ``results.csv``: one row per run plus a ``single`` row that combines the three single-task runs
  (see :data:`COLUMNS`; ``notebooks/results.ipynb`` draws it), and
* ``results.md``: dev scores per task and the CS224N overall score, the published numbers of
  docs/design.md §6 beside them, parameters per task, stored parameters and wall time.

Usage::

    python benchmarks/reproduce.py                              # the default grid and budget
    python benchmarks/reproduce.py --steps 60 --only shared,pals_annealed --out /tmp/quick
    python benchmarks/reproduce.py --extra                      # add low_rank, pals_no_sharing, adapter_only
    python benchmarks/reproduce.py --seeds 3 --only shared,pals_annealed --compare pals_annealed:shared
    python benchmarks/reproduce.py --seeds 3 --only shared,pals_annealed \
        --method "pals_simcse=pals_annealed+simcse" \
        --method "shared_lr=shared --model.init_args.optim.layer_lr_decay=0.9" \
        --compare pals_simcse:pals_annealed --compare shared_lr:shared

Seeds: ``--seeds N`` runs every method with the seeds ``--seed`` .. ``--seed + N - 1`` (seed-major, so a
run cut short still holds complete pairs) and adds to ``results.md`` the mean and standard deviation
per task and overall, and for each ``--compare A:B`` the paired difference A - B over the seeds with
its 95 % t-interval and a verdict (``benchmarks/paired_stats.py``); ``summary.json`` holds the same numbers.

Methods: a ``--method "NAME=BASE[+OVERLAY...] [OPTION ...]"`` defines a method beside the shipped
configs: the config ``configs/BASE.yaml`` (or a path), overlays applied in order (``configs/simcse.yaml``
...), then the options (``pal-lightning fit`` syntax), which win over the options after ``--``.

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
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/cli_runs.py, also when loaded by path
from cli_runs import by_version, fit_command, run_logged, version_dirs  # noqa: E402
from paired_stats import mean_std, paired_difference  # noqa: E402

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

#: Published dev numbers (docs/design.md §6), all with BERT-base.
PUBLISHED = (
    ("handout, fine-tuned SST only", "single_sst", 0.515, None, None, None),
    ("PALs + annealed sampling (project report)", "pals_annealed", 0.519, 0.775, 0.448, None),
    ("PALs + annealed + SimCSE, 4 x T4 (poster)", "pals_annealed", 0.516, 0.862, 0.866, 0.770),
    ("course winner 2022-23 (PALs, annealed)", "pals_annealed", 0.520, 0.883, 0.871, 0.780),
)

#: Scores summarised over seeds and compared between methods: (results.csv column, label).
SCORE_COLUMNS = (
    ("sst_acc", "SST acc"),
    ("qqp_acc", "Quora acc"),
    ("sts_pearson", "STS r"),
    ("overall", "overall"),
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


def config_path(name: str) -> Path:
    """``configs/<name>.yaml`` for a bare name, else the path itself (relative to the repository)."""
    if name.endswith((".yaml", ".yml")) or "/" in name:
        path = Path(name)
        return path if path.is_absolute() else REPO / path
    return CONFIGS / f"{name}.yaml"


def parse_method(text: str) -> tuple[str, list[Path], list[str]]:
    """``"NAME=BASE[+OVERLAY...] [OPTION ...]"`` -> ``(NAME, [config files], [options])``.

    Raises:
        ValueError: for a definition without ``NAME=BASE``, or a config file that does not exist.
    """
    words = shlex.split(text)
    if not words or "=" not in words[0]:
        raise ValueError(f"method {text!r}: write NAME=BASE[+OVERLAY...] followed by fit options")
    name, _, configs = words[0].partition("=")
    if not name or not configs:
        raise ValueError(f"method {text!r}: write NAME=BASE[+OVERLAY...] followed by fit options")
    paths = [config_path(c) for c in configs.split("+")]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise ValueError(f"method {name!r}: config file(s) {missing} not found")
    return name, paths, words[1:]


def method_definition(name: str, args: argparse.Namespace) -> tuple[list[Path], list[str]]:
    """Config files and extra options of a grid entry: a ``--method`` definition or a shipped config."""
    return getattr(args, "methods", {}).get(name, ([CONFIGS / f"{name}.yaml"], []))


def run_command(
    name: str, args: argparse.Namespace, data_dir: Path, root: Path, seed: int | None = None
) -> list[str]:
    """The ``pal-lightning fit`` command of one grid entry at the benchmark's budget."""
    steps_per_epoch = run_steps(name, args) // args.epochs
    options = [
        f"--trainer.max_steps={steps_per_epoch * args.epochs}",
        f"--trainer.check_val_every_n_epoch={args.epochs}",
        f"--data.init_args.steps_per_epoch={steps_per_epoch}",
        f"--data.init_args.max_length={args.max_length}",
    ]
    configs, method_options = method_definition(name, args)
    seed = args.seed if seed is None else seed
    return fit_command(configs, root, data_dir, seed, options, [*args.cli_args, *method_options])


def _finished_run(root: Path) -> Path | None:
    """The newest version folder under ``root`` holding a ``scores.json``."""
    done = [p for p in version_dirs(root) if (p / "scores.json").is_file()]
    return by_version(done)[-1] if done else None


def _metric(scores: dict[str, float], task: str, metric: str) -> float | None:
    value = scores.get(f"val/{task}/{metric}")
    return None if value is None or not math.isfinite(value) else float(value)


def row_from_run(
    name: str,
    run_dir: Path | None,
    wall_s: float,
    args: argparse.Namespace,
    status: str,
    seed: int | None = None,
) -> dict[str, Any]:
    """One results.csv row from a run's ``scores.json`` (blank scores when it failed)."""
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    configs, options = method_definition(name, args)
    config = "+".join(str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(p) for p in configs)
    row.update(
        method=name,
        config=" ".join([config, *options]),
        wall_s=round(wall_s, 1),
        seed=args.seed if seed is None else seed,
        status=status,
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


def results_table(rows: dict[tuple[str, int], dict[str, Any]], seeds: Sequence[int]) -> list[dict[str, Any]]:
    """The runs so far, seed by seed, each seed's ``single`` row after its single-task runs."""
    table: list[dict[str, Any]] = []
    for seed in seeds:
        mine = {name: row for (name, s), row in rows.items() if s == seed}
        table += mine.values()
        single = combine_singles(mine)
        if single is not None:
            table.append(single)
    return table


def write_summary(path: Path, rows: Sequence[dict[str, Any]], args: argparse.Namespace) -> None:
    """``summary.json``: per-method mean/std over seeds and every ``--compare`` paired difference."""
    payload = {
        "seeds": args.seeds,
        "steps": args.steps,
        "methods": seed_summary(rows),
        "comparisons": [{"a": a, "b": b, "scores": compare(rows, a, b)} for a, b in args.compare],
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")


def write_csv(path: Path, rows: Sequence[dict[str, Any]], columns: Sequence[str] = COLUMNS) -> None:
    """``rows`` as a CSV with ``columns`` in that order (a missing or ``None`` value is an empty cell)."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row.get(k) is None else row[k]) for k in columns})


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


def seed_summary(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per method (in order of appearance): its seeds, and ``{mean, std, n}`` of every score column
    that has values (``std`` is ``None`` for one seed)."""
    out: dict[str, dict[str, Any]] = {}
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == method]
        entry: dict[str, Any] = {"seeds": sorted(r["seed"] for r in mine)}
        for column, _ in SCORE_COLUMNS:
            values = [float(r[column]) for r in mine if r[column] is not None]
            if values:
                mean, std = mean_std(values)
                entry[column] = {"mean": mean, "std": std, "n": len(values)}
        out[method] = entry
    return out


def compare(rows: Sequence[dict[str, Any]], a: str, b: str) -> dict[str, dict[str, Any]]:
    """Paired difference ``a - b`` per score column over the seeds where both have a score."""
    scores_a = {r["seed"]: r for r in rows if r["method"] == a}
    scores_b = {r["seed"]: r for r in rows if r["method"] == b}
    out: dict[str, dict[str, Any]] = {}
    for column, _ in SCORE_COLUMNS:
        seeds = [
            s
            for s in sorted(set(scores_a) & set(scores_b))
            if scores_a[s][column] is not None and scores_b[s][column] is not None
        ]
        if not seeds:
            continue
        diff = paired_difference(
            [float(scores_a[s][column]) for s in seeds], [float(scores_b[s][column]) for s in seeds]
        )
        out[column] = {
            "n": diff.n,
            "mean": diff.mean,
            "sd": diff.sd,
            "low": diff.low,
            "high": diff.high,
            "verdict": {"A better": f"{a} better", "B better": f"{b} better"}.get(diff.verdict, diff.verdict),
            "seeds": seeds,
        }
    return out


def seed_sections(rows: Sequence[dict[str, Any]], comparisons: Sequence[tuple[str, str]]) -> list[str]:
    """Markdown: mean +- standard deviation per method, and the paired comparisons."""
    lines = [
        "",
        "## Over seeds",
        "",
        "Mean +- sample standard deviation over the seeds (n = seeds with a score).",
        "",
        "| method | n | " + " | ".join(label for _, label in SCORE_COLUMNS) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in SCORE_COLUMNS) + " |",
    ]
    for method, entry in seed_summary(rows).items():
        cells = []
        for column, _ in SCORE_COLUMNS:
            value = entry.get(column)
            if value is None:
                cells.append("")
            else:
                spread = "" if value["std"] is None else f" +- {value['std']:.3f}"
                cells.append(f"{value['mean']:.3f}{spread}")
        n = max((entry[c]["n"] for c, _ in SCORE_COLUMNS if c in entry), default=0)
        lines.append(f"| {method} | {n} | " + " | ".join(cells) + " |")
    if comparisons:
        lines += [
            "",
            "## Paired differences",
            "",
            "A - B over the seeds both ran (same seed = same data order and initial heads), with the 95 % "
            "t-interval of the mean difference; a verdict only when the interval excludes 0.",
            "",
            "| A vs B | score | n | mean A - B | 95 % interval | verdict |",
            "| --- | --- | ---: | ---: | --- | --- |",
        ]
        labels = dict(SCORE_COLUMNS)
        for a, b in comparisons:
            for column, d in compare(rows, a, b).items():
                interval = "" if d["low"] is None else f"[{d['low']:+.4f}, {d['high']:+.4f}]"
                lines.append(
                    f"| {a} vs {b} | {labels[column]} | {d['n']} | {d['mean']:+.4f} | {interval} | {d['verdict']} |"
                )
    return lines


def write_markdown(
    path: Path, rows: Sequence[dict[str, Any]], args: argparse.Namespace, command: str
) -> None:
    seeds = getattr(args, "seeds", [args.seed])
    by_method = {r["method"]: r for r in rows} if len(seeds) == 1 else {}
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
        + f"; validation once at the end, seed{'s ' + ', '.join(map(str, seeds)) if len(seeds) > 1 else ' ' + str(seeds[0])}"
        + f", max_length {args.max_length}. "
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
        label = r["method"] if len(seeds) == 1 else f"{r['method']} (seed {r['seed']})"
        lines.append(
            f"| {label} | {_fmt(r['sst_acc'])} | {_fmt(r['qqp_acc'])} | {_fmt(r['sts_pearson'])} | "
            f"{_fmt(r['overall'])} | {_fmt(r['params_per_task'], 'params')} | "
            f"{_fmt(r['stored_params_ratio'], 'ratio')} | {_fmt(r['wall_s'], 'time')} | {r['status']} |"
        )
    lines += [
        "",
        "Published dev numbers (docs/design.md §6; BERT-base, full training, GPUs):",
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
    if len(seeds) > 1 or getattr(args, "compare", None):
        lines += seed_sections(rows, getattr(args, "compare", []))
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
    parser.add_argument("--seed", type=int, default=42, help="the first seed (default 42)")
    parser.add_argument(
        "--seeds", type=int, default=1, help="run every method with N seeds: --seed .. --seed + N - 1"
    )
    parser.add_argument(
        "--method",
        action="append",
        default=[],
        metavar="'NAME=BASE[+OVERLAY...] [OPTION ...]'",
        help="define a method: shipped config BASE (or a path), overlays, then fit options; it joins the grid",
    )
    parser.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="A:B",
        help="paired difference A - B over the seeds with a 95 %% t-interval (repeatable)",
    )
    parser.add_argument("--resume", action="store_true", help="reuse runs already finished in --out")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds before a run is abandoned")
    parser.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    parser.add_argument(
        "cli_args",
        nargs="*",
        help="extra pal-lightning options after --, e.g. -- --model.init_args.optim.lr=1e-4",
    )
    args = parser.parse_args(argv)
    if args.steps < args.epochs or args.epochs < 1:
        parser.error("--steps must be at least --epochs, and --epochs at least 1")
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    args.seeds = [args.seed + i for i in range(args.seeds)]
    args.methods = {}
    for text in args.method:
        try:
            name, configs, options = parse_method(text)
        except ValueError as err:
            parser.error(str(err))
        if name in DEFAULT_GRID + EXTRA_GRID or name == "single" or name in args.methods:
            parser.error(f"method name {name!r} is taken (a shipped config or defined twice): choose another")
        args.methods[name] = (configs, options)
    known = DEFAULT_GRID + EXTRA_GRID + tuple(args.methods)
    grid = list(DEFAULT_GRID) + (list(EXTRA_GRID) if args.extra else [])
    if args.only:
        grid = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in grid if n not in known]
        if unknown:
            parser.error(f"unknown grid names {unknown}; choose from {', '.join(known)}")
    grid += [n for n in args.methods if n not in grid]
    args.grid = grid
    comparisons = []
    runnable = set(grid) | ({"single"} if all(n in grid for n in SINGLES) else set())
    for text in args.compare:
        a, sep, b = text.partition(":")
        if not sep or a not in runnable or b not in runnable or a == b:
            choices = ", ".join(sorted(runnable))
            parser.error(f"--compare {text!r}: write A:B with two different methods of the grid ({choices})")
        comparisons.append((a, b))
    args.compare = comparisons
    args.data_dir = cs224n_data_dir(parser, args.data_dir)
    return args


def cs224n_data_dir(parser: argparse.ArgumentParser, data_dir: Path | None) -> Path:
    """``--data-dir``, else ``$PAL_DATA_DIR``; a parser error (exit 2) when neither holds the CS224N files."""
    if data_dir is None:
        env = os.environ.get("PAL_DATA_DIR")
        if not env:
            parser.error("no data: pass --data-dir or set PAL_DATA_DIR to the CS224N data folder")
        data_dir = Path(env)
    if not (data_dir / "quora-dev.csv").is_file():
        parser.error(f"{data_dir} does not hold the CS224N files (quora-dev.csv missing)")
    return data_dir


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = " ".join(["python benchmarks/reproduce.py", *(argv if argv is not None else sys.argv[1:])])
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    data_dir = prepare_data_dir(args.data_dir.resolve(), out / "data", args.qqp_dev_limit)
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")

    multi = len(args.seeds) > 1
    # seed-major: every method's first seed, then every method's second seed, ... (a run cut short
    # still holds complete pairs for --compare)
    runs = [(seed, name) for seed in args.seeds for name in args.grid]
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for k, (seed, name) in enumerate(runs, 1):
        root = out / "runs" / name / f"seed{seed}" if multi else out / "runs" / name
        cmd = run_command(name, args, data_dir, root, seed)
        if args.dry_run:
            print(" ".join(cmd))
            continue
        tag = f"{name} seed {seed}" if multi else name
        finished = _finished_run(root) if args.resume else None
        if finished is not None:
            payload = json.loads((finished / "scores.json").read_text())
            print(f"[{k}/{len(runs)}] {tag}: reusing {finished}", flush=True)
            rows[name, seed] = row_from_run(
                name, finished, float(payload.get("wall_s") or 0.0), args, "ok", seed
            )
        else:
            print(f"[{k}/{len(runs)}] {tag}: {' '.join(cmd[2:])}", flush=True)
            log = out / "logs" / (f"{name}-seed{seed}.log" if multi else f"{name}.log")
            status, wall, run_dir = run_logged(cmd, root, log, env, REPO, args.timeout)
            if run_dir is not None and not (run_dir / "scores.json").is_file():
                run_dir = None
            if run_dir is None and status == "ok":
                status = "no scores.json (see log)"
            rows[name, seed] = row_from_run(name, run_dir, wall, args, status, seed)
        r = rows[name, seed]
        print(
            f"    sst {_fmt(r['sst_acc']) or '-'}  qqp {_fmt(r['qqp_acc']) or '-'}  sts {_fmt(r['sts_pearson']) or '-'}"
            f"  overall {_fmt(r['overall']) or '-'}  {_fmt(r['wall_s'], 'time')}  {r['status']}",
            flush=True,
        )
        table = results_table(rows, args.seeds)
        write_csv(out / "results.csv", table)
        write_markdown(out / "results.md", table, args, command)
        if multi or args.compare:
            write_summary(out / "summary.json", table, args)
    if args.dry_run:
        return 0
    print(f"wrote {out / 'results.csv'} and {out / 'results.md'}")
    print((out / "results.md").read_text())
    return 0 if all(r["status"] == "ok" for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

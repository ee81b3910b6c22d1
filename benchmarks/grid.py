"""Run a grid of methods x seeds through ``pal-lightning fit``, several runs at once, and collect scores.

``benchmarks/reproduce.py`` runs the shipped configs one after another at a reduced budget on
a CPU; this script is for a machine with room for several runs side by side (a GPU, where a
MiniLM step is bound by kernel launches and one process leaves most of the device idle). Each
method is a list of config files (a base and overlays, applied in order) plus command-line
overrides; every method runs once per seed (the spec's ``seeds``, or the method's own). Results land in ``runs.jsonl`` (one JSON object per
finished run: method, seed, status, wall time, the dev scores of its ``scores.json``) as they
arrive, so a grid cut short by ``--deadline`` still leaves every finished run.

Runs are ordered seed-major (every method's first seed, then every method's second seed, ...),
so a partial grid holds complete pairs for the paired comparisons of ``--compare``.

A run longer than a sitting (a base-size encoder on two CPU cores) continues in the next one: with
``"checkpoint_every": N`` in the spec, every fit writes its ``last.ckpt`` every N steps (full state: the
resumed run is the uninterrupted one, step for step); ``--resume`` then skips the runs ``runs.jsonl``
records as finished and continues every other from the newest ``last.ckpt`` under its folder (a new
``version_N`` folder; the record names the checkpoint it ``resumed_from``, and its ``wall_s`` is this
sitting's alone). A run cut by ``--deadline``, a crash or the machine going away resumes alike.

Usage::

    python benchmarks/grid.py --spec spec.json --out runs/grid --jobs 8 --deadline 480
    python benchmarks/grid.py --spec spec.json --out runs/grid --resume    # the next sitting
    python benchmarks/grid.py --summarize runs/grid/runs.jsonl --compare pals:shared

with ``spec.json`` like::

    {"seeds": [42, 43, 44],
     "common_args": ["--data.init_args.cache_dir=false"],
     "checkpoint_every": 100,
     "methods": {
        "shared": {"configs": ["configs/quickstart.yaml"], "args": ["--model.init_args.adapter.method=none"]},
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

from pal_lightning.cli.run_folders import find_newest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def grid_runs(spec: dict[str, Any], only_seeds: list[int] | None = None) -> list[tuple[str, int]]:
    """``(method, seed)`` pairs in seed-major order; a method may name its own ``seeds``.

    ``only_seeds`` keeps the spec's runs of those seeds alone: a grid too long for one sitting (a base-size
    encoder on two CPU cores) runs a seed or two at a time into the same ``runs.jsonl``. A seed the spec
    does not name is refused, so that a typo cannot start a run nobody specified.
    """
    methods = spec["methods"]
    seeds = sorted({s for m in methods.values() for s in m.get("seeds", spec["seeds"])})
    if only_seeds is not None:
        unknown = sorted(set(only_seeds) - set(seeds))
        if unknown:
            raise ValueError(f"--seeds {unknown} are not in the spec, whose seeds are {seeds}")
        seeds = [s for s in seeds if s in only_seeds]
    return [(m, s) for s in seeds for m, entry in methods.items() if s in entry.get("seeds", spec["seeds"])]


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of a ``runs.jsonl`` (none when it does not exist yet)."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def finished_runs(sink: Path) -> set[tuple[str, int]]:
    """``(method, seed)`` of the runs that ``runs.jsonl`` records as finished (status ``ok``)."""
    return {(r["method"], r["seed"]) for r in read_records(sink) if r.get("status") == "ok"}


def run_one(
    method: str,
    seed: int,
    spec: dict[str, Any],
    out: Path,
    data_dir: Path,
    timeout: float,
    resume: bool = False,
) -> dict[str, Any]:
    """One ``fit`` of ``method`` with ``seed`` (with ``resume``, from the newest ``last.ckpt`` of an
    earlier sitting's fit of it, if there is one); returns its ``runs.jsonl`` record."""
    entry = spec["methods"][method]
    configs = [REPO / c for c in entry["configs"]]
    root = out / method / f"seed{seed}"
    args = [*spec.get("common_args", []), *entry.get("args", [])]
    if spec.get("checkpoint_every"):
        args.append(f"--last_checkpoint.every_n_train_steps={spec['checkpoint_every']}")
    last = find_newest(root, "last*.ckpt") if resume else None
    if last is not None:
        args.append(f"--ckpt_path={last}")
    cmd = fit_command(configs, root, data_dir, seed, args)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    log = root / (f"fit_resumed_{last.parent.parent.name}.log" if last is not None else "fit.log")
    status, wall, run_dir = run_logged(cmd, root, log, env, REPO, timeout)
    record: dict[str, Any] = {"method": method, "seed": seed, "status": status, "wall_s": round(wall, 1)}
    if last is not None:
        record["resumed_from"] = str(last)
    scores_file = run_dir / "scores.json" if run_dir else None
    if scores_file is not None and scores_file.is_file():
        payload = json.loads(scores_file.read_text())
        result = payload.get("last") or payload.get("best") or {}
        record["scores"] = result.get("scores", {})
        record["step"] = result.get("step")
        record["run_dir"] = str(run_dir)
    return record


def score_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``runs.jsonl`` records of finished runs as ``reproduce.py`` rows (method, seed, dev scores, overall)."""
    from reproduce import cs224n_overall

    rows = []
    for record in records:
        scores = record.get("scores")
        if record.get("status") != "ok" or not scores:
            continue
        row = {
            "method": record["method"],
            "seed": record["seed"],
            "sst_acc": scores.get("val/sst/accuracy"),
            "qqp_acc": scores.get("val/qqp/accuracy"),
            "sts_pearson": scores.get("val/sts/pearson"),
        }
        row["overall"] = cs224n_overall(row["sst_acc"], row["qqp_acc"], row["sts_pearson"])
        rows.append(row)
    return rows


def summarize(paths: list[Path], comparisons: list[str]) -> str:
    """Markdown of finished runs: mean +- sd per method and the paired differences ``A:B``."""
    from reproduce import seed_sections

    records = [record for path in paths for record in read_records(path)]
    pairs = [tuple(c.split(":", 1)) for c in comparisons]
    return "\n".join(seed_sections(score_rows(records), pairs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--summarize", type=Path, nargs="+", help="runs.jsonl files: print tables, run nothing"
    )
    parser.add_argument("--compare", action="append", default=[], help="A:B paired difference (repeatable)")
    parser.add_argument("--spec", type=Path, help="JSON file: seeds and methods")
    parser.add_argument("--out", type=Path, help="folder for the runs and runs.jsonl")
    parser.add_argument("--jobs", type=int, default=4, help="runs at once")
    parser.add_argument(
        "--deadline",
        type=float,
        default=3600.0,
        help="seconds after the start at which the grid ends: no run starts after it, and a run still going "
        "is stopped there (recorded as a timeout); give more than the longest run needs",
    )
    parser.add_argument(
        "--seeds", type=int, nargs="+", help="run only these of the spec's seeds (the others another time)"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="skip the runs runs.jsonl records as finished; continue the others from their newest last.ckpt "
        "(the spec's checkpoint_every writes it every N steps)",
    )
    parser.add_argument("--data-dir", type=Path, default=os.environ.get("PAL_DATA_DIR"))
    args = parser.parse_args(argv)
    if args.summarize:
        missing = [str(p) for p in args.summarize if not p.is_file()]
        if missing:
            parser.error(f"no such runs.jsonl: {', '.join(missing)}")
        print(summarize(args.summarize, args.compare))
        return 0
    if args.spec is None or args.out is None:
        parser.error("give --spec and --out (or --summarize FILES)")
    if args.data_dir is None:
        parser.error("give --data-dir or set PAL_DATA_DIR")
    spec = json.loads(args.spec.read_text())
    every = spec.get("checkpoint_every")
    if every is not None and (not isinstance(every, int) or isinstance(every, bool) or every < 1):
        parser.error(
            f"checkpoint_every in {args.spec} is {every!r}: give a whole number of steps, at least 1"
        )
    try:
        runs = grid_runs(spec, args.seeds)
    except ValueError as err:
        parser.error(str(err))
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    lock = threading.Lock()
    sink = args.out / "runs.jsonl"
    if args.resume:
        done = finished_runs(sink)
        for method, seed in [r for r in runs if r in done]:
            print(f"{method} seed {seed}: finished in {sink}, skipped", flush=True)
        runs = [r for r in runs if r not in done]

    def task(method: str, seed: int) -> None:
        left = args.deadline - (time.monotonic() - start)
        if left <= 30:
            record: dict[str, Any] = {"method": method, "seed": seed, "status": "not started (deadline)"}
        else:
            record = run_one(method, seed, spec, args.out, args.data_dir, timeout=left, resume=args.resume)
        line = json.dumps(record)
        with lock:
            with sink.open("a") as f:
                f.write(line + "\n")
            print(line, flush=True)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for method, seed in runs:
            pool.submit(task, method, seed)
    print(f"grid done in {time.monotonic() - start:.0f} s -> {sink}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""GLUE-small grid: systems x seeds through ``pal-lightning fit`` and ``test``, one raw JSON record per run.

The systems are the ``configs/glue_small*.yaml`` experiments (CoLA, SST-2, MRPC, STS-B, RTE; validation carved
from train, so the best checkpoint never sees dev): ``pals``, ``shared``, ``lora``, ``bottleneck`` and
``separate`` (one encoder per task, each trained on the joint run's expected draws of its task), on MiniLM
(``--encoder minilm``, ``glue_small*.yaml``) or all-mpnet-base-v2 (``--encoder base``, ``glue_small_base*.yaml``).
Each run is ``fit`` (model selection on the carved validation split), then ``test`` of its best checkpoint on
GLUE's dev sets, scored once; a separate system's run is five fits and tests, one per task, whose dev scores
make one GLUE average. Every run writes ``<out>/<encoder>[-<budget>]/<system>/seed<S>.json`` (scores, wall
time, stored parameters, commands, device); a run whose record exists is skipped, so a stopped grid resumes
where it was. ``--summarize`` writes ``summary.json`` and ``summary.md`` beside the records: each system's
GLUE average and task scores (mean and sd over seeds, stored parameters) and the paired 95 % intervals of the
claims (``benchmarks/paired_stats.py``). Usage::

    python benchmarks/glue_small.py --data-dir ../shared/data/glue --systems pals,shared,separate
    python benchmarks/glue_small.py --summarize
    python benchmarks/glue_small.py --tiny --systems pals,separate --seeds 1   # the whole path in minutes
    python benchmarks/glue_small.py --separate-steps                          # the separate runs' steps
    python benchmarks/glue_small.py --jobs 15 --deadline 540                  # a GPU machine, one call

``--jobs N`` runs N fits at once (each fit and its test is one *unit*; a separate system's five tasks are
five units, so its tasks train side by side), the longest units first so that the workers finish together,
and writes each (system, seed) record as soon as its last unit ends. ``--deadline S`` starts no unit after
S seconds from the start and cuts a running one there (its record says so): the grid fits one call of a
device whose time is counted.

``--scale F`` runs every system at F times the configs' steps (a reduced budget on a slow machine; its
records go to ``<encoder>-scale<F>``), ``--tiny`` at a few steps on 64 examples per split
(``<encoder>-tiny``): a check of the path, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_runs import fit_command, run_logged  # noqa: E402
from paired_stats import mean_std, paired_difference  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results_quality" / "glue_small"
TASKS = ("glue_cola", "glue_sst2", "glue_mrpc", "glue_stsb", "glue_rte")
#: (system, config stem under configs/ without the encoder's part)
SYSTEMS = {
    "pals": "",
    "shared": "_shared",
    "lora": "_lora",
    "bottleneck": "_bottleneck",
    "separate": "_separate",
}
ENCODERS = {"minilm": "glue_small", "base": "glue_small_base"}
#: (A, B, tasks): the claims of issue 29, each a paired difference A - B (on the GLUE average and these tasks)
#: (the small tasks first: the literature's claim is about them; CoLA and SST-2 after, for the whole picture)
CLAIMS = (
    ("pals", "separate", ("glue_rte", "glue_mrpc", "glue_stsb", "glue_cola", "glue_sst2")),
    ("pals", "shared", ("glue_rte", "glue_mrpc", "glue_stsb", "glue_cola", "glue_sst2")),
    ("shared", "separate", ("glue_rte", "glue_mrpc", "glue_stsb", "glue_cola", "glue_sst2")),
    ("pals", "lora", ()),
    ("pals", "bottleneck", ()),
)
TINY = ["--trainer.max_steps=2", "--data.init_args.steps_per_epoch=1", "--data.init_args.limit_examples=64"]


def config_of(encoder: str, system: str) -> Path:
    return REPO / "configs" / f"{ENCODERS[encoder]}{SYSTEMS[system]}.yaml"


def joint_budget(encoder: str) -> tuple[int, int, float]:
    """``(max_steps, steps_per_epoch, validation_fraction)`` of the joint config (its dotted keys)."""
    import yaml

    config = yaml.safe_load((REPO / "configs" / "glue_small.yaml").read_text())
    if encoder == "base":  # glue_small_base.yaml changes the encoder only
        config.update(
            {k: v for k, v in yaml.safe_load(config_of("base", "pals").read_text()).items() if k != "config"}
        )
    return (
        int(config["trainer.max_steps"]),
        int(config["data.init_args.steps_per_epoch"]),
        float(config["data.init_args.validation_fraction"]),
    )


def separate_steps(encoder: str, scale: float = 1.0) -> dict[str, int]:
    """Each task's expected draws in the joint run (annealed sampling over its epochs), scaled: the steps of
    its separate model, so that each separate model sees as many examples of its task as the joint run."""
    from pal_lightning.data.sampling.schedules import SamplingSchedule
    from pal_lightning.data.stage_splits import carve

    rows = {"glue_cola": 8551, "glue_sst2": 67349, "glue_mrpc": 3668, "glue_stsb": 5749, "glue_rte": 2490}
    steps, epoch, fraction = joint_budget(encoder)
    sizes = {t: len(carve(n, fraction, 0, t)[0]) for t, n in rows.items()}
    epochs = steps // epoch
    draws = dict.fromkeys(sizes, 0.0)
    for e in range(epochs):
        for task, p in SamplingSchedule("annealed", num_epochs=epochs).probabilities(sizes, e).items():
            draws[task] += p * epoch
    return {t: max(1, round(d * scale)) for t, d in draws.items()}


def budget_args(system: str, task: str | None, args: argparse.Namespace) -> list[str]:
    """The command-line options that set a run's budget (none at the configs' own budget)."""
    if args.tiny:
        return list(TINY)  # a new list: a caller appends its own options
    if task is not None:  # a separate model: the joint run's draws of its task, one epoch
        steps = separate_steps(args.encoder, args.scale)[task]
        return [f"--trainer.max_steps={steps}", f"--data.init_args.steps_per_epoch={steps}"]
    if args.scale != 1.0:
        max_steps, epoch, _ = joint_budget(args.encoder)
        scaled = max(1, round(epoch * args.scale))  # the same number of annealing epochs, each shorter
        return [
            f"--trainer.max_steps={max_steps // epoch * scaled}",
            f"--data.init_args.steps_per_epoch={scaled}",
        ]
    return []


def _scores(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "scores.json").read_text())


def time_left(args: argparse.Namespace) -> float:
    """Seconds a fit or test may run: ``--timeout``, or less where ``--deadline`` comes sooner."""
    deadline = getattr(args, "deadline_at", None)
    if deadline is None:
        return float(args.timeout)
    return max(1.0, min(float(args.timeout), deadline - time.monotonic()))


def fit_and_test(
    system: str, seed: int, task: str | None, args: argparse.Namespace, env: dict[str, str]
) -> dict[str, Any]:
    """One fit of ``system`` (one task of a separate system) and the test of its best checkpoint on dev."""
    config = config_of(args.encoder, system)
    root = args.work / args.label / system / f"seed{seed}" / (task or "joint")
    options = list(budget_args(system, task, args))
    if task is not None:
        options.append(f"--model.init_args.tasks=[{task}]")
    fit = fit_command(config, root, args.data_dir, seed, options, args.extra)
    status, fit_wall, run = run_logged(fit, root, root / "fit.log", env, REPO, time_left(args))
    out: dict[str, Any] = {"task": task, "fit_status": status, "fit_wall_s": round(fit_wall, 1), "fit": fit}
    if status != "ok" or run is None:
        return out
    fitted = _scores(run)
    best = run / "checkpoints" / "best.ckpt"
    test = [
        sys.executable, "-m", "pal_lightning", "test", "--config", str(config), *options,
        f"--data.init_args.data_dir={args.data_dir}", "--trainer.enable_progress_bar=false",
        f"--ckpt_path={best}", *args.extra,
    ]  # fmt: skip
    test_root = run / "test"
    status, test_wall, test_run = run_logged(test, test_root, run / "test.log", env, REPO, time_left(args))
    out.update(test_status=status, test_wall_s=round(test_wall, 1), test=test, run=str(run))
    out.update(validation=fitted.get("best", {}).get("scores", {}), parameters=fitted.get("parameters"))
    if status == "ok" and test_run is not None:
        out["dev"] = _scores(test_run)["scores"]
    return out


def dev_scores(parts: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``task -> metric -> dev score`` from the ``test/<task>/<metric>`` scores of one or more tests."""
    found: dict[str, dict[str, float]] = {}
    for part in parts:
        for key, value in (part.get("dev") or {}).items():
            stage, task, metric = (key.split("/") + ["", ""])[:3]
            if stage == "test" and task in TASKS and metric and metric != "loss":
                found.setdefault(task, {})[metric] = float(value)
    return found


def unit_tasks(system: str) -> list[str | None]:
    """The fits of one (system, seed): one per task for a separate system, else one joint fit."""
    return list(TASKS) if system == "separate" else [None]


def run_record(system: str, seed: int, args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    """Every fit and test of one (system, seed), one after the other, and its GLUE average on dev."""
    start = time.perf_counter()
    parts = [fit_and_test(system, seed, task, args, env) for task in unit_tasks(system)]
    return make_record(system, seed, parts, time.perf_counter() - start, args)


def make_record(
    system: str, seed: int, parts: list[dict[str, Any]], wall_s: float, args: argparse.Namespace
) -> dict[str, Any]:
    """The raw record of one (system, seed) from its fits' ``parts``: GLUE average on dev when every test
    ran, stored parameters, wall time (the sum of its units' when they ran side by side), device, commit."""
    from pal_lightning.tasks.catalogue import GLUE_TASKS
    from pal_lightning.tasks.glue import glue_average

    dev = dev_scores(parts)
    ok = all(p.get("test_status") == "ok" for p in parts) and set(dev) == set(TASKS)
    average = glue_average(dev, [GLUE_TASKS[t] for t in TASKS]) if ok else None
    return {
        "system": system,
        "encoder": args.encoder,
        "seed": seed,
        "status": "ok" if ok else "failed",
        "glue_average": average,
        "dev": dev,
        "stored_parameters": stored_parameters(parts),
        "wall_s": round(wall_s, 1),
        "budget": args.label,
        "jobs": args.jobs,
        "parts": parts,
        "device": device(),
        "code": code_version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def stored_parameters(parts: list[dict[str, Any]]) -> int | None:
    """What the system stores: the joint model's total, or the sum of the separate models' totals."""
    totals = [(p.get("parameters") or {}).get("total") for p in parts]
    return None if any(t is None for t in totals) else int(sum(totals))  # type: ignore[arg-type]


def code_version() -> str | None:
    """The commit the runs ran (``$PAL_CODE_VERSION`` for a copy of the code outside git)."""
    if os.environ.get("PAL_CODE_VERSION"):
        return os.environ["PAL_CODE_VERSION"]
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def device() -> str:
    """The machine the fits ran on: the GPU's name when ``nvidia-smi`` names one, and the CPU."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    host = f"CPU {cpu}, {os.cpu_count()} cores"
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return host
    gpus = [ln.strip() for ln in done.stdout.splitlines() if ln.strip()]
    return f"GPU {'; '.join(gpus)} (driver), {host}" if gpus else host


def _write_record(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(
        f"  {record['system']} seed {record['seed']} {record['status']}: GLUE average "
        f"{record['glue_average']}, {record['wall_s']} s",
        flush=True,
    )


def unit_steps(system: str, task: str | None, args: argparse.Namespace) -> int:
    """A unit's training steps, to hand out the longest units first."""
    if task is not None:
        return separate_steps(args.encoder, args.scale)[task]
    max_steps, epoch, _ = joint_budget(args.encoder)
    return max_steps // epoch * max(1, round(epoch * args.scale))


def run_grid(args: argparse.Namespace) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
    folder = args.out / args.label
    todo: list[tuple[str, int]] = []
    for seed in args.seeds:  # seed-major: a grid cut short holds complete pairs
        for system in args.systems:
            path = folder / system / f"seed{seed}.json"
            if path.is_file() and json.loads(path.read_text()).get("status") == "ok":
                print(f"skip {system} seed {seed}: {path} exists", flush=True)
            else:  # not run, or failed (cut at a deadline, say): run again
                todo.append((system, seed))
    if args.jobs <= 1:
        for system, seed in todo:
            print(f"run {system} seed {seed} ({args.label}) ...", flush=True)
            _write_record(folder / system / f"seed{seed}.json", run_record(system, seed, args, env))
        return
    run_units(todo, folder, args, env)


def run_units(
    todo: list[tuple[str, int]], folder: Path, args: argparse.Namespace, env: dict[str, str]
) -> None:
    """``todo``'s fits, ``args.jobs`` at a time, longest first (then seed-major); each (system, seed)
    record is written when its last fit ends. A unit that would start after the deadline does not run
    (its part says so, and its record is ``failed``)."""
    units = [(system, seed, task) for system, seed in todo for task in unit_tasks(system)]
    order = {key: i for i, key in enumerate(todo)}
    units.sort(key=lambda u: (-unit_steps(u[0], u[2], args), order[(u[0], u[1])]))
    parts: dict[tuple[str, int], dict[str | None, dict[str, Any]]] = {key: {} for key in todo}
    lock = threading.Lock()

    def one(system: str, seed: int, task: str | None) -> dict[str, Any]:
        if args.deadline_at is not None and time.monotonic() > args.deadline_at - args.min_unit_s:
            return {"task": task, "fit_status": "not started: past the deadline"}
        with lock:
            print(f"run {system} seed {seed} {task or 'joint'} ({args.label}) ...", flush=True)
        return fit_and_test(system, seed, task, args, env)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(one, *unit): unit for unit in units}
        for future in as_completed(futures):
            system, seed, task = futures[future]
            part = future.result()
            done = parts[(system, seed)]
            done[task] = part
            if len(done) == len(unit_tasks(system)):
                ordered = [done[t] for t in unit_tasks(system)]
                wall = sum(p.get("fit_wall_s", 0.0) + p.get("test_wall_s", 0.0) for p in ordered)
                _write_record(
                    folder / system / f"seed{seed}.json", make_record(system, seed, ordered, wall, args)
                )


def summarize(folder: Path) -> dict[str, Any]:
    """``summary.json`` and ``summary.md`` of the records under ``folder``."""
    records: dict[str, dict[int, dict[str, Any]]] = {}
    for path in sorted(folder.glob("*/seed*.json")):
        record = json.loads(path.read_text())
        if record.get("status") == "ok":
            records.setdefault(record["system"], {})[int(record["seed"])] = record
    systems = {name: _system_row(by_seed) for name, by_seed in records.items()}
    claims = [c for c in (_claim(records, a, b, tasks) for a, b, tasks in CLAIMS) if c is not None]
    summary = {"folder": _repo_relative(folder), "systems": systems, "claims": claims}
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (folder / "summary.md").write_text(_markdown(summary))
    if systems:
        figure(summary, folder / "summary.png")
    return summary


def _repo_relative(folder: Path) -> str:
    """``folder`` as the repository names it (a path under the repository), else as given."""
    try:
        return str(folder.resolve().relative_to(REPO))
    except ValueError:
        return str(folder)


def figure(summary: dict[str, Any], path: Path) -> None:
    """GLUE average (mean, with each seed's point) against stored parameters, one point per system: what each
    system buys for what it stores. Written when matplotlib is installed (the ``dev`` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, row in sorted(summary["systems"].items()):
        stored = row["stored_parameters"]
        if stored is None:
            continue
        millions = stored / 1e6
        values = row["glue_average"]["values"]
        sd = row["glue_average"]["sd"] or 0.0
        bar = ax.errorbar(millions, row["glue_average"]["mean"], yerr=sd, fmt="o", capsize=3)
        ax.scatter([millions] * len(values), values, s=12, alpha=0.4, color=bar.lines[0].get_color())
        ax.annotate(name, (millions, row["glue_average"]["mean"]), textcoords="offset points", xytext=(6, 4))
    ax.set_xscale("log")
    ax.set_xlabel("stored parameters (millions, log scale)")
    ax.set_ylabel("GLUE average on dev (5 tasks)")
    ax.set_title(f"GLUE-small, {Path(summary['folder']).name}: mean ± sd over seeds, and each seed")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _task_score(record: dict[str, Any], task: str) -> float:
    scores = record["dev"][task]
    return math.fsum(scores.values()) / len(scores)


def _system_row(by_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    seeds = sorted(by_seed)
    averages = [by_seed[s]["glue_average"] for s in seeds]
    mean, sd = mean_std(averages)
    tasks = {t: mean_std([_task_score(by_seed[s], t) for s in seeds]) for t in TASKS}
    return {
        "seeds": seeds,
        "glue_average": {"mean": mean, "sd": sd, "values": averages},
        "tasks": {t: {"mean": m, "sd": d} for t, (m, d) in tasks.items()},
        "stored_parameters": by_seed[seeds[0]].get("stored_parameters"),
        "wall_s_mean": mean_std([by_seed[s]["wall_s"] for s in seeds])[0],
        "device": by_seed[seeds[0]].get("device"),
    }


def _claim(
    records: dict[str, dict[int, dict[str, Any]]], a: str, b: str, tasks: tuple[str, ...]
) -> dict | None:
    if a not in records or b not in records:
        return None
    seeds = sorted(set(records[a]) & set(records[b]))
    if not seeds:
        return None
    out: dict[str, Any] = {"a": a, "b": b, "seeds": seeds}
    for name, score in [("glue_average", None), *((t, t) for t in tasks)]:

        def value(system: str, seed: int, task: str | None = score) -> float:
            record = records[system][seed]
            return record["glue_average"] if task is None else _task_score(record, task)

        diff = paired_difference([value(a, s) for s in seeds], [value(b, s) for s in seeds])
        out[name] = {"mean": diff.mean, "low": diff.low, "high": diff.high, "verdict": diff.verdict}
    return out


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:+.4f}"


def _markdown(summary: dict[str, Any]) -> str:
    lines = [
        f"# GLUE-small: {Path(summary['folder']).name}",
        "",
        "GLUE average and task scores on dev (mean over seeds).",
        "",
    ]
    lines += ["| system | seeds | GLUE avg | sd | " + " | ".join(TASKS) + " | stored parameters |"]
    lines += ["|" + " --- |" * (5 + len(TASKS))]
    for name, row in summary["systems"].items():
        avg = row["glue_average"]
        tasks = " | ".join(f"{row['tasks'][t]['mean']:.4f}" for t in TASKS)
        sd = "-" if avg["sd"] is None else f"{avg['sd']:.4f}"
        lines.append(
            f"| {name} | {len(row['seeds'])} | {avg['mean']:.4f} | {sd} | {tasks} | {row['stored_parameters']} |"
        )
    lines += ["", "Paired differences A - B over the same seeds, 95 % t-intervals.", ""]
    lines += ["| A - B | score | mean | 95 % interval | verdict |", "| --- | --- | --- | --- | --- |"]
    for claim in summary["claims"]:
        for name, diff in claim.items():
            if isinstance(diff, dict):
                interval = f"[{_fmt(diff['low'])}, {_fmt(diff['high'])}]"
                lines.append(
                    f"| {claim['a']} - {claim['b']} | {name} | {_fmt(diff['mean'])} | {interval} | {diff['verdict']} |"
                )
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_data = Path(os.environ.get("PAL_DATA_DIR", "data")).parent / "glue"
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=default_data,
        help="GLUE's download (default: glue/ beside $PAL_DATA_DIR)",
    )
    parser.add_argument("--systems", default="pals,shared,lora,bottleneck,separate")
    parser.add_argument("--seeds", default="42,43,44")
    parser.add_argument("--encoder", choices=sorted(ENCODERS), default="minilm")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="the configs' steps times this (a reduced budget)"
    )
    parser.add_argument(
        "--tiny", action="store_true", help="a few steps on 64 examples per split: checks the path"
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "glue_small_grid", help="run folders")
    parser.add_argument("--timeout", type=float, default=24 * 3600, help="seconds per fit or test")
    parser.add_argument("--jobs", type=int, default=1, help="fits at once (a separate system's tasks apart)")
    parser.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="seconds from the start: no fit starts later, none runs on",
    )
    parser.add_argument(
        "--min-unit-s",
        type=float,
        default=120.0,
        help="with --deadline: start no fit with less than this left",
    )
    parser.add_argument("--summarize", action="store_true", help="only write summary.json/.md of the records")
    parser.add_argument("--separate-steps", action="store_true", help="print each separate model's steps")
    parser.add_argument("extra", nargs="*", help="more pal-lightning options for every run, after --")
    args = parser.parse_args(argv)
    args.systems = [s for s in args.systems.split(",") if s]
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown:
        parser.error(f"unknown systems {unknown}; choose from {sorted(SYSTEMS)}")
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    suffix = "-tiny" if args.tiny else (f"-scale{args.scale:g}" if args.scale != 1.0 else "")
    args.label = args.encoder + suffix
    args.deadline_at = None if args.deadline is None else time.monotonic() + args.deadline
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.separate_steps:
        print(json.dumps(separate_steps(args.encoder, args.scale), indent=2))
        return 0
    if not args.summarize:
        run_grid(args)
    summary = summarize(args.out / args.label)
    print((args.out / args.label / "summary.md").read_text())
    return 0 if summary["systems"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""pal-lightning side by side with what users would pick instead (issue 16).

Systems, all on the same encoder (default all-MiniLM-L6-v2 from the ``offline`` extra), the same
training files, tokenisation limit, examples seen per task, seeds and learning-rate search budget:

* ``trainer``: the ``transformers`` Trainer, one ``AutoModelForSequenceClassification`` per task
  (regression head for STS, pairs cross-encoded as ``[CLS] a [SEP] b [SEP]``), AdamW with linear
  warmup and decay;
* ``lora``: ``peft`` LoRA, one adapter per task on the frozen encoder (peft's default target modules
  for BERT, query and value, plus the trained classifier), rank chosen so that one adapter holds about
  as many parameters as one task's PALs (both counts are reported);
* ``lora_tuned``: the same LoRA adapters on a *fine-tuned* frozen encoder. LoRA per task with the
  encoder trainable for that task would be full fine-tuning per task (``trainer``); the reading here
  is the other one: one encoder fine-tuned on all three tasks, then one adapter per task on it. Stage 1
  trains ``pal_shared`` (round robin, its rates) for ``TUNED_ENCODER_SHARE`` of the examples of each
  task (siamese pairs, as pal-lightning trains them); stage 2 trains ``lora`` exactly as above (pairs
  cross-encoded), from that encoder's weights and MiniLM's own pooler (pal-lightning has none), on the
  rest. Each stage reads its own disjoint part of the seed's training rows, so the examples per task
  in total equal every other system's; stage 1's heads are thrown away. It stores what ``lora``
  stores (one encoder + 3 x (LoRA + head)), and its one rate multiplier is chosen on overall;
* ``st_multitask``: ``sentence-transformers``' multi-task trainer (``SentenceTransformerTrainer`` with
  one dataset and loss per task, round-robin batches): ``SoftmaxLoss`` for Quora, cosine-similarity
  loss for STS, and for SST (one sentence, which ``SoftmaxLoss`` cannot take) the same softmax
  classifier over the single sentence embedding;
* ``pal_shared``, ``pal_pals``, ``pal_adapter_only``: pal-lightning with ``configs/quickstart.yaml``
  (PALs), the same with ``adapter: none`` (shared encoder, heads per task) and the same with the
  encoder frozen (only PALs and heads train).

Budget: ``--examples-per-task`` training examples per task (rounded down to whole batches). Every
seed draws its own training subset of each task (``min(N, rows)`` rows), written once as data files
that every system reads; single-task systems train ``N / batch`` steps per task, multi-task systems
``3 N / batch`` steps in round robin (pal-lightning's ``sampling: round_robin``: the quickstart's
annealed schedule would not give each task the same number of examples).

Scores: every system's dev predictions go through one scorer, ``pal_lightning.tasks.metrics``
(``build_task_metrics`` and ``cs224n_overall``). Learning rates: ``--lrs`` multiplies each system's
base rates (all its parameter groups), the same number of values for every system; the best value is
chosen on the dev sets (per task for the one-model-per-task systems, on the overall score for the
multi-task ones), which flatters every system alike since there is no labelled test set.

Cost: parameters stored to serve the three tasks, training seconds per example seen, and peak
resident memory of the process that ran the system (each run in its own subprocess unless
``--in-process``; ``--quick`` runs in-process, where the peak is that of the whole process).

Usage::

    export PAL_DATA_DIR=/path/to/cs224n-minbert HF_HUB_OFFLINE=1
    python benchmarks/peers.py                                   # every system, 3 seeds, 3 rates
    python benchmarks/peers.py --systems lora,pal_pals --seeds 1 --lrs 1 --examples-per-task 3200
    python benchmarks/peers.py --seeds 3 --search-seeds 1 --jobs 16   # rates searched on seed 42, 16 runs at once
    python benchmarks/peers.py --quick --out /tmp/peers.csv      # tiny random encoder, fixture data
    python benchmarks/peers.py --merge a.csv b.csv --out all.csv  # join parts run on two machines

``--search-seeds K`` runs every ``--lrs`` value on the first K seeds only and the later seeds at the rates
chosen there (:func:`choose_rates` lets only the search seeds vote). ``--jobs N`` runs N runs at once,
each in its own subprocess: a GPU shares them well (a step of this size is bound by the host), while on
a CPU they share the cores, so ``ms_per_example`` then compares nothing.

A comparison too long for one machine runs in parts: each part copies the common results file and
adds its runs with ``--resume --systems ...``; ``--merge PART1.csv PART2.csv --out ALL.csv`` then joins
them (same budget and dev sets, else refused; a run two parts both hold must be the same run), trains
nothing, and records every part's command and machine in the JSON's ``merged_from``.

Writes ``--out`` (CSV, one row per run) and the same path with ``.json`` (the settings, every run,
the per-system summary at its chosen rates and the paired differences of ``pal_pals`` against each
peer, ``benchmarks/paired_stats.py``). Needs the ``peers`` extra (``pip install -e ".[peers]"``).
:func:`plot_peers` draws a results CSV as score against stored parameters (``notebooks/peers.ipynb``).
"""

# no "from __future__ import annotations": the tests load this script by path, without a sys.modules
# entry, and dataclasses need one to read string annotations
import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/*.py, also when loaded by path
# the pieces: peers_budget.py (what every system gets, the scorer), peers_systems.py (the runners),
# peers_results.py (rates chosen, summary, output files, figure); names that tests, notebooks/peers.ipynb
# and loop_overhead.py take from this script are imported here too
from peers_budget import (  # noqa: E402, F401
    BASE_LR,
    COLUMNS,
    REPO,
    SYSTEMS,
    TASKS,
    Budget,
    budget_rows,
    overall,
    quick_encoder,
    score_task,
    write_budget_data,
)
from peers_results import (  # noqa: E402, F401
    choose_rates,
    label_positions,
    merge_results,
    plot_peers,
    plot_points,
    read_results,
    resumed_rows,
    selected_scores,
    summarize,
    summary_table,
    write_outputs,
)
from peers_systems import (  # noqa: E402, F401
    RUNNERS,
    _classifier,
    _device,
    load_tuned_encoder,
    matched_lora_rank,
    pal_adapter_size,
    pal_arguments,
    split_training_files,
    tuned_stages,
)
from reproduce import cs224n_data_dir  # noqa: E402

# -------------------------------------------------------------------------------------- running


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_unit(system: str, budget: Budget, scale: float, seed: int) -> dict[str, Any]:
    """One system at one learning-rate scale and seed: its results row (without the command)."""
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(
        system=system, lr_scale=scale, seed=seed, examples_per_task=budget.steps_per_task * budget.batch_size
    )
    try:
        row.update(RUNNERS[system](system, budget, scale, seed))
        row["status"] = "ok"
    except Exception as err:  # noqa: BLE001 - a peer that fails is reported, the others still run
        row["status"] = f"failed: {type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    row["overall"] = overall(row)
    if row["train_s"] is not None:
        row["ms_per_example"] = 1000.0 * row["train_s"] / (len(TASKS) * row["examples_per_task"])
    row["peak_rss_mb"] = round(peak_rss_mb(), 1)
    row["device"] = _device()
    return row


def _run_command(args: argparse.Namespace, budget: Budget, system: str) -> str:
    """The command that reruns ``system``'s part of this comparison alone (recorded with every run)."""
    return (
        f"python benchmarks/peers.py --systems {system} --seeds {args.seeds} --seed {args.seed} "
        f"--lrs {','.join(f'{x:g}' for x in args.lrs)} --examples-per-task {budget.examples_per_task} "
        f"--max-length {args.max_length} --qqp-dev-limit {args.qqp_dev_limit} --precision {args.precision}"
        + (f" --search-seeds {args.search_seeds}" if args.search_seeds else "")
        + (f" --dev-limit {args.dev_limit}" if args.dev_limit else "")
        + (" --quick" if args.quick else "")
    )


def run_in_subprocess(system: str, budget: Budget, scale: float, seed: int, log: Path) -> dict[str, Any]:
    """:func:`run_unit` in a fresh Python process (its own peak memory; nothing shared between runs)."""
    spec = json.dumps({"system": system, "budget": asdict(budget), "scale": scale, "seed": seed})
    result = log.with_suffix(".json")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", spec, "--worker-out", str(result)]
    with log.open("w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO)
    if proc.returncode != 0 or not result.is_file():
        row: dict[str, Any] = dict.fromkeys(COLUMNS)
        row.update(system=system, lr_scale=scale, seed=seed, status=f"exit {proc.returncode} (see {log})")
        return row
    return json.loads(result.read_text())


# ------------------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help=f"comma-separated, from {', '.join(SYSTEMS)}"
    )
    parser.add_argument("--seeds", type=int, default=3, help="seeds --seed .. --seed + N - 1 (default 3)")
    parser.add_argument("--seed", type=int, default=42, help="the first seed (default 42)")
    parser.add_argument(
        "--lrs",
        default="0.5,1,2",
        help="learning-rate search: multipliers of each system's base rates, the same for all (default 0.5,1,2)",
    )
    parser.add_argument(
        "--examples-per-task",
        type=int,
        default=12800,
        help="training examples seen per task (default 12800: the quickstart's 1,200 steps of 32 over 3 tasks)",
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=64, help="tokens per encoder input (default 64)")
    parser.add_argument(
        "--precision",
        choices=("32-true", "bf16-mixed"),
        default="32-true",
        help="every system's arithmetic (default 32-true); bf16-mixed autocasts all of them to bf16,\n"
        "about twice as fast on a CPU with bf16 instructions",
    )
    parser.add_argument(
        "--qqp-dev-limit", type=int, default=0, help="score the first N Quora dev pairs; 0 = all"
    )
    parser.add_argument(
        "--dev-limit",
        type=int,
        default=0,
        help="score the first N dev examples of every task; 0 = all (default). Smoke runs only: the files are\n"
        "not shuffled (SST's first 400 dev rows are 44 %% class 3, the whole file 24 %%)",
    )
    parser.add_argument("--encoder", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="CS224N data folder (default $PAL_DATA_DIR)"
    )
    parser.add_argument(
        "--out", type=Path, default=REPO / "benchmarks" / "results_peers.csv", help="CSV (and .json)"
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="folder for budget data and logs (default: temporary)"
    )
    parser.add_argument("--in-process", action="store_true", help="run every system in this process")
    parser.add_argument(
        "--search-seeds",
        type=int,
        default=0,
        help="run the rate search (every --lrs value) on the first K seeds only; each later seed runs a\n"
        "system at the rates chosen on those (per task for one-model-per-task systems). 0 (default): all",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs at once, each in its own subprocess (default 1). Several share one GPU well, since a\n"
        "step of this size is bound by the host; on a CPU they share the cores and slow each other,\n"
        "so ms_per_example is comparable only between runs made with the same --jobs on one machine",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the finished runs of the --out file (same budget and dev sets, else refused) and run only\n"
        "the others: the comparison can be run in parts, one session at a time",
    )
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="train nothing: write to --out the union of these results files' finished runs (parts of one\n"
        "comparison run on several machines, each by --resume from a common file). --out must be one of\n"
        "them or new; a run that two files hold with other scores is refused",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny random encoder and fixture data, in-process (tests)"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return args
    if args.merge:
        inputs = {path.with_suffix(".json").resolve() for path in args.merge}
        record = args.out.with_suffix(".json").resolve()
        if (args.out.exists() or record.exists()) and record not in inputs:
            parser.error(
                f"--merge would overwrite {args.out}: name it among the files to merge, or another --out"
            )
        return args
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown or not args.systems:
        parser.error(f"--systems: unknown {unknown}; choose from {', '.join(SYSTEMS)}")
    try:
        args.lrs = [float(x) for x in args.lrs.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--lrs {args.lrs!r}: write comma-separated numbers, e.g. 0.5,1,2")
    if not args.lrs or any(x <= 0 for x in args.lrs):
        parser.error("--lrs needs at least one positive multiplier")
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    if not 0 <= args.search_seeds <= args.seeds:
        parser.error(f"--search-seeds must be between 0 (every seed) and --seeds ({args.seeds})")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.jobs > 1 and args.in_process:
        parser.error("--jobs runs each run in its own subprocess: drop --in-process, or use --jobs 1")
    if args.examples_per_task < args.batch_size:
        parser.error("--examples-per-task must be at least --batch-size")
    if "lora_tuned" in args.systems and args.examples_per_task < 2 * args.batch_size and not args.quick:
        parser.error(
            "--systems lora_tuned trains in two stages: --examples-per-task must be at least 2 batches"
        )
    if not args.quick:
        args.data_dir = cs224n_data_dir(parser, args.data_dir)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = parse_args(argv)
    if args.worker:  # one run in a subprocess of main()
        spec = json.loads(args.worker)
        row = run_unit(spec["system"], Budget(**spec["budget"]), spec["scale"], spec["seed"])
        row["rss_scope"] = "run"
        args.worker_out.write_text(json.dumps(row))
        return 0
    words = list(argv if argv is not None else sys.argv[1:])
    command = " ".join(["python benchmarks/peers.py", *words])
    if args.merge:
        return merge(args.merge, args.out, command)
    with tempfile.TemporaryDirectory() as tmp:
        work = (args.work or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        return _run(args, work, command)


def merge(paths: Sequence[Path], out: Path, command: str) -> int:
    """``--merge``: the union of the files' finished runs, summarised again, written to ``out``."""
    try:
        rows, settings = merge_results(paths)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    settings["merged_by"] = command
    summary = write_outputs(out, rows, settings)
    print(summary_table(summary))
    print(f"merged {len(rows)} runs from {len(paths)} files; wrote {out} and {out.with_suffix('.json')}")
    return 0


def _run(args: argparse.Namespace, work: Path, command: str) -> int:
    from pal_lightning.core.hub import resolve_encoder

    seeds = [args.seed + i for i in range(args.seeds)]
    overrides: dict[str, Any] = {}
    if args.quick:
        from pal_lightning.testing import write_cs224n_data

        source = write_cs224n_data(work / "fixture")
        encoder = str(quick_encoder(work / "tiny_encoder"))
        overrides = {"adapter": {"size": 8, "num_heads": 2}}
        # seconds, not minutes: two batches of four short examples per task, one torch thread (a
        # tiny model gains nothing from more, and on a busy machine extra threads only wait for cores)
        import torch

        torch.set_num_threads(1)
        args.batch_size, args.max_length = 4, 32
        args.examples_per_task = min(args.examples_per_task, 2 * args.batch_size)
    else:
        source = args.data_dir.resolve()
        encoder = resolve_encoder(args.encoder)
    budget = Budget(
        encoder=encoder,
        data_root=str(work / "data"),
        examples_per_task=args.examples_per_task // args.batch_size * args.batch_size,
        batch_size=args.batch_size,
        eval_batch_size=16 if args.quick else 128,
        max_length=args.max_length,
        pal_overrides=overrides,
        precision=args.precision,
    )
    for seed in seeds:
        write_budget_data(
            source, budget.data_dir(seed), budget.examples_per_task, seed, args.qqp_dev_limit, args.dev_limit
        )
    pal_size = pal_adapter_size(budget)
    from dataclasses import replace

    budget = replace(budget, lora_rank=matched_lora_rank(budget, pal_size))
    in_process = args.in_process or (args.quick and args.jobs == 1)
    settings = {
        "command": command,
        "encoder": args.encoder,
        "systems": args.systems,
        "seeds": seeds,
        "lr_multipliers": args.lrs,
        "base_lr": {s: BASE_LR[s] for s in args.systems},
        "budget": {**asdict(budget), "data_root": None},
        "pal_adapter_per_task": pal_size,
        "quick": args.quick,
        "qqp_dev_limit": args.qqp_dev_limit,
        "dev_limit": args.dev_limit,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "load_avg_at_start": os.getloadavg()[0],
    }
    print(
        f"budget: {budget.examples_per_task} examples per task, batch {budget.batch_size}, max_length "
        f"{budget.max_length}; seeds {seeds}; lr multipliers {args.lrs}; PAL adapter {pal_size} parameters "
        f"per task, LoRA rank {budget.lora_rank}",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    if args.resume:
        try:
            rows = resumed_rows(args.out, settings)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    search_seeds = seeds[: args.search_seeds] if args.search_seeds else seeds
    settings["search_seeds"] = search_seeds
    settings["jobs"] = args.jobs
    command_of = partial(_run_command, args, budget)
    done = {(row["seed"], row["system"], row["lr_scale"]) for row in rows}
    search = [
        (seed, system, scale)
        for seed in search_seeds
        for system in args.systems
        for scale in args.lrs
        if (seed, system, scale) not in done
    ]
    summary = summarize(rows, settings["systems"])  # written after each run below

    def later_runs(system: str) -> list[tuple[int, str, float]]:
        """The runs of ``system`` at the seeds after the search ones, at its chosen rates (once its search
        is over: every search run finished, well or not)."""
        if any(run[1] == system for run in search):
            return []
        scales = sorted(set(choose_rates(rows, system).values()))
        return [
            (seed, system, scale)
            for seed in seeds
            if seed not in search_seeds
            for scale in scales
            if (seed, system, scale) not in done
        ]

    def one(seed: int, system: str, scale: float) -> dict[str, Any]:
        if in_process:
            row = run_unit(system, budget, scale, seed)
            row["rss_scope"] = "process"
        else:
            log = work / "logs" / f"{system}-lr{scale:g}-seed{seed}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            row = run_in_subprocess(system, budget, scale, seed, log)
        row["command"] = command_of(system)
        return row

    queue = list(search)
    for system in args.systems:
        queue += later_runs(system)
    if rows:
        print(f"--resume: {len(rows)} finished runs kept from {args.out}, {len(queue)} to run", flush=True)
    workers = 1 if in_process else args.jobs
    k = 0
    with ThreadPoolExecutor(max_workers=workers) as pool:
        running: dict[Future[dict[str, Any]], tuple[int, str, float]] = {}
        while queue or running:
            while queue and len(running) < workers:
                run = queue.pop(0)
                running[pool.submit(one, *run)] = run
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                seed, system, scale = running.pop(future)
                row = future.result()
                rows.append(row)
                done.add((seed, system, scale))
                k += 1
                scores = "  ".join(
                    f"{c} {row[c]:.3f}"
                    for c in ("sst_acc", "qqp_acc", "sts_pearson", "overall")
                    if row[c] is not None
                )
                print(
                    f"[{k}/{k + len(queue) + len(running)}] {system} lr x{scale:g} seed {seed}: {scores}  {row['status']}",
                    flush=True,
                )
                summary = write_outputs(args.out, rows, settings)
                if (seed, system, scale) in search:
                    search.remove((seed, system, scale))
                    queue[:0] = later_runs(system)  # a system's seeds before other systems' searches
    if args.work is None:
        shutil.rmtree(work / "data", ignore_errors=True)
    print(summary_table(summary))
    print(f"wrote {args.out} and {args.out.with_suffix('.json')}")
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

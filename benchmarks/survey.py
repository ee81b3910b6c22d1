"""Memory and time per configuration: sharing regimes, adapter types and sizes (issue 14, item 4).

Every configuration is a list of dotted overrides of ``configs/quickstart.yaml``, the same thing a user
writes in a YAML overlay or on the command line (``model.init_args.layer_sharing=FFSSII`` is
``--model.init_args.layer_sharing=FFSSII``). Each one is trained through the ``pal-lightning fit``
command line (:class:`pal_lightning.cli.fit.PalLightningCLI`) for the same budget and seed, in a fresh
Python process of its own (so its peak memory is its own), and the survey records per configuration:

* stored parameters for serving all tasks (:func:`pal_lightning.parameter_report`: encoder, every
  adapter, head and individual layer once), also as a multiple of one encoder;
* peak memory: the process's peak resident set (``ru_maxrss``: loading, training and the snapshot
  evaluations together) and, where there is a GPU, ``torch.cuda.max_memory_allocated``;
* time per training step: the median, after ``--warmup`` steps, of the time from a batch's start to its
  end (forward, backward, clipping, optimizer step and the library's callbacks; data loading and the
  snapshot evaluations excluded), and the median CPU time of those steps (all threads of the process;
  on a CPU shared with other jobs the wall time grows with their load, the CPU time much less);
* the dev scores (per task and the CS224N overall) at ``--snapshots`` evenly spaced steps, each with the
  training seconds spent so far.

Dev sets: the first ``--dev-limit`` rows of each task's dev file (the same rows for every configuration,
so the configurations compare; the files are not shuffled, so the numbers are not whole-dev-set scores).

Budget: ``--snapshots`` x ``--steps-per-snapshot`` optimizer steps; one epoch of the data module per
snapshot, so the annealed sampling runs its schedule (alpha 1 -> 0.2) over the survey's epochs.

Usage::

    export PAL_DATA_DIR=/path/to/cs224n-minbert HF_HUB_OFFLINE=1
    python benchmarks/survey.py                                  # every configuration, 3 x 50 steps each
    python benchmarks/survey.py --only shared,separate,pals --steps-per-snapshot 20
    python benchmarks/survey.py --quick --out /tmp/survey        # tiny random encoder, fixture data

Writes ``--out``/``survey.csv`` (one row per configuration and snapshot, :data:`COLUMNS`),
``--out``/``survey.json`` (settings, machine, load average, the configurations) and the two figures
``survey_params.png`` (score against stored parameters) and ``survey_time.png`` (score against
training time); ``notebooks/survey.ipynb`` draws the same from the CSV.
"""

# no "from __future__ import annotations": the tests load this script by path, without a sys.modules
# entry, and dataclasses need one to read string annotations
import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/reproduce.py, also when loaded by path
from reproduce import cs224n_data_dir, cs224n_overall, prepare_data_dir  # noqa: E402
from reproduce import write_csv as reproduce_write_csv  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "configs" / "quickstart.yaml"
TASKS = ("sst", "qqp", "sts")
#: ``val/<task>/<metric>`` of each task's score in the CSV column of the same name.
TASK_METRICS = {
    "sst_acc": "val/sst/accuracy",
    "qqp_acc": "val/qqp/accuracy",
    "sts_pearson": "val/sts/pearson",
}

M = "model.init_args."


@dataclass(frozen=True)
class Configuration:
    """One surveyed configuration: a name and its overrides of ``configs/quickstart.yaml``."""

    name: str
    """Short name (the CSV's ``config`` column)."""
    overrides: tuple[str, ...]
    """Dotted ``key=value`` overrides, as a YAML overlay or the command line would give them."""
    what: str
    """One line: what the configuration is."""


#: The default survey, in the order it runs. Regimes with ``adapter: none`` isolate what sharing layers
#: does; the adapters run on the all-shared encoder of the quickstart.
CONFIGURATIONS: tuple[Configuration, ...] = (
    Configuration("shared", (f"{M}adapter.method=none",), "all layers shared (S), heads per task"),
    Configuration(
        "separate",
        (f"{M}adapter.method=none", f"{M}layer_sharing=IIIIII"),
        "all layers individual (I): separate models but for the shared embeddings",
    ),
    Configuration("pals", (f"{M}adapter.method=pals",), "PALs in every layer, d_s = 102 (the quickstart)"),
    Configuration(
        "FFSSII",
        (f"{M}adapter.method=none", f"{M}layer_sharing=FFSSII"),
        "2 frozen, 2 shared, 2 individual layers",
    ),
    Configuration(
        "FFFFSS",
        (f"{M}adapter.method=none", f"{M}layer_sharing=FFFFSS"),
        "bottom 4 layers frozen, top 2 shared",
    ),
    Configuration("pff", (f"{M}adapter.method=pff",), "projected feed-forward in every layer, d_s = 102"),
    Configuration("pa_on_top", (f"{M}adapter.method=pa_on_top",), "projected attention on top, d_s = 102"),
    Configuration(
        "bert_layer_on_top",
        (f"{M}adapter.method=bert_layer_on_top", f"{M}optim.adapter_lr=1.0e-04"),
        "a BERT layer per task on top (configs/variants/bert_layer_on_top.yaml)",
    ),
    Configuration(
        "SSSSII", (f"{M}adapter.method=none", f"{M}layer_sharing=SSSSII"), "4 shared, top 2 layers individual"
    ),
    Configuration("pals_ds48", (f"{M}adapter.method=pals", f"{M}adapter.size=48"), "PALs, smaller d_s = 48"),
    Configuration(
        "pals_ds204", (f"{M}adapter.method=pals", f"{M}adapter.size=204"), "PALs, larger d_s = 204"
    ),
)

#: Columns of survey.csv: one row per configuration and snapshot.
COLUMNS = (
    "config",  # the configuration's name
    "overrides",  # its dotted overrides of configs/quickstart.yaml, ";"-separated
    "adapter",
    "layer_sharing",  # one letter per layer (F frozen, S shared, I individual)
    "adapter_size",  # d_s (0 without projected space)
    "stored_params",  # parameters stored to serve all tasks (parameter_report(...).total)
    "stored_ratio",  # stored_params / one base encoder
    "trainable_params",
    "peak_rss_mib",  # peak resident memory of the process (ru_maxrss)
    "rss_scope",  # "run": its own process; "process": a shared one (--quick), the process's peak so far
    "gpu_peak_mib",  # torch.cuda.max_memory_allocated, blank on a CPU
    "step_ms",  # median time per training step after the warm-up steps
    "step_cpu_ms",  # median CPU time per step, all threads of the process (less sensitive to other jobs)
    "steps_timed",  # steps in those medians
    "snapshot",  # 1, 2, ...
    "step",  # optimizer steps done at the snapshot
    "train_s",  # training seconds to the snapshot (sum of step times, evaluations excluded)
    "sst_acc",  # SST dev accuracy (first --dev-limit rows)
    "qqp_acc",  # Quora dev accuracy (first --dev-limit rows)
    "sts_pearson",  # STS dev Pearson (first --dev-limit rows)
    "overall",  # CS224N overall of the three
    "wall_s",  # wall time of the configuration's process (loading, training, evaluations)
    "load_1min",  # 1-minute load average when the configuration started (the CPU may be shared)
    "device",
    "status",
)


# ----------------------------------------------------------------------------------------- probe


def _probe_class() -> type:
    """The Lightning callback that measures one run (built on demand: importing Lightning is slow)."""
    import lightning.pytorch as pl
    import torch

    from pal_lightning import parameter_report

    class SurveyProbe(pl.Callback):
        """Parameter counts at the start of fit, per-step times, and the dev scores at each validation."""

        def __init__(self) -> None:
            self.report: Any = None
            self.step_s: list[float] = []
            self.step_cpu_s: list[float] = []
            self.snapshots: list[dict[str, Any]] = []
            self._start = self._cpu_start = 0.0

        def _sync(self, pl_module: pl.LightningModule) -> None:
            if pl_module.device.type == "cuda":  # kernels run asynchronously: time what they did
                torch.cuda.synchronize(pl_module.device)

        def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            self.report = parameter_report(pl_module)

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            self._sync(pl_module)
            self._start, self._cpu_start = time.perf_counter(), time.process_time()

        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            self._sync(pl_module)
            self.step_s.append(time.perf_counter() - self._start)
            self.step_cpu_s.append(time.process_time() - self._cpu_start)

        def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            if trainer.sanity_checking:
                return
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
            self.snapshots.append(
                {"step": trainer.global_step, "train_s": sum(self.step_s), "metrics": metrics}
            )

    return SurveyProbe


# ------------------------------------------------------------------------------------------- runs


def fit_arguments(config: Configuration, settings: dict[str, Any]) -> list[str]:
    """The ``pal-lightning fit`` arguments of one configuration at the survey's budget.

    The configuration's overrides come after the quickstart; the survey's budget, data, run folder and
    (with ``--quick``) the tiny model come after them, so every configuration gets the same budget.
    """
    steps, snapshots = settings["steps_per_snapshot"], settings["snapshots"]
    args = [
        "fit",
        "--config",
        str(QUICKSTART),
        *(f"--{o}" for o in config.overrides),
        f"--seed_everything={settings['seed']}",
        f"--trainer.max_steps={steps * snapshots}",
        "--trainer.check_val_every_n_epoch=1",  # one epoch per snapshot
        "--trainer.enable_progress_bar=false",
        f"--trainer.default_root_dir={Path(settings['work']) / 'runs' / config.name}",
        "--checkpoint.save_top_k=0",  # the survey keeps numbers, not weights
        "--checkpoint.save_last=false",
        "--save_model.enabled=false",
        f"--data.init_args.data_dir={settings['data_dir']}",
        f"--data.init_args.steps_per_epoch={steps}",
        f"--data.init_args.seed={settings['seed']}",
        *(f"--{o}" for o in settings["extra"]),
    ]
    return args


def measure(config: Configuration, settings: dict[str, Any]) -> dict[str, Any]:
    """Train ``config`` in this process through the CLI; its measurements (not yet CSV rows)."""
    import torch

    from pal_lightning.cli.fit import PalLightningCLI, default_trainer_settings

    if settings.get("threads"):
        torch.set_num_threads(settings["threads"])
    probe = _probe_class()()
    callbacks = [*default_trainer_settings()["callbacks"], probe]
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    PalLightningCLI(args=fit_arguments(config, settings), trainer_defaults={"callbacks": callbacks})
    report = probe.report
    warm = probe.step_s[settings["warmup"] :] or probe.step_s
    warm_cpu = probe.step_cpu_s[settings["warmup"] :] or probe.step_cpu_s
    return {
        "adapter": report.method,
        "adapter_size": report.adapter_size,
        "layer_sharing": report.layer_sharing,
        "stored_params": report.stored_for_serving,
        "stored_ratio": round(report.ratio, 4),
        "trainable_params": report.trainable,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "gpu_peak_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1) if cuda else None,
        "step_ms": round(1000.0 * statistics.median(warm), 2) if warm else None,
        "step_cpu_ms": round(1000.0 * statistics.median(warm_cpu), 2) if warm_cpu else None,
        "steps_timed": len(warm),
        "snapshots": probe.snapshots,
        "device": torch.cuda.get_device_name() if cuda else f"cpu ({torch.get_num_threads()} threads)",
    }


def measure_in_subprocess(config: Configuration, settings: dict[str, Any], log: Path) -> dict[str, Any]:
    """:func:`measure` in a fresh Python process, so that its peak memory is its own."""
    out = log.with_suffix(".json")
    spec = json.dumps({"config": asdict(config), "settings": settings})
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", spec, "--worker-out", str(out)]
    with log.open("w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO)
    if proc.returncode != 0 or not out.is_file():
        return {"status": f"exit {proc.returncode} (see {log})"}
    return json.loads(out.read_text())


def rows_of(config: Configuration, result: dict[str, Any], wall_s: float, load: float, scope: str) -> list:
    """The CSV rows of one configuration: one per snapshot (one row of blanks if it failed)."""
    common = {k: result.get(k) for k in COLUMNS if k in result}
    common.update(
        config=config.name,
        overrides=";".join(config.overrides),
        rss_scope=scope,
        wall_s=round(wall_s, 1),
        load_1min=round(load, 2),
        status=result.get("status", "ok"),
    )
    snapshots = result.get("snapshots") or [{}]
    rows = []
    for k, snap in enumerate(snapshots, 1):
        row: dict[str, Any] = dict.fromkeys(COLUMNS)
        row.update(common)
        if snap:
            metrics = snap["metrics"]
            scores = {col: metrics.get(key) for col, key in TASK_METRICS.items()}
            scores = {c: (v if v is not None and math.isfinite(v) else None) for c, v in scores.items()}
            row.update(scores, snapshot=k, step=snap["step"], train_s=round(snap["train_s"], 2))
            row["overall"] = cs224n_overall(scores["sst_acc"], scores["qqp_acc"], scores["sts_pearson"])
        rows.append(row)
    return rows


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """The survey's rows as a CSV in :data:`COLUMNS` order (reproduce.py's writer)."""
    reproduce_write_csv(path, rows, COLUMNS)


# ------------------------------------------------------------------------------------------ data


def dev_subset_dir(source: Path, target: Path, dev_limit: int) -> Path:
    """A data folder of links to ``source`` whose dev files keep only their first ``dev_limit`` rows."""
    from pal_lightning.tasks.specs import get_task

    prepare_data_dir(source, target, dev_limit)  # links every file and cuts the Quora dev file
    for task in TASKS:
        dev = target / get_task(task).files["dev"]
        lines = (source / dev.name).read_text(encoding="utf-8").splitlines(keepends=True)
        dev.unlink()
        dev.write_text("".join(lines[: 1 + dev_limit]), encoding="utf-8")
    return target


# ----------------------------------------------------------------------------------------- quick


#: Width of the --quick encoder (pal_lightning.testing.tiny_bert_config) against MiniLM's 384.
QUICK_WIDTH, FULL_WIDTH, QUICK_HEADS = 32, 384, 2


def quick_overrides(overrides: Sequence[str]) -> tuple[str, ...]:
    """``overrides`` for the tiny --quick encoder: an explicit ``adapter.size`` scaled by its width
    (32 / 384) and rounded to a multiple of its 2 PAL heads, at least 2."""
    out = []
    for o in overrides:
        key, _, value = o.partition("=")
        if key == f"{M}adapter.size" and value not in ("null", ""):
            size = int(value) * QUICK_WIDTH / FULL_WIDTH
            value = str(max(QUICK_HEADS, QUICK_HEADS * round(size / QUICK_HEADS)))
        out.append(f"{key}={value}")
    return tuple(out)


def quick_extra() -> list[str]:
    """Overrides of the --quick budget: a random 6-layer width-32 encoder (so every 6-letter regime
    fits; d_s scaled to its width), 2 PAL heads, batches of 4 short examples, no tokenisation cache, one CPU."""
    from pal_lightning.testing import tiny_bert_config

    return [
        f"{M}encoder_config={json.dumps(tiny_bert_config(layers=6))}",
        f"{M}adapter.num_heads={QUICK_HEADS}",
        "data.init_args.batch_size=4",
        "data.init_args.eval_batch_size=16",
        "data.init_args.max_length=32",
        "data.init_args.cache_dir=false",
        "trainer.accelerator=cpu",
        "trainer.logger=false",
    ]


# ---------------------------------------------------------------------------------------- figures


def plot_survey(csv_path: Path, out_dir: Path | None = None) -> list[Any]:
    """Score against stored parameters and against training time, from a survey CSV.

    Left figure: each configuration's overall (and per-task) score at its last snapshot against its
    stored parameters. Right figure: the overall score at every snapshot against the training seconds
    spent to it. Saved as ``survey_params.png`` and ``survey_time.png`` in ``out_dir`` when given;
    returns the two figures.
    """
    import matplotlib.pyplot as plt
    import pandas as pd

    table = pd.read_csv(csv_path)
    table = table[table["status"] == "ok"].dropna(subset=["overall"])
    last = table.sort_values("snapshot").groupby("config", sort=False).tail(1).set_index("config")
    fig1, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, columns in zip(axes, (["overall"], list(TASK_METRICS)), strict=True):
        for col, marker in zip(columns, "osD^", strict=False):
            ax.scatter(last["stored_params"] / 1e6, last[col], marker=marker, label=col)
            if ax is axes[0]:
                for name, r in last.iterrows():
                    ax.annotate(
                        str(name),
                        (r["stored_params"] / 1e6, r[col]),
                        fontsize=8,
                        xytext=(3, 3),
                        textcoords="offset points",
                    )
        ax.set_xlabel("stored parameters for serving all tasks (millions)")
        ax.set_ylabel("dev score at the last snapshot")
        ax.legend(fontsize=8)
    axes[0].set_title("overall against stored parameters")
    axes[1].set_title("per task")
    fig1.tight_layout()
    fig2, ax = plt.subplots(figsize=(7, 4.5))
    colors = plt.get_cmap("tab20").colors  # more configurations than the default cycle's 10 colours
    for k, (name, group) in enumerate(table.groupby("config", sort=False)):
        group = group.sort_values("snapshot")
        ax.plot(
            group["train_s"], group["overall"], marker="o", label=str(name), color=colors[k % len(colors)]
        )
    ax.set_xlabel("training seconds (sum of step times; evaluations excluded)")
    ax.set_ylabel("overall dev score")
    ax.set_title("overall against training time, one point per snapshot")
    ax.legend(fontsize=7, ncol=2)
    fig2.tight_layout()
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        fig1.savefig(out_dir / "survey_params.png", dpi=110, bbox_inches="tight")
        fig2.savefig(out_dir / "survey_time.png", dpi=110, bbox_inches="tight")
    return [fig1, fig2]


# ------------------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    names = [c.name for c in CONFIGURATIONS]
    parser.add_argument("--only", default=None, help=f"comma-separated, from {', '.join(names)}")
    parser.add_argument("--snapshots", type=int, default=3, help="dev evaluations per run (default 3)")
    parser.add_argument(
        "--steps-per-snapshot", type=int, default=50, help="optimizer steps between snapshots (default 50)"
    )
    parser.add_argument("--warmup", type=int, default=5, help="steps left out of the median step time")
    parser.add_argument(
        "--dev-limit", type=int, default=300, help="score the first N dev rows of every task (default 300)"
    )
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="CS224N data folder (default $PAL_DATA_DIR)"
    )
    parser.add_argument(
        "--out", type=Path, default=REPO / "benchmarks" / "results_survey", help="output folder"
    )
    parser.add_argument("--work", type=Path, default=None, help="run folders and logs (default: temporary)")
    parser.add_argument(
        "--quick", action="store_true", help="tiny random encoder, fixture data, 2 x 1 steps, in-process"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "extra", nargs="*", help="more dotted overrides for every run, e.g. trainer.precision=bf16-mixed"
    )
    args = parser.parse_args(argv)
    if args.worker:
        return args
    chosen = names if not args.only else [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in names]
    if unknown or not chosen:
        parser.error(f"--only: unknown {unknown}; choose from {', '.join(names)}")
    args.configurations = [c for c in CONFIGURATIONS if c.name in chosen]
    if args.snapshots < 1 or args.steps_per_snapshot < 1 or args.dev_limit < 1 or args.warmup < 0:
        parser.error("--snapshots, --steps-per-snapshot and --dev-limit must be >= 1, --warmup >= 0")
    if args.quick:
        args.snapshots, args.steps_per_snapshot, args.warmup, args.dev_limit = 2, 1, 0, 10
    else:
        args.data_dir = cs224n_data_dir(parser, args.data_dir)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:  # one configuration in a subprocess of main()
        spec = json.loads(args.worker)
        config = Configuration(
            spec["config"]["name"], tuple(spec["config"]["overrides"]), spec["config"]["what"]
        )
        args.worker_out.write_text(json.dumps(measure(config, spec["settings"])))
        return 0
    command = " ".join(["python benchmarks/survey.py", *(argv if argv is not None else sys.argv[1:])])
    with tempfile.TemporaryDirectory() as tmp:
        work = (args.work or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        return _run(args, work, command)


def _run(args: argparse.Namespace, work: Path, command: str) -> int:
    import torch

    extra = [e.removeprefix("--") for e in args.extra]
    configurations = args.configurations
    if args.quick:
        from pal_lightning.testing import write_cs224n_data

        source = write_cs224n_data(work / "fixture")
        extra = quick_extra() + extra
        configurations = [Configuration(c.name, quick_overrides(c.overrides), c.what) for c in configurations]
        torch.set_num_threads(1)  # a tiny model gains nothing from more on a shared CPU
    else:
        source = args.data_dir.resolve()
    data_dir = dev_subset_dir(source, work / "data", args.dev_limit)
    settings = {
        "seed": args.seed,
        "snapshots": args.snapshots,
        "steps_per_snapshot": args.steps_per_snapshot,
        "warmup": args.warmup,
        "threads": args.threads,
        "data_dir": str(data_dir),
        "work": str(work),
        "extra": extra,
    }
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    info = {
        "command": command,
        "base_config": str(QUICKSTART.relative_to(REPO)),
        "configurations": [asdict(c) for c in configurations],
        "budget": {
            "snapshots": args.snapshots,
            "steps_per_snapshot": args.steps_per_snapshot,
            "max_steps": args.snapshots * args.steps_per_snapshot,
            "warmup_steps_left_out": args.warmup,
            "seed": args.seed,
            "extra_overrides": extra,
        },
        "dev_sets": f"first {args.dev_limit} rows of each task's dev file (not shuffled; the same for all)",
        "quick": args.quick,
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "torch": torch.__version__,
            "torch_threads": args.threads or torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        },
        "load_avg_start": list(os.getloadavg()),
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
    }
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    for k, config in enumerate(configurations, 1):
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        print(f"[{k}/{len(configurations)}] {config.name}: {' '.join(config.overrides)}", flush=True)
        if args.quick:
            try:
                result = measure(config, settings)
            except Exception as err:  # noqa: BLE001 - one failed configuration must not lose the others
                result = {"status": f"failed: {type(err).__name__}: {err}"[:300]}
        else:
            (work / "logs").mkdir(exist_ok=True)
            result = measure_in_subprocess(config, settings, work / "logs" / f"{config.name}.log")
        mine = rows_of(config, result, time.perf_counter() - t0, load, "process" if args.quick else "run")
        rows += mine
        last = mine[-1]
        print(
            f"    stored {last['stored_params'] or 0:,}  step {last['step_ms']} ms  rss {last['peak_rss_mib']} MiB"
            f"  overall {last['overall']}  {last['wall_s']} s  {last['status']}",
            flush=True,
        )
        write_csv(out / "survey.csv", rows)
        info.update(wall_s=round(time.perf_counter() - start, 1), load_avg_end=list(os.getloadavg()))
        (out / "survey.json").write_text(json.dumps(info, indent=2) + "\n")
    try:
        plot_survey(out / "survey.csv", out)
    except ImportError as err:  # matplotlib/pandas are the notebook extra's
        print(f"no figures ({err})")
    print(f"wrote {out / 'survey.csv'}, {out / 'survey.json'} in {time.perf_counter() - start:.0f} s")
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

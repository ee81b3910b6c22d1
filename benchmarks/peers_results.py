"""What ``benchmarks/peers.py`` makes of its runs: the learning rate chosen per system on the dev
sets, the per-system summary and the paired differences of ``pal_pals`` against each peer, the CSV and
JSON files (and ``--resume`` reading them back), the Markdown table, and the figure of score against
stored parameters (``notebooks/peers.ipynb``). Kept apart from the runners: a results file is read,
summarised and drawn without any training code.
"""

# no "from __future__ import annotations" (see peers.py): PlotPoint is a dataclass, which must read its
# annotations also when this module is loaded by path, without a sys.modules entry
import csv
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/*.py, also when loaded by path
from paired_stats import mean_std, paired_difference  # noqa: E402
from peers_budget import COLUMNS, SYSTEMS, TASK_SCORE, TASKS, overall  # noqa: E402
from reproduce import _fmt  # noqa: E402

# ---------------------------------------------------------------------------------------- summary


def choose_rates(rows: Sequence[dict[str, Any]], system: str) -> dict[str, float]:
    """The best ``--lrs`` value of a system per score column, by the mean over seeds on dev: one value
    for every task of a multi-task system (by overall), one per task for a one-model-per-task system.

    Only the *search seeds* vote: those at which the system ran every rate it ran at all. With
    ``--search-seeds K`` the later seeds run only the chosen rates, and letting them vote would favour
    the chosen rates by their extra seeds (a mean over 3 seeds against one over 1)."""
    ok = [r for r in rows if r["system"] == system and r["status"] == "ok"]
    scales = sorted({r["lr_scale"] for r in ok})
    if not scales:
        return {}
    search = {
        s for s in {r["seed"] for r in ok} if {r["lr_scale"] for r in ok if r["seed"] == s} == set(scales)
    }
    mine = [r for r in ok if r["seed"] in search] or ok

    def mean(column: str, scale: float) -> float:
        values = [r[column] for r in mine if r["lr_scale"] == scale and r[column] is not None]
        return sum(values) / len(values) if values else float("-inf")

    columns = [TASK_SCORE[t][1] for t in TASKS]
    if SYSTEMS[system]:
        return {c: max(scales, key=lambda s, c=c: mean(c, s)) for c in columns}
    best = max(scales, key=lambda s: mean("overall", s))
    return dict.fromkeys(columns, best)


def selected_scores(rows: Sequence[dict[str, Any]], system: str) -> dict[int, dict[str, float]]:
    """Per seed, the system's three scores at its chosen rates and their overall (complete seeds only)."""
    rates = choose_rates(rows, system)
    out: dict[int, dict[str, float]] = {}
    for seed in sorted({r["seed"] for r in rows if r["system"] == system}):
        scores = {}
        for column, scale in rates.items():
            match = [
                r for r in rows if r["system"] == system and r["seed"] == seed and r["lr_scale"] == scale
            ]
            if match and match[0][column] is not None:
                scores[column] = match[0][column]
        if len(scores) == len(TASKS):
            scores["overall"] = overall(scores)
            out[seed] = scores
    return out


def summarize(rows: Sequence[dict[str, Any]], systems: Sequence[str]) -> dict[str, Any]:
    """Per system: chosen rates, mean and sd of each score over seeds, and mean costs; and the paired
    difference of ``pal_pals`` minus each other system over the seeds both have."""
    summary: dict[str, Any] = {"systems": {}, "pal_pals_minus": {}}
    for system in systems:
        per_seed = selected_scores(rows, system)
        mine = [r for r in rows if r["system"] == system and r["status"] == "ok"]
        entry: dict[str, Any] = {"rates": choose_rates(rows, system), "seeds": sorted(per_seed)}
        for column in [*(TASK_SCORE[t][1] for t in TASKS), "overall"]:
            values = [s[column] for s in per_seed.values()]
            if values:
                m, sd = mean_std(values)
                entry[column] = {"mean": m, "sd": sd, "n": len(values)}
        for column in (
            "params_stored",
            "params_per_task",
            "adapter_per_task",
            "ms_per_example",
            "peak_rss_mb",
        ):
            values = [r[column] for r in mine if r[column] is not None]
            entry[column] = sum(values) / len(values) if values else None
        summary["systems"][system] = entry
    pals = selected_scores(rows, "pal_pals")
    for system in systems:
        other = selected_scores(rows, system)
        common = sorted(set(pals) & set(other))
        if system == "pal_pals" or not common:
            continue
        d = paired_difference([pals[s]["overall"] for s in common], [other[s]["overall"] for s in common])
        summary["pal_pals_minus"][system] = {
            "n": d.n, "mean": d.mean, "low": d.low, "high": d.high, "verdict": d.verdict
        }  # fmt: skip
    return summary


#: settings that must be equal for runs of two calls to be compared (the budget without its local paths)
RESUME_KEYS = ("encoder", "budget", "pal_adapter_per_task", "quick", "qqp_dev_limit", "dev_limit")


def differing_settings(before: dict[str, Any], settings: dict[str, Any]) -> list[str]:
    """The :data:`RESUME_KEYS` on which two results files' settings differ (the budget compared without
    its encoder path, which names the same weights differently on each machine)."""

    def key(s: dict[str, Any], k: str) -> Any:
        return {x: y for x, y in s[k].items() if x != "encoder"} if k == "budget" else s.get(k)

    return [k for k in RESUME_KEYS if key(before, k) != key(settings, k)]


def join_settings(settings: dict[str, Any], before: dict[str, Any]) -> None:
    """``settings`` takes the union of both files' systems, seeds and rates (and their base rates)."""
    settings["systems"] = list(dict.fromkeys([*before["systems"], *settings["systems"]]))
    settings["seeds"] = sorted({*before["seeds"], *settings["seeds"]})
    settings["lr_multipliers"] = sorted({*before["lr_multipliers"], *settings["lr_multipliers"]})
    settings["base_lr"] = {**before["base_lr"], **settings["base_lr"]}


def join_comparable(settings: dict[str, Any], before: dict[str, Any], source: str, fix: str) -> None:
    """:func:`join_settings` when ``before`` measured what ``settings`` measures, else a
    :class:`ValueError` naming ``source``, the settings that differ and ``fix``."""
    differ = differing_settings(before, settings)
    if differ:
        raise ValueError(f"{source} was measured with other {', '.join(differ)}; {fix}")
    join_settings(settings, before)


def read_record(record: Path, option: str) -> dict[str, Any]:
    """A results JSON written by ``peers.py`` (its ``settings`` and ``runs``), else a :class:`ValueError`
    that names ``record`` and ``option``: another JSON, or a truncated one, is not read as a comparison."""
    try:
        payload = json.loads(record.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(
            f"{option}: {record} is not readable JSON ({err}); name results files written by peers.py"
        ) from None
    if (
        not isinstance(payload, dict)
        or not isinstance(payload.get("settings"), dict)
        or not isinstance(payload.get("runs"), list)
    ):
        raise ValueError(
            f"{option}: {record} holds no 'settings' and 'runs'; name results files written by peers.py"
        )
    return payload


def resumed_rows(out: Path, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """``--resume``: the finished runs (status ``ok``) recorded in ``out``'s JSON by an earlier call, which
    must have measured what this one measures (:data:`RESUME_KEYS`); ``settings`` gets the union of both
    calls' systems, seeds and rates. Raises :class:`ValueError` naming the settings that differ."""
    record = out.with_suffix(".json")
    if not record.is_file():
        return []
    earlier = read_record(record, "--resume")
    fix = "run with that file's options (its 'settings') or write to another --out"
    join_comparable(settings, earlier["settings"], f"--resume: {record}", fix)
    return [row for row in earlier["runs"] if row["status"] == "ok"]


#: what must agree when two files hold the same (seed, system, rate): the scores and where they ran
SAME_RUN = ("sst_acc", "qqp_acc", "sts_pearson", "params_stored", "device")


def merge_results(paths: Sequence[Path]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``--merge``: the union of the finished runs of several results files (parts of one comparison run
    on different machines or sessions, each by ``--resume`` from a common file), with the first file's
    settings joined to the others'. A run present in several files must be the same run there
    (:data:`SAME_RUN`): a comparison is never silently mixed from two measurements of one triple.
    Raises :class:`ValueError` naming the file and what differs."""
    records = []
    for path in paths:
        record = path.with_suffix(".json")
        if not record.is_file():
            raise ValueError(f"--merge: {record} not found; name results files written by peers.py")
        records.append((record, read_record(record, "--merge")))
    first, settings = records[0][0], dict(records[0][1]["settings"])
    runs: dict[tuple[int, str, float], tuple[Path, dict[str, Any]]] = {}
    for record, payload in records:
        fix = f"merge only parts of one comparison (as {first})"
        join_comparable(settings, payload["settings"], f"--merge: {record}", fix)
        for row in payload["runs"]:
            if row["status"] != "ok":
                continue
            key = (row["seed"], row["system"], row["lr_scale"])
            if key in runs and any(runs[key][1].get(c) != row.get(c) for c in SAME_RUN):
                raise ValueError(
                    f"--merge: {row['system']} lr x{row['lr_scale']:g} seed {row['seed']} differs between "
                    f"{runs[key][0]} and {record}; keep one of the two measurements (drop it from a file)"
                )
            runs.setdefault(key, (record, row))
    settings["merged_from"] = [
        {
            "file": str(record),
            "command": payload["settings"]["command"],
            "machine": payload["settings"]["machine"],
        }
        for record, payload in records
    ]
    return [row for _, row in runs.values()], settings


def write_outputs(out: Path, rows: Sequence[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    """``out`` (CSV, every run) and ``out.with_suffix('.json')`` (settings, runs, summary)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if row.get(k) is None else row[k] for k in COLUMNS})
    summary = summarize(rows, settings["systems"])
    payload = {"settings": settings, "summary": summary, "runs": list(rows)}
    out.with_suffix(".json").write_text(json.dumps(payload, indent=2) + "\n")
    return summary


def summary_table(summary: dict[str, Any]) -> str:
    """The summary as a Markdown table (mean over seeds at the chosen rates)."""

    def cell(entry: dict[str, Any], column: str) -> str:
        value = entry.get(column)
        if not value:
            return ""
        sd = f" ± {value['sd']:.3f}" if value.get("sd") is not None else ""
        return f"{value['mean']:.3f}{sd}"

    lines = [
        "| system | seeds | SST acc | Quora acc | STS r | overall | stored params | per task | ms/example | peak RSS |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for system, e in summary["systems"].items():
        stored, per_task = _fmt(e.get("params_stored"), "params"), _fmt(e.get("params_per_task"), "params")
        ms = f"{e['ms_per_example']:.1f}" if e.get("ms_per_example") else ""
        rss = f"{e['peak_rss_mb']:.0f} MiB" if e.get("peak_rss_mb") else ""
        lines.append(
            f"| {system} | {len(e['seeds'])} | {cell(e, 'sst_acc')} | {cell(e, 'qqp_acc')} | "
            f"{cell(e, 'sts_pearson')} | {cell(e, 'overall')} | {stored} | {per_task} | {ms} | {rss} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- figure

#: Columns of the results CSV read back as integers, and as floats (the rest stay text; blanks None).
INT_COLUMNS = (
    "seed",
    "params_stored",
    "params_per_task",
    "adapter_per_task",
    "lora_rank",
    "examples_per_task",
)
FLOAT_COLUMNS = (
    "lr_scale", "sst_acc", "qqp_acc", "sts_pearson", "overall", "train_s", "ms_per_example", "peak_rss_mb"
)  # fmt: skip


def read_results(csv_path: Path) -> list[dict[str, Any]]:
    """The rows of a results CSV written by :func:`write_outputs`, numbers as numbers, blanks as ``None``
    (what :func:`summarize` and :func:`selected_scores` take)."""

    def value(column: str, text: str) -> Any:
        if text == "":
            return None
        if column in INT_COLUMNS:
            return int(float(text))
        return float(text) if column in FLOAT_COLUMNS else text

    with Path(csv_path).open(newline="") as f:
        return [{k: value(k, v) for k, v in row.items()} for row in csv.DictReader(f)]


@dataclass(frozen=True)
class PlotPoint:
    """One system in the score-against-stored-parameters figure."""

    system: str
    """The system's name (``SYSTEMS``)."""
    params_stored: float
    """Parameters stored to serve the three tasks (the mean over its runs; the same in every run)."""
    mean: float
    """Mean CS224N overall over the seeds, each seed at the system's chosen rates."""
    low: float
    """Lowest seed's overall (the bottom of the spread bar)."""
    high: float
    """Highest seed's overall (the top of the spread bar)."""
    seeds: int
    """Seeds with all three scores."""


def plot_points(rows: Sequence[dict[str, Any]]) -> list[PlotPoint]:
    """One point per system that has a complete seed, in the rows' order: its stored parameters and the
    mean, lowest and highest overall over seeds at its chosen rates (:func:`selected_scores`, the
    summary's choice, so the figure shows what the summary table shows)."""
    points = []
    for system in dict.fromkeys(r["system"] for r in rows):
        per_seed = [s["overall"] for s in selected_scores(rows, system).values()]
        stored = [
            r["params_stored"] for r in rows if r["system"] == system and r["params_stored"] is not None
        ]
        if per_seed and stored:
            mean, _ = mean_std(per_seed)
            points.append(
                PlotPoint(
                    system, sum(stored) / len(stored), mean, min(per_seed), max(per_seed), len(per_seed)
                )
            )
    return points


def describe_run(settings: dict[str, Any]) -> str:
    """One line saying what a results file measured, and whether it is the issue's comparison (at least
    3 seeds, 3 learning rates, whole dev sets, the real encoder) or a smoke run."""
    seeds, lrs = len(settings["seeds"]), len(settings["lr_multipliers"])
    dev = f"first {settings['dev_limit']} dev rows" if settings.get("dev_limit") else "whole dev sets"
    line = (
        f"{seeds} seed{'s' * (seeds != 1)}, {settings['budget']['examples_per_task']} examples per task, "
        f"{lrs} learning rate{'s' * (lrs != 1)}, {dev}"
    )
    comparison = seeds >= 3 and lrs >= 3 and not settings.get("dev_limit") and not settings.get("quick")
    return line + ("" if comparison else ": a smoke run, not the comparison")


def label_positions(
    x: Sequence[float], y: Sequence[float], gap: float = 0.045, near: float = 1.3
) -> list[tuple[float, float]]:
    """Where the points' labels go. Systems often store nearly the same parameters, and labels beside
    their points would print over each other and over the neighbours' points. So points whose x lie
    within a factor ``near`` of each other (chained) form a group, whose labels stand in one column just
    right of the group's rightmost point, from the highest point down, each at its point's height unless
    the label above is closer than ``gap`` of the y range (then just below that label)."""
    span = (max(y) - min(y)) or 1.0
    order = sorted(range(len(x)), key=lambda k: x[k])
    groups: list[list[int]] = []
    for k in order:
        if groups and x[k] / x[groups[-1][-1]] < near:
            groups[-1].append(k)
        else:
            groups.append([k])
    out: list[tuple[float, float]] = [(0.0, 0.0)] * len(x)
    for group in groups:
        column = max(x[k] for k in group) * 1.03
        last = float("inf")
        for k in sorted(group, key=lambda k: -y[k]):
            height = min(y[k], last - gap * span)
            out[k] = (column, height)
            last = height
    return out


def plot_peers(csv_path: Path, out: Path | None = None) -> Any:
    """Overall dev score against stored parameters (log scale), one labelled point per system: the mean
    over seeds, with a bar from the lowest to the highest seed. The title says what was run (from the
    JSON beside the CSV, when there is one). Saved to ``out`` (PNG) when given; returns the figure."""
    import matplotlib.pyplot as plt

    points = plot_points(read_results(csv_path))
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    x = [p.params_stored / 1e6 for p in points]
    y = [p.mean for p in points]
    ax.errorbar(
        x, y, yerr=[[p.mean - p.low for p in points], [p.high - p.mean for p in points]],
        fmt="none", ecolor="grey", capsize=3,
    )  # fmt: skip
    ax.scatter(x, y, zorder=3)
    most = max((p.seeds for p in points), default=0)
    for p, xi, (label_x, label_y) in zip(points, x, label_positions(x, y), strict=True):
        # a system with fewer seeds than the others says so: its point is one run, not a mean
        label = p.system if p.seeds == most else f"{p.system} ({p.seeds} seed{'s' * (p.seeds != 1)})"
        moved = label_y != p.mean or label_x > xi * 1.03
        ax.annotate(
            label, (xi, p.mean), xytext=(label_x, label_y), fontsize=8, va="center",
            arrowprops={"arrowstyle": "-", "color": "grey", "lw": 0.5} if moved else None,
        )  # fmt: skip
    ax.set_xscale("log")
    ax.margins(x=0.12)  # room for the rightmost label
    # plain numbers on the log axis (22.6, not 2.26 x 10^1): the systems span one decade at most
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.tick_params(axis="x", which="minor", labelsize=7)
    ax.set_xlabel("parameters stored to serve SST, Quora and STS (millions, log scale)")
    ax.set_ylabel("CS224N overall dev score (mean over seeds)")
    settings_path = Path(csv_path).with_suffix(".json")
    title = "score against stored parameters, one point per system"
    if settings_path.is_file():
        title += "\n" + describe_run(json.loads(settings_path.read_text())["settings"])
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110, bbox_inches="tight")
    return fig

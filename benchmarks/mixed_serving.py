"""Benchmark: serving a mixed stream of sst, qqp and sts requests in mixed batches vs per-task batches.

A server receives requests of the three quickstart tasks interleaved, and serves them in windows of
``batch`` requests as they arrive. Two ways to serve a window:

* **mixed**: one ``module.predict([(task, text), ...], batch_size=batch)`` call, one encoder pass for the
  window whatever its tasks (per-example task routing, :mod:`pal_lightning.module.inference`);
* **per-task**: the window grouped by task, one ``module.predict(task, texts, batch_size=batch)`` call per
  task present (what a one-task API allows): up to three smaller passes.

The stream is ``--n`` requests (default 768), tasks drawn uniformly at random (seeded) and texts taken in
order from the real dev files (SST sentences, QQP and STS pairs) read by the library's reader. Each batch
size (8, 32, 128) serves the whole stream both ways, ``--reps`` times, the two ways interleaved (their
order alternating per repetition) so that a change of machine load hits both; the medians give
examples per second, and ``mixed / per-task`` the speed-up. The two ways must agree (the maximum absolute
difference of probabilities and scores is reported). Model loading and one warm-up pass are excluded.

Usage::

    PAL_DATA_DIR=/work/shared/data/cs224n-minbert HF_HUB_OFFLINE=1 \\
        python benchmarks/mixed_serving.py [--encoder minilm] [--json benchmarks/results_speed/mixed_serving.json]

The default model is a tiny random encoder (seconds, for a quick look); ``--encoder minilm`` is the
packaged all-MiniLM-L6-v2 with PALs and the quickstart's heads (``pair_encoding: siamese``; untrained
heads: speed does not depend on the weights). The JSON records the 1-minute load average before and
after. Target (issue 30): mixed at least 2x the examples per second of per-task calls at batch 8 on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import time
from pathlib import Path
from typing import Any

TASKS = ("sst", "qqp", "sts")
BATCH_SIZES = (8, 32, 128)
TARGET_RATIO_AT_8 = 2.0
DEFAULT_JSON = Path(__file__).parent / "results_speed" / "mixed_serving.json"
#: The tiny random encoder of the default run (pal_lightning.testing.TINY_BERT's shape).
TINY = "tiny"


def stream(data_dir: Path, n: int, seed: int) -> list[tuple[str, Any]]:
    """``n`` requests ``(task, text or pair)``: tasks drawn at random, texts in order from the dev files."""
    from pal_lightning.data.sources.readers import read_split
    from pal_lightning.tasks.specs import get_task

    pools: dict[str, list[Any]] = {}
    for task in TASKS:
        columns = read_split(get_task(task), "dev", data_dir).texts
        pools[task] = columns[0] if len(columns) == 1 else list(zip(*columns, strict=True))
    rng = random.Random(seed)
    used = dict.fromkeys(TASKS, 0)
    requests = []
    for _ in range(n):
        task = rng.choice(TASKS)
        requests.append((task, pools[task][used[task] % len(pools[task])]))
        used[task] += 1
    return requests


def windows(requests: list[tuple[str, Any]], batch: int) -> list[list[tuple[str, Any]]]:
    """The stream cut into windows of ``batch`` requests, in arrival order."""
    return [requests[i : i + batch] for i in range(0, len(requests), batch)]


def serve_mixed(module: Any, requests: list[tuple[str, Any]], batch: int) -> list[Any]:
    """Each window as one mixed ``predict`` call; the outputs (probabilities or score) in stream order."""
    out = []
    for window in windows(requests, batch):
        out += [
            p.score if p.score is not None else p.probabilities
            for p in module.predict(window, batch_size=batch)
        ]
    return out


def serve_per_task(module: Any, requests: list[tuple[str, Any]], batch: int) -> list[Any]:
    """Each window grouped by task, one ``predict(task, texts)`` call per task present; outputs in stream order."""
    out: list[Any] = [None] * len(requests)
    for start, window in zip(range(0, len(requests), batch), windows(requests, batch), strict=True):
        for task in dict.fromkeys(t for t, _ in window):
            at = [i for i, (t, _) in enumerate(window) if t == task]
            result = module.predict(task, [window[i][1] for i in at], batch_size=batch)
            values = result.scores if result.scores is not None else list(result.probabilities)
            for i, value in zip(at, values, strict=True):
                out[start + i] = value
    return out


def max_difference(a: list[Any], b: list[Any]) -> float:
    import numpy as np

    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b, strict=True))


def measure(module: Any, requests: list[tuple[str, Any]], reps: int) -> list[dict[str, Any]]:
    """Per batch size: the median seconds of serving the stream each way, examples/s and the ratio."""
    ways = {"mixed": serve_mixed, "per_task": serve_per_task}
    rows = []
    for batch in BATCH_SIZES:
        outputs = {name: way(module, requests[: 2 * batch], batch) for name, way in ways.items()}  # warm-up
        times: dict[str, list[float]] = {name: [] for name in ways}
        for rep in range(reps):
            for name in list(ways)[:: 1 if rep % 2 == 0 else -1]:  # alternate which way runs first
                start = time.perf_counter()
                outputs[name] = ways[name](module, requests, batch)
                times[name].append(time.perf_counter() - start)
        medians = {name: statistics.median(ts) for name, ts in times.items()}
        rows.append(
            {
                "batch": batch,
                "mixed_s": medians["mixed"],
                "per_task_s": medians["per_task"],
                "mixed_examples_per_s": len(requests) / medians["mixed"],
                "per_task_examples_per_s": len(requests) / medians["per_task"],
                "ratio": medians["per_task"] / medians["mixed"],
                "mixed_s_all": times["mixed"],
                "per_task_s_all": times["per_task"],
                "max_abs_diff": max_difference(outputs["mixed"], outputs["per_task"]),
            }
        )
        r = rows[-1]
        print(
            f"batch {batch:>3}: mixed {r['mixed_examples_per_s']:8.1f} ex/s, per-task "
            f"{r['per_task_examples_per_s']:8.1f} ex/s, ratio {r['ratio']:.2f}x "
            f"(max abs diff {r['max_abs_diff']:.1e})",
            flush=True,
        )
    return rows


def build_module(encoder: str) -> Any:
    """The quickstart's three tasks (siamese pairs) on the packaged MiniLM, or on a tiny random encoder."""
    import torch

    from pal_lightning import DEFAULT_ENCODER, MultiTaskModule
    from pal_lightning.testing import TINY_BERT

    torch.manual_seed(0)
    kwargs: dict[str, Any] = {"pair_encoding": "siamese"}
    if encoder == TINY:
        kwargs.update(encoder_config=TINY_BERT, adapter={"size": 8, "num_heads": 2, "init": "random"})
    else:
        kwargs.update(encoder=DEFAULT_ENCODER if encoder == "minilm" else encoder, adapter={"init": "random"})
    return MultiTaskModule(tasks=list(TASKS), **kwargs).eval()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=os.environ.get("PAL_DATA_DIR"), help="default: $PAL_DATA_DIR")
    parser.add_argument(
        "--encoder", default=TINY, help="tiny (random, default), minilm, or a hub id / folder"
    )
    parser.add_argument("--n", type=int, default=768, help="requests in the stream")
    parser.add_argument("--reps", type=int, default=5, help="repetitions of each way (medians)")
    parser.add_argument("--seed", type=int, default=0, help="the stream's task order")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument(
        "--json", type=Path, default=DEFAULT_JSON, help=f"results file (default: {DEFAULT_JSON})"
    )
    args = parser.parse_args(argv)
    if not args.data_dir:
        parser.error("pass --data-dir or set PAL_DATA_DIR")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    module = build_module(args.encoder)
    requests = stream(Path(args.data_dir), args.n, args.seed)
    load_before = os.getloadavg()[0]
    with torch.no_grad():
        rows = measure(module, requests, args.reps)
    at_8 = next(r for r in rows if r["batch"] == 8)
    result = {
        "benchmark": "mixed_serving",
        "encoder": args.encoder,
        "device": "cpu",
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "n": len(requests),
        "tasks_in_stream": {t: sum(1 for task, _ in requests if task == t) for t in TASKS},
        "reps": args.reps,
        "load_avg_1m_before": load_before,
        "load_avg_1m_after": os.getloadavg()[0],
        "results": rows,
        "target_ratio_at_8": TARGET_RATIO_AT_8,
        "target_met": at_8["ratio"] >= TARGET_RATIO_AT_8,
    }
    print(
        f"{args.encoder}: mixed / per-task at batch 8 = {at_8['ratio']:.2f}x (target >= {TARGET_RATIO_AT_8:g}x: "
        f"{'met' if result['target_met'] else 'missed'}); load average {load_before:.2f} -> "
        f"{result['load_avg_1m_after']:.2f}"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()

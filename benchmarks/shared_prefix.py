"""Benchmark: all tasks asked of one input, the layers below the tasks' modules computed once (issue 44, item 3).

A model serves 8 tasks whose per-task modules sit in the top 3 of the encoder's 6 layers. A request asks
all 8 tasks of one text: ``predict([(task, text) for task in tasks])``, the inference core's call
(:func:`pal_lightning.module.inference.predict_items`, as the server makes it). Two ways:

* **once**: the default, the 3 shared lower layers run once for the text and its row branches into 8 at
  layer 3 (``MultiTaskEncoder.shared_prefix``);
* **plain**: ``shared_prefix=False``, 8 separate rows through all 6 layers.

The arithmetic bound: 6 x 8 = 48 row-layers against 3 + 3 x 8 = 27, 1.78x, where the rows branch on layer
3's entry (LoRA, adapters); PALs beside a post-LN layer (MiniLM's) branch at its join norm, so layer 3's
attention and FFN run once too: 48 against 4 + 2 x 8 = 20, 2.4x (the PALs' own work aside). Each of ``--texts`` real SST dev
sentences (or built-in sentences without a data directory) is one request; ``--reps`` rounds serve every
request both ways, interleaved request by request (which way goes first alternating), so that a change of
machine load hits both; the medians over all calls give the times and ``plain / once`` the speed-up. The same
is measured for batches of ``--batch`` texts x 8 tasks in one call. Both ways must agree (the maximum absolute
difference of probabilities is reported; target 1e-5). Model loading and a warm-up are excluded.

Usage::

    PAL_DATA_DIR=/work/shared/data/cs224n-minbert HF_HUB_OFFLINE=1 \\
        python benchmarks/shared_prefix.py [--encoder minilm] [--method pals] [--threads 1]

``--encoder minilm`` (the default) is the packaged all-MiniLM-L6-v2 (the ``offline`` extra), with random
per-task modules and heads (speed does not depend on the weights); ``--quick`` a tiny random 6-layer
encoder and a few calls (seconds: what tests/benchmarks runs). Target: once at least 1.5x faster than plain
for one text x 8 tasks.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

NUM_TASKS = 8
LAYERS, TOP_LAYERS = 6, 3
TARGET_RATIO = 1.5
DEFAULT_JSON = Path(__file__).parent / "results_speed" / "shared_prefix.json"
#: Requests when no data directory is given (and in --quick).
BUILT_IN = [
    "a gripping , beautifully shot film that never lets go",
    "the plot is thin and the jokes fall flat",
    "an honest , moving portrait of a family in crisis , with a score that stays with you",
    "dull",
    "it is neither as funny nor as clever as it thinks it is , but the cast is fun to watch",
    "a small film that does what it sets out to do",
]


def texts_of(data_dir: str | None, n: int) -> list[str]:
    """``n`` SST dev sentences (cleaned as for training) from ``data_dir``, else the built-in ones, cycled."""
    pool = BUILT_IN
    if data_dir:
        from pal_lightning.data.sources.readers import read_split
        from pal_lightning.tasks.specs import get_task

        pool = read_split(get_task("sst"), "dev", Path(data_dir)).texts[0]
    return [pool[i % len(pool)] for i in range(n)]


def build_module(encoder: str, method: str) -> Any:
    """8 classification tasks (2 to 9 classes) with ``method``'s modules in the top 3 of 6 layers."""
    import torch

    from pal_lightning import DEFAULT_ENCODER, MultiTaskModule, TaskSpec
    from pal_lightning.testing import tiny_bert_config

    torch.manual_seed(0)
    tasks = [TaskSpec(name=f"task{i}", num_labels=2 + i) for i in range(NUM_TASKS)]
    adapter: dict[str, Any] = {"method": method, "num_layers": TOP_LAYERS, "placement": "top"}
    if method == "pals":
        adapter["init"] = "random"  # a zero start would make every task's module the identity
    if encoder == "tiny":
        source: dict[str, Any] = {"encoder_config": tiny_bert_config(layers=LAYERS)}
        adapter.update({"size": 8, "num_heads": 2} if method == "pals" else {})
    else:
        source = {"encoder": DEFAULT_ENCODER if encoder == "minilm" else encoder}
    module = MultiTaskModule(tasks=tasks, adapter=adapter, **source).eval()
    layers = int(module.encoder.num_layers)
    if layers != LAYERS:
        raise SystemExit(f"{encoder} has {layers} layers; this benchmark places modules in the top 3 of 6")
    return module


def requests(module: Any, texts: Sequence[str], per_call: int) -> list[list[tuple[str, str]]]:
    """Calls of ``per_call`` texts, each text asked of every task."""
    tasks = list(module.task_specs)
    return [
        [(task, text) for text in texts[i : i + per_call] for task in tasks]
        for i in range(0, len(texts) - per_call + 1, per_call)
    ]


def measure(module: Any, calls: list[list[tuple[str, str]]], reps: int) -> dict[str, Any]:
    """Each call both ways, ``reps`` rounds, interleaved: median seconds per call, the ratio, the largest
    difference of probabilities."""
    import numpy as np

    from pal_lightning.module.inference import predict_items

    ways: dict[str, Callable[[list[tuple[str, str]]], Any]] = {
        "once": lambda items: predict_items(module, items, batch_size=len(items)),
        "plain": lambda items: predict_items(module, items, batch_size=len(items), shared_prefix=False),
    }
    diff = 0.0
    for items in calls[:2]:  # warm-up, and the check that both ways agree
        once, plain = ways["once"](items), ways["plain"](items)
        for a, b in zip(once, plain, strict=True):
            diff = max(diff, float(np.max(np.abs(a.probabilities - b.probabilities))))
    times: dict[str, list[float]] = {name: [] for name in ways}
    turn = 0
    for _ in range(reps):
        for items in calls:
            for name in list(ways)[:: 1 if turn % 2 == 0 else -1]:  # alternate which way runs first
                start = time.perf_counter()
                ways[name](items)
                times[name].append(time.perf_counter() - start)
            turn += 1
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    paired = [p / o for o, p in zip(times["once"], times["plain"], strict=True)]
    return {
        "texts_per_call": len(calls[0]) // len(module.task_specs),
        "rows_per_call": len(calls[0]),
        "calls": len(times["once"]),
        "once_ms": 1e3 * medians["once"],
        "plain_ms": 1e3 * medians["plain"],
        "ratio": medians["plain"] / medians["once"],
        "paired_ratio_median": statistics.median(paired),
        "paired_ratio_q1_q3": [float(q) for q in np.quantile(paired, [0.25, 0.75])],
        "max_abs_diff": diff,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data-dir", default=os.environ.get("PAL_DATA_DIR"), help="default: $PAL_DATA_DIR")
    parser.add_argument(
        "--encoder", default="minilm", help="minilm (default), tiny, or a 6-layer hub id / folder"
    )
    parser.add_argument("--method", default="pals", help="the per-task method (default pals)")
    parser.add_argument("--texts", type=int, default=32, help="texts (requests of one text) per round")
    parser.add_argument("--batch", type=int, nargs="*", default=[4, 16], help="texts per call, batched")
    parser.add_argument("--reps", type=int, default=5, help="rounds over the texts (medians)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--quick", action="store_true", help="a tiny random encoder, few calls")
    parser.add_argument("--json", type=Path, default=None, help=f"results file (default: {DEFAULT_JSON})")
    args = parser.parse_args(argv)
    if args.quick:
        args.encoder, args.texts, args.batch, args.reps, args.data_dir = "tiny", 4, [2], 2, None
        # a tiny model gains nothing from a thread pool, and on a busy machine it loses much
        args.threads = args.threads or 1
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from pal_lightning.modeling.families.prefix import join_norm

    if args.threads:
        torch.set_num_threads(args.threads)
    module = build_module(args.encoder, args.method)
    if max(args.batch, default=1) > args.texts:
        parser.error(f"--batch {max(args.batch)} exceeds --texts {args.texts}")
    texts = texts_of(args.data_dir, args.texts)
    load_before = os.getloadavg()[0]
    with torch.no_grad():
        rows = [
            measure(module, requests(module, texts, per_call), args.reps) for per_call in (1, *args.batch)
        ]
    for r in rows:
        print(
            f"{r['texts_per_call']:>3} text(s) x {NUM_TASKS} tasks: once {r['once_ms']:7.2f} ms, plain "
            f"{r['plain_ms']:7.2f} ms, plain / once {r['ratio']:.2f}x (paired median {r['paired_ratio_median']:.2f}x; "
            f"max abs diff {r['max_abs_diff']:.1e})",
            flush=True,
        )
    one = rows[0]
    bound = LAYERS * NUM_TASKS / (TOP_LAYERS * NUM_TASKS + LAYERS - TOP_LAYERS)
    bound_at_join = LAYERS * NUM_TASKS / ((TOP_LAYERS - 1) * NUM_TASKS + LAYERS - TOP_LAYERS + 1)
    joined = join_norm(module.encoder, LAYERS - TOP_LAYERS) is not None
    result = {
        "benchmark": "shared_prefix",
        "encoder": args.encoder,
        "method": args.method,
        "modules_in_layers": f"top {TOP_LAYERS} of {LAYERS}",
        "tasks": NUM_TASKS,
        "texts": "sst dev" if args.data_dir else "built-in",
        "device": "cpu",
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "reps": args.reps,
        "load_avg_1m_before": load_before,
        "load_avg_1m_after": os.getloadavg()[0],
        "arithmetic_bound": bound,
        "arithmetic_bound_at_join": bound_at_join,
        "branch": "join norm of layer 3" if joined else "entry of layer 3",
        "results": rows,
        "target_ratio": TARGET_RATIO,
        "target_met": one["ratio"] >= TARGET_RATIO,
    }
    print(
        f"{args.encoder} ({args.method}): one text x {NUM_TASKS} tasks, plain / once = {one['ratio']:.2f}x "
        f"(target >= {TARGET_RATIO:g}x: {'met' if result['target_met'] else 'missed'}; rows branch at the "
        f"{result['branch']}, bound {bound_at_join if joined else bound:.2f}x); load average {load_before:.2f} -> {result['load_avg_1m_after']:.2f}"
    )
    path = args.json or DEFAULT_JSON
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()

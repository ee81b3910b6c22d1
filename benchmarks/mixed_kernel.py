"""Benchmark: a mixed-task batch's per-task modules looped over the tasks vs run at once (issue 44, item 2).

In a mixed batch (rows of several tasks, ``MultiTaskEncoder.forward(..., tasks=...)``) the rows are sorted
by task once; then, in every layer, either the hooks loop over the tasks present, each task's module on
its slice of rows (``mixed_rows = "loop"``; the CPU's default, ``"auto"``), or the method's ``batch_rows``
module runs them at once: each Linear one ``baddbmm`` over the rows with each row's task's weights
gathered (Punica's and S-LoRA's idea; ``mixed_rows = "gather"``, the default off the CPU). This times the
eval forward of one batch three ways, side by side in one process:

* **one**: all ``B`` rows of one task (the single-task path: the floor, no routing);
* **loop**: the same rows spread over ``--tasks`` tasks (seeded uniform draws), the hooks' loop;
* **gather**: the same mixed rows, every present task's module at once.

``loop / one`` is what the loop over the tasks costs, ``gather / one`` what is left of it, ``loop /
gather`` the gain. The sides run interleaved (their order reversed every other repetition) so that a
change of machine load hits them all; medians of ``--reps``. Each side's ATen operator count per forward
(``op_count.py``'s counter) is recorded: on a GPU the step of a small batch follows it. The largest
absolute difference between loop and batched outputs is reported (the two must agree).

Usage::

    HF_HUB_OFFLINE=1 python benchmarks/mixed_kernel.py [--methods pals,lora,pfeiffer] [--batches 8,32,64]
    python benchmarks/mixed_kernel.py --quick --json /tmp/mk.json     # tiny random BERT (the test's run)

The default encoder is the packaged all-MiniLM-L6-v2 (``offline`` extra) with new random task modules
(``init: random``: speed does not depend on the weights); rows are random token ids of lengths drawn
between ``--length / 2`` and ``--length``, padded to ``--length``. The JSON
(``benchmarks/results_speed/mixed_kernel.json`` by default) records the 1-minute load average before and
after: on a shared machine the figures move with it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from op_count import OperatorCount  # noqa: E402

from pal_lightning.modeling import MultiTaskEncoder  # noqa: E402

DEFAULT_JSON = Path(__file__).parent / "results_speed" / "mixed_kernel.json"
SIDES = ("one", "loop", "gather")
#: Small options for the tiny random encoder of ``--quick`` (pal_lightning.testing.TINY_BERT's shape).
TINY_OPTIONS = {"pals": {"size": 8, "num_heads": 2}}


def build(encoder: str, method: str, tasks: int) -> MultiTaskEncoder:
    """``tasks`` tasks with new random ``method`` modules on the packaged MiniLM, or on a tiny random BERT."""
    from pal_lightning import DEFAULT_ENCODER
    from pal_lightning.testing import TINY_BERT

    torch.manual_seed(0)
    names = [f"task{i}" for i in range(tasks)]
    if encoder == "tiny":
        options = TINY_OPTIONS.get(method, {})
        return MultiTaskEncoder.from_config(TINY_BERT, names, method, init="random", **options).eval()
    name = DEFAULT_ENCODER if encoder == "minilm" else encoder
    return MultiTaskEncoder.from_pretrained(name, names, method, init="random").eval()


def batch(rows: int, length: int, tasks: int, seed: int) -> dict[str, torch.Tensor]:
    """``rows`` random token sequences padded to ``length`` and each row's task (uniform draws)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, 20000, (rows, length), generator=gen)
    lengths = torch.randint(max(1, length // 2), length + 1, (rows,), generator=gen)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "mixed": torch.randint(0, tasks, (rows,), generator=gen),
    }


def forward(model: MultiTaskEncoder, inputs: dict[str, torch.Tensor], side: str) -> torch.Tensor:
    """One eval forward of ``side``: all rows of task 0, or the mixed rows looped or gathered."""
    model.mixed_rows = "gather" if side == "gather" else "loop"
    tasks = torch.zeros_like(inputs["mixed"]) if side == "one" else inputs["mixed"]
    return model(inputs["input_ids"], inputs["attention_mask"], tasks=tasks)


def operators(model: MultiTaskEncoder, inputs: dict[str, torch.Tensor], side: str) -> int:
    """ATen operators one forward of ``side`` dispatches."""
    with OperatorCount() as counter:
        forward(model, inputs, side)
    return counter.count


def summarize(times: dict[str, list[float]]) -> dict[str, Any]:
    """Median seconds per side and the ratios of medians ``loop/one``, ``gather/one``, ``loop/gather``."""
    median = {side: statistics.median(ts) for side, ts in times.items()}
    return {
        "median_s": median,
        "loop/one": median["loop"] / median["one"],
        "gather/one": median["gather"] / median["one"],
        "loop/gather": median["loop"] / median["gather"],
    }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":  # kernels run asynchronously: time them to their end
        torch.cuda.synchronize(device)


def measure(model: MultiTaskEncoder, inputs: dict[str, torch.Tensor], reps: int) -> dict[str, Any]:
    """One batch's three sides, interleaved, ``reps`` times after a warm-up; summary, ops and agreement."""
    device = inputs["input_ids"].device
    outputs = {side: forward(model, inputs, side) for side in SIDES}  # warm-up
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    for rep in range(reps):
        for side in SIDES[:: 1 if rep % 2 == 0 else -1]:
            _sync(device)
            start = time.perf_counter()
            forward(model, inputs, side)
            _sync(device)
            times[side].append(time.perf_counter() - start)
    model.mixed_rows = "auto"  # the default again
    return {
        **summarize(times),
        "all_s": times,
        "operators": {side: operators(model, inputs, side) for side in SIDES},
        "tasks_present": int(inputs["mixed"].unique().numel()),
        "max_abs_diff_loop_gather": float((outputs["loop"] - outputs["gather"]).abs().max()),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoder", default="minilm", help="minilm (default), tiny, or a hub id / folder")
    parser.add_argument("--methods", default="pals,lora,pfeiffer", help="comma-separated methods")
    parser.add_argument("--batches", default="8,32,64", help="comma-separated batch sizes B")
    parser.add_argument("--length", type=int, default=32, help="padded length (rows from half of it)")
    parser.add_argument("--tasks", type=int, default=8, help="tasks of the mixed rows")
    parser.add_argument("--reps", type=int, default=7, help="repetitions of each side (medians)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]: where the model runs")
    parser.add_argument("--quick", action="store_true", help="tiny random BERT, B = 4, 8; 2 repetitions")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"results (default: {DEFAULT_JSON})")
    args = parser.parse_args(argv)
    if args.quick:
        args.encoder, args.batches, args.reps = "tiny", "4,8", 2
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    load_before = os.getloadavg()[0]
    rows: list[dict[str, Any]] = []
    for method in args.methods.split(","):
        model = build(args.encoder, method, args.tasks).to(device)
        for b in map(int, args.batches.split(",")):
            inputs = {k: v.to(device) for k, v in batch(b, args.length, args.tasks, b).items()}
            with torch.no_grad():
                row = {"method": method, "batch": b, **measure(model, inputs, args.reps)}
            rows.append(row)
            ms = {side: 1e3 * s for side, s in row["median_s"].items()}
            ops = row["operators"]
            print(
                f"{method:>9} B={b:<3} "
                + "  ".join(f"{side} {ms[side]:7.1f} ms" for side in SIDES)
                + " | "
                + "  ".join(f"{k} {v:.2f}" for k, v in row.items() if "/" in k)
                + f" | ops {'/'.join(str(ops[side]) for side in SIDES)}  diff {row['max_abs_diff_loop_gather']:.1e}",
                flush=True,
            )
    result = {
        "benchmark": "mixed_kernel",
        "encoder": args.encoder,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "length": args.length,
        "tasks": args.tasks,
        "reps": args.reps,
        "load_avg_1m_before": load_before,
        "load_avg_1m_after": os.getloadavg()[0],
        "results": rows,
    }
    print(f"load average {load_before:.2f} -> {result['load_avg_1m_after']:.2f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()

"""Where a training step's time goes: ``torch.profiler`` over the rows of ``benchmarks/step_time.py``.

The rows, models, batches and optimizers are ``step_time.py``'s own (:func:`step_time.build`, the same
command-line options), each step split into phases by ``record_function`` labels (``step/forward``,
``step/backward``, ``step/gem``, ``step/optimizer``; inside GEM's, ``gem/memory_gradients``,
``gem/gram``, ``gem/write_back``). After ``--warmup`` untimed steps per row, ``--profile-steps`` steps
of every row are profiled (CPU activity; on a GPU the CPU side only). For each row it writes:

* ``profile_<row>.txt``: torch's table of the top operators by self CPU time;
* in ``profile.json`` and ``profile.md``: the step's wall time under the profiler, the share of each
  phase, and the self CPU time grouped by what the operator is part of (:func:`kind_of`): matmuls,
  attention, layer norm, GELU, dropout, embeddings, loss, gradient accumulation, copies and layout,
  other element-wise work, the optimizer, GEM's dot products and write-back, and Python with
  dispatch between operators (a label's self time); beside it the matmul rate reached (the counted
  matmul FLOPs over the matmuls' time) against the roof, a large matmul timed in the same process.

An operator is grouped by its outermost operator (``aten::dropout`` owns the ``bernoulli_``, ``div_``
and ``mul`` it calls; a backward node owns the kernels it runs), so every microsecond of self time
lands in one group. The profiler adds a few microseconds per operator, so the step is slower under it
than in ``step_time.py``; shares are what to read.

Usage::

    HF_HUB_OFFLINE=1 python benchmarks/profile_step.py --rows shared,pals,gem,agem \\
        --out benchmarks/results_speed/profile_cpu
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # step_time.py and throughput.py beside it
import step_time  # noqa: E402
import torch  # noqa: E402
from throughput import count_flops_by_op, matmul_roof  # noqa: E402
from torch.autograd.profiler_util import FunctionEvent  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

#: Operator-name fragments of each group, tried in order (lower case; backward nodes by their forward name).
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("scaled_dot_product", "softmax", "attention")),
    ("matmul", ("addmm", "bmm", "aten::mm", "mmbackward", "aten::matmul", "aten::linear", "baddbmm")),
    ("layer norm", ("layer_norm", "layernorm")),
    ("gelu", ("gelu",)),
    ("dropout", ("dropout", "bernoulli")),
    ("embedding", ("embedding",)),
    ("loss", ("cross_entropy", "log_softmax", "nll_loss")),
    ("gradient accumulation", ("accumulategrad",)),
    (
        "copies and layout",
        (
            "copy",
            "clone",
            "contiguous",
            "cat",
            "stack",
            "_to_copy",
            "aten::to",
            "reshape",
            "view",
            "permute",
            "transpose",
            "aten::t",
            "expand",
            "unbind",
            "split",
            "select",
            "slice",
            "index",
        ),
    ),
)
#: Phase labels whose every operator counts as that group (whatever the operator is).
PHASE_KINDS = {
    "step/optimizer": "optimizer (AdamW, zero_grad)",
    "gem/gram": "GEM dots and write-back",
    "gem/write_back": "GEM dots and write-back",
}
OVERHEAD = "Python and dispatch between operators"
MATMUL_OPS = ("aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm")


def kind_of(name: str) -> str:
    """The group of an outermost operator or backward node called ``name``."""
    low = name.lower().removeprefix("autograd::engine::evaluate_function: ")
    for kind, fragments in KINDS:
        if any(f in low for f in fragments):
            return kind
    return "other element-wise"


def _is_label(event: FunctionEvent) -> bool:
    return event.name.startswith(("step/", "gem/", "Optimizer."))


def _outer(event: FunctionEvent) -> tuple[FunctionEvent | None, list[str]]:
    """The outermost operator above ``event`` (itself if none) and the labels it runs under."""
    outer: FunctionEvent | None = None
    labels: list[str] = []
    node: FunctionEvent | None = event
    while node is not None:
        if _is_label(node):
            labels.append(node.name)
        else:
            outer = node
        node = node.cpu_parent
    return outer, labels


def group(events: list[FunctionEvent]) -> tuple[dict[str, float], dict[str, float]]:
    """Self CPU microseconds by group and total microseconds by phase label, over ``events``."""
    kinds: dict[str, float] = defaultdict(float)
    phases: dict[str, float] = defaultdict(float)
    for event in events:
        if _is_label(event):
            phases[event.name] += event.cpu_time_total
        outer, labels = _outer(event)
        phase_kind = next((PHASE_KINDS[x] for x in labels if x in PHASE_KINDS), None)
        if phase_kind is not None:
            kinds[phase_kind] += event.self_cpu_time_total
        elif outer is None:  # a label's own time: Python between the operators it encloses
            kinds[OVERHEAD] += event.self_cpu_time_total
        else:
            kinds[kind_of(outer.name)] += event.self_cpu_time_total
    return dict(kinds), dict(phases)


def profile_row(bench: step_time.Bench, name: str, first: int, steps: int) -> tuple[profile, float]:
    """Profile ``steps`` steps of row ``name`` from batch ``first`` on; the profiler and the wall ms per step."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for i in range(first, first + steps):
            bench.step_fn(name, i)()
        wall = (time.perf_counter() - start) * 1000.0 / steps
    return prof, wall


def main(argv: list[str] | None = None) -> dict:
    parser = step_time.parser()
    parser.description = __doc__.split("\n\n")[0]
    parser.add_argument("--profile-steps", type=int, default=2, help="profiled steps per row")
    parser.add_argument("--top", type=int, default=25, help="operators in each row's table")
    parser.add_argument("--out", type=Path, default=Path("profile"), help="folder for the tables")
    args = step_time.parse(argv, parser)
    args.steps = args.profile_steps
    bench = step_time.build(args)
    device, names = bench.device, bench.names
    roof_size = args.roof_size or step_time.ROOF_SIZE.get(device.type, step_time.ROOF_SIZE["cpu"])
    dtype = bench.precisions["pals"].dtype
    roof = matmul_roof(device, dtype, roof_size)
    flops: dict[str, dict[str, int]] = {}
    for i in range(args.warmup):
        for name in names:
            if i == 0:
                _, flops[name] = count_flops_by_op(bench.step_fn(name, i))
            else:
                bench.step_fn(name, i)()
    roof = max(roof, matmul_roof(device, dtype, roof_size))
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict = {"rows": {}}
    for name in names:
        prof, wall_ms = profile_row(bench, name, args.warmup, args.profile_steps)
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top)
        (args.out / f"profile_{name}.txt").write_text(table + "\n")
        kinds, phases = group(list(prof.events()))
        per_step = {k: v / 1000.0 / args.profile_steps for k, v in kinds.items()}  # ms per step
        total = sum(per_step.values())
        matmul_flop = sum(n for op, n in flops[name].items() if op in MATMUL_OPS)
        matmul_ms = per_step.get("matmul", 0.0)
        result["rows"][name] = {
            "wall_ms_profiled": round(wall_ms, 1),
            "self_ms_total": round(total, 1),
            "kinds_ms": {k: round(v, 1) for k, v in sorted(per_step.items(), key=lambda kv: -kv[1])},
            "kinds_share": {
                k: round(v / total, 4) for k, v in sorted(per_step.items(), key=lambda kv: -kv[1])
            },
            "phases_ms": {k: round(v / 1000.0 / args.profile_steps, 1) for k, v in sorted(phases.items())},
            "flop_per_step": sum(flops[name].values()),
            "flop_by_op": flops[name],
            "matmul_flop_per_s": round(matmul_flop / (matmul_ms / 1000.0), 1) if matmul_ms else None,
            "matmul_over_roof": round(matmul_flop / (matmul_ms / 1000.0) / roof, 4) if matmul_ms else None,
            "step_at_roof_ms": round(sum(flops[name].values()) / roof * 1000.0, 1),
        }
    result.update(
        {
            "roof_flop_per_s": round(roof, 1),
            "roof_matmul_size": roof_size,
            "device": f"cpu ({torch.get_num_threads()} threads)" if device.type == "cpu" else str(device),
            "adamw": step_time.optimizer_kind(bench.optimizers["pals"]),
            "shape": args.shape,
            "batch_size": args.batch_size,
            "seq_len": args.seq_len,
            "precision": args.precision,
            "profile_steps": args.profile_steps,
            "torch": torch.__version__,
        }
    )
    (args.out / "profile.json").write_text(json.dumps(result, indent=2) + "\n")
    markdown = _markdown(result)
    (args.out / "profile.md").write_text(markdown)
    print(markdown)
    return result


def _markdown(result: dict) -> str:
    """Two tables: self time by group (ms per step and share) and the phases, one column per row."""
    rows = result["rows"]
    names = list(rows)
    kinds = sorted(
        {k for r in rows.values() for k in r["kinds_ms"]}, key=lambda k: -rows[names[0]]["kinds_ms"].get(k, 0)
    )
    head = "| | " + " | ".join(names) + " |\n| --- |" + " ---: |" * len(names) + "\n"
    lines = [
        f"Profile: {result['device']}, {result['shape']} shape {result['batch_size']} x {result['seq_len']}, "
        f"{result['precision']}, AdamW {result['adamw']}, {result['profile_steps']} profiled steps per row; "
        f"roof {result['roof_flop_per_s'] / 1e9:.1f} GFLOP/s\n",
        "Self CPU time per step by group (ms, share):\n",
        head.rstrip("\n"),
    ]
    for kind in kinds:
        cells = [
            f"{rows[n]['kinds_ms'].get(kind, 0.0):.0f} ({rows[n]['kinds_share'].get(kind, 0.0):.0%})"
            for n in names
        ]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines.append("| total self time | " + " | ".join(f"{rows[n]['self_ms_total']:.0f}" for n in names) + " |")
    lines.append(
        "| wall time under the profiler | "
        + " | ".join(f"{rows[n]['wall_ms_profiled']:.0f}" for n in names)
        + " |"
    )
    lines.append(
        "| step at the roof (FLOPs / roof) | "
        + " | ".join(f"{rows[n]['step_at_roof_ms']:.0f}" for n in names)
        + " |"
    )
    lines.append(
        "| matmul rate / roof | "
        + " | ".join(
            f"{rows[n]['matmul_over_roof']:.0%}" if rows[n]["matmul_over_roof"] else "-" for n in names
        )
        + " |"
    )
    phases = sorted({p for r in rows.values() for p in r["phases_ms"]})
    lines += ["", "Phases (ms per step, the label's total time):", "", head.rstrip("\n")]
    for phase in phases:
        lines.append(
            f"| {phase} | " + " | ".join(f"{rows[n]['phases_ms'].get(phase, 0.0):.0f}" for n in names) + " |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main(sys.argv[1:])

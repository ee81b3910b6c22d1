"""The host's cost of a training step, measured on the CPU: a shape's structure at a negligible width.

On a GPU whose matmuls are fast (bf16 on an H100) a BERT-base step waits for the host to dispatch its
operators one by one (``benchmarks/RESULTS.md``, "GPU figures"). The host's work per operator does not
depend on the tensors' sizes, so the same step at the same *structure* (layers, heads, the PALs, GEM's
passes) but a width and sequence so small that the arithmetic is negligible (width 48, 16 tokens, batch 2
by default) takes the time the host spends per step. That is measurable on any CPU.

Systems (each ``<row>/<precision>/<mode>``), timed interleaved in one process (the order rotates every
repetition; the medians and the median of per-repetition ratios are reported), each beside its
dispatched-operator count (``benchmarks/op_count.py``'s :class:`OperatorCount`, one whole step):

* rows ``shared`` (``adapter="none"``), ``pals``, ``gem`` and ``agem`` (``benchmarks/step_time.py``'s rows
  and step: GEM with 3 tasks, the memories of 2 constraining, ``--memory-batch-size`` remembered examples
  each, 2 by default so that their arithmetic is negligible too; A-GEM one reference gradient; the memories
  of all tasks in one mixed batch, ``one_pass``), ``gem_task_forwards`` and ``agem_task_forwards`` (the same
  with one forward per task, ``one_pass=False``, as before the one pass); all take their flat float64 rows (``flat_rows=True``, A-GEM's embedding rows
  dense: :func:`dense_agem_rows`), the path they take on CUDA;
* precisions ``32-true`` and ``bf16-mixed`` (autocast, as Lightning's plugin);
* modes ``eager`` and ``compiled`` (the encoder through ``torch.compile`` as ``--model.compile true`` calls
  it, :class:`~pal_lightning.module.compile.EncoderCall`; inductor by default, ``--backend``; the compile
  time is reported; shared and PAL rows only; ``--compile-mode reduce-overhead`` as
  ``--model.compile_mode`` sets it: CUDA graphs on a GPU).

``--shape`` names the structure: ``bert-base`` (12 layers, 12 heads) or ``minilm`` (6 layers, 12 heads);
``--width``, ``--seq-len``, ``--batch-size`` the negligible arithmetic; ``--width 768 --seq-len 128
--batch-size 32`` is the real BERT-base step (``benchmarks/gpu_check.sh`` runs that on a GPU).

Usage::

    python benchmarks/host_cost.py --json benchmarks/results_speed/host_cost.json
    python benchmarks/host_cost.py --modes eager --reps 20            # no compilation (minutes less)
    python benchmarks/host_cost.py --shape minilm --rows shared,pals
    python benchmarks/host_cost.py --device cuda --width 768 --seq-len 128 --batch-size 32 --modes eager

Prints one line per system and the ratios (PAL/shared, GEM/PAL, A-GEM/PAL, eager/compiled) in operators
and in time; ``--json`` writes them with every step's time, the load average and the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from op_count import OperatorCount, count_step  # noqa: E402
from step_time import (  # noqa: E402
    GEM_TASKS,
    MEMORY_EXAMPLES,
    TASK,
    _batches,
    _Classifier,
    _MemoryData,
    _MultiTaskClassifier,
    _step,
)
from throughput import Precision  # noqa: E402
from torch import nn  # noqa: E402

from pal_lightning.gem import GEMCallback  # noqa: E402
from pal_lightning.modeling import MultiTaskEncoder  # noqa: E402
from pal_lightning.module.compile import EncoderCall  # noqa: E402
from pal_lightning.module.optim import adamw  # noqa: E402

#: --shape: (layers, attention heads) of the structure
SHAPES = {"bert-base": (12, 12), "minilm": (6, 12)}
ROWS = ("shared", "pals", "gem", "agem", "gem_task_forwards", "agem_task_forwards")
#: the GEM rows: (mode, one_pass) of their callback (``step_time.py``'s rows of the same names)
GEM_ROWS = {
    "gem": ("gem", True),
    "agem": ("agem", True),
    "gem_task_forwards": ("gem", False),
    "agem_task_forwards": ("agem", False),
}
PRECISIONS = ("32-true", "bf16-mixed")
MODES = ("eager", "compiled")
#: rows that run compiled (GEM's memory batches change length every step: a graph per length)
COMPILED_ROWS = ("shared", "pals")
#: the issue's targets on this benchmark, at BERT-base structure
TARGETS = {"pals/shared": 1.10, "gem/pals": 1.6, "agem/pals": 1.3}


class _CompiledEncoder(nn.Module):
    """The encoder called through :class:`EncoderCall` (what ``--model.compile`` does), same parameters."""

    def __init__(self, encoder: MultiTaskEncoder, backend: str, mode: str | None = None) -> None:
        super().__init__()
        self.inner = encoder
        # outside the module tree, as the module keeps it
        self.__dict__["call"] = EncoderCall(encoder, backend, mode=mode)
        self.hidden_size = encoder.hidden_size

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.call(*args, **kwargs)


def encoder_config(shape: str, width: int, seq_len: int, vocab: int) -> dict:
    """A random BERT of ``shape``'s layers and heads at ``width`` (feed-forward 4x, as BERT's)."""
    layers, heads = SHAPES[shape]
    if width % heads:
        raise SystemExit(f"--width {width}: must be a multiple of the {heads} heads of {shape}")
    return {
        "hidden_size": width,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": 4 * width,
        "vocab_size": vocab,
        "max_position_embeddings": max(64, seq_len),
    }


class System:
    """One row in one precision and mode: its model, optimizer, and step on batch ``i``."""

    def __init__(self, row: str, precision: str, mode: str, args: argparse.Namespace, device: torch.device):
        self.row, self.precision, self.mode = row, precision, mode
        self.name = f"{row}/{precision}/{mode}"
        config = encoder_config(args.shape, args.width, args.seq_len, args.vocab)
        torch.manual_seed(args.seed)
        self.callback: GEMCallback | None = None
        model: nn.Module
        if row in GEM_ROWS:
            model = _MultiTaskClassifier(
                MultiTaskEncoder.from_config(config, list(GEM_TASKS), adapter="pals")
            )
            self.callback = GEMCallback(
                memory_size=MEMORY_EXAMPLES,
                memory_batch_size=args.memory_batch_size,
                mode=GEM_ROWS[row][0],
                one_pass=GEM_ROWS[row][1],
                flat_rows=True,  # GEM's path on CUDA, the device whose host cost this predicts
            )
            for task in GEM_TASKS:  # pre-filled memories: every task already trained
                self.callback.task_order.append(task)
                self.callback.memory.add(task, range(MEMORY_EXAMPLES))
        else:
            model = _Classifier(
                MultiTaskEncoder.from_config(config, [TASK], adapter="pals" if row != "shared" else "none")
            )
        if mode == "compiled":
            model.encoder = _CompiledEncoder(model.encoder, args.backend, args.compile_mode)
        self.model = model.to(device).train()
        self.amp = Precision(precision, device)
        self.optimizer = adamw(self.model.parameters(), lr=2e-5)  # the library's AdamW (fused where it can)
        self.device = device
        self.times: list[float] = []
        self.ops = 0
        self.first_step_s = 0.0

    def step(self, batch: tuple, data: _MemoryData, i: int) -> float:
        """One training step (milliseconds), as ``step_time.py`` times it."""
        gem = (self.callback, data, i) if self.callback is not None else None
        return _step(self.model, self.optimizer, batch, self.device, gem, False, self.amp)

    @property
    def fell_back(self) -> bool:
        encoder = getattr(self.model, "encoder", None)
        return isinstance(encoder, _CompiledEncoder) and encoder.call.fell_back


@contextlib.contextmanager
def dense_agem_rows() -> Iterator[None]:
    """Within the block, A-GEM's reference gradient has dense embedding rows, as on CUDA, on any device.

    :func:`pal_lightning.gem.rows.constraint_gradients` asks for sparse embedding rows in one process
    on a CPU (they save a table-sized gradient's arithmetic); on a GPU the row is dense and goes flat, and
    that is the host's cost this benchmark predicts.
    """
    from pal_lightning.gem import rows

    original = rows.memory_gradient  # per task and in one pass
    rows.memory_gradient = lambda *args, **kwargs: original(*args, **{**kwargs, "sparse_embeddings": False})
    try:
        yield
    finally:
        rows.memory_gradient = original


def mode_counts(system: System) -> bool:
    """Whether ``system``'s operators can be counted: not when compiled, since dynamo does not run under
    a dispatch mode (the count would be the eager step's) and inductor's fused kernels are not dispatched."""
    return system.mode != "compiled"


def count_ops(step: Callable[[], float]) -> int:
    """The operators one call of ``step`` dispatches (:class:`op_count.OperatorCount`)."""
    with OperatorCount() as counter:
        step()
    return counter.count


def attribution(systems: dict[str, System], top: int = 12) -> dict[str, dict[str, dict[str, int]]]:
    """Where the PAL step's extra operators go: per precision and phase, the operators whose count differs
    between the eager ``pals`` and ``shared`` steps (:func:`op_count.count_step` by name), largest first,
    ``top`` of them and the rest summed as ``(other)``."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for precision in PRECISIONS:
        pair = [systems.get(f"{row}/{precision}/eager") for row in ("pals", "shared")]
        if pair[0] is None or pair[1] is None:
            continue
        names: list[dict[str, Counter[str]]] = []
        for system in pair:
            by_phase: dict[str, Counter[str]] = {}
            dtype = system.amp.dtype if precision != "32-true" else None
            count_step(system.model, system.optimizer, dtype, names=by_phase)
            names.append(by_phase)
        out[precision] = {}
        for phase in ("forward", "backward", "optimizer"):
            diff = Counter(names[0][phase])
            diff.subtract(names[1][phase])
            ranked = sorted(((k, v) for k, v in diff.items() if v), key=lambda kv: -abs(kv[1]))
            table = dict(ranked[:top])
            if ranked[top:]:
                table["(other)"] = sum(v for _, v in ranked[top:])
            table["(total)"] = sum(diff.values())
            out[precision][phase] = table
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--shape", choices=sorted(SHAPES), default="bert-base", help="the structure (layers, heads)"
    )
    p.add_argument("--width", type=int, default=48, help="hidden size (a multiple of the heads)")
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument(
        "--vocab",
        type=int,
        default=2048,
        help="vocabulary (small: GEM's flat copies and AdamW scale with the parameters, not the host)",
    )
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, from {','.join(ROWS)}")
    p.add_argument("--precisions", default=",".join(PRECISIONS), help="comma-separated: 32-true,bf16-mixed")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated: eager,compiled")
    p.add_argument("--backend", default="inductor", help="torch.compile backend of the compiled mode")
    p.add_argument(
        "--compile-mode",
        default=None,
        help="torch.compile mode of the compiled mode (--model.compile_mode): reduce-overhead records CUDA graphs",
    )
    p.add_argument("--reps", type=int, default=30, help="timed steps per system (interleaved)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per system first")
    p.add_argument(
        "--memory-batch-size",
        type=int,
        default=2,
        help="GEM: examples per constraining task (default 2, the batch: arithmetic negligible there too)",
    )
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: the host's own thread)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None)
    return p


def _systems(args: argparse.Namespace, device: torch.device) -> list[System]:
    rows, precisions, modes = (s.split(",") for s in (args.rows, args.precisions, args.modes))
    for given, known in ((rows, ROWS), (precisions, PRECISIONS), (modes, MODES)):
        if not set(given) <= set(known):
            raise SystemExit(f"unknown {sorted(set(given) - set(known))}: choose from {','.join(known)}")
    return [
        System(row, precision, mode, args, device)
        for mode in modes
        for row in rows
        if mode == "eager" or row in COMPILED_ROWS
        for precision in precisions
    ]


def _ratios(systems: dict[str, System], medians: dict[str, float]) -> dict[str, dict[str, float]]:
    """Every ratio of the issue between systems present: rows against their baseline, eager/compiled."""

    def paired(a: str, b: str) -> float:
        ta, tb = systems[a].times, systems[b].times
        return statistics.median(x / y for x, y in zip(ta, tb, strict=True))

    def entry(num: str, den: str) -> dict[str, float]:
        ops = systems[num].ops / systems[den].ops if systems[num].ops and systems[den].ops else None
        return {
            "ops": round(ops, 4) if ops is not None else None,
            "time": round(medians[num] / medians[den], 4),
            "time_paired": round(paired(num, den), 4),
        }

    bases = {"pals": "shared", **{row: "pals" for row in GEM_ROWS}}
    out: dict[str, dict[str, float]] = {}
    for name, s in systems.items():
        base = f"{bases.get(s.row)}/{s.precision}/{s.mode}"
        if base in systems:
            out[f"{s.row}/{bases[s.row]} {s.precision}/{s.mode}"] = entry(name, base)
        eager = f"{s.row}/{s.precision}/eager"
        if s.mode == "compiled" and eager in systems:
            out[f"eager/compiled {s.row}/{s.precision}"] = entry(eager, name)
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parser().parse_args(argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        with dense_agem_rows():
            return run(args)
    finally:
        torch.set_num_threads(threads)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Build, warm, count and time every system of ``args``; print and write (``--json``) the results."""
    device = torch.device(args.device)
    systems = {s.name: s for s in _systems(args, device)}
    batches = _batches(args.warmup + args.reps, args.batch_size, args.seq_len, args.vocab, device, args.seed)
    pools = _batches(len(GEM_TASKS), MEMORY_EXAMPLES, args.seq_len, args.vocab, device, args.seed + 1)
    data = _MemoryData(dict(zip(GEM_TASKS, pools, strict=True)))
    load_before = os.getloadavg()
    for name, system in systems.items():  # warm-up (the compiled ones compile here), then one counted step
        start = time.perf_counter()
        for i in range(args.warmup):
            system.step(batches[i], data, i)
            if i == 0:
                system.first_step_s = time.perf_counter() - start
        if mode_counts(system):
            system.ops = count_ops(lambda s=system: s.step(batches[0], data, 0))
        print(
            f"warm: {name} (first step {system.first_step_s:.1f} s, {system.ops or '?'} operators)",
            flush=True,
        )
    names = list(systems)
    for r in range(args.reps):
        i = args.warmup + r
        order = names[r % len(names) :] + names[: r % len(names)]  # rotate, so drift hits all alike
        for name in order:
            systems[name].times.append(systems[name].step(batches[i], data, i))
    medians = {name: statistics.median(s.times) for name, s in systems.items()}
    extra_ops = attribution(systems)
    ratios = _ratios(systems, medians)
    result: dict[str, Any] = {
        "systems": {
            name: {
                "ops": s.ops or None,
                "ms": round(medians[name], 4),
                "us_per_op": round(1000 * medians[name] / s.ops, 3) if s.ops else None,
                "first_step_s": round(s.first_step_s, 2),
                **({"fell_back_to_eager": True} if s.fell_back else {}),
                "steps_ms": [round(t, 4) for t in s.times],
            }
            for name, s in systems.items()
        },
        "ratios": ratios,
        "pals_minus_shared_ops": extra_ops,
        "targets": TARGETS,
        "shape": args.shape,
        "structure": dict(zip(("layers", "heads"), SHAPES[args.shape], strict=True)),
        "width": args.width,
        "seq_len": args.seq_len,
        "batch_size": args.batch_size,
        "vocab": args.vocab,
        "reps": args.reps,
        "warmup": args.warmup,
        "backend": args.backend,
        "compile_mode": args.compile_mode,
        "gem_memory_batch_size": args.memory_batch_size,
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"cpu ({args.threads} threads)",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "load_average_before_after": [round(x, 2) for x in (*load_before, *os.getloadavg())],
        "torch": torch.__version__,
    }
    print(
        f"{args.shape} structure, width {args.width}, {args.batch_size} x {args.seq_len}, {result['device']}"
    )
    for name, s in result["systems"].items():
        ops = f"{s['ops']:6d} ops, " if s["ops"] else "   (not counted) "
        print(f"{name:>32}: {ops}{s['ms']:8.2f} ms (median)")
    for label, r in ratios.items():
        ops = f"ops {r['ops']:.3f}, " if r["ops"] is not None else ""
        print(f"{label:>32}: {ops}time {r['time']:.3f} (paired {r['time_paired']:.3f})")
    for precision, phases in extra_ops.items():
        for phase, table in phases.items():
            print(f"PAL - shared, {precision} {phase}: " + ", ".join(f"{k} {v:+d}" for k, v in table.items()))
    print(f"load average before {load_before}, after {os.getloadavg()}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()

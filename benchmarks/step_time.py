"""Median training-step time of PALs against the shared baseline, on the real encoder.

One training step = forward, cross-entropy loss on a linear head over mean-pooled states, backward and an
AdamW step over every parameter (pretrained encoder included, as in full multi-task fine-tuning). Both
models are built in the same process from the same checkpoint, fed the same batches, and timed
interleaved (the order alternates every step) after a warm-up, so machine noise hits both alike.

* shared: ``adapter="none"``, the encoder plus a linear head (only the head is task-specific);
* pals: ``adapter="pals"`` with the default size (102 for all-MiniLM-L6-v2) on every layer;
* gem: the PAL model with 3 tasks and a head each, trained on task 0 with
  :class:`~pal_lightning.gem.GEMCallback` (``constraints="others"``: the memories of tasks 1 and 2
  constrain, 16 remembered examples each, memories pre-filled); the step includes the two memory
  gradients, the Gram matrix and, when a constraint is violated, the QP and the write-back. The memory
  gradients come from one mixed batch of both tasks' examples (``one_pass=True``: one forward, one
  backward per task; :mod:`pal_lightning.gem.rows`; GEM's default on CUDA only);
* agem: the same with ``mode="agem"`` (one reference gradient of 16 remembered examples, 8 per task; one
  mixed batch: one forward, one backward; A-GEM's default);
* gem_task_forwards, agem_task_forwards: the gem and agem rows with ``one_pass=False``: one forward per
  constraining task (GEM's rows then from one backward, ``batch_tasks=True``), as before the one pass;
* gem_per_task: the gem row with ``one_pass=False, batch_tasks=False``: one forward and one backward per
  constraining task, as GEM computed its memory gradients before they came from one backward;
* pals_loop: the pals row with torch's for-loop AdamW (the library's optimizer before it took the fused
  kernel; ``--adamw`` sets every other row's), so the optimizer's share is timed side by side;
* simcse: the PAL model plus unsupervised SimCSE (weight 1) on the batch's sentences through the
  library's :func:`~pal_lightning.modeling.simcse.simcse_batch_loss`, as ``MultiTaskModule`` runs it:
  the task forward's pooled vectors are the first dropout view, one more forward/backward of the
  batch's sentences gives the second.

The GEM rows get their memory batches from a small stand-in for the data module (random examples with
the same length distribution), through the callback's duck-typed ``train_batch(task, indices)``.

Throughput (``benchmarks/throughput.py``): every row also reports tokens per second (the ``B x s`` token
positions the step computes, padding included), its FLOPs per step counted by
``torch.utils.flop_counter`` on the row's first warm-up step (forward and backward of everything the
step runs, GEM's memory passes and SimCSE's second view included; not the optimizer's element-wise
update), FLOPs per second, and MFU against the device's own roof: a large matmul in the step's dtype
(fp32, bf16 or fp16), measured in this process before and after the steps (the higher one counts).

Shapes (``--shape``): ``default``, the default encoder at batch 32 x 64; ``bert-base``, a randomly
initialised BERT-base (12 layers, width 768, 12 heads, feed-forward 3072) at batch 32 x 128, the setting
of the literature; ``minilm``, the default encoder's architecture with random weights at 32 x 64 (the
same arithmetic as ``default`` without its weights: ``gpu_check.sh`` takes it on a machine without the
encoder's package); ``tiny``, a random width-32 encoder at 4 x 16 for tests. ``--precision`` takes
Lightning's names: ``32-true``, ``bf16-mixed`` (autocast to bf16), ``16-mixed`` (fp16 with loss scaling).

Usage::

    python benchmarks/step_time.py                       # batch 32, sequence 64, default encoder
    python benchmarks/step_time.py --json results/step_time.json --steps 30 --device cuda
    python benchmarks/step_time.py --threads 1     # steadier on a CPU shared with other jobs
    python benchmarks/step_time.py --rows pals,gem,gem_per_task,agem   # only these rows (pals always)
    python benchmarks/step_time.py --rows pals,gem,agem,gem_task_forwards,agem_task_forwards   # one pass or not
    python benchmarks/step_time.py --shape bert-base --precision bf16-mixed --device cuda
    python benchmarks/step_time.py --adamw loop --rows shared,pals,gem,agem   # torch's for-loop AdamW, as before
    python benchmarks/step_time.py --rows shared,pals,shared_bf16,pals_bf16   # bf16-mixed's speed-up, one process
    bash benchmarks/gpu_check.sh results/gpu   # every GPU measurement, both shapes, bf16-mixed and 32-true

``benchmarks/profile_step.py`` takes the same options and profiles the same rows (where the time goes).

Prints the medians and their ratios; ``--json PATH`` writes
``{"shared_ms": ..., "pals_ms": ..., "pal_over_shared": ..., "gem_over_pal": ..., "agem_over_pal": ..., ...}``
(plus the per-step times and the medians of per-batch ratios, a check on noise), and per row
``<row>_tokens_per_s``, ``<row>_flop_per_step``, ``<row>_flop_per_s``, ``<row>_mfu`` with ``roof_flop_per_s``.
The ``*_bf16`` rows run in bf16-mixed whatever ``--precision`` says (MFU against a bf16 matmul roof)
and add ``shared_over_shared_bf16``/``pals_over_pals_bf16``: how many times faster bf16-mixed is.
Targets: pal_over_shared <= 1.10, gem_over_pal <= 1.6, agem_over_pal <= 1.3 (issue 30: the memories in one
pass; 2.0 and 1.5 for the rows with one forward per task), simcse_over_pal <= 2.0 (the auxiliary loss adds at
most its own forward/backward of the batch's sentences). ``gem_over_gem_task_forwards`` and
``agem_over_agem_task_forwards``: the one pass against one forward per task.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.profiler import record_function  # noqa: E402

from pal_lightning.core.hub import DEFAULT_ENCODER  # noqa: E402
from pal_lightning.gem import GEMCallback  # noqa: E402
from pal_lightning.modeling import MultiTaskEncoder  # noqa: E402
from pal_lightning.modeling.heads import pool  # noqa: E402
from pal_lightning.modeling.simcse import SimCSEConfig, simcse_batch_loss  # noqa: E402
from pal_lightning.module.optim import adamw  # noqa: E402
from pal_lightning.tasks.specs import TaskSpec  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/throughput.py, also when loaded by path
from throughput import PRECISIONS, Precision, count_flops, matmul_roof, mfu  # noqa: E402
from throughput import sync as _sync  # noqa: E402

TASK = "bench"
GEM_TASKS = ("t0", "t1", "t2")
MEMORY_EXAMPLES = 64
SIMCSE = SimCSEConfig(weight=1.0)
SIMCSE_SPEC = TaskSpec(name=TASK)  # a single-sentence task: SimCSE views of the batch's sentences
ROWS = (
    "shared",
    "pals",
    "gem",
    "agem",
    "gem_task_forwards",
    "agem_task_forwards",
    "gem_per_task",
    "simcse",
    "pals_loop",
    "shared_bf16",
    "pals_bf16",
)
#: the GEM rows: (mode, one_pass, batch_tasks) of their callback
GEM_ROWS = {
    "gem": ("gem", True, True),
    "agem": ("agem", True, True),
    "gem_task_forwards": ("gem", False, True),
    "agem_task_forwards": ("agem", False, True),
    "gem_per_task": ("gem", False, False),
}
#: rows that always run in bf16-mixed, beside the others' --precision: the precision's speed-up in one process
BF16_ROWS = ("shared_bf16", "pals_bf16")
#: --adamw: the library's AdamW, or torch's for-loop, foreach or fused implementation
ADAMW = ("library", "loop", "foreach", "fused")
#: --shape: (BERT config for a random encoder, or None for the pretrained --encoder; batch size, sequence length)
SHAPES: dict[str, tuple[dict | None, int, int]] = {
    "default": (None, 32, 64),
    "bert-base": (
        {
            "hidden_size": 768,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "intermediate_size": 3072,
            "vocab_size": 30522,
            "max_position_embeddings": 512,
        },
        32,
        128,
    ),
    # all-MiniLM-L6-v2's architecture with random weights: the `default` row's arithmetic (a step's time
    # does not depend on the weights' values) on a machine without the encoder's package, e.g. a bare GPU
    "minilm": (
        {
            "hidden_size": 384,
            "num_hidden_layers": 6,
            "num_attention_heads": 12,
            "intermediate_size": 1536,
            "vocab_size": 30522,
            "max_position_embeddings": 512,
        },
        32,
        64,
    ),
    "tiny": (
        {
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 37,
            "vocab_size": 30522,
            "max_position_embeddings": 64,
        },
        4,
        16,
    ),
}
#: --roof-size default: a matmul large enough to reach the device's rate, small enough to time quickly.
ROOF_SIZE = {"cuda": 8192, "cpu": 2048}


class _Classifier(nn.Module):
    """Encoder + mean pooling + one linear head: the smallest complete training model."""

    def __init__(self, encoder: MultiTaskEncoder, num_labels: int = 2) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(encoder.hidden_size, num_labels)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids, attention_mask, task=TASK)
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return self.head(pooled)


class _MultiTaskClassifier(nn.Module):
    """The PAL encoder with one adapter and one head per task, and ``batch_loss`` for GEM's memories."""

    def __init__(self, encoder: MultiTaskEncoder, num_labels: int = 2) -> None:
        super().__init__()
        self.encoder = encoder
        self.heads = nn.ModuleDict(
            {t: nn.Linear(encoder.hidden_size, num_labels) for t in encoder.task_names}
        )

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, task: str) -> torch.Tensor:
        hidden = self.encoder(input_ids, attention_mask, task=task)
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return self.heads[task](pooled)

    def batch_loss(self, batch: dict) -> torch.Tensor:
        logits = self(batch["input_ids"], batch["attention_mask"], batch["task"])
        return nn.functional.cross_entropy(logits, batch["labels"])

    def mixed_losses(self, batch: dict) -> dict[str, torch.Tensor]:
        """Each task's ``batch_loss`` over its rows of a mixed batch (``mix_batches``), from one encoder
        pass with per-example task routing, as ``MultiTaskModule.mixed_losses``: GEM's one pass."""
        mask = batch["attention_mask"]
        hidden = self.encoder(batch["input_ids"], mask, tasks=batch["tasks"])
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        rows: dict[str, list[int]] = {}
        for i, task in enumerate(batch["tasks"]):
            rows.setdefault(task, []).append(i)
        losses = {}
        for task, idx in rows.items():
            at = torch.tensor(idx, device=pooled.device)
            logits = self.heads[task](pooled.index_select(0, at))
            losses[task] = nn.functional.cross_entropy(logits, batch["labels"][at].long())
        return losses


class _MemoryData:
    """Stand-in for the data module: ``train_batch(task, indices)`` over a fixed pool of random examples."""

    def __init__(self, pool: dict[str, tuple]) -> None:
        self.pool = pool

    def train_batch(self, task: str, indices: list[int]) -> dict:
        ids, mask, labels = self.pool[task]
        idx = torch.tensor(indices, device=ids.device)
        mask = mask[idx]
        length = int(mask.sum(1).max())  # padded to the longest example, like the data module
        return {
            "task": task,
            "input_ids": ids[idx, :length],
            "attention_mask": mask[:, :length],
            "labels": labels[idx],
        }


def _batches(n: int, batch_size: int, seq_len: int, vocab: int, device: torch.device, seed: int) -> list:
    """Random token ids with realistic padding: lengths uniform in [seq_len/2, seq_len], one full row."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(1000, vocab, (batch_size, seq_len), generator=gen)
        lengths = torch.randint(seq_len // 2, seq_len + 1, (batch_size,), generator=gen)
        lengths[0] = seq_len
        mask = (torch.arange(seq_len)[None, :] < lengths[:, None]).long()
        ids = ids * mask
        ids[:, 0] = 101  # [CLS]
        labels = torch.randint(0, 2, (batch_size,), generator=gen)
        out.append((ids.to(device), mask.to(device), labels.to(device)))
    return out


def _step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: tuple,
    device: torch.device,
    gem: tuple[GEMCallback, _MemoryData, int] | None = None,
    simcse: bool = False,
    precision: Precision | None = None,
) -> float:
    amp = precision if precision is not None else Precision("32-true", device)
    _sync(device)
    start = time.perf_counter()
    # the labels name the phases for benchmarks/profile_step.py (a few microseconds when not profiling)
    with record_function("step/forward"), amp.autocast():  # as Lightning's precision plugin wraps it
        loss = _loss(model, batch, gem, simcse)
    with record_function("step/backward"):
        amp.backward(loss, optimizer)  # scaled and unscaled again under 16-mixed: GEM sees true gradients
    if gem is not None:
        callback, data, step = gem
        with record_function("step/gem"):
            callback.project_step(
                model, data, step=step, current=[GEM_TASKS[0]], forward_context=amp.autocast
            )
    with record_function("step/optimizer"):
        amp.step(optimizer)
        optimizer.zero_grad(set_to_none=True)
    _sync(device)
    return (time.perf_counter() - start) * 1000.0


def _loss(
    model: nn.Module, batch: tuple, gem: tuple[GEMCallback, _MemoryData, int] | None, simcse: bool
) -> torch.Tensor:
    """The row's training loss on ``batch`` (the forward passes of the step)."""
    ids, mask, labels = batch
    if simcse:

        def encode(inputs: dict) -> torch.Tensor:
            m = inputs["attention_mask"]
            return pool(model.encoder(inputs["input_ids"], m, task=TASK), m, "mean")

        inputs = {"input_ids": ids, "attention_mask": mask}
        pooled = encode(inputs)  # the task forward, whose vectors are SimCSE's first view
        auxiliary = simcse_batch_loss(encode, inputs, SIMCSE_SPEC, SIMCSE, first_view=pooled)
        return nn.functional.cross_entropy(model.head(pooled), labels) + SIMCSE.weight * auxiliary
    if gem is None:
        return nn.functional.cross_entropy(model(ids, mask), labels)
    return nn.functional.cross_entropy(model(ids, mask, GEM_TASKS[0]), labels)


def parser() -> argparse.ArgumentParser:
    """The command line of this script (``benchmarks/profile_step.py`` extends it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoder", default=DEFAULT_ENCODER, help="encoder name or local directory")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="default", help="model and batch shape")
    parser.add_argument("--batch-size", type=int, default=None, help="default: the shape's (32)")
    parser.add_argument("--seq-len", type=int, default=None, help="default: the shape's (64; bert-base 128)")
    parser.add_argument("--precision", choices=PRECISIONS, default="32-true", help="as Lightning's Trainer")
    parser.add_argument("--roof-size", type=int, default=None, help="roof matmul size (cuda 8192, cpu 2048)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per model")
    parser.add_argument(
        "--warmup", type=int, default=3, help="untimed steps per model first (>= 1: the first counts FLOPs)"
    )
    parser.add_argument("--device", default="auto", help="auto (cuda if available), cpu or cuda")
    parser.add_argument("--attn-implementation", default=None, help="BERT attention: sdpa (default) or eager")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--memory-batch-size", type=int, default=16, help="GEM: remembered examples per constraining task"
    )
    parser.add_argument(
        "--adamw",
        choices=ADAMW,
        default="library",
        help="the optimizer's implementation: the library's choice (training.optim.adamw: fused where "
        "the device has it), or torch's for-loop, foreach or fused one",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the results to this JSON file")
    parser.add_argument(
        "--rows", default=",".join(ROWS), help=f"comma-separated rows to time (pals always): {','.join(ROWS)}"
    )
    return parser


class Bench(NamedTuple):
    """Every row's model, optimizer and precision, and the batches they are fed, built once per process."""

    device: torch.device
    """Where every row runs."""
    models: dict[str, nn.Module]
    """Row name -> model, in :data:`ROWS` order."""
    optimizers: dict[str, torch.optim.Optimizer]
    """Row name -> AdamW over every parameter of its model."""
    precisions: dict[str, Precision]
    """Row name -> precision (a loss scaler per row under ``16-mixed``)."""
    callbacks: dict[str, GEMCallback]
    """GEM rows -> their callback, memories pre-filled."""
    data: _MemoryData
    """The remembered examples of the GEM rows."""
    batches: list[tuple]
    """Warm-up batches, then timed ones: ``(input_ids, attention_mask, labels)``."""

    @property
    def names(self) -> list[str]:
        return list(self.models)

    def step_fn(self, name: str, i: int) -> Callable[[], float]:
        """Row ``name``'s training step on batch ``i`` (returns its milliseconds)."""
        gem = (self.callbacks[name], self.data, i) if name in self.callbacks else None
        return functools.partial(
            _step,
            self.models[name],
            self.optimizers[name],
            self.batches[i],
            self.device,
            gem,
            name == "simcse",
            self.precisions[name],
        )


def make_optimizer(params: Iterable[nn.Parameter], kind: str, precision: Precision) -> torch.optim.Optimizer:
    """AdamW as the library builds it (``library``) or a given torch implementation (lr 2e-5)."""
    if kind == "library":  # as MultiTaskModule.configure_optimizers: not fused with a loss scaler
        return adamw(params, fused=precision.name != "16-mixed", lr=2e-5)
    flags = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[kind]
    return torch.optim.AdamW(params, lr=2e-5, **flags)


def optimizer_kind(optimizer: torch.optim.Optimizer) -> str:
    """Which AdamW implementation ``optimizer`` runs: ``fused``, ``foreach`` or ``loop``."""
    flags = optimizer.defaults
    return "fused" if flags.get("fused") else "foreach" if flags.get("foreach") else "loop"


def build(args: argparse.Namespace) -> Bench:
    """The rows ``args.rows`` (pals always), on ``args``' device, shape and precision."""
    rows = {"pals", *args.rows.split(",")}
    encoder_config, default_batch, default_seq = SHAPES[args.shape]
    args.batch_size = args.batch_size or default_batch
    args.seq_len = args.seq_len or default_seq

    def build_encoder(tasks: list[str], adapter: str) -> MultiTaskEncoder:
        if encoder_config is None:
            return MultiTaskEncoder.from_pretrained(
                args.encoder, tasks, adapter=adapter, attn_implementation=args.attn_implementation
            )
        return MultiTaskEncoder.from_config(
            encoder_config, tasks, adapter=adapter, attn_implementation=args.attn_implementation
        )

    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    models: dict[str, nn.Module] = {}
    plain_rows = (("shared", "none"), ("pals", "pals"), ("simcse", "pals"), ("pals_loop", "pals"))
    for name, adapter in (*plain_rows, ("shared_bf16", "none"), ("pals_bf16", "pals")):
        if name not in rows:
            continue
        torch.manual_seed(args.seed)  # every row starts from the same weights (a bf16 row = its fp32 row's)
        models[name] = _Classifier(build_encoder([TASK], adapter)).to(device).train()
    callbacks: dict[str, GEMCallback] = {}
    for name, (mode, one_pass, batch_tasks) in GEM_ROWS.items():
        if name not in rows:
            continue
        models[name] = _MultiTaskClassifier(build_encoder(list(GEM_TASKS), "pals")).to(device).train()
        callback = GEMCallback(
            memory_size=MEMORY_EXAMPLES,
            memory_batch_size=args.memory_batch_size,
            mode=mode,
            batch_tasks=batch_tasks,
            one_pass=one_pass,
        )
        for task in GEM_TASKS:  # pre-filled memories: every task already trained
            callback.task_order.append(task)
            callback.memory.add(task, range(MEMORY_EXAMPLES))
        callbacks[name] = callback
    precisions = {  # a loss scaler per row under 16-mixed
        name: Precision("bf16-mixed" if name in BF16_ROWS else args.precision, device) for name in models
    }
    optimizers = {
        name: make_optimizer(
            model.parameters(), "loop" if name == "pals_loop" else args.adamw, precisions[name]
        )
        for name, model in models.items()
    }
    vocab = models["pals"].encoder.config.vocab_size
    batches = _batches(args.warmup + args.steps, args.batch_size, args.seq_len, vocab, device, args.seed)
    pool_batches = _batches(
        len(GEM_TASKS), MEMORY_EXAMPLES, args.seq_len, vocab, device, args.seed + 1
    )  # one pool of remembered examples per task
    data = _MemoryData(dict(zip(GEM_TASKS, pool_batches, strict=True)))
    return Bench(device, models, optimizers, precisions, callbacks, data, batches)


def parse(argv: list[str] | None, parser_: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """Parse and check the command line."""
    parser_ = parser_ or parser()
    args = parser_.parse_args(argv)
    rows = {"pals", *args.rows.split(",")}
    if not rows <= set(ROWS):
        parser_.error(f"--rows: unknown {sorted(rows - set(ROWS))}; choose from {','.join(ROWS)}")
    if args.warmup < 1:
        parser_.error("--warmup: at least 1 (the first warm-up step of each row counts its FLOPs)")
    return args


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = parse(argv)
    bench = build(args)
    device, models, precisions, callbacks = bench.device, bench.models, bench.precisions, bench.callbacks
    names = bench.names
    roof_size = args.roof_size or ROOF_SIZE.get(device.type, ROOF_SIZE["cpu"])
    roofs = [matmul_roof(device, precisions["pals"].dtype, roof_size)]  # before the steps, again after
    bf16_roofs = [matmul_roof(device, torch.bfloat16, roof_size)] if set(BF16_ROWS) & set(names) else []
    times: dict[str, list[float]] = {name: [] for name in names}
    flops: dict[str, int] = {}
    violated = {name: 0 for name in callbacks}
    for i in range(len(bench.batches)):
        order = names[i % len(names) :] + names[: i % len(names)]  # rotate, so drift hits all alike
        for name in order:
            step = bench.step_fn(name, i)
            if i == 0:  # a warm-up step: the counter's overhead is not timed
                elapsed, flops[name] = count_flops(step)
            else:
                elapsed = step()
            if i >= args.warmup:
                times[name].append(elapsed)
                if name in callbacks:
                    violated[name] += int(callbacks[name].last_stats["gem/violated"])

    roofs.append(matmul_roof(device, precisions["pals"].dtype, roof_size))
    if bf16_roofs:
        bf16_roofs.append(matmul_roof(device, torch.bfloat16, roof_size))
    medians = {name: statistics.median(times[name]) for name in names}

    def paired(a: str, b: str) -> float:
        # median of per-batch ratios: both models ran that batch back to back, so slow drift cancels
        return round(statistics.median([x / y for x, y in zip(times[a], times[b], strict=True)]), 4)

    result: dict = {f"{name}_ms": round(ms, 3) for name, ms in medians.items()}
    if "shared" in medians:
        result["pal_over_shared"] = round(medians["pals"] / medians["shared"], 4)
        result["pal_over_shared_paired"] = paired("pals", "shared")
    for name in names:
        if name in BF16_ROWS:  # the bf16 row against the same model in --precision
            base = name.removesuffix("_bf16")
            if base in medians:
                result[f"{base}_over_{name}"] = round(medians[base] / medians[name], 4)
                result[f"{base}_over_{name}_paired"] = paired(base, name)
        elif name not in ("shared", "pals"):
            result[f"{name}_over_pal"] = round(medians[name] / medians["pals"], 4)
            result[f"{name}_over_pal_paired"] = paired(name, "pals")
    for one, other in (("gem", "gem_per_task"), ("gem", "gem_task_forwards"), ("agem", "agem_task_forwards")):
        if {one, other} <= set(names):  # the memories in one pass (or one backward) against per task
            result[f"{one}_over_{other}"] = round(medians[one] / medians[other], 4)
            result[f"{one}_over_{other}_paired"] = paired(one, other)
    result.update({f"{name}_violated_steps": n for name, n in violated.items()})
    roof = max(roofs)  # the higher of the two: contention or clocks can only lower a measurement
    tokens = args.batch_size * args.seq_len  # positions computed per step, padding included
    for name in names:
        seconds = medians[name] / 1000.0
        result[f"{name}_tokens_per_s"] = round(tokens / seconds, 1)
        result[f"{name}_flop_per_step"] = flops[name]
        result[f"{name}_flop_per_s"] = round(flops[name] / seconds, 1)
        row_roof = max(bf16_roofs) if name in BF16_ROWS else roof
        result[f"{name}_mfu"] = round(mfu(flops[name], seconds, row_roof), 5)
    result.update(
        {
            "roof_flop_per_s": round(roof, 1),
            "roof_flop_per_s_before_after": [round(r, 1) for r in roofs],
            "roof_matmul_size": roof_size,
            "roof_dtype": str(precisions["pals"].dtype).removeprefix("torch."),
            **({"bf16_roof_flop_per_s": round(max(bf16_roofs), 1)} if bf16_roofs else {}),
            "flop_count": "torch.utils.flop_counter.FlopCounterMode, one warm-up step per row",
            "precision": args.precision,
            "shape": args.shape,
        }
    )
    result["gem_memory_batch_size"] = args.memory_batch_size
    result["adamw"] = optimizer_kind(bench.optimizers["pals"])
    # to 0.1 us: the paired ratios above are medians of these, and a tiny model's step of a few ms
    # rounded to 10 us would move a ratio recomputed from this list by up to 1 %
    result.update({f"{name}_steps_ms": [round(t, 4) for t in times[name]] for name in names})
    result.update(
        {
            "encoder": args.encoder if SHAPES[args.shape][0] is None else f"random init ({args.shape} shape)",
            "adapter": {"size": models["pals"].encoder.adapter_size},
            "batch_size": args.batch_size,
            "seq_len": args.seq_len,
            "steps": args.steps,
            "warmup": args.warmup,
            "device": torch.cuda.get_device_name(device)
            if device.type == "cuda"
            else f"cpu ({torch.get_num_threads()} threads)",
            "torch": torch.__version__,
        }
    )
    targets = {
        "gem": 1.6,
        "agem": 1.3,
        "gem_task_forwards": 2.0,
        "agem_task_forwards": 1.5,
        "gem_per_task": 2.0,
        "simcse": 2.0,
    }
    lines = [
        f"device {result['device']}, shape {args.shape}, batch {args.batch_size} x {args.seq_len}, "
        f"{args.precision}, {args.steps} timed steps each; roof {roof / 1e12:.4g} TFLOP/s "
        f"({result['roof_dtype']} matmul {roof_size})"
    ]
    for name in names:
        line = (
            f"{name:>18}: {medians[name]:9.2f} ms/step (median), {result[f'{name}_tokens_per_s']:,.0f} tokens/s, "
            f"{result[f'{name}_flop_per_s'] / 1e12:.4g} TFLOP/s, MFU {result[f'{name}_mfu']:.1%}"
        )
        if name == "pals" and "shared" in medians:
            line += f", pal/shared {result['pal_over_shared']:.3f} (paired {result['pal_over_shared_paired']:.3f}; target <= 1.10)"
        elif name in targets:
            line += (
                f", {name}/pal {result[f'{name}_over_pal']:.3f} (paired {result[f'{name}_over_pal_paired']:.3f}; "
                f"target <= {targets[name]})"
            )
        if name in BF16_ROWS and f"{name.removesuffix('_bf16')}_over_{name}" in result:
            key = f"{name.removesuffix('_bf16')}_over_{name}"
            line += f", bf16-mixed against {args.precision}: {result[key]:.3f}x faster (paired {result[key + '_paired']:.3f})"
        if name in violated:
            line += f", violated in {violated[name]}/{args.steps} steps"
        lines.append(line)
    for one, other, what in (
        ("gem", "gem_per_task", "one pass"),
        ("gem", "gem_task_forwards", "one pass"),
        ("agem", "agem_task_forwards", "one pass"),
    ):
        if f"{one}_over_{other}" in result:
            lines.append(
                f"{one} ({what}) / {other}: {result[f'{one}_over_{other}']:.3f} "
                f"(paired {result[f'{one}_over_{other}_paired']:.3f})"
            )
    print("\n".join(lines))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])

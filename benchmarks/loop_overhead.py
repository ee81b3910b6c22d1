"""Time per example: pal-lightning's Lightning loop against the ``transformers`` Trainer (issue 16).

The issue's time target: pal-lightning's training time per example within 1.10x of the ``transformers``
Trainer on the same model and batch (the Lightning loop must not cost more than a plain training loop),
measured in one process. This script trains, in ONE process, alternating (A B C A B C ...):

* ``trainer``: the Trainer on ``AutoModelForSequenceClassification`` (BERT's pooler, dropout, a linear
  layer) loaded from the encoder folder: what a Trainer user would write;
* ``trainer_pal_net``: the Trainer on the very network pal-lightning builds (``MultiTaskModule``'s
  encoder, mean pooling and head, called through a small ``forward(input_ids, ..., labels)`` wrapper):
  the same model on both sides, so any difference is the loop's;
* ``pal``: pal-lightning's normal path, ``MultiTaskModule`` + ``MultiTaskDataModule`` + a Lightning
  ``Trainer`` (``adapter: none``, task ``sst`` only).

Held equal: the encoder weights (bit-identical at step 0, checked by a fingerprint of every encoder
parameter), one single-sentence task (SST, 5 classes; no pair encoding to differ), the batches
(pal-lightning's data module draws them once; the Trainer sides get the same rows in the same order,
padded by ``DataCollatorWithPadding`` to the same per-batch shapes, checked per step), batch 32, at
most 64 tokens, fp32, AdamW (lr 1e-4 for every parameter, betas 0.9/0.999, eps 1e-8, weight decay
0.01 off for biases and LayerNorm weights), warmup 6 % then linear decay, gradient clipping at norm
1.0, ``N`` optimizer steps (read back from each optimizer's state), the torch threads.
AdamW implementation: pal-lightning uses ``torch.optim.AdamW(fused=True)`` on the CPU
(``pal_lightning.module.optim.adamw``); the Trainer's ``optim`` is ``--hf-optim``, default
``adamw_torch_fused`` (its own default in transformers 5.x, the same kernel); ``adamw_torch`` is the
for-loop one. Off on every side: evaluation, checkpoint writing, loggers, progress bars, the model
summary. Still on, as a user has them: pal-lightning's ``self.log`` calls in ``training_step`` (kept in
memory) and its non-finite-gradient guard; the Trainer's per-step NaN/inf loss filter and gradient norm.

Timed: the training loop proper, from the loop-start hook (Lightning ``on_train_start``, Trainer
``on_train_begin``: after model, data and optimizer are built) to the loop-end hook, and every step's
interval between consecutive step-end hooks (Lightning ``on_train_batch_end``, Trainer
``on_step_end``, both after the optimizer step). Not in the loop time on either side: building the
model, reading and tokenising the data, building the optimizer. The whole ``fit()`` / ``train()`` call
is reported too (pal-lightning's call includes its data module's ``setup``, which reads and tokenises
SST; the Trainer's data were tokenised before). The first repeat of every side is a warmup, reported
but not in the medians. Before every run, of every side, the garbage collector runs (the Trainer does it
anyway before its loop).

Measure (idle machine; one process; ~5 minutes on 2 CPU cores)::

    export PAL_DATA_DIR=/path/to/cs224n-minbert HF_HUB_OFFLINE=1
    python benchmarks/loop_overhead.py --steps 40 --repeats 4 \\
        --json benchmarks/results_peers/loop_overhead.json
    python benchmarks/loop_overhead.py --quick --json /tmp/lo.json    # tiny random BERT, fixture data

Writes ``--json``: the settings, the machine (CPU count, torch and library versions, torch threads,
load average before and after), every run (loop and call seconds, step intervals, optimizer steps,
the optimizer's implementation, the initial-weights fingerprint) and the summary (median seconds per
example per side over the measured repeats, and the ratios ``pal / trainer`` and
``pal / trainer_pal_net``: per-repeat ratios of adjacent runs, their median, min and max).
"""

# no "from __future__ import annotations": the tests load this script by path (see peers.py)
import argparse
import gc
import hashlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from torch import nn
from torch.utils.data import IterableDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/*.py, also when loaded by path
from peers import Budget, _classifier, pal_arguments, quick_encoder  # noqa: E402
from reproduce import cs224n_data_dir  # noqa: E402

#: The sides, in the order they alternate.
SIDES = ("trainer", "trainer_pal_net", "pal")
#: The Trainer sides each pal-lightning time is divided by.
BASELINES = ("trainer", "trainer_pal_net")
TASK = "sst"


@dataclass(frozen=True)
class Setup:
    """What every side gets."""

    encoder: str
    """Local encoder folder (weights and tokenizer)."""
    data_dir: str
    """CS224N data folder (only SST is read)."""
    steps: int
    """Optimizer steps per run."""
    batch_size: int = 32
    """Training batch size of every side."""
    max_length: int = 64
    """Tokens per sentence."""
    lr: float = 1e-4
    """Peak learning rate of every parameter (pal-lightning's ``head_lr`` set to it too)."""
    weight_decay: float = 0.01
    """AdamW decoupled weight decay (biases and LayerNorm weights excluded on both sides)."""
    warmup_ratio: float = 0.06
    """Warmup fraction, then linear decay to 0."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm of every side."""
    hf_optim: str = "adamw_torch_fused"
    """The Trainer's ``optim`` (``adamw_torch`` for torch's for-loop AdamW)."""
    device: str = "cpu"
    """``cpu`` or ``cuda`` (both sides)."""
    seed: int = 42
    """Seed of every run (the same head initialisation in every repeat of a side)."""

    def budget(self) -> Budget:
        return Budget(
            encoder=self.encoder,
            data_root="",
            examples_per_task=self.steps * self.batch_size,
            batch_size=self.batch_size,
            max_length=self.max_length,
            warmup_ratio=self.warmup_ratio,
            weight_decay=self.weight_decay,
            max_grad_norm=self.max_grad_norm,
        )


# ------------------------------------------------------------------------------------ pure parts


def step_intervals(start: float, ends: Sequence[float]) -> list[float]:
    """Seconds of every step: from the loop start to the first step end, then between step ends."""
    marks = [start, *ends]
    return [b - a for a, b in zip(marks, marks[1:], strict=False)]


def spread(values: Sequence[float]) -> dict[str, float | int | None]:
    """Median, min, max and count of ``values`` (``None`` figures when empty)."""
    if not values:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def paired_ratios(runs: Sequence[dict[str, Any]], side: str, baseline: str) -> list[float]:
    """``side`` / ``baseline`` seconds per example, repeat by repeat (runs next to each other in time),
    over the measured repeats both have."""
    per = {(r["side"], r["repeat"]): r["s_per_example"] for r in runs if not r["warmup"]}
    repeats = sorted({r["repeat"] for r in runs if not r["warmup"]})
    return [per[(side, k)] / per[(baseline, k)] for k in repeats if (side, k) in per and (baseline, k) in per]


def summarize(runs: Sequence[dict[str, Any]], sides: Sequence[str], target: float = 1.10) -> dict[str, Any]:
    """Per side the spread of seconds per example and of the median step over the measured repeats;
    the ratios of pal-lightning to each Trainer side, and whether their median meets ``target``."""
    summary: dict[str, Any] = {"sides": {}, "ratios": {}}
    for side in sides:
        mine = [r for r in runs if r["side"] == side and not r["warmup"]]
        summary["sides"][side] = {
            "s_per_example": spread([r["s_per_example"] for r in mine]),
            "median_step_s": spread([r["median_step_s"] for r in mine]),
            "call_s_per_example": spread([r["call_s"] / r["examples"] for r in mine]),
        }
    if "pal" in sides:
        for baseline in (b for b in BASELINES if b in sides):
            ratios = paired_ratios(runs, "pal", baseline)
            entry: dict[str, Any] = {**spread(ratios), "per_repeat": ratios, "target": target}
            entry["met"] = None if not ratios else entry["median"] <= target
            summary["ratios"][f"pal/{baseline}"] = entry
    return summary


def fingerprint(named: Iterator[tuple[str, Any]], skip: tuple[str, ...] = ("pooler.",)) -> str:
    """SHA-256 of an encoder's parameters (names in sorted order and their fp32 bytes), ``skip``
    prefixes left out: two encoders with the same fingerprint hold bit-identical weights."""
    digest = hashlib.sha256()
    for name, tensor in sorted((n, t) for n, t in named if not n.startswith(skip)):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def optimizer_report(optimizer: Any) -> dict[str, Any]:
    """What the optimizer is, and how many steps its state says it took (the ``step`` of each parameter;
    ``steps_min`` = ``steps_max`` when every parameter was stepped as often)."""
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate / Lightning wrappers
    steps = [int(s["step"]) for s in inner.state.values() if "step" in s]
    group = inner.param_groups[0]
    return {
        "class": f"{type(inner).__module__}.{type(inner).__name__}",
        "fused": bool(inner.defaults.get("fused")),
        "foreach": inner.defaults.get("foreach"),
        "param_groups": len(inner.param_groups),
        "betas": list(group["betas"]),
        "eps": group["eps"],
        "weight_decays": sorted({g["weight_decay"] for g in inner.param_groups}),
        "steps_min": min(steps) if steps else 0,
        "steps_max": max(steps) if steps else 0,
    }


# ------------------------------------------------------------------------------------ the batches


def pal_arguments_sst(setup: Setup) -> tuple[dict, dict, dict]:
    """``MultiTaskModule``, ``MultiTaskDataModule`` and ``Trainer`` arguments: peers.py's ``pal_shared``
    (the quickstart with ``adapter: none``) on SST alone, one learning rate, ``setup.steps`` steps."""
    model, data, trainer = pal_arguments("pal_shared", setup.budget(), 1.0, setup.seed)
    model.update(tasks=[TASK], optim={**model["optim"], "lr": setup.lr, "head_lr": setup.lr})
    data.update(tasks=[TASK], data_dir=setup.data_dir, steps_per_epoch=setup.steps)
    trainer.update(max_steps=setup.steps, accelerator="gpu" if setup.device == "cuda" else "cpu")
    return model, data, trainer


def pal_batches(setup: Setup) -> list[dict[str, Any]]:
    """The ``setup.steps`` training batches pal-lightning's data module serves first (its seed)."""
    from pal_lightning import MultiTaskDataModule

    _, data_args, _ = pal_arguments_sst(setup)
    datamodule = MultiTaskDataModule(**data_args)
    datamodule.setup("fit")
    batches = []
    for batch in datamodule.train_dataloader():
        batches.append(batch)
        if len(batches) == setup.steps:
            return batches
    raise RuntimeError(f"the data module served {len(batches)} batches, fewer than {setup.steps}")


class Rows(IterableDataset):
    """The rows of pal-lightning's batches, unpadded, in its order: an iterable dataset (the Trainer
    reads it in order, without shuffling) of ``input_ids``, ``attention_mask``, ``token_type_ids``,
    ``labels``."""

    def __init__(self, batches: Sequence[dict[str, Any]]) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []
        for batch in batches:
            lengths = batch["attention_mask"].sum(1).tolist()
            for i, n in enumerate(lengths):
                row = {k: batch[k][i, :n].tolist() for k in ("input_ids", "attention_mask", "token_type_ids")}
                self.rows.append({**row, "labels": int(batch["labels"][i])})

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows)


# ------------------------------------------------------------------------------------------ sides


class _Clock:
    """Loop start, every step end and loop end (``time.perf_counter``), and the encoder inputs' shapes."""

    def __init__(self, sync: bool) -> None:
        self.sync = sync
        self.start = self.end = 0.0
        self.step_ends: list[float] = []
        self.shapes: list[tuple[int, ...]] = []

    def now(self) -> float:
        if self.sync:  # a GPU step ends when its kernels have run
            import torch

            torch.cuda.synchronize()
        return time.perf_counter()

    def watch(self, embeddings: Any) -> None:
        embeddings.register_forward_pre_hook(lambda _m, args: self.shapes.append(tuple(args[0].shape)))


def _pal_module(setup: Setup) -> Any:
    from pal_lightning import MultiTaskModule

    model_args, _, _ = pal_arguments_sst(setup)
    return MultiTaskModule(**model_args)


class PalNet(nn.Module):
    """pal-lightning's network for the Trainer: ``forward(input_ids, attention_mask, token_type_ids,
    labels) -> {"loss", "logits"}`` through ``MultiTaskModule``'s own forward and loss."""

    def __init__(self, module: Any) -> None:
        super().__init__()
        self.module = module

    def forward(
        self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None, labels: Any = None
    ) -> dict[str, Any]:
        batch = {"task": TASK, "input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            batch["token_type_ids"] = token_type_ids
        logits = self.module(batch)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = self.module.compute_loss(TASK, logits, labels)
        return out


def run_trainer(setup: Setup, rows: Rows, pal_net: bool, keep: dict | None) -> dict[str, Any]:
    """One Trainer run of ``setup.steps`` steps; its record (``keep``: the optimizer and first weights)."""
    from transformers import (
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainerCallback,
        TrainingArguments,
        set_seed,
    )

    set_seed(setup.seed)
    if pal_net:
        module = _pal_module(setup)
        model, bert = PalNet(module), module.encoder.backbone
    else:
        model = _classifier(setup.budget(), TASK)
        bert = model.bert
    first = fingerprint(bert.named_parameters())
    initial = {n: p.detach().clone() for n, p in bert.named_parameters()} if keep is not None else None
    clock = _Clock(setup.device == "cuda")
    clock.watch(bert.embeddings.word_embeddings)

    class StepClock(TrainerCallback):
        def on_train_begin(self, *_a: Any, **_k: Any) -> None:
            clock.start = clock.now()

        def on_step_end(self, *_a: Any, **_k: Any) -> None:
            clock.step_ends.append(clock.now())

        def on_train_end(self, *_a: Any, **_k: Any) -> None:
            clock.end = clock.now()

    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp,
            max_steps=setup.steps,
            per_device_train_batch_size=setup.batch_size,
            learning_rate=setup.lr,
            weight_decay=setup.weight_decay,
            warmup_steps=int(round(setup.warmup_ratio * setup.steps)),
            lr_scheduler_type="linear",
            max_grad_norm=setup.max_grad_norm,
            optim=setup.hf_optim,
            seed=setup.seed,
            data_seed=setup.seed,
            use_cpu=setup.device == "cpu",
            report_to="none",
            save_strategy="no",
            eval_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
        )
        collator = DataCollatorWithPadding(AutoTokenizer.from_pretrained(setup.encoder))
        trainer = Trainer(
            model=model, args=args, train_dataset=rows, data_collator=collator, callbacks=[StepClock()]
        )
        call = time.perf_counter()
        trainer.train()
        call_s = time.perf_counter() - call
    if keep is not None:
        keep.update(optimizer=trainer.optimizer, initial=initial, global_step=trainer.state.global_step)
    return _record(setup, clock, call_s, first, trainer.state.global_step, trainer.optimizer)


def run_pal(setup: Setup, keep: dict | None) -> dict[str, Any]:
    """One pal-lightning run through MultiTaskModule + MultiTaskDataModule + a Lightning Trainer."""
    import lightning.pytorch as pl

    from pal_lightning import MultiTaskDataModule
    from pal_lightning.testing import quiet_trainer

    pl.seed_everything(setup.seed, verbose=False)
    _, data_args, trainer_args = pal_arguments_sst(setup)
    module = _pal_module(setup)
    datamodule = MultiTaskDataModule(**data_args)
    bert = module.encoder.backbone
    first = fingerprint(bert.named_parameters())
    initial = {n: p.detach().clone() for n, p in bert.named_parameters()} if keep is not None else None
    clock = _Clock(setup.device == "cuda")
    clock.watch(bert.embeddings.word_embeddings)
    indices: list[list[int]] = []

    class StepClock(pl.Callback):
        def on_train_start(self, *_a: Any) -> None:
            clock.start = clock.now()

        def on_train_batch_start(self, _t: Any, _m: Any, batch: Any, _i: int) -> None:
            indices.append(list(batch["indices"]))

        def on_train_batch_end(self, *_a: Any) -> None:
            clock.step_ends.append(clock.now())

        def on_train_end(self, *_a: Any) -> None:
            clock.end = clock.now()

    # quiet_trainer: no logger, checkpointing, progress bar or model summary (the Trainer sides match)
    trainer = quiet_trainer(**trainer_args, devices=1, callbacks=[StepClock()])
    call = time.perf_counter()
    trainer.fit(module, datamodule)
    call_s = time.perf_counter() - call
    optimizer = trainer.optimizers[0]
    if keep is not None:
        keep.update(optimizer=optimizer, initial=initial, global_step=trainer.global_step, indices=indices)
    return {**_record(setup, clock, call_s, first, trainer.global_step, optimizer), "indices": indices}


def _record(setup: Setup, clock: _Clock, call_s: float, first: str, global_step: int, optimizer: Any) -> dict:
    steps = step_intervals(clock.start, clock.step_ends)
    loop_s = clock.end - clock.start
    examples = setup.steps * setup.batch_size
    # the first step also builds lazily initialised state (AdamW's moments): left out of the median
    return {
        "loop_s": loop_s,
        "call_s": call_s,
        "examples": examples,
        "s_per_example": loop_s / examples,
        "step_s": steps,
        "median_step_s": statistics.median(steps[1:] or steps) if steps else None,
        "global_step": int(global_step),
        "optimizer": optimizer_report(optimizer),
        "initial_encoder_sha256": first,
        "shapes": [list(s) for s in clock.shapes],
    }


# ------------------------------------------------------------------------------------------- main


def machine(threads: int) -> dict[str, Any]:
    import lightning
    import torch
    import transformers

    return {
        "platform": platform.platform(),
        "processor": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "lightning": lightning.__version__,
        "python": platform.python_version(),
        "torch_threads": threads,
        "load_avg_1min_at_start": os.getloadavg()[0],
    }


def measure(setup: Setup, sides: Sequence[str], repeats: int, keep: dict | None = None) -> dict[str, Any]:
    """Every side ``repeats`` times, alternating, in this process; the runs and the summary.

    ``keep`` (tests): filled per side with the last run's optimizer, initial encoder weights, global
    step (and pal-lightning's batch indices) so that a caller can check them itself.
    """
    batches = pal_batches(setup)
    rows = Rows(batches)
    expected_shapes = [list(b["input_ids"].shape) for b in batches]
    expected_indices = [list(b["indices"]) for b in batches]
    runs: list[dict[str, Any]] = []
    for repeat in range(repeats):
        for side in sides:
            slot = keep.setdefault(side, {}) if keep is not None else None
            # the Trainer collects garbage before its loop (accelerate's free_memory); every side starts
            # from the same clean heap, so that no side pays for the garbage of the run before it
            gc.collect()
            if side == "pal":
                record = run_pal(setup, slot)
                record["same_rows_as_planned"] = record.pop("indices") == expected_indices
            else:
                record = run_trainer(setup, rows, side == "trainer_pal_net", slot)
            record["same_shapes_as_planned"] = record.pop("shapes") == expected_shapes
            record.update(side=side, repeat=repeat, warmup=repeat == 0)
            runs.append(record)
            print(
                f"repeat {repeat} {side:16s} loop {record['loop_s']:.2f} s, "
                f"{1000 * record['s_per_example']:.2f} ms/example, median step {record['median_step_s']:.3f} s, "
                f"{record['optimizer']['steps_max']} optimizer steps" + ("  (warmup)" if repeat == 0 else ""),
                flush=True,
            )
    fingerprints = {r["initial_encoder_sha256"] for r in runs}
    return {
        "runs": runs,
        "summary": summarize(runs, sides),
        "checks": {
            "same_initial_encoder": len(fingerprints) == 1,
            "steps_as_asked": all(
                r["optimizer"]["steps_min"] == r["optimizer"]["steps_max"] == r["global_step"] == setup.steps
                for r in runs
            ),
            "same_batches": all(r["same_shapes_as_planned"] for r in runs)
            and all(r.get("same_rows_as_planned", True) for r in runs),
        },
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps per run (default 40)")
    parser.add_argument(
        "--repeats", type=int, default=4, help="runs per side, alternating; the first is a warmup (default 4)"
    )
    parser.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated, from {', '.join(SIDES)}")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument(
        "--hf-optim",
        default="adamw_torch_fused",
        help="the Trainer's optim: adamw_torch_fused (its default; pal-lightning's kernel) or adamw_torch",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--encoder", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="CS224N data folder (default $PAL_DATA_DIR)"
    )
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    parser.add_argument(
        "--quick", action="store_true", help="tiny random BERT, fixture data, 3 steps of 4, 2 repeats (tests)"
    )
    args = parser.parse_args(argv)
    args.sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    if not args.sides or any(s not in SIDES for s in args.sides):
        parser.error(f"--sides {','.join(args.sides)!r}: choose from {', '.join(SIDES)}")
    if args.repeats < 2:
        parser.error("--repeats must be at least 2 (the first run of every side is a warmup)")
    if args.steps < 2:
        parser.error("--steps must be at least 2")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be at least 1")
    if not args.quick:
        args.data_dir = cs224n_data_dir(parser, args.data_dir)
    return args


def main(argv: Sequence[str] | None = None, keep: dict | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = parse_args(argv)
    import torch

    from pal_lightning.core.hub import resolve_encoder

    command = " ".join(["python benchmarks/loop_overhead.py", *(argv if argv is not None else sys.argv[1:])])
    with tempfile.TemporaryDirectory() as tmp:
        if args.quick:
            from pal_lightning.testing import write_cs224n_data

            data_dir = write_cs224n_data(Path(tmp) / "fixture")
            encoder = str(quick_encoder(Path(tmp) / "tiny_encoder"))
            args.threads = args.threads or 1
            args.steps, args.batch_size, args.max_length = min(args.steps, 3), 4, 32
            args.repeats = min(args.repeats, 2)
        else:
            data_dir, encoder = args.data_dir.resolve(), resolve_encoder(args.encoder)
        if args.threads is not None:
            torch.set_num_threads(args.threads)
        setup = Setup(
            encoder=str(encoder),
            data_dir=str(data_dir),
            steps=args.steps,
            batch_size=args.batch_size,
            max_length=args.max_length,
            lr=args.lr,
            hf_optim=args.hf_optim,
            device=args.device,
            seed=args.seed,
        )
        info = machine(torch.get_num_threads())
        result = measure(setup, args.sides, args.repeats, keep)
    info["load_avg_1min_at_end"] = os.getloadavg()[0]
    payload = {
        "command": command,
        "settings": {**asdict(setup), "encoder": args.encoder if not args.quick else "tiny random BERT"},
        "sides": args.sides,
        "repeats": args.repeats,
        "quick": args.quick,
        "machine": info,
        **result,
    }
    for name, entry in result["summary"]["ratios"].items():
        print(
            f"{name}: median {entry['median']:.3f} (min {entry['min']:.3f}, max {entry['max']:.3f}, "
            f"{entry['n']} repeats); target <= {entry['target']}: {'met' if entry['met'] else 'not met'}"
        )
    print("checks:", result["checks"])
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0 if all(result["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())

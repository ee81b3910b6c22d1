"""Median training-step time of PALs against the shared baseline, on the real encoder.

One training step = forward, cross-entropy loss on a linear head over mean-pooled states, backward and an
AdamW step over every parameter (pretrained encoder included, as in full multi-task fine-tuning). Both
models are built in the same process from the same checkpoint, fed the same batches, and timed
interleaved (the order alternates every step) after a warm-up, so machine noise hits both alike.

* shared: ``adapter="none"``, the encoder plus a linear head (only the head is task-specific);
* pals: ``adapter="pals"`` with the default size (102 for all-MiniLM-L6-v2) on every layer.

Usage::

    python benchmarks/step_time.py                       # batch 32, sequence 64, default encoder
    python benchmarks/step_time.py --json results/step_time.json --steps 30 --device cuda
    python benchmarks/step_time.py --threads 1     # steadier on a CPU shared with other jobs

Prints both medians and their ratio; ``--json PATH`` writes
``{"shared_ms": ..., "pals_ms": ..., "pal_over_shared": ..., ...}`` (plus the per-step times and the
median of per-batch ratios, a check on noise). Target: pal_over_shared <= 1.10.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

from pal_lightning.hub import DEFAULT_ENCODER  # noqa: E402
from pal_lightning.modeling import MultiTaskBert  # noqa: E402

TASK = "bench"


class _Classifier(nn.Module):
    """Encoder + mean pooling + one linear head: the smallest complete training model."""

    def __init__(self, encoder: MultiTaskBert, num_labels: int = 2) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(encoder.hidden_size, num_labels)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids, attention_mask, task=TASK)
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return self.head(pooled)


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


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _step(model: _Classifier, optimizer: torch.optim.Optimizer, batch: tuple, device: torch.device) -> float:
    ids, mask, labels = batch
    _sync(device)
    start = time.perf_counter()
    loss = nn.functional.cross_entropy(model(ids, mask), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    _sync(device)
    return (time.perf_counter() - start) * 1000.0


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoder", default=DEFAULT_ENCODER, help="encoder name or local directory")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per model")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per model first")
    parser.add_argument("--device", default="auto", help="auto (cuda if available), cpu or cuda")
    parser.add_argument("--attn-implementation", default=None, help="BERT attention: sdpa (default) or eager")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write the results to this JSON file")
    args = parser.parse_args(argv)

    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    models: dict[str, _Classifier] = {}
    optimizers: dict[str, torch.optim.Optimizer] = {}
    for name, adapter in (("shared", "none"), ("pals", "pals")):
        encoder = MultiTaskBert.from_pretrained(
            args.encoder, [TASK], adapter=adapter, attn_implementation=args.attn_implementation
        )
        model = _Classifier(encoder).to(device).train()
        models[name] = model
        optimizers[name] = torch.optim.AdamW(model.parameters(), lr=2e-5)
    vocab = models["shared"].encoder.config.vocab_size
    batches = _batches(args.warmup + args.steps, args.batch_size, args.seq_len, vocab, device, args.seed)

    times: dict[str, list[float]] = {"shared": [], "pals": []}
    for i, batch in enumerate(batches):
        order = ("shared", "pals") if i % 2 == 0 else ("pals", "shared")
        for name in order:
            elapsed = _step(models[name], optimizers[name], batch, device)
            if i >= args.warmup:
                times[name].append(elapsed)

    shared_ms = statistics.median(times["shared"])
    pals_ms = statistics.median(times["pals"])
    result = {
        "shared_ms": round(shared_ms, 3),
        "pals_ms": round(pals_ms, 3),
        "pal_over_shared": round(pals_ms / shared_ms, 4),
        # median of per-batch ratios: both models ran that batch back to back, so slow drift cancels
        "pal_over_shared_paired": round(
            statistics.median([p / s for p, s in zip(times["pals"], times["shared"], strict=True)]), 4
        ),
        "shared_steps_ms": [round(t, 2) for t in times["shared"]],
        "pals_steps_ms": [round(t, 2) for t in times["pals"]],
        "encoder": args.encoder,
        "pal_size": models["pals"].encoder.pal_size,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "steps": args.steps,
        "warmup": args.warmup,
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"cpu ({torch.get_num_threads()} threads)",
        "torch": torch.__version__,
    }
    print(
        f"device {result['device']}, batch {args.batch_size} x {args.seq_len}, {args.steps} timed steps each\n"
        f"shared (adapter none): {shared_ms:9.2f} ms/step (median)\n"
        f"pals (d_s {result['pal_size']}):       {pals_ms:9.2f} ms/step (median)\n"
        f"pal/shared: {result['pal_over_shared']:.3f} (ratio of medians; median of per-batch ratios "
        f"{result['pal_over_shared_paired']:.3f}; target <= 1.10)"
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])

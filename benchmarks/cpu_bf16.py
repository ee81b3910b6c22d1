"""Why ``precision: auto`` picks bf16-mixed on some CPUs, and why attention stays fp32 there: the kernels, side by side.

Two measurements in one process, each kernel interleaved with its counterpart (medians of ``--reps``):

1. **Matmuls** at the shapes of a MiniLM training step (batch 32 x 64 = 2048 rows; width 384, feed-forward
   1536) and the 2048-square roof, in fp32 and in bf16: GFLOP/s and the bf16/fp32 speed-up. On a CPU
   with ``avx512_bf16`` or AMX, bf16 is several times faster; without them torch emulates it.
2. **Attention** (forward and backward of ``scaled_dot_product_attention``) at BERT's shape in MiniLM (12
   heads of 32) and the PALs' (6 heads of 17), 64 positions, batch 32, under CPU autocast to bf16:
   torch's kernel on bf16 inputs (what autocast gives), and the library's
   :func:`pal_lightning.modeling.attention.attention` (fp32 inside, autocast off around it).

Usage::

    python benchmarks/cpu_bf16.py --json benchmarks/results_speed/cpu_bf16_kernels.json
    python benchmarks/cpu_bf16.py --threads 1     # steadier on a shared machine
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from pal_lightning.core.private_api import cpu_bf16_instructions
from pal_lightning.modeling.attention import attention

#: (rows, inner, cols) of the step's matmuls, then the roof
MATMULS = ((2048, 384, 384), (2048, 384, 1536), (2048, 1536, 384), (2048, 2048, 2048))
#: (name, heads, head size)
ATTENTION = (("bert", 12, 32), ("pal", 6, 17))


def _median_ms(fn: Callable[[], object], reps: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000.0


def matmuls(reps: int, shapes: tuple[tuple[int, int, int], ...] = MATMULS) -> list[dict]:
    """GFLOP/s of each shape in fp32 and bf16, and the speed-up."""
    rows = []
    for m, k, n in shapes:
        found = {}
        for dtype in (torch.float32, torch.bfloat16):
            a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
            found[dtype] = _median_ms(lambda a=a, b=b: a @ b, reps)
        flops = 2 * m * k * n
        rows.append(
            {
                "shape": [m, k, n],
                "fp32_gflop_per_s": flops / found[torch.float32] / 1e6,
                "bf16_gflop_per_s": flops / found[torch.bfloat16] / 1e6,
                "bf16_speedup": round(found[torch.float32] / found[torch.bfloat16], 3),
            }
        )
    return rows


def _torch_bf16(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype))


def _library(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return attention(q, k, v, attn_mask=mask)


def _forward_backward(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> None:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = fn(*inputs)
    out.float().sum().backward()


def attentions(reps: int, batch: int = 32, seq: int = 64, shapes: tuple = ATTENTION) -> list[dict]:
    """Forward + backward ms of bf16 SDPA under autocast against the library's fp32-inside attention."""
    rows = []
    for name, heads, size in shapes:
        q, k, v = (
            torch.randn(batch, heads, seq, size, dtype=torch.bfloat16, requires_grad=True) for _ in range(3)
        )
        mask = torch.zeros(batch, 1, 1, seq)
        torch_ms = _median_ms(functools.partial(_forward_backward, _torch_bf16, q, k, v, mask), reps)
        ours_ms = _median_ms(functools.partial(_forward_backward, _library, q, k, v, mask), reps)
        rows.append(
            {
                "attention": name,
                "shape": [batch, heads, seq, size],
                "torch_bf16_ms": torch_ms,
                "library_fp32_inside_ms": ours_ms,
                "speedup": round(torch_ms / ours_ms, 3),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10, help="timed repetitions per kernel")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--quick", action="store_true", help="tiny shapes (the test)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    quick = {"shapes": ((64, 32, 32),)}
    result = {
        "cpu_bf16_instructions": cpu_bf16_instructions() or "none",
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "matmul": matmuls(args.reps, **quick) if args.quick else matmuls(args.reps),
        "attention": attentions(args.reps, 4, 8, (("tiny", 2, 4),)) if args.quick else attentions(args.reps),
    }
    print(f"CPU bf16 instructions: {result['cpu_bf16_instructions']}; {result['threads']} threads")
    for row in result["matmul"]:
        print(
            f"matmul {row['shape']}: fp32 {row['fp32_gflop_per_s']:.1f}, bf16 {row['bf16_gflop_per_s']:.1f} "
            f"GFLOP/s ({row['bf16_speedup']:.2f}x)"
        )
    for row in result["attention"]:
        print(
            f"attention {row['attention']} {row['shape']} fwd+bwd under bf16 autocast: torch's bf16 kernel "
            f"{row['torch_bf16_ms']:.2f} ms, the library's (fp32 inside) {row['library_fp32_inside_ms']:.2f} ms "
            f"({row['speedup']:.2f}x)"
        )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])

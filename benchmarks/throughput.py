"""Throughput figures for the step benchmarks: the device's matmul roof, counted model FLOPs, precision.

* :func:`matmul_roof`: the arithmetic rate one large square matmul reaches in a given dtype, measured in
  the calling process (so the same threads, clocks and contention as the steps it is compared with);
* :func:`count_flops` (:func:`count_flops_by_op` per operator): the FLOPs of one call, counted by ``torch.utils.flop_counter.FlopCounterMode``
  (matmuls, ``bmm`` and the fused attention kernels, forward and backward, on the real shapes);
* :func:`mfu`: achieved FLOP/s over the roof;
* :class:`Precision`: Lightning's precision names (``32-true``, ``bf16-mixed``, ``16-mixed``) as an
  autocast context and, for ``16-mixed``, a gradient scaler, as Lightning's mixed-precision plugin does.

For an encoder of ``L`` layers, width ``d``, ``P`` parameters in its linear layers and ``T = B x s``
token positions, the counted training FLOPs (forward + backward) of a shared step are
``6 P T + 12 L s d T``: 2 per multiply-add, backward twice the forward (gradients of the input and the
weights), and the two attention products ``Q K^T`` and ``A V`` of ``2 s d`` multiply-adds per position
and layer. ``tests/benchmarks/test_step_time.py`` checks the counter against this formula.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

PRECISIONS = ("32-true", "bf16-mixed", "16-mixed")
_DTYPES = {"32-true": torch.float32, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously; a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_roof(device: torch.device, dtype: torch.dtype, size: int, repeats: int = 5) -> float:
    """FLOP/s of a ``size x size`` by ``size x size`` matmul in ``dtype`` (median of ``repeats``, 1 warm-up).

    The matmul counts ``2 size^3`` FLOPs. In fp32 it runs as the device runs fp32 matmuls by default
    (on NVIDIA cards torch does not use TF32 for them unless told), as the ``32-true`` steps do.
    """
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(size, size, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(size, size, generator=gen).to(device=device, dtype=dtype)
    times = []
    for i in range(repeats + 1):
        sync(device)
        start = time.perf_counter()
        torch.mm(a, b)
        sync(device)
        if i > 0:  # the first call warms up (kernel choice, allocation)
            times.append(time.perf_counter() - start)
    return 2.0 * size**3 / statistics.median(times)


def count_flops(fn: Callable[[], Any]) -> tuple[Any, int]:
    """Run ``fn()`` once under ``FlopCounterMode``; its result and the FLOPs counted.

    Only the operations the counter knows are counted (matmuls, convolutions, attention kernels):
    element-wise work (layer norms, activations, the optimizer's update) is not model arithmetic.
    """
    out, by_op = count_flops_by_op(fn)
    return out, sum(by_op.values())


def count_flops_by_op(fn: Callable[[], Any]) -> tuple[Any, dict[str, int]]:
    """Run ``fn()`` once under ``FlopCounterMode``; its result and the FLOPs counted per operator
    (``aten.mm``, ``aten.addmm``, ``aten.bmm``, the attention kernels and their backward ones)."""
    with FlopCounterMode(display=False) as counter:
        out = fn()
    return out, {str(op): int(n) for op, n in counter.get_flop_counts()["Global"].items()}


def mfu(flop_per_step: float, step_seconds: float, roof_flop_per_s: float) -> float:
    """Model FLOPs utilisation: the step's FLOPs per second as a fraction of the measured roof."""
    return flop_per_step / step_seconds / roof_flop_per_s


@dataclass
class Precision:
    """A Lightning precision name for hand-written training steps."""

    name: str
    """``32-true``, ``bf16-mixed`` or ``16-mixed``."""
    device: torch.device
    """Where the step runs (autocast and the gradient scaler are per device type)."""
    scaler: torch.amp.GradScaler | None = field(init=False, default=None)
    """``16-mixed`` only: scales the loss so that fp16 gradients do not underflow."""

    def __post_init__(self) -> None:
        if self.name not in PRECISIONS:
            raise ValueError(f"precision {self.name!r}: choose from {', '.join(PRECISIONS)}")
        if self.name == "16-mixed":
            self.scaler = torch.amp.GradScaler(self.device.type)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the step's matmuls (and so of the roof it is compared with)."""
        return _DTYPES[self.name]

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        """Mixed precision: matmuls in the low dtype, weights and optimizer in fp32."""
        if self.name == "32-true":
            yield
            return
        with torch.autocast(self.device.type, dtype=self.dtype):
            yield

    def backward(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
        """``loss.backward()``, scaled for ``16-mixed`` and then unscaled, so later code sees true gradients."""
        if self.scaler is None:
            loss.backward()
            return
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer step (skipped by the scaler when a gradient overflowed)."""
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)
        self.scaler.update()

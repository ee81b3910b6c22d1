"""``precision: auto``: the fastest arithmetic the device runs natively, chosen when the Trainer is built.

The right mixed precision depends on the machine, not the recipe (benchmarks/RESULTS.md, "bf16 on the
CPU"), so one config runs fast everywhere. :func:`choose_precision` decides, :func:`device_capabilities` reads the machine and
:class:`PalTrainer` is Lightning's ``Trainer`` with ``"auto"`` accepted (the CLI's trainer class).

::

    device                          capability                      auto becomes
    ------------------------------  ------------------------------  ------------
    CUDA GPU                        bf16 (compute capability >= 8)  bf16-mixed
    CUDA GPU                        tensor cores (>= 7.0), no bf16  16-mixed
    CUDA GPU                        older                           32-true
    CPU                             avx512_bf16 or AMX              bf16-mixed
    CPU                             neither (bf16 emulated)         32-true
    anything else (MPS, TPU, ...)   not measured here               32-true
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.utilities import rank_zero_info

from pal_lightning.core.private_api import LightningPrecision, cpu_bf16_instructions

AUTO = "auto"


@dataclass(frozen=True)
class DeviceCapabilities:
    """What the device that will train can do natively, as :func:`choose_precision` needs it."""

    device: str
    """``"cuda"``, ``"cpu"`` or another accelerator name (``"mps"``, ...)."""
    bf16: bool = False
    """bf16 matrix arithmetic in hardware: CUDA compute capability >= 8.0, or a CPU with ``avx512_bf16``/AMX."""
    fp16_tensor_cores: bool = False
    """CUDA compute capability >= 7.0 (V100, T4): fp16 matmuls on tensor cores."""
    detail: str = ""
    """What was detected, for the log line (``"NVIDIA T4, compute capability 7.5"``, ``"avx512_bf16"``)."""


def choose_precision(caps: DeviceCapabilities) -> str:
    """The Lightning precision that ``auto`` stands for on a device with ``caps`` (see the module table)."""
    if caps.device == "cuda":
        if caps.bf16:
            return "bf16-mixed"
        return "16-mixed" if caps.fp16_tensor_cores else "32-true"
    if caps.device == "cpu":
        return "bf16-mixed" if caps.bf16 else "32-true"
    return "32-true"


def target_device(accelerator: Any) -> str:
    """The device type a Trainer with ``accelerator`` trains on: ``"cuda"``, ``"cpu"`` or another name
    (``auto``/``gpu`` resolve as Lightning does; an ``Accelerator`` instance by its class name)."""
    name = accelerator if isinstance(accelerator, str) else type(accelerator).__name__
    name = name.lower().replace("accelerator", "")
    if name in ("auto", "gpu", "cuda"):
        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        if name != "cuda" and mps is not None and mps.is_available():
            return "mps"
        return "cpu" if name == "auto" else name
    return name


def device_capabilities(accelerator: Any = "auto") -> DeviceCapabilities:
    """Read what the device of ``accelerator`` can do (the first CUDA device stands for all of them)."""
    device = target_device(accelerator)
    if device == "cuda" and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(0)
        return DeviceCapabilities(
            device="cuda",
            bf16=major >= 8,
            fp16_tensor_cores=major >= 7,
            detail=f"{torch.cuda.get_device_name(0)}, compute capability {major}.{minor}",
        )
    if device == "cpu":
        found = cpu_bf16_instructions()
        return DeviceCapabilities(device="cpu", bf16=bool(found), detail=found or "no bf16 instructions")
    return DeviceCapabilities(device=device, detail="precision not measured on this device")


def resolve_precision(precision: Any, accelerator: Any = "auto") -> Any:
    """``precision`` unchanged, or for ``"auto"`` the choice of :func:`choose_precision` on this machine."""
    if precision != AUTO:
        return precision
    caps = device_capabilities(accelerator)
    chosen = choose_precision(caps)
    rank_zero_info(f"precision auto: {chosen} ({caps.device}: {caps.detail})")
    return chosen


class PalTrainer(Trainer):
    """Lightning's :class:`~lightning.pytorch.Trainer`, with ``precision="auto"`` (see the module docstring).

    In Python, ``Trainer(precision=resolve_precision("auto"))`` does the same.
    """

    def __init__(
        self, *args: Any, precision: LightningPrecision | Literal["auto"] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(
            *args, precision=resolve_precision(precision, kwargs.get("accelerator", "auto")), **kwargs
        )

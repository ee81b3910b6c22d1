"""``precision: auto``: the fastest arithmetic the device runs natively, chosen when the Trainer is built.

bf16-mixed on a CUDA GPU of compute capability >= 8 or a CPU with avx512_bf16/AMX, 16-mixed on a GPU with
tensor cores (>= 7.0), else 32-true (also on MPS, TPU and other devices).
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
    """What the device that will train (``"cuda"``, ``"cpu"`` or another accelerator name) can do natively:
    bf16 matrix arithmetic, fp16 matmuls on tensor cores (CUDA compute capability >= 7.0); ``detail``: what
    was detected, for the log line."""

    device: str
    bf16: bool = False
    fp16_tensor_cores: bool = False
    detail: str = ""


def choose_precision(caps: DeviceCapabilities) -> str:
    """The Lightning precision that ``auto`` stands for on a device with ``caps``."""
    if caps.device in ("cuda", "cpu") and caps.bf16:
        return "bf16-mixed"
    return "16-mixed" if caps.device == "cuda" and caps.fp16_tensor_cores else "32-true"


def target_device(accelerator: Any) -> str:
    """The device type a Trainer with ``accelerator`` (a name or an ``Accelerator``) trains on."""
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
    """What the device of ``accelerator`` can do (the first CUDA device stands for all)."""
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
    chosen = choose_precision(caps := device_capabilities(accelerator))
    rank_zero_info(f"precision auto: {chosen} ({caps.device}: {caps.detail})")
    return chosen


class PalTrainer(Trainer):
    """Lightning's ``Trainer`` accepting ``precision="auto"`` (``Trainer(precision=resolve_precision("auto"))``)."""

    def __init__(
        self, *args: Any, precision: LightningPrecision | Literal["auto"] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(
            *args, precision=resolve_precision(precision, kwargs.get("accelerator", "auto")), **kwargs
        )

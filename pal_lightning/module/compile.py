"""``MultiTaskModule(compile=...)``: the encoder (only it, ``dynamic=True``: one graph per task serves every
padded length) called through ``torch.compile``, lazily; where that fails, one warning and the eager encoder.
The compiled function lives outside the module tree, so checkpoints are an eager run's.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from pal_lightning.core.contracts import datamodule_of
from pal_lightning.core.distributed import is_main_process
from pal_lightning.core.errors import PalUserError
from pal_lightning.core.private_api import COMPILER_MODULES

#: ``torch.compile``'s modes (inductor only)
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: the modes that record CUDA graphs on a GPU
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def compile_backend(option: bool | str) -> str | None:
    """The backend ``MultiTaskModule(compile=option)`` asks for: ``None`` (eager), ``"inductor"`` for ``True``."""
    if option is False:
        return None
    return "inductor" if option is True else str(option)


def check_compile_options(option: bool | str, mode: str | None) -> None:
    """Refuse a ``compile_mode`` that cannot act: an unknown one, or one without inductor (others ignore it)."""
    if mode is not None and mode not in COMPILE_MODES:
        raise PalUserError(
            f"model.compile_mode {mode!r} is not a torch.compile mode. Use one of {', '.join(COMPILE_MODES)}, "
            "or leave it null."
        )
    backend = compile_backend(option)
    if mode is not None and backend != "inductor":
        what = "model.compile is false" if backend is None else f"model.compile names the {backend!r} backend"
        raise PalUserError(
            f"model.compile_mode {mode!r} is set but {what}: only inductor applies a mode. Set "
            "model.compile true, or leave compile_mode null."
        )


def owns_its_output(mode: str | None, grad_enabled: bool, on_cuda: bool) -> bool:
    """Whether a compiled call's output must be copied: a CUDA graph's output made without a pending
    backward is overwritten by the next call."""
    return mode in CUDA_GRAPH_MODES and on_cuda and not grad_enabled


def cuda_graph_padding_warning(mode: str | None, pad_to_multiple_of: int | None, on_cuda: bool) -> str | None:
    """The warning for CUDA graphs over unbucketed batch lengths (a graph, and its memory, per length), or ``None``."""
    if mode not in CUDA_GRAPH_MODES or not on_cuda or pad_to_multiple_of not in (None, 1):
        return None
    return (
        f"model.compile_mode {mode!r} records a CUDA graph per distinct batch shape, and batches padded to "
        "their longest example make up to one graph (and its memory) per length. Set data.pad_to_multiple_of "
        "(e.g. 16) so that a few lengths recur."
    )


def warn_cuda_graphs_without_buckets(trainer: Any, call: EncoderCall) -> None:
    """:func:`cuda_graph_padding_warning` once, on rank 0 (``trainer`` may be ``None``)."""
    if trainer is None or not call.compiling:
        return
    config = getattr(datamodule_of(trainer), "config", None)
    root = getattr(trainer.strategy, "root_device", torch.device("cpu"))  # setup runs before the move to it
    message = cuda_graph_padding_warning(
        call.mode, getattr(config, "pad_to_multiple_of", None), root.type == "cuda"
    )
    if message is not None and is_main_process(trainer):
        warnings.warn(message, UserWarning, stacklevel=3)


def is_compile_failure(error: BaseException) -> bool:
    """Whether ``error`` came from the compiler stack rather than the model."""
    return type(error).__module__.startswith(COMPILER_MODULES)


class EncoderCall:
    """Calls ``module`` through ``torch.compile(module, backend=..., dynamic=..., mode=...)`` (``backend``
    ``None``: eagerly), falling back to ``module`` itself with one warning when compiling fails."""

    def __init__(
        self,
        module: nn.Module,
        backend: str | Callable[..., Any] | None,
        dynamic: bool | None = True,
        mode: str | None = None,
    ) -> None:
        self.module = module
        self.backend = backend
        self.dynamic = dynamic
        self.mode = mode
        self._compiled: Callable[..., Any] | None = None
        self.fell_back = False

    @property
    def compiling(self) -> bool:
        """Whether calls go through ``torch.compile`` (asked for and not fallen back)."""
        return self.backend is not None and not self.fell_back

    def _fall_back(self, error: BaseException) -> None:
        self.fell_back, self._compiled = True, None
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        warnings.warn(
            f"torch.compile of the encoder failed ({type(error).__name__}: {first_line}); training continues "
            "with the eager encoder. Set model.compile false to silence this, or a backend that works here "
            "(e.g. 'aot_eager' where inductor lacks a C compiler).",
            RuntimeWarning,
            stacklevel=3,
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.compiling:
            return self.module(*args, **kwargs)
        try:
            if self._compiled is None:
                assert self.backend is not None  # compiling
                self._compiled = torch.compile(
                    self.module, backend=self.backend, dynamic=self.dynamic, mode=self.mode
                )
            output = self._compiled(*args, **kwargs)
        except Exception as err:
            # from torch.compile itself, a RuntimeError: compiling is not supported on this Python / platform
            if not (isinstance(err, RuntimeError) if self._compiled is None else is_compile_failure(err)):
                raise
            self._fall_back(err)
            return self.module(*args, **kwargs)
        if isinstance(output, torch.Tensor) and owns_its_output(
            self.mode, torch.is_grad_enabled(), output.device.type == "cuda"
        ):
            return output.clone()
        return output

    def __getstate__(self) -> dict[str, Any]:
        # the compiled function's code caches do not pickle (ddp_spawn, deepcopy): rebuilt lazily
        return {**self.__dict__, "_compiled": None}

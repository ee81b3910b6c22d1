"""``MultiTaskModule(compile=...)``: the encoder called through ``torch.compile``, or eagerly where it cannot be.

On a GPU a MiniLM step is bound by kernel launches (issue 15); a compiled encoder fuses the element-wise
work around the matmuls of every layer and its PAL. Only the encoder is compiled: it is where the time
goes, and it is the same module for every task (the task's adapter is picked by a string that
``torch.compile`` guards on, so each task gets its own graph once; its default cache holds 8, and
beyond it the extra tasks run eagerly). Heads, losses and GEM's bookkeeping stay eager.

Each task gets one graph, compiled at its first call: the graph is compiled with dynamic batch and
sequence sizes (``dynamic=True``), because batches are padded to their longest example and so change
length from batch to batch. With static shapes torch compiles a graph for the first length it sees and
recompiles, dynamic, at the next one (three compilations for two tasks of changing lengths where one per
task suffices: ``tests/test_compile_option.py`` counts them). Alternating tasks reuses their graphs
without recompiling. A compiled graph is also
kept per grad mode and autocast state (training and evaluation), within the same cache.

Compiling is lazy: :class:`EncoderCall` compiles at the first call, and if ``torch.compile`` is not
supported here (a Python version it does not support yet) or the backend fails (inductor without a C
compiler, an operator it cannot lower), it warns once and runs the encoder eagerly from then on. An error
of the model itself (an unknown task, a bad batch) is not a compile failure and is raised as usual.
The module's parameters and state-dict names are untouched: the compiled function is kept outside the
module tree, so checkpoints of compiled and eager runs are interchangeable.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from pal_lightning.core.private_api import COMPILER_MODULES


def compile_backend(option: bool | str) -> str | None:
    """The ``torch.compile`` backend that ``MultiTaskModule(compile=option)`` asks for: ``None`` (eager) for
    ``False``, ``"inductor"`` (torch's default) for ``True``, else the named backend."""
    if option is False:
        return None
    return "inductor" if option is True else str(option)


def is_compile_failure(error: BaseException) -> bool:
    """Whether ``error`` came from the compiler stack (dynamo, inductor, AOT autograd) rather than the model."""
    return type(error).__module__.startswith(COMPILER_MODULES)


class EncoderCall:
    """Calls ``module`` through ``torch.compile(module, backend=backend)``, falling back to ``module`` itself.

    Args:
        module: the encoder.
        backend: a ``torch.compile`` backend name or callable; ``None`` calls ``module`` eagerly.
        dynamic: ``torch.compile``'s ``dynamic``: ``True`` (one graph per task whatever the batch's size and
            length), ``None`` (torch's default: static at first, dynamic after a change of shape).
    """

    def __init__(
        self, module: nn.Module, backend: str | Callable[..., Any] | None, dynamic: bool | None = True
    ) -> None:
        self.module = module
        self.backend = backend
        self.dynamic = dynamic
        self._compiled: Callable[..., Any] | None = None
        self.fell_back = False
        """Whether compiling failed and the encoder now runs eagerly."""

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
        if self._compiled is None:
            assert self.backend is not None  # compiling
            try:
                self._compiled = torch.compile(self.module, backend=self.backend, dynamic=self.dynamic)
            except RuntimeError as err:  # compile is not supported on this Python / platform
                self._fall_back(err)
                return self.module(*args, **kwargs)
        try:
            return self._compiled(*args, **kwargs)
        except Exception as err:
            if not is_compile_failure(err):
                raise
            self._fall_back(err)
            return self.module(*args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        # the compiled function holds code caches that do not pickle (ddp_spawn, deepcopy): rebuilt lazily
        return {**self.__dict__, "_compiled": None}

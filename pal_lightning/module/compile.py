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

``compile_mode`` is ``torch.compile``'s ``mode``, for inductor only. ``"reduce-overhead"`` records each
compiled graph as a CUDA graph on a GPU, so that a step's thousands of kernels are launched by one call
instead of one host call each: the lever for a step that waits for the host (``benchmarks/RESULTS.md``,
"Host cost per step"). A CUDA graph holds one set of shapes, so inductor records one per distinct batch
shape of a task's dynamic graph: pad the batches to a few lengths (``data.pad_to_multiple_of``, e.g. 16),
or every new length records another graph (:func:`cuda_graph_padding_warning`). On a CPU there are no
CUDA graphs and the mode compiles as ``"default"`` does.

CUDA graphs own their outputs' memory: a call with no backward pending (evaluation, prediction: no
grad) starts a new iteration and overwrites the previous call's outputs. A siamese pair encodes its two
sentences by two calls before it compares them, so :class:`EncoderCall` hands out a copy of a CUDA-graph
output made without grad (:func:`owns_its_output`). With grad on, the first call's pending backward keeps
the second from starting an iteration, and training needs no copy.

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

from pal_lightning.core.contracts import datamodule_of
from pal_lightning.core.distributed import is_main_process
from pal_lightning.core.errors import PalUserError
from pal_lightning.core.private_api import COMPILER_MODULES

#: ``torch.compile``'s modes (``torch._inductor.list_mode_options()``), each for the inductor backend
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: the modes that record CUDA graphs on a GPU
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def compile_backend(option: bool | str) -> str | None:
    """The ``torch.compile`` backend that ``MultiTaskModule(compile=option)`` asks for: ``None`` (eager) for
    ``False``, ``"inductor"`` (torch's default) for ``True``, else the named backend."""
    if option is False:
        return None
    return "inductor" if option is True else str(option)


def check_compile_options(option: bool | str, mode: str | None) -> None:
    """Refuse a ``compile_mode`` that cannot act: an unknown one, or one without inductor to apply it (other
    backends ignore ``mode`` with no more than a log line, so the run would not be what was asked for)."""
    if mode is None:
        return
    if mode not in COMPILE_MODES:
        raise PalUserError(
            f"model.compile_mode {mode!r} is not a torch.compile mode. Use one of {', '.join(COMPILE_MODES)}, "
            "or leave it null."
        )
    backend = compile_backend(option)
    if backend != "inductor":
        what = "model.compile is false" if backend is None else f"model.compile names the {backend!r} backend"
        raise PalUserError(
            f"model.compile_mode {mode!r} is set but {what}: only inductor applies a mode. Set "
            "model.compile true, or leave compile_mode null."
        )


def owns_its_output(mode: str | None, grad_enabled: bool, on_cuda: bool) -> bool:
    """Whether a compiled call's output must be copied before it is handed out: a CUDA graph's output made
    without a pending backward is overwritten by the next call (see the module's docstring)."""
    return mode in CUDA_GRAPH_MODES and on_cuda and not grad_enabled


def cuda_graph_padding_warning(mode: str | None, pad_to_multiple_of: int | None, on_cuda: bool) -> str | None:
    """The warning for CUDA graphs over batches of any length (one graph recorded per length, each holding
    its own memory), or ``None`` where the lengths are bucketed, the mode records no CUDA graph or the
    device is not a GPU."""
    if mode not in CUDA_GRAPH_MODES or not on_cuda or pad_to_multiple_of not in (None, 1):
        return None
    return (
        f"model.compile_mode {mode!r} records a CUDA graph per distinct batch shape, and batches padded to "
        "their longest example make up to one graph (and its memory) per length. Set data.pad_to_multiple_of "
        "(e.g. 16) so that a few lengths recur."
    )


def warn_cuda_graphs_without_buckets(trainer: Any, call: EncoderCall) -> None:
    """At the module's ``setup``: one warning (rank 0) where CUDA graphs would record a graph per batch
    length (:func:`cuda_graph_padding_warning`). ``trainer`` may be ``None`` (a module used alone)."""
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
    """Whether ``error`` came from the compiler stack (dynamo, inductor, AOT autograd) rather than the model."""
    return type(error).__module__.startswith(COMPILER_MODULES)


class EncoderCall:
    """Calls ``module`` through ``torch.compile(module, backend=backend)``, falling back to ``module`` itself.

    Args:
        module: the encoder.
        backend: a ``torch.compile`` backend name or callable; ``None`` calls ``module`` eagerly.
        dynamic: ``torch.compile``'s ``dynamic``: ``True`` (one graph per task whatever the batch's size and
            length), ``None`` (torch's default: static at first, dynamic after a change of shape).
        mode: ``torch.compile``'s ``mode`` (:data:`COMPILE_MODES`; inductor only), ``None`` for its default.
    """

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
                self._compiled = torch.compile(
                    self.module, backend=self.backend, dynamic=self.dynamic, mode=self.mode
                )
            except RuntimeError as err:  # compile is not supported on this Python / platform
                self._fall_back(err)
                return self.module(*args, **kwargs)
        try:
            output = self._compiled(*args, **kwargs)
        except Exception as err:
            if not is_compile_failure(err):
                raise
            self._fall_back(err)
            return self.module(*args, **kwargs)
        if isinstance(output, torch.Tensor) and owns_its_output(
            self.mode, torch.is_grad_enabled(), output.device.type == "cuda"
        ):
            return output.clone()
        return output

    def __getstate__(self) -> dict[str, Any]:
        # the compiled function holds code caches that do not pickle (ddp_spawn, deepcopy): rebuilt lazily
        return {**self.__dict__, "_compiled": None}

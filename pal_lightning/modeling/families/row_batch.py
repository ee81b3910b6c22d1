"""A mixed batch's call with every present task's module at once: the method's
:meth:`~pal_lightning.modeling.methods.base.AdapterMethod.batch_rows` module over all the sorted rows,
which the hooks then run like one task's module (docs/design.md §2, "Mixed-task batches")."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from pal_lightning.core.errors import PalUserError
from pal_lightning.modeling.families.routing import TaskRouting
from pal_lightning.modeling.families.wiring import TaskCall
from pal_lightning.modeling.methods.base import AdapterMethod
from pal_lightning.modeling.methods.batched import RowWeights


def row_tasks(routing: TaskRouting, device: torch.device) -> torch.Tensor:
    """``LongTensor[B]``: each sorted row's index into ``routing.tasks``."""
    counts = torch.tensor([stop - start for _, start, stop in routing.slices()])
    return torch.repeat_interleave(torch.arange(len(counts)), counts).to(device)


def batched_call(
    method: AdapterMethod,
    adapters: nn.ModuleDict,
    routing: TaskRouting,
    layers: Sequence[int],
    num_layers: int,
    attention_bias: torch.Tensor | None,
    mode: str = "gather",
) -> TaskCall | None:
    """The call of ``routing``'s sorted rows with ``method``'s one module for all of them; ``None`` where the
    hooks must loop: a method without :meth:`~AdapterMethod.batch_rows`, one outside the layers (a block on
    top), groups of individual layers (their copies run per group), no present task with a module, or
    ``mode`` ``"auto"`` on the CPU (where the step is arithmetic, the loop as fast: docs/design.md §2)."""
    if mode not in ("auto", "gather"):
        raise PalUserError(
            f"encoder.mixed_rows must be 'auto', 'gather' or 'loop', got {mode!r}: 'auto' runs the tasks' "
            "modules at once off the CPU and loops over the tasks on it."
        )
    if not method.where.in_layers or routing.groups:
        return None
    modules = [adapters[task] if task in adapters else None for task in routing.tasks]
    present = [m for m in modules if m is not None]
    if not present:
        return None
    device = next(present[0].parameters()).device
    if mode == "auto" and device.type == "cpu":
        return None
    module = method.batch_rows(modules, RowWeights(row_tasks(routing, device)))
    if module is None:
        return None
    return method.where.call(module, layers, num_layers, attention_bias, None)

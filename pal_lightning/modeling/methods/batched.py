"""Every present task's Linear on its own rows of a mixed batch in one batched product (the gather idea of
Punica's and S-LoRA's multi-adapter kernels): the tasks' weights are stacked into ``[K, out, in]``, each
row gathers its task's matrix and one ``baddbmm`` runs all rows, where the hooks' loop would run one
product per task present (docs/design.md §2, "Mixed-task batches").

The stacks are built from the tasks' own Parameters in each forward, so gradients reach them as in the
loop; without gradients (inference) a stack is reused by the layers of one forward that share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from pal_lightning.modeling.families.wiring import check_rows


def batch_exactly(
    kind: type, batched: type[BatchedModules], modules: Sequence[nn.Module | None], rows: RowWeights
) -> nn.Module | None:
    """``batched(modules, rows)`` when every module is exactly a ``kind`` or ``None``, else ``None``: a
    method batches only the modules it built (a subclass may compute something else)."""
    return batched(modules, rows) if all(m is None or type(m) is kind for m in modules) else None


def stack_linears(linears: Sequence[nn.Linear | None]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(weight [K, out, in], bias [K, out] or None)`` of ``linears``; a ``None`` (a task without a
    module) stacks zeros, so its rows get an exact zero. Raises ``ValueError`` when all are ``None``."""
    template = next((linear for linear in linears if linear is not None), None)
    if template is None:
        raise ValueError("no Linear to stack: every task is None")

    def stack(name: str) -> torch.Tensor:
        like = getattr(template, name)
        return torch.stack(
            [like.new_zeros(()).expand_as(like) if lin is None else getattr(lin, name) for lin in linears]
        )

    return stack("weight"), None if template.bias is None else stack("bias")


class RowWeights:
    """The per-row products of one mixed forward: ``row_tasks`` (``LongTensor[B]``) gives each sorted row's
    index into the tasks' lists of Linears (:meth:`linear`)."""

    def __init__(self, row_tasks: torch.Tensor) -> None:
        self.row_tasks = row_tasks
        self._gathered: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor | None]] = {}

    @property
    def size(self) -> int:
        """B, the number of rows."""
        return int(self.row_tasks.shape[0])

    def check(self, rows: torch.Tensor, where: str) -> None:
        """Raise ``RuntimeError`` when ``rows`` is not rows first (B of them), as the hooks' loop does."""
        check_rows(rows, self.size, where)

    def gathered(self, linears: Sequence[nn.Linear | None]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(weight [B, out, in], bias [B, out] or None)``: each row's task's Linear."""
        key = tuple(id(linear) for linear in linears)
        cached = self._gathered.get(key)
        if cached is not None:
            return cached
        weight, bias = stack_linears(linears)
        rows = self.row_tasks
        gathered = weight.index_select(0, rows), None if bias is None else bias.index_select(0, rows)
        if not torch.is_grad_enabled():
            # reused by the layers of this forward that share the Linears (shared V^E/V^D); never under
            # gradients: a checkpointed layer's recomputation must run the same operators again
            self._gathered[key] = gathered
        return gathered

    def linear(self, linears: Sequence[nn.Linear | None], x: torch.Tensor) -> torch.Tensor:
        """``x [B, ..., in] -> [B, ..., out]``: row ``r`` through ``linears[row_tasks[r]]``."""
        weight, bias = self.gathered(linears)
        rows = x.reshape(x.shape[0], -1, x.shape[-1])
        if bias is None:
            out = torch.bmm(rows, weight.transpose(1, 2))
        else:
            out = torch.baddbmm(bias.unsqueeze(1), rows, weight.transpose(1, 2))
        return out.view(*x.shape[:-1], out.shape[-1])


class BatchedModules(nn.Module):
    """Base of the module a method's ``batch_rows`` returns: every present task's module (``modules``,
    ``None`` for a task without one) at once on the rows of a mixed batch sorted by task, ``rows`` giving
    each row's index into ``modules``. Holds the modules unregistered (their Parameters stay the tasks')."""

    def __init__(self, modules: Sequence[Any], rows: RowWeights) -> None:
        super().__init__()
        self._template = next(m for m in modules if m is not None)
        self.layers: tuple[int, ...] = self._template.layers
        self._tasks = tuple(modules)  # a tuple: not submodules
        self._rows = rows

"""Every present task's Linear on its own rows of a mixed batch in one batched product (the gather idea of
Punica's and S-LoRA's multi-adapter kernels): the tasks' weights are stacked into ``[K, out, in]``, each
row gathers its task's matrix and one ``baddbmm`` runs all rows, where the hooks' loop would run one
product per task present (docs/design.md §2, "Mixed-task batches").

The stacks are built from the tasks' own Parameters in each forward, so gradients reach them as in the
loop; without gradients (inference) a stack is reused by the layers of one forward that share it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def all_of(modules: Sequence[nn.Module | None], kind: type) -> bool:
    """Whether every module is exactly a ``kind`` or ``None``: a method batches only the modules it built
    (a subclass may compute something else)."""
    return all(m is None or type(m) is kind for m in modules)


def stack_linears(linears: Sequence[nn.Linear | None]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(weight [K, out, in], bias [K, out] or None)`` of ``linears``; a ``None`` (a task without a
    module) stacks zeros, so its rows get an exact zero. Raises ``ValueError`` when all are ``None``."""
    template = next((linear for linear in linears if linear is not None), None)
    if template is None:
        raise ValueError("no Linear to stack: every task is None")
    weights = [
        template.weight.new_zeros(()).expand_as(template.weight) if lin is None else lin.weight
        for lin in linears
    ]
    weight = torch.stack(weights)
    if template.bias is None:
        return weight, None
    biases = [
        template.bias.new_zeros(()).expand_as(template.bias) if lin is None else lin.bias for lin in linears
    ]
    return weight, torch.stack(biases)


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
        if rows.dim() < 2 or rows.shape[0] != self.size:
            raise RuntimeError(
                f"a mixed-task forward reached {where} with {rows.shape[0]} rows for a batch of "
                f"{self.size}: this family does not keep rows first there, so rows cannot be routed"
            )

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

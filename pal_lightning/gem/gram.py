"""The Gram matrix ``[g, G][g, G]^T`` of GEM's rows and the write-back ``g~ = g + G^T v``.

A row is one tensor per parameter (``None`` = zero; sparse for an embedding table's used rows). Per
tensor nothing of the model's size is copied; flat, the rows are one ``(t, n)`` float64 matrix and each
product one kernel: ``t + 1`` copies of the parameters for far fewer operators, which pays where the
host issuing them bounds a step (CUDA). :class:`GramRows` chooses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from torch import Tensor, nn

from pal_lightning.core.private_api import foreach_add_
from pal_lightning.gem.projection import flat_bordered_gram

__all__ = ["Grads", "GramRows", "Rows", "add_rows", "bordered_gram", "gram_matrix", "wants_flat_rows"]

Grads = list[Tensor | None]
#: the rows of ``G``: a gradient per row (per tensor), or one ``(t, n)`` float64 matrix (flat)
Rows = list[Grads] | Tensor


# ---------------------------------------------------------------- per tensor
def _dot(a: Tensor, b: Tensor) -> Tensor:
    """``<a, b>`` on their device (half precision upcast to float32); a sparse one is read at its rows."""
    if a.is_sparse and not b.is_sparse:
        a, b = b, a
    if b.is_sparse:
        same = a is b
        b = b.coalesce()
        a = b.values() if same else (a.to_dense() if a.is_sparse else a)[tuple(b.indices())]
        b = b.values()
    if a.dtype in (torch.float16, torch.bfloat16):
        a, b = a.float(), b.float()
    return torch.dot(a.reshape(-1), b.reshape(-1))


def _row_dot(x: Grads, y: Grads) -> Tensor | None:
    """``<x, y>`` summed over the tensors both rows have (float64), ``None`` when they share none."""
    parts = [_dot(a, b) for a, b in zip(x, y, strict=True) if a is not None and b is not None]
    return torch.stack(parts).double().sum() if parts else None


def gram_matrix(rows: Sequence[Grads]) -> Tensor:
    """``M[i, j] = sum over tensors of <rows[i][k], rows[j][k]>`` (``None`` = zero), float64 on the device."""
    n = len(rows)
    device = next((x.device for row in rows for x in row if x is not None), torch.device("cpu"))
    M = torch.zeros(n, n, dtype=torch.float64, device=device)
    for i in range(n):
        for j in range(i, n):
            if (d := _row_dot(rows[i], rows[j])) is not None:
                M[i, j] = M[j, i] = d
    return M


def bordered_gram(g: Grads, rows: Sequence[Grads], GGt: Tensor) -> Tensor:
    """``gram_matrix([g, *rows])`` from ``GGt = gram_matrix(rows)`` (the same products in the same order)."""
    device = next((x.device for x in g if x is not None), GGt.device)  # GGt of all-None rows is on the CPU
    M = torch.zeros(len(rows) + 1, len(rows) + 1, dtype=torch.float64, device=device)
    M[1:, 1:] = GGt.to(device)
    for i, row in enumerate([g, *rows]):
        if (d := _row_dot(g, row)) is not None:
            M[0, i] = M[i, 0] = d
    return M


def add_rows(params: Sequence[nn.Parameter], rows: Sequence[Grads], v: Sequence[float]) -> None:
    """``p.grad += sum_k v_k rows[k][p]`` in place; a parameter without a gradient gets one."""
    for coeff, row in zip(v, rows, strict=True):
        if coeff == 0.0:
            continue
        for p, r in zip(params, row, strict=True):
            if r is None:
                continue
            if p.grad is None:
                p.grad = (r * coeff).to_dense().to(p.dtype)
            elif r.is_sparse:  # only the stored rows change (coalesced: each once)
                r = r.coalesce()
                p.grad.index_put_(tuple(r.indices()), (r.values() * coeff).to(p.grad.dtype), accumulate=True)
            else:
                p.grad.add_(r.to(p.grad.dtype), alpha=coeff)


# ---------------------------------------------------------------- flat
class FlatLayout:
    """One buffer over ``params``' elements (of one dtype and device) with a view shaped like each:
    a gradient goes in, and an update out, in one multi-tensor operator."""

    def __init__(self, params: Sequence[nn.Parameter]) -> None:
        self.key = self.key_of(params)
        first = params[0]
        self.buffer = torch.empty(sum(p.numel() for p in params), dtype=first.dtype, device=first.device)
        sizes = [p.numel() for p in params]
        self.views = [v.view_as(p) for v, p in zip(self.buffer.split(sizes), params, strict=True)]

    @staticmethod
    def key_of(params: Sequence[nn.Parameter]) -> tuple:
        return tuple((id(p), tuple(p.shape), p.dtype, p.device) for p in params)

    def gather(self, grads: Sequence[Tensor]) -> Tensor:
        self.buffer.zero_()
        foreach_add_(self.views, list(grads))  # 0 + x: a copy, every tensor in one operator
        return self.buffer

    def add_into(self, grads: Sequence[Tensor], delta: Tensor) -> None:
        self.buffer.copy_(delta)
        foreach_add_(list(grads), self.views)


def has_dense_gradients(params: Sequence[nn.Parameter]) -> bool:
    return all(p.grad is not None and not p.grad.is_sparse for p in params)


def can_flatten(rows: Sequence[Grads], params: Sequence[nn.Parameter]) -> bool:
    """Every row entry present and dense, and every ``p.grad``: a ``None`` keeps the per-tensor path, whose
    write-back leaves a parameter no row touches without a gradient (a zero one would still move it
    through AdamW's moments and weight decay)."""
    present = all(x is not None and not x.is_sparse for row in rows for x in row)
    return present and has_dense_gradients(params)


def flatten(
    grads: Sequence[Tensor | None], params: Sequence[nn.Parameter], layout: FlatLayout | None = None
) -> Tensor:
    """One gradient as a float64 vector over ``params``' elements (``None`` = zero)."""
    if layout is not None and all(x is not None for x in grads):
        return layout.gather(cast("list[Tensor]", grads)).to(torch.float64)
    parts = [
        (x if x is not None else torch.zeros_like(p)).reshape(-1) for x, p in zip(grads, params, strict=True)
    ]
    return torch.cat(parts).to(torch.float64)


def flatten_rows(
    rows: Sequence[Grads], params: Sequence[nn.Parameter], layout: FlatLayout | None = None
) -> Tensor:
    """The rows of ``G`` as one ``(t, n)`` float64 matrix."""
    if layout is None or not all(x is not None for row in rows for x in row):
        return torch.stack([flatten(row, params) for row in rows])
    F = torch.empty(len(rows), layout.buffer.numel(), dtype=torch.float64, device=layout.buffer.device)
    for i, row in enumerate(rows):
        F[i].copy_(layout.gather(cast("list[Tensor]", row)))
    return F


def unflatten_rows(F: Tensor, params: Sequence[nn.Parameter]) -> list[Grads]:
    """The inverse of :func:`flatten_rows`, in the parameters' shapes and dtypes."""
    sizes = [p.numel() for p in params]
    return [
        [x.view_as(p).to(p.dtype) for x, p in zip(row.split(sizes), params, strict=True)]
        for row in F.unbind(0)
    ]


def add_flat_rows(
    params: Sequence[nn.Parameter], F: Tensor, v: Sequence[float], layout: FlatLayout | None = None
) -> None:
    """``p.grad += (F^T v)[p's elements]`` in place for every parameter (each must have a gradient)."""
    dense = cast("list[Tensor]", [p.grad for p in params])  # all present: GramRows.bordered saw to it
    delta = torch.tensor(list(v), dtype=torch.float64, device=F.device) @ F
    if layout is not None:
        layout.add_into(dense, delta)
        return
    dtypes = {x.dtype for x in dense}
    if len(dtypes) == 1:  # one cast of the whole update, not one per tensor
        delta = delta.to(dtypes.pop())
    parts = delta.split([x.numel() for x in dense])
    foreach_add_(dense, [d.view_as(x).to(x.dtype) for d, x in zip(parts, dense, strict=True)])


# ---------------------------------------------------------------- the choice
def wants_flat_rows(flat_rows: bool | None, params: Sequence[nn.Parameter]) -> bool:
    """As ``flat_rows`` says, or by default (``None``) on a CUDA device."""
    if flat_rows is not None:
        return flat_rows
    return bool(params) and params[0].device.type == "cuda"


class GramRows:
    """Gram matrices and write-backs of one step's rows, flat where wanted and possible, else per tensor;
    keeps the flat path's :class:`FlatLayout` while the parameters stay the same."""

    def __init__(self) -> None:
        self._layout: FlatLayout | None = None

    def layout(self, params: list[nn.Parameter]) -> FlatLayout | None:
        """The flat buffer over ``params``, or ``None`` where one cannot hold them."""
        if self._layout is None or self._layout.key != FlatLayout.key_of(params):
            fits = bool(params) and len({(p.dtype, p.device) for p in params}) == 1
            self._layout = FlatLayout(params) if fits else None
        return self._layout

    def rows(self, grads: list[Grads], params: list[nn.Parameter], flat: bool | None) -> tuple[Rows, Tensor]:
        """``(rows, GG^T)``: the rows flat (:func:`wants_flat_rows` and :func:`can_flatten`) or as given."""
        if wants_flat_rows(flat, params) and can_flatten(grads, params):
            F = flatten_rows(grads, params, self.layout(params))
            return F, F @ F.T
        return grads, gram_matrix(grads)

    def bordered(self, params: list[nn.Parameter], rows: Rows, GGt: Tensor) -> tuple[Rows, Tensor]:
        """``(rows, M)`` with ``M = [g, G][g, G]^T`` for ``g`` the ``p.grad``; cached flat rows go back per
        tensor where a parameter has no gradient now (the per-tensor write-back creates one)."""
        if isinstance(rows, Tensor) and not has_dense_gradients(params):
            rows = unflatten_rows(rows, params)
        if isinstance(rows, Tensor):
            g = flatten([p.grad for p in params], params, self.layout(params))
            return rows, flat_bordered_gram(g, rows, GGt)
        return rows, bordered_gram([p.grad for p in params], rows, GGt)

    def add(self, params: list[nn.Parameter], rows: Rows, v: Sequence[float]) -> None:
        """``g~ = g + G^T v`` into the ``p.grad``."""
        if isinstance(rows, Tensor):
            add_flat_rows(params, rows, v, self.layout(params))
        else:
            add_rows(params, rows, v)

"""GEM's rows as one ``(t, n)`` matrix: the Gram matrix, the bordered one and the write-back in a few kernels.

:mod:`pal_lightning.gem.gram` takes every product tensor by tensor: for a model of ``N`` parameter tensors
and ``t`` rows that is ``N (t + 1)(t + 2) / 2`` dot products, plus ``t N`` in-place additions for the
write-back, each one operator the host must dispatch. On a CPU the products' arithmetic dominates; on a
GPU a BERT-base step is bound by the host issuing its operators (``benchmarks/RESULTS.md``, "GPU
figures": about 14 µs each on an H100 machine), and GEM's ~4,000 per-tensor products and additions at
``t = 2`` come, at that rate, to about 56 ms: an estimate of about all the time GEM's fp32 step took
there beyond its arithmetic. Here each gradient is copied once into one float64 vector over the
participating parameters, in their order::

    F = [flat(g_1); ...; flat(g_t)]       (t, n)       GG^T = F F^T        (one matmul)
    M = [[g.g, (F g)^T], [F g, GG^T]]                                        (one matrix-vector product)
    g~ = g + F^T v, split back into the parameters' gradients                (one product, one foreach add)

The products and sums are taken in float64 (the per-tensor path takes each tensor's dot in float32 and
sums the tensors in float64); both agree to 1e-6 relative in ``tests/callbacks/test_gem_flat_rows.py``.
The price is memory and copies: ``t + 1`` float64 copies of the participating parameters (for
BERT-base's 110 M, 0.9 GB each). On a CPU, where a dispatch is cheap beside the arithmetic, the copies
would only add time, so :class:`~pal_lightning.gem.GEMCallback` takes this path on CUDA devices unless
told otherwise (``flat_rows=True``/``False``). Sparse rows (A-GEM's embedding tables, in one process on
a CPU: :mod:`pal_lightning.gem.sparse_embeddings`) stay per tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from torch import Tensor, nn

from pal_lightning.core.private_api import foreach_add_
from pal_lightning.gem.gram import Grads

__all__ = [
    "FlatLayout",
    "add_flat_rows",
    "can_flatten",
    "flat_bordered_gram",
    "flatten",
    "flatten_rows",
    "has_dense_gradients",
    "unflatten_rows",
]


class FlatLayout:
    """One buffer over ``params``' elements, in their dtype, with a view shaped like each parameter.

    Kept across steps (:class:`~pal_lightning.gem.step_projector.StepProjector` holds one), so that a
    gradient goes into one vector, and an update out of one, in a multi-tensor operator or two instead of a
    view per tensor and a ``cat`` (or ``split``): at BERT-base's 200 tensors that is about 200 operators
    less per flattened gradient and per write-back. The values are the same: a copy in, one cast of the
    whole update out, as :func:`flatten` and :func:`add_flat_rows` compute them without it.

    Args:
        params: the participating parameters, of one dtype on one device (:meth:`fits`).
    """

    def __init__(self, params: Sequence[nn.Parameter]) -> None:
        self.key = self.key_of(params)
        first = params[0]
        self.buffer = torch.empty(sum(p.numel() for p in params), dtype=first.dtype, device=first.device)
        sizes = [p.numel() for p in params]
        self.views = [v.view_as(p) for v, p in zip(self.buffer.split(sizes), params, strict=True)]

    @staticmethod
    def key_of(params: Sequence[nn.Parameter]) -> tuple:
        """What a layout depends on: each parameter, its shape, dtype and device."""
        return tuple((id(p), tuple(p.shape), p.dtype, p.device) for p in params)

    @staticmethod
    def fits(params: Sequence[nn.Parameter]) -> bool:
        """Whether one layout holds ``params``: some, all of one dtype and one device."""
        return bool(params) and len({(p.dtype, p.device) for p in params}) == 1

    def gather(self, grads: Sequence[Tensor]) -> Tensor:
        """``grads`` (one dense tensor per parameter) copied into :attr:`buffer`, which is returned."""
        self.buffer.zero_()
        foreach_add_(self.views, list(grads))  # 0 + x: a copy, every tensor in one operator
        return self.buffer

    def add_into(self, grads: Sequence[Tensor], delta: Tensor) -> None:
        """``grads[k] += delta[k's elements]`` in place, ``delta`` cast once to the parameters' dtype."""
        self.buffer.copy_(delta)
        foreach_add_(list(grads), self.views)


def has_dense_gradients(params: Sequence[nn.Parameter]) -> bool:
    """Whether every parameter has a dense ``p.grad`` now (the flat write-back adds into each)."""
    return all(p.grad is not None and not p.grad.is_sparse for p in params)


def can_flatten(rows: Sequence[Grads], params: Sequence[nn.Parameter]) -> bool:
    """Whether the flat path applies: every row entry present and dense, and every parameter's gradient.

    A missing entry (``None``: the parameter got no gradient from that task) or a missing ``p.grad`` keeps
    the per-tensor path, whose write-back gives a gradient only to parameters that some row touches (a
    zero gradient would still move a parameter through AdamW's moments and weight decay).
    """
    present = all(x is not None and not x.is_sparse for row in rows for x in row)
    return present and has_dense_gradients(params)


def flatten(
    grads: Sequence[Tensor | None], params: Sequence[nn.Parameter], layout: FlatLayout | None = None
) -> Tensor:
    """One gradient (a tensor per parameter, ``None`` = zero) as a float64 vector over ``params``' elements
    (through ``layout``'s buffer where given and every tensor is present)."""
    if layout is not None and all(x is not None for x in grads):
        return layout.gather(cast("list[Tensor]", grads)).to(torch.float64)
    parts = [
        (x if x is not None else torch.zeros_like(p)).reshape(-1) for x, p in zip(grads, params, strict=True)
    ]
    return torch.cat(parts).to(torch.float64)


def flatten_rows(
    rows: Sequence[Grads], params: Sequence[nn.Parameter], layout: FlatLayout | None = None
) -> Tensor:
    """The rows of ``G`` as one ``(t, n)`` float64 matrix (:func:`flatten` of each; through ``layout``'s
    buffer where given and every entry is present)."""
    if layout is None or not all(x is not None for row in rows for x in row):
        return torch.stack([flatten(row, params) for row in rows])
    F = torch.empty(len(rows), layout.buffer.numel(), dtype=torch.float64, device=layout.buffer.device)
    for i, row in enumerate(rows):
        F[i].copy_(layout.gather(cast("list[Tensor]", row)))
    return F


def unflatten_rows(F: Tensor, params: Sequence[nn.Parameter]) -> list[Grads]:
    """The inverse of :func:`flatten_rows` (rows in the parameters' shapes and dtypes): for cached flat
    rows at a step where the flat write-back cannot run (:func:`has_dense_gradients` false)."""
    sizes = [p.numel() for p in params]
    return [
        [x.view_as(p).to(p.dtype) for x, p in zip(row.split(sizes), params, strict=True)]
        for row in F.unbind(0)
    ]


def flat_bordered_gram(g: Tensor, F: Tensor, GGt: Tensor) -> Tensor:
    """``M = [g, G][g, G]^T`` from the flat ``g`` (``n``), ``F`` (``t x n``) and ``GGt = F F^T``."""
    t = F.shape[0]
    M = torch.empty(t + 1, t + 1, dtype=torch.float64, device=F.device)
    M[0, 0] = g @ g
    Fg = F @ g
    M[0, 1:] = Fg
    M[1:, 0] = Fg
    M[1:, 1:] = GGt
    return M


def add_flat_rows(
    params: Sequence[nn.Parameter], F: Tensor, v: Sequence[float], layout: FlatLayout | None = None
) -> None:
    """``p.grad += (F^T v)[p's elements]`` in place for every parameter (``g~ = g + G^T v``; through
    ``layout``'s buffer where given)."""
    grads = [p.grad for p in params]
    if any(x is None for x in grads):
        raise ValueError("add_flat_rows needs every parameter's gradient (see can_flatten)")
    dense = cast("list[Tensor]", grads)
    delta = torch.tensor(list(v), dtype=torch.float64, device=F.device) @ F
    if layout is not None:
        layout.add_into(dense, delta)
        return
    dtypes = {x.dtype for x in dense}
    if len(dtypes) == 1:  # one cast of the whole update, not one per tensor
        delta = delta.to(dtypes.pop())
    parts = delta.split([x.numel() for x in dense])
    foreach_add_(dense, [d.view_as(x).to(x.dtype) for d, x in zip(parts, dense, strict=True)])

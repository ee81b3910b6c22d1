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
    "add_flat_rows",
    "can_flatten",
    "flat_bordered_gram",
    "flatten",
    "flatten_rows",
    "has_dense_gradients",
    "unflatten_rows",
]


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


def flatten(grads: Sequence[Tensor | None], params: Sequence[nn.Parameter]) -> Tensor:
    """One gradient (a tensor per parameter, ``None`` = zero) as a float64 vector over ``params``' elements."""
    parts = [
        (x if x is not None else torch.zeros_like(p)).reshape(-1) for x, p in zip(grads, params, strict=True)
    ]
    return torch.cat(parts).to(torch.float64)


def flatten_rows(rows: Sequence[Grads], params: Sequence[nn.Parameter]) -> Tensor:
    """The rows of ``G`` as one ``(t, n)`` float64 matrix (:func:`flatten` of each)."""
    return torch.stack([flatten(row, params) for row in rows])


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


def add_flat_rows(params: Sequence[nn.Parameter], F: Tensor, v: Sequence[float]) -> None:
    """``p.grad += (F^T v)[p's elements]`` in place for every parameter (``g~ = g + G^T v``)."""
    grads = [p.grad for p in params]
    if any(x is None for x in grads):
        raise ValueError("add_flat_rows needs every parameter's gradient (see can_flatten)")
    dense = cast("list[Tensor]", grads)
    delta = torch.tensor(list(v), dtype=torch.float64, device=F.device) @ F
    dtypes = {x.dtype for x in dense}
    if len(dtypes) == 1:  # one cast of the whole update, not one per tensor
        delta = delta.to(dtypes.pop())
    parts = delta.split([x.numel() for x in dense])
    foreach_add_(dense, [d.view_as(x).to(x.dtype) for d, x in zip(parts, dense, strict=True)])

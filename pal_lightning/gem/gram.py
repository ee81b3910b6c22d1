"""Gradients stored as lists of parameter tensors: their Gram matrix and GEM's write-back.

A model's gradient lives in many tensors (one per parameter); a row of GEM's ``G`` is one such
list, ``None`` where a parameter got no gradient (zero). Everything here works tensor by tensor
on the gradients' device: nothing of the model's size is copied, flattened or moved to the host.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

__all__ = ["Grads", "add_rows", "bordered_gram", "gram_matrix"]

Grads = list[Tensor | None]


def _dot(a: Tensor, b: Tensor) -> Tensor:
    """``<a, b>`` of two same-shape tensors on their device (half precision upcast to float32).

    Either may be a sparse COO tensor (an embedding table's memory gradient,
    :mod:`pal_lightning.gem.sparse_embeddings`): then only its stored rows are read.
    """
    if a.is_sparse and not b.is_sparse:
        a, b = b, a
    if b.is_sparse:
        same = a is b
        b = b.coalesce()
        # a dense tensor (or another sparse one, densified: a rare case) read at b's stored rows
        a = b.values() if same else (a.to_dense() if a.is_sparse else a)[tuple(b.indices())]
        b = b.values()
    if a.dtype in (torch.float16, torch.bfloat16):
        a, b = a.float(), b.float()
    return torch.dot(a.reshape(-1), b.reshape(-1))


def gram_matrix(rows: Sequence[Grads]) -> Tensor:
    """``M[i, j] = sum over tensors of <rows[i][k], rows[j][k]>`` (``None`` = zero), float64 on the device.

    Each row is a gradient stored across many parameter tensors; the dot products are taken per
    tensor on the gradients' device, so nothing of the size of the model is copied or flattened.
    """
    n = len(rows)
    device = next((x.device for row in rows for x in row if x is not None), torch.device("cpu"))
    parts: list[list[Tensor]] = [[] for _ in range(n * n)]
    for k in range(len(rows[0]) if rows else 0):
        present = [(i, x) for i, row in enumerate(rows) if (x := row[k]) is not None]
        for a, (i, x) in enumerate(present):
            for j, y in present[a:]:
                parts[i * n + j].append(_dot(x, y))
    M = torch.zeros(n, n, dtype=torch.float64, device=device)
    for i in range(n):
        for j in range(i, n):
            if parts[i * n + j]:
                M[i, j] = M[j, i] = torch.stack(parts[i * n + j]).double().sum()
    return M


def bordered_gram(g: Grads, rows: Sequence[Grads], GGt: Tensor) -> Tensor:
    """``gram_matrix([g, *rows])`` from ``GGt = gram_matrix(rows)``: only the products with ``g`` are new.

    With ``refresh_every > 1`` the memory gradients, and so ``GGt``, are reused for several steps;
    each step then costs ``t + 1`` dot products per tensor instead of ``(t + 1)(t + 2) / 2``. The
    products are taken in the same order as :func:`gram_matrix` takes them: the same numbers.
    """
    n = len(rows)
    device = next((x.device for x in g if x is not None), GGt.device)  # GGt of all-None rows is on the CPU
    M = torch.zeros(n + 1, n + 1, dtype=torch.float64, device=device)
    M[1:, 1:] = GGt.to(device)
    parts: list[list[Tensor]] = [[] for _ in range(n + 1)]
    for k, x in enumerate(g):
        if x is None:
            continue
        parts[0].append(_dot(x, x))
        for i, row in enumerate(rows):
            if (y := row[k]) is not None:
                parts[i + 1].append(_dot(x, y))
    for i, part in enumerate(parts):
        if part:
            M[0, i] = M[i, 0] = torch.stack(part).double().sum()
    return M


def add_rows(params: Sequence[nn.Parameter], rows: Sequence[Grads], v: Sequence[float]) -> None:
    """``p.grad += sum_k v_k rows[k][p]`` in place for every parameter (``g~ = g + G^T v``).

    A parameter without a gradient (e.g. with ``parameters="all"``, a head the current task did not
    use) gets one; zero coefficients and ``None`` entries are skipped.
    """
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

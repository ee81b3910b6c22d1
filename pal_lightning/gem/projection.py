"""GEM's and A-GEM's projections of a gradient, from the Gram matrix of the gradients alone.

GEM (Lopez-Paz & Ranzato, 2017) requires ``<g~, g_k> >= 0`` for every memory gradient ``g_k`` (rows
of ``G``): when ``g`` already satisfies them, ``g~ = g``; otherwise ``g~ = g + G^T v`` with ``v`` from
the dual QP (:mod:`pal_lightning.gem.qp`). A-GEM (Chaudhry et al., 2019) uses one reference
gradient instead::

    g~ = g - (g^T g_ref / g_ref^T g_ref) g_ref      if g^T g_ref < 0, else g

:func:`gem_coefficients` and :func:`step_coefficients` need only ``[g, G][g, G]^T`` (float64, NumPy),
so the gradients themselves can stay on their device, spread over many parameter tensors;
:func:`project_gradient` and :func:`agem_project` are the same maths on one flat tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from pal_lightning.gem import qp

__all__ = [
    "DEFAULT_EPS",
    "EPS_RETRIES",
    "EXACT_TOL",
    "ZERO_ROW_RTOL",
    "ProjectionResult",
    "agem_project",
    "gem_coefficients",
    "project_gradient",
    "step_coefficients",
]

#: Default relative ridge: ``eps * mean(diag(G G^T))`` is added to the diagonal of ``G G^T``.
DEFAULT_EPS = 1e-3
#: How often the ridge is multiplied by 10 when quadprog fails, before the A-GEM fallback.
EPS_RETRIES = 3
#: A memory gradient whose squared norm is at most this fraction of the largest one counts as zero.
ZERO_ROW_RTOL = 1e-24
#: Relative violation up to which the exact dual's solution is preferred to the ridged one.
EXACT_TOL = 1e-9


@dataclass(slots=True)
class ProjectionResult:
    """Coefficients of a projection ``g~ = g + sum_k v_k g_k`` and what it took to find them."""

    v: np.ndarray | None
    """``[t]`` float64 coefficients (zeros for dropped rows), or ``None`` when ``g`` is left alone."""
    violated: bool
    """Whether some ``<g, g_k> < 0``."""
    fallbacks: int
    """How many fallbacks were used (larger ridges, then A-GEM)."""
    min_cosine: float | None
    """The smallest ``cos(g, g_k)`` over the non-zero rows (``None`` without rows)."""
    rows: int
    """The number of non-zero memory gradients."""
    violation: float | None = None
    """The residual ``max_k -<g~, g_k> / (|g_k| |g~|)`` after the projection (0 when none is left;
    ``None`` when ``g`` is left alone)."""


def gem_coefficients(
    GGt: np.ndarray, Gg: np.ndarray, gg: float, margin: float = 0.0, eps: float | None = None
) -> ProjectionResult:
    """GEM's projection coefficients from the small matrices alone (nothing of size ``p``).

    The QP is solved in normalised units: with ``a^2 = mean_k ||g_k||^2`` (non-zero rows) and
    ``b = ||g||``, ``v = (b / a) v^`` where ``v^`` solves the dual with ``GG^T / a^2``, ``Gg / (a b)``
    and margin ``margin * a / b``. Both matrices are then O(1) whatever the gradients' scale
    (1e-8 or 1e8), and the ridge ``eps`` is relative to the mean squared row norm.

    Rows with ``||g_k|| = 0`` are dropped (they cannot be violated and make ``GG^T`` singular).
    When quadprog fails, the ridge is multiplied by 10 up to :data:`EPS_RETRIES` times; then the
    A-GEM projection against the mean of the violated rows is used. Each counts as a fallback.

    Args:
        GGt: ``[t, t]`` Gram matrix of the memory gradients (float64).
        Gg: ``[t]`` dot products ``<g_k, g>``.
        gg: ``||g||^2``.
        margin: GEM's ``memory_strength`` (lower bound of ``v``).
        eps: relative ridge (``None``: :data:`DEFAULT_EPS`).
    """
    eps = DEFAULT_EPS if eps is None else float(eps)
    GGt = np.asarray(GGt, dtype=np.float64).reshape(len(Gg), len(Gg))
    Gg = np.asarray(Gg, dtype=np.float64).reshape(-1)
    t = Gg.shape[0]
    diag = np.diag(GGt).copy()
    keep = diag > ZERO_ROW_RTOL * diag.max() if t else np.zeros(0, dtype=bool)
    keep &= diag > 0
    rows = int(keep.sum())
    norm_g = float(np.sqrt(max(gg, 0.0)))
    if rows == 0 or norm_g == 0.0:
        return ProjectionResult(None, False, 0, None, rows)
    K = np.flatnonzero(keep)
    GGt_k, Gg_k = GGt[np.ix_(K, K)], Gg[K]
    min_cosine = float(np.min(Gg_k / (np.sqrt(np.diag(GGt_k)) * norm_g)))
    if not np.any(Gg_k < 0):
        return ProjectionResult(None, False, 0, min_cosine, rows)
    a = float(np.sqrt(np.mean(np.diag(GGt_k))))
    v_hat, violation, fallbacks = _solve_normalised(
        GGt_k / (a * a), Gg_k / (a * norm_g), float(margin) * a / norm_g, eps
    )
    v = np.zeros(t)
    if v_hat is not None:
        v[K] = v_hat * (norm_g / a)
        return ProjectionResult(v, True, fallbacks, min_cosine, rows, violation)
    # A-GEM against the violated rows: g_ref = mean of those g_k, in terms of GG^T and Gg only
    V = K[Gg_k < 0]
    ref_dot = float(np.mean(Gg[V]))  # <g, g_ref>
    ref_sq = float(GGt[np.ix_(V, V)].sum()) / len(V) ** 2  # ||g_ref||^2
    if ref_sq > 0 and np.isfinite(ref_sq) and ref_dot < 0:
        v[V] = -ref_dot / ref_sq / len(V)
        violation = qp.relative_violation(GGt_k, Gg_k, v[K], gg)
        return ProjectionResult(v, True, fallbacks, min_cosine, rows, violation)
    return ProjectionResult(None, True, fallbacks, min_cosine, rows)


def _solve_normalised(
    P: np.ndarray, q: np.ndarray, margin: float, eps: float
) -> tuple[np.ndarray | None, float, int]:
    """``(v, violation, fallbacks)`` of the normalised dual (``|g| = 1``); ``v`` is ``None`` when
    quadprog failed at every ridge.

    quadprog with the ridge ``eps``, then 10x larger ones (each failure is one fallback). The ridge
    moves the solution off the feasible set by up to ``eps v``: the un-ridged dual is also solved
    exactly, and whichever of the two violates the constraints less is kept.
    """
    v_hat = None
    fallbacks = 0
    ridge = eps
    for _ in range(EPS_RETRIES + 1):
        try:
            candidate = qp.solve_gem_dual(P, q, margin, ridge)
        except ValueError:  # "not positive definite" / "constraints are inconsistent"
            candidate = None
        if candidate is not None and np.all(np.isfinite(candidate)):
            v_hat = candidate
            break
        fallbacks += 1
        ridge *= 10.0
    if v_hat is None:
        return None, 0.0, fallbacks
    violation = qp.relative_violation(P, q, v_hat, 1.0)
    try:
        exact = qp.solve_gem_dual_exact(P, q, margin)
    except (np.linalg.LinAlgError, ValueError):  # SVD did not converge: keep the ridged solution
        return v_hat, violation, fallbacks
    if np.all(np.isfinite(exact)):
        exact_violation = qp.relative_violation(P, q, exact, 1.0)
        if exact_violation <= max(violation, EXACT_TOL):
            return exact, exact_violation, fallbacks
    return v_hat, violation, fallbacks


def step_coefficients(
    M: np.ndarray, mode: str, margin: float = 0.0, eps: float | None = None
) -> ProjectionResult:
    """The coefficients of one step from ``M = [g, G][g, G]^T`` (finite, float64).

    ``mode="gem"``: :func:`gem_coefficients`. ``mode="agem"``: ``G`` is the single reference
    gradient and ``v = -<g, g_ref> / |g_ref|^2`` when ``<g, g_ref> < 0`` (``violation`` is ``None``:
    A-GEM's result is orthogonal to ``g_ref`` by construction).
    """
    gg, Gg, GGt = float(M[0, 0]), M[1:, 0], M[1:, 1:]
    if mode == "gem":
        return gem_coefficients(GGt, Gg, gg, margin=margin, eps=eps)
    ref_sq, dot = float(GGt[0, 0]), float(Gg[0])
    violated = dot < 0 and ref_sq > 0 and gg > 0
    v = np.array([-dot / ref_sq]) if violated else None
    min_cosine = dot / float(np.sqrt(ref_sq * gg)) if ref_sq > 0 and gg > 0 else None
    return ProjectionResult(v, violated, 0, min_cosine, int(ref_sq > 0))


def project_gradient(g: Tensor, G: Tensor, margin: float = 0.0, eps: float | None = None) -> Tensor:
    """GEM's projection of one flat gradient: the ``g~`` closest to ``g`` with ``G g~ >= 0``.

    ::

        g~ = g + G^T v,   v = argmin_{v >= margin} 1/2 v^T (GG^T + eps' I) v + (Gg)^T v

    with ``eps' = eps * mean(diag(GG^T))``. Returns ``g`` unchanged (a copy) when ``G g >= 0``
    already, when ``g`` or ``G`` is not finite, or when every row of ``G`` is zero; see
    :func:`gem_coefficients` for the normalisation and the fallbacks.

    Args:
        g: ``[p]`` gradient.
        G: ``[t, p]`` memory gradients (one row per constraining task).
        margin: GEM's ``memory_strength`` (0: the exact Euclidean projection, up to the ridge).
        eps: relative ridge (``None``: :data:`DEFAULT_EPS`).

    Returns:
        ``g~`` of shape ``[p]``, the dtype and device of ``g``.
    """
    if g.dim() != 1 or G.dim() != 2 or G.shape[1] != g.shape[0]:
        raise ValueError(
            f"project_gradient needs g [p] and G [t, p], got {tuple(g.shape)} and {tuple(G.shape)}"
        )
    g64, G64 = g.detach().double(), G.detach().double().to(g.device)
    gg = float(g64 @ g64)
    GGt = (G64 @ G64.T).cpu().numpy()
    Gg = (G64 @ g64).cpu().numpy()
    if not (np.isfinite(gg) and np.all(np.isfinite(GGt)) and np.all(np.isfinite(Gg))):
        return g.clone()
    result = gem_coefficients(GGt, Gg, gg, margin=margin, eps=eps)
    if result.v is None:
        return g.clone()
    v = torch.as_tensor(result.v, dtype=torch.float64, device=g.device)
    return (g64 + G64.T @ v).to(g.dtype)


def agem_project(g: Tensor, g_ref: Tensor) -> Tensor:
    """A-GEM's projection: ``g - (g^T g_ref / g_ref^T g_ref) g_ref`` when ``g^T g_ref < 0``, else ``g``.

    A zero (or non-finite) ``g_ref`` leaves ``g`` unchanged. Returns a new tensor.
    """
    dot = torch.dot(g.double().reshape(-1), g_ref.double().reshape(-1))
    ref_sq = torch.dot(g_ref.double().reshape(-1), g_ref.double().reshape(-1))
    if not (torch.isfinite(dot) and torch.isfinite(ref_sq)) or ref_sq <= 0 or dot >= 0:
        return g.clone()
    return (g.double() - (dot / ref_sq) * g_ref.double()).to(g.dtype)

"""GEM's and A-GEM's projections: coefficients from ``[g, G][g, G]^T`` alone (:func:`gem_coefficients`,
:func:`step_coefficients`), and the same maths on flat tensors (:func:`project_gradient`, :func:`agem_project`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from pal_lightning.gem import qp

__all__ = ["ProjectionResult", "agem_project", "gem_coefficients", "project_gradient", "step_coefficients"]

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
    """``[t]`` float64 coefficients (zeros for dropped rows), ``None`` when ``g`` is left alone."""
    violated: bool
    """Whether some ``<g, g_k> < 0``."""
    fallbacks: int
    """How many fallbacks were used (larger ridges, then A-GEM)."""
    min_cosine: float | None
    """The smallest ``cos(g, g_k)`` over the non-zero rows (``None`` without rows)."""
    rows: int
    """The number of non-zero memory gradients."""
    violation: float | None = None
    """The residual ``max_k -<g~, g_k> / (|g_k| |g~|)`` (``None`` when ``g`` is left alone)."""


def gem_coefficients(
    GGt: np.ndarray, Gg: np.ndarray, gg: float, margin: float = 0.0, eps: float | None = None
) -> ProjectionResult:
    """GEM's coefficients from ``GGt`` (``[t, t]``), ``Gg = <g_k, g>`` and ``gg = ||g||^2``.

    Solved in normalised units (``v = (b / a) v^``, ``a^2 = mean_k ||g_k||^2``, ``b = ||g||``): O(1)
    matrices at any gradient scale, ``eps`` (``None``: :data:`DEFAULT_EPS`) relative. Zero rows are dropped.
    When quadprog fails the ridge grows 10x up to :data:`EPS_RETRIES` times, then A-GEM against the mean of
    the violated rows is used; each counts as a fallback.
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
    """``(v, violation, fallbacks)`` of the normalised dual (``v`` ``None`` when quadprog failed at every
    ridge). The ridge moves the solution off the feasible set by up to ``eps v``, so the exact dual is
    also solved and whichever violates less is kept."""
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
    """One step's coefficients from ``M = [g, G][g, G]^T`` (finite, float64): :func:`gem_coefficients`,
    or for ``mode="agem"`` ``v = -<g, g_ref> / |g_ref|^2`` when ``<g, g_ref> < 0``."""
    gg, Gg, GGt = float(M[0, 0]), M[1:, 0], M[1:, 1:]
    if mode == "gem":
        return gem_coefficients(GGt, Gg, gg, margin=margin, eps=eps)
    ref_sq, dot = float(GGt[0, 0]), float(Gg[0])
    violated = dot < 0 and ref_sq > 0 and gg > 0
    v = np.array([-dot / ref_sq]) if violated else None
    min_cosine = dot / float(np.sqrt(ref_sq * gg)) if ref_sq > 0 and gg > 0 else None
    return ProjectionResult(v, violated, 0, min_cosine, int(ref_sq > 0))


def flat_bordered_gram(g: Tensor, F: Tensor, GGt: Tensor) -> Tensor:
    """``M = [g, G][g, G]^T`` from the flat ``g`` (``n``), ``F`` (``t x n``) and ``GGt = F F^T``."""
    top = torch.cat([(g @ g).reshape(1), F @ g])
    return torch.cat([top[None], torch.cat([top[1:, None], GGt], dim=1)])


def _project_flat(g: Tensor, G: Tensor, mode: str, margin: float = 0.0, eps: float | None = None) -> Tensor:
    """``g + G^T v`` in ``g``'s shape and dtype, ``v`` from :func:`step_coefficients` on ``[g, G][g, G]^T``;
    a copy of ``g`` when nothing is projected or a product it needs is not finite (A-GEM needs no ``|g|^2``)."""
    g64, G64 = g.detach().double().reshape(-1), G.detach().double().to(g.device)
    M = flat_bordered_gram(g64, G64, G64 @ G64.T).cpu().numpy()
    if not np.all(np.isfinite(M if mode == "gem" else M[1:])):
        return g.clone()
    result = step_coefficients(M, mode, margin=margin, eps=eps)
    if result.v is None:
        return g.clone()
    v = torch.as_tensor(result.v, dtype=torch.float64, device=g.device)
    return (g64 + G64.T @ v).reshape(g.shape).to(g.dtype)


def project_gradient(g: Tensor, G: Tensor, margin: float = 0.0, eps: float | None = None) -> Tensor:
    """GEM's projection of a flat gradient ``g`` (``[p]``) against ``G`` (``[t, p]``): the ``g~ = g + G^T v``
    closest to ``g`` with ``G g~ >= 0`` (:func:`gem_coefficients`), in ``g``'s dtype. A copy of ``g`` when
    nothing is violated, something is not finite, or every row is zero."""
    if g.dim() != 1 or G.dim() != 2 or G.shape[1] != g.shape[0]:
        raise ValueError(
            f"project_gradient needs g [p] and G [t, p], got {tuple(g.shape)} and {tuple(G.shape)}"
        )
    return _project_flat(g, G, "gem", margin, eps)


def agem_project(g: Tensor, g_ref: Tensor) -> Tensor:
    """A-GEM's projection: ``g - (g^T g_ref / g_ref^T g_ref) g_ref`` when ``g^T g_ref < 0``, else (and for a
    zero or non-finite ``g_ref``) a copy of ``g``."""
    return _project_flat(g, g_ref.reshape(1, -1), "agem")

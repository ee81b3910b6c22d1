"""GEM's dual QP ``min_{v >= margin} 1/2 v^T P v + q^T v`` (``P = G G^T``, ``q = G g``, ``g~ = g + G^T v``)
on the ``t x t`` matrices alone (float64 NumPy): ridged by quadprog, exactly by non-negative least squares
(docs/design.md says why both)."""

from __future__ import annotations

import numpy as np
import quadprog

__all__ = ["relative_violation", "solve_gem_dual", "solve_gem_dual_exact"]


def solve_gem_dual(GGt: np.ndarray, Gg: np.ndarray, margin: float, eps: float) -> np.ndarray:
    """``argmin_{v >= margin} 1/2 v^T (GG^T + eps I) v + (Gg)^T v`` by quadprog (``eps`` absolute).

    Raises:
        ValueError: quadprog's "matrix G is not positive definite" or "constraints are inconsistent".
    """
    GGt = np.asarray(GGt, dtype=np.float64)
    t = GGt.shape[0]
    P = 0.5 * (GGt + GGt.T) + eps * np.eye(t)  # exactly symmetric, as quadprog assumes
    a = -np.asarray(Gg, dtype=np.float64)
    b = np.full(t, float(margin))
    return np.asarray(quadprog.solve_qp(P, a, np.eye(t), b)[0], dtype=np.float64)


def relative_violation(P: np.ndarray, q: np.ndarray, v: np.ndarray, qq: float) -> float:
    """``max_k -<g~, g_k> / (|g_k| max(|g~|, 1e-3 T))`` (0 when none is violated) for ``g~ = g + G^T v``
    from ``P = GG^T``, ``q = Gg``, ``qq = |g|^2``; ``T = max(|g|, sum_k |v_k| |g_k|)``. (Where ``g~`` is
    nearly the origin, ``|g~|`` is rounding noise of the terms it sums: the floor measures against them.)"""
    c = q + P @ v
    norm_x = float(np.sqrt(max(qq + 2.0 * float(q @ v) + float(v @ P @ v), 0.0)))
    rows = np.sqrt(np.maximum(np.diag(P), 0.0))
    terms = max(float(np.sqrt(max(qq, 0.0))), float(np.abs(v) @ rows))  # |g|, sum_k |v_k| |g_k|
    norm_x = max(norm_x, 1e-3 * terms)
    scale = rows * norm_x
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(scale > 0, -c / scale, 0.0)
    return float(max(rel.max(initial=0.0), 0.0))


def solve_gem_dual_exact(
    P: np.ndarray, q: np.ndarray, margin: float, max_iter: int | None = None
) -> np.ndarray:
    """GEM's dual without a ridge, exactly, by Lawson & Hanson's NNLS (at most ``max_iter``, default
    ``3 t + 10``, outer iterations).

    With ``v = margin + u`` it is ``min_{u >= 0} 1/2 u^T P u + r^T u``, ``r = q + margin P 1``: free
    coefficients are added (most violated first) and solved for by least squares (``P`` may be singular),
    stepping back when one turns negative, to a KKT point (``u >= 0``, ``P u + r >= 0``, complementary).
    """
    P = np.asarray(P, dtype=np.float64)
    t = P.shape[0]
    r = np.asarray(q, dtype=np.float64) + margin * P.sum(axis=1)
    tol = 1e-13 * max(float(np.abs(P).max(initial=0.0)), float(np.abs(r).max(initial=0.0)), 1e-300)
    u = np.zeros(t)
    free = np.zeros(t, dtype=bool)
    w = -r  # minus the gradient: w_k > 0 means raising u_k lowers the objective
    for _ in range(max_iter or 3 * t + 10):
        candidates = np.where(~free & (w > tol), w, -np.inf)
        if not np.isfinite(candidates.max(initial=-np.inf)):
            break
        free[int(np.argmax(candidates))] = True
        u = _keep_free_positive(P, r, u, free, tol)
        w = -(P @ u + r)
    S = np.flatnonzero(free)
    if S.size:  # one step of iterative refinement: large u (a large margin) loses digits to rounding
        u[S] = np.maximum(u[S] + np.linalg.lstsq(P[np.ix_(S, S)], w[S], rcond=None)[0], 0.0)
    return margin + u


def _keep_free_positive(
    P: np.ndarray, r: np.ndarray, u: np.ndarray, free: np.ndarray, tol: float
) -> np.ndarray:
    """Lawson-Hanson's inner loop: solve on the free set, stepping back while a coefficient is <= 0
    (updates ``free`` in place)."""
    t = P.shape[0]
    for _ in range(3 * t + 10):
        s = np.zeros(t)
        S = np.flatnonzero(free)
        s[S] = np.linalg.lstsq(P[np.ix_(S, S)], -r[S], rcond=None)[0]
        if np.all(s[S] > 0):
            return s
        neg = S[s[S] <= 0]
        alpha = float(np.min(u[neg] / np.maximum(u[neg] - s[neg], 1e-300)))
        u = u + alpha * (s - u)
        free &= u > tol
        u[~free] = 0.0
        if not free.any():
            break
    return u

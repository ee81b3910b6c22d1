"""GEM's dual QP: the ridged solve (quadprog) and the exact, un-ridged one (non-negative least squares).

Both solve, for ``t`` memory gradients (rows of ``G``) and the current gradient ``g``::

    minimise_v  1/2 v^T P v + q^T v      subject to  v >= margin,     P = G G^T,  q = G g

and the projection is ``g~ = g + G^T v``. Everything here works on the ``t x t`` matrices alone
(float64 NumPy); nothing of the model's size. See docs/design.md for why both solvers exist.
"""

from __future__ import annotations

import numpy as np
import quadprog

__all__ = ["relative_violation", "solve_gem_dual", "solve_gem_dual_exact"]


def solve_gem_dual(GGt: np.ndarray, Gg: np.ndarray, margin: float, eps: float) -> np.ndarray:
    """Solve GEM's dual QP with quadprog (float64 on the CPU).

    ::

        minimise_v  1/2 v^T (GG^T + eps I) v + (Gg)^T v   subject to  v >= margin

    quadprog minimises ``1/2 x^T P x - a^T x`` subject to ``C^T x >= b``; here ``P = GG^T + eps I``,
    ``a = -Gg``, ``C = I``, ``b = margin * 1``.

    Args:
        GGt: ``[t, t]`` Gram matrix of the memory gradients.
        Gg: ``[t]`` dot products of the memory gradients with the current gradient.
        margin: lower bound of every ``v_k`` (GEM's ``memory_strength``).
        eps: absolute ridge added to the diagonal (callers scale it to ``GG^T``).

    Returns:
        ``v`` of shape ``[t]`` (float64).

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
    """``max_k -<g~, g_k> / (|g_k| max(|g~|, 1e-3 T))`` (0 when none is violated) for
    ``g~ = g + G^T v``, from ``P = GG^T``, ``q = Gg`` and ``qq = |g|^2`` alone, where
    ``T = max(|g|, sum_k |v_k| |g_k|)`` is the size of the terms that ``g~`` sums. (When the
    projection is the origin or nearly, which happens when the constraints leave almost no
    feasible direction, ``|g~|`` is rounding noise of those terms; the floor then measures the
    violation against the terms themselves, as float64 rounding does.)"""
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
    """GEM's dual without a ridge, solved exactly by an active-set method (Lawson & Hanson's NNLS).

    With ``v = margin + u``, the dual ``min_{v >= margin} 1/2 v^T P v + q^T v`` is
    ``min_{u >= 0} 1/2 u^T P u + r^T u`` with ``r = q + margin P 1``, which equals
    ``1/2 |h + G^T u|^2`` up to a constant (``h = g + margin G^T 1``): a non-negative least-squares
    problem. Lawson-Hanson's method grows a set of free coefficients (the most violated constraint
    first), solves ``P_SS u_S = -r_S`` on it by least squares (``P`` may be singular: collinear or
    duplicated memory gradients, more memories than the gradient's rank) and steps back whenever a
    coefficient would turn negative. It ends at a KKT point: ``u >= 0``, ``c = P u + r >= 0``
    (the constraints ``G g~ >= 0``) and ``c_k = 0`` where ``u_k > 0``.

    Args:
        P: ``[t, t]`` Gram matrix ``GG^T`` (best in normalised units, O(1)).
        q: ``[t]`` products ``Gg``.
        margin: lower bound of ``v``.
        max_iter: most outer iterations (default ``3 t + 10``).

    Returns:
        ``v`` (float64).
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
    """Lawson-Hanson's inner loop: solve on the free set, stepping back (and freeing fewer
    coefficients) while the solution has a coefficient <= 0. Updates ``free`` in place."""
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

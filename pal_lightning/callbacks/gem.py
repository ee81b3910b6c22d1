"""Gradient Episodic Memory (GEM) and A-GEM as a Lightning callback.

GEM (Lopez-Paz & Ranzato, 2017) keeps a small episodic memory ``M_k`` of every task
``k``. At each optimizer step with gradient ``g`` it computes one memory gradient
``g_k`` per constraining task (rows of ``G``) and requires ``<g~, g_k> >= 0``: the
update must not increase any remembered task's loss (to first order). When ``g``
already satisfies every constraint, ``g~ = g``; otherwise ``g~`` is the closest
vector to ``g`` that does, found through the ``t x t`` dual QP::

    minimise_v  1/2 v^T (G G^T + eps I) v + (G g)^T v      subject to  v >= margin
    g~ = g + G^T v

By the KKT conditions ``G g~ = lambda - eps v`` with ``lambda = (G G^T + eps I) v + G g >= 0``,
so the constraints hold up to the (small, relative) ridge ``eps``, also for ``margin > 0``.

A-GEM (Chaudhry et al., 2019) replaces the QP by one reference gradient ``g_ref`` of a
batch drawn across the memories::

    g~ = g - (g^T g_ref / g_ref^T g_ref) g_ref      if g^T g_ref < 0, else g

This module holds the pure functions (:func:`solve_gem_dual`, :func:`project_gradient`,
:func:`agem_project`), the :class:`EpisodicMemory` and the :class:`GEMCallback`.
"""

from __future__ import annotations

import logging

import numpy as np
import quadprog
import torch
from torch import Tensor

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_EPS",
    "ProjectionResult",
    "agem_project",
    "gem_coefficients",
    "project_gradient",
    "solve_gem_dual",
]

#: Default relative ridge: ``eps * mean(diag(G G^T))`` is added to the diagonal of ``G G^T``.
DEFAULT_EPS = 1e-3
#: How often the ridge is multiplied by 10 when quadprog fails, before the A-GEM fallback.
EPS_RETRIES = 3
#: A memory gradient whose squared norm is at most this fraction of the largest one counts as zero.
ZERO_ROW_RTOL = 1e-24

MODES = ("gem", "agem")
CONSTRAINTS = ("others", "past")
PARAMETERS = ("shared", "all")


# ---------------------------------------------------------------------------------------- pure maths


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


class ProjectionResult:
    """Coefficients of a projection ``g~ = g + sum_k v_k g_k`` and what it took to find them.

    Attributes:
        v: ``[t]`` float64 coefficients (zeros for dropped rows), or ``None`` when ``g`` is left alone.
        violated: whether some ``<g, g_k> < 0``.
        fallbacks: how many fallbacks were used (larger ridges, then A-GEM).
        min_cosine: the smallest ``cos(g, g_k)`` over the non-zero rows (``None`` without rows).
        rows: the number of non-zero memory gradients.
    """

    __slots__ = ("fallbacks", "min_cosine", "rows", "v", "violated")

    def __init__(
        self,
        v: np.ndarray | None,
        violated: bool,
        fallbacks: int,
        min_cosine: float | None,
        rows: int,
    ) -> None:
        self.v = v
        self.violated = violated
        self.fallbacks = fallbacks
        self.min_cosine = min_cosine
        self.rows = rows


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
    violated = bool(np.any(Gg_k < 0))
    if not violated:
        return ProjectionResult(None, False, 0, min_cosine, rows)
    a = float(np.sqrt(np.mean(np.diag(GGt_k))))
    P_hat = GGt_k / (a * a)
    q_hat = Gg_k / (a * norm_g)
    margin_hat = float(margin) * a / norm_g
    v_hat = None
    fallbacks = 0
    ridge = eps
    for _ in range(EPS_RETRIES + 1):  # eps, then 10x larger ridges: each failure is one fallback
        try:
            candidate = solve_gem_dual(P_hat, q_hat, margin_hat, ridge)
        except ValueError:  # "not positive definite" / "constraints are inconsistent"
            candidate = None
        if candidate is not None and np.all(np.isfinite(candidate)):
            v_hat = candidate
            break
        fallbacks += 1
        ridge *= 10.0
    v = np.zeros(t)
    if v_hat is not None:
        v[K] = v_hat * (norm_g / a)
        return ProjectionResult(v, True, fallbacks, min_cosine, rows)
    # A-GEM against the violated rows: g_ref = mean of those g_k, in terms of GG^T and Gg only
    V = K[Gg_k < 0]
    ref_dot = float(np.mean(Gg[V]))  # <g, g_ref>
    ref_sq = float(GGt[np.ix_(V, V)].sum()) / len(V) ** 2  # ||g_ref||^2
    if ref_sq > 0 and np.isfinite(ref_sq) and ref_dot < 0:
        v[V] = -ref_dot / ref_sq / len(V)
        return ProjectionResult(v, True, fallbacks, min_cosine, rows)
    return ProjectionResult(None, True, fallbacks, min_cosine, rows)


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

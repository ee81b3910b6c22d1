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
so the ridged solution violates the constraints by up to ``eps v`` (about 1 % of ``|g_k| |g~|``
for nearly collinear memory gradients). :func:`solve_gem_dual_exact` therefore also solves the
un-ridged dual exactly (an active-set non-negative least-squares method on the ``t x t`` matrices),
so that ``G g~ >= -1e-9 |g_k| |g~|``, also for ``margin > 0``; the ridged solution stays as the
fallback when the exact one is worse.

A-GEM (Chaudhry et al., 2019) replaces the QP by one reference gradient ``g_ref`` of a
batch drawn across the memories::

    g~ = g - (g^T g_ref / g_ref^T g_ref) g_ref      if g^T g_ref < 0, else g

This module holds the pure functions (:func:`solve_gem_dual`, :func:`project_gradient`,
:func:`agem_project`), the :class:`EpisodicMemory` and the :class:`GEMCallback`.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import lightning.pytorch as pl
import numpy as np
import quadprog
import torch
import torch.distributed as dist
from lightning.fabric.utilities.apply_func import move_data_to_device
from torch import Tensor, nn

from pal_lightning.errors import PalUserError

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_EPS",
    "EpisodicMemory",
    "GEMCallback",
    "ProjectionResult",
    "agem_project",
    "gem_coefficients",
    "solve_gem_dual_exact",
    "project_gradient",
    "solve_gem_dual",
]

#: Default relative ridge: ``eps * mean(diag(G G^T))`` is added to the diagonal of ``G G^T``.
DEFAULT_EPS = 1e-3
#: How often the ridge is multiplied by 10 when quadprog fails, before the A-GEM fallback.
EPS_RETRIES = 3
#: A memory gradient whose squared norm is at most this fraction of the largest one counts as zero.
ZERO_ROW_RTOL = 1e-24
#: Relative violation up to which the exact dual's solution is preferred to the ridged one.
EXACT_TOL = 1e-9

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


def _relative_violation(P: np.ndarray, q: np.ndarray, v: np.ndarray, qq: float) -> float:
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


def solve_gem_dual_exact(P: np.ndarray, q: np.ndarray, margin: float, max_iter: int | None = None) -> np.ndarray:
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
        for _ in range(3 * t + 10):  # inner loop: keep the free coefficients positive
            s = np.zeros(t)
            S = np.flatnonzero(free)
            s[S] = np.linalg.lstsq(P[np.ix_(S, S)], -r[S], rcond=None)[0]
            if np.all(s[S] > 0):
                u = s
                break
            neg = S[s[S] <= 0]
            alpha = float(np.min(u[neg] / np.maximum(u[neg] - s[neg], 1e-300)))
            u = u + alpha * (s - u)
            free &= u > tol
            u[~free] = 0.0
            if not free.any():
                break
        w = -(P @ u + r)
    S = np.flatnonzero(free)
    if S.size:  # one step of iterative refinement: large u (a large margin) loses digits to rounding
        u[S] = np.maximum(u[S] + np.linalg.lstsq(P[np.ix_(S, S)], w[S], rcond=None)[0], 0.0)
    return margin + u


class ProjectionResult:
    """Coefficients of a projection ``g~ = g + sum_k v_k g_k`` and what it took to find them.

    Attributes:
        v: ``[t]`` float64 coefficients (zeros for dropped rows), or ``None`` when ``g`` is left alone.
        violated: whether some ``<g, g_k> < 0``.
        fallbacks: how many fallbacks were used (larger ridges, then A-GEM).
        min_cosine: the smallest ``cos(g, g_k)`` over the non-zero rows (``None`` without rows).
        rows: the number of non-zero memory gradients.
        violation: the residual ``max_k -<g~, g_k> / (|g_k| |g~|)`` after the projection (0 when
            none is left; ``None`` when ``g`` is left alone).
    """

    __slots__ = ("fallbacks", "min_cosine", "rows", "v", "violated", "violation")

    def __init__(
        self,
        v: np.ndarray | None,
        violated: bool,
        fallbacks: int,
        min_cosine: float | None,
        rows: int,
        violation: float | None = None,
    ) -> None:
        self.v = v
        self.violated = violated
        self.fallbacks = fallbacks
        self.min_cosine = min_cosine
        self.rows = rows
        self.violation = violation


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
        # The ridge moves the solution off the feasible set by up to eps v: solve the un-ridged dual
        # exactly and keep whichever of the two violates the constraints less.
        violation = _relative_violation(P_hat, q_hat, v_hat, 1.0)
        try:
            exact = solve_gem_dual_exact(P_hat, q_hat, margin_hat)
        except (np.linalg.LinAlgError, ValueError):  # SVD did not converge: keep the ridged solution
            exact = np.full_like(v_hat, np.nan)
        if np.all(np.isfinite(exact)):
            exact_violation = _relative_violation(P_hat, q_hat, exact, 1.0)
            if exact_violation <= max(violation, EXACT_TOL):
                v_hat, violation = exact, exact_violation
        v[K] = v_hat * (norm_g / a)
        return ProjectionResult(v, True, fallbacks, min_cosine, rows, violation)
    # A-GEM against the violated rows: g_ref = mean of those g_k, in terms of GG^T and Gg only
    V = K[Gg_k < 0]
    ref_dot = float(np.mean(Gg[V]))  # <g, g_ref>
    ref_sq = float(GGt[np.ix_(V, V)].sum()) / len(V) ** 2  # ||g_ref||^2
    if ref_sq > 0 and np.isfinite(ref_sq) and ref_dot < 0:
        v[V] = -ref_dot / ref_sq / len(V)
        violation = _relative_violation(GGt_k, Gg_k, v[K], gg)
        return ProjectionResult(v, True, fallbacks, min_cosine, rows, violation)
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


# ---------------------------------------------------------------------------------------- memory

_MASK64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """SplitMix64's finaliser: a fast, well-mixed 64-bit hash of an integer."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _task_key(task: str) -> int:
    """A stable integer per task name (Python's ``hash`` of a str changes between processes)."""
    return zlib.crc32(task.encode("utf-8"))


class EpisodicMemory:
    """One reservoir of training-example indices per task.

    Reservoir sampling (Vitter's algorithm R): the ``n``-th example of a task (0-based) is
    stored while the buffer has room; afterwards it replaces slot ``j`` when
    ``j = hash(seed, task, n) mod (n + 1) < size``. Every example a task has seen is then in
    its memory with the same probability ``size / n_seen``, so the memory stays a uniform
    sample of everything the task trained on. A ring buffer would keep only the most recent
    examples, which in interleaved multi-task training covers a small, late slice of each
    task's data. The draw depends only on ``(seed, task, n)``: every DDP rank (fed the same
    global indices) holds the same memories, and a resumed run continues exactly.

    Args:
        size: examples kept per task.
        seed: seed of the replacement draws and of :meth:`sample`.
    """

    def __init__(self, size: int, seed: int = 0) -> None:
        if size < 1:
            raise PalUserError(f"memory_size must be >= 1, got {size}.")
        self.size = int(size)
        self.seed = int(seed)
        self.buffers: dict[str, list[int]] = {}
        self.seen: dict[str, int] = {}

    def add(self, task: str, indices: Iterable[int]) -> None:
        """Offer ``indices`` (positions in ``task``'s train split), in order, to ``task``'s reservoir."""
        buffer = self.buffers.setdefault(task, [])
        n = self.seen.get(task, 0)
        base = _mix64((self.seed & _MASK64) ^ (_task_key(task) << 32))
        for index in indices:
            if n < self.size:
                buffer.append(int(index))
            else:
                j = _mix64(base ^ n) % (n + 1)
                if j < self.size:
                    buffer[j] = int(index)
            n += 1
        self.seen[task] = n

    def __len__(self) -> int:
        return sum(len(b) for b in self.buffers.values())

    def tasks(self) -> list[str]:
        """Tasks with a non-empty memory."""
        return [t for t, b in self.buffers.items() if b]

    def sample(self, task: str, n: int, step: int) -> list[int]:
        """``min(n, len(memory))`` distinct stored indices, drawn by a generator seeded by ``(seed, step, task)``.

        The same on every rank: ranks take disjoint shares of this one draw.
        """
        buffer = self.buffers.get(task, [])
        n = min(int(n), len(buffer))
        if n <= 0:
            return []
        rng = np.random.default_rng([self.seed & _MASK64, int(step), _task_key(task)])
        positions = rng.choice(len(buffer), size=n, replace=False)
        return [buffer[int(i)] for i in positions]

    def state_dict(self) -> dict[str, Any]:
        """Plain ints, lists and strings (checkpoints stay loadable with ``torch.load(weights_only=True)``)."""
        return {
            "size": self.size,
            "seed": self.seed,
            "buffers": {t: list(b) for t, b in self.buffers.items()},
            "seen": dict(self.seen),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore buffers and counters; buffers longer than ``size`` keep their first ``size`` slots."""
        if int(state.get("size", self.size)) != self.size or int(state.get("seed", self.seed)) != self.seed:
            warnings.warn(
                f"Episodic memory saved with size={state.get('size')}, seed={state.get('seed')} is loaded into "
                f"one with size={self.size}, seed={self.seed}: the memories will not match an uninterrupted run.",
                stacklevel=2,
            )
        self.buffers = {str(t): [int(i) for i in b][: self.size] for t, b in state["buffers"].items()}
        self.seen = {str(t): int(n) for t, n in state["seen"].items()}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EpisodicMemory) and self.state_dict() == other.state_dict()

    def __repr__(self) -> str:
        sizes = {t: len(b) for t, b in self.buffers.items()}
        return f"EpisodicMemory(size={self.size}, seed={self.seed}, stored={sizes}, seen={self.seen})"


# ---------------------------------------------------------------------------------------- callback

Grads = list[Tensor | None]


def _dot(a: Tensor, b: Tensor) -> Tensor:
    """``<a, b>`` of two same-shape tensors on their device (half precision upcast to float32)."""
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
        present = [(i, row[k]) for i, row in enumerate(rows) if row[k] is not None]
        for a, (i, x) in enumerate(present):
            for j, y in present[a:]:
                parts[i * n + j].append(_dot(x, y))
    M = torch.zeros(n, n, dtype=torch.float64, device=device)
    for i in range(n):
        for j in range(i, n):
            if parts[i * n + j]:
                M[i, j] = M[j, i] = torch.stack(parts[i * n + j]).double().sum()
    return M


class GEMCallback(pl.Callback):
    """Gradient Episodic Memory (or A-GEM) for multi-task and continual training.

    Memories: one :class:`EpisodicMemory` reservoir per task, filled in ``on_train_batch_start``
    from every training batch's ``batch["indices"]`` (under DDP the indices of all ranks are
    gathered first, in rank order, so every rank stores the same global examples). The window's
    current tasks (those of the micro-batches since the last optimizer step) are recorded there
    too: ``on_before_optimizer_step`` runs inside the last micro-batch, before any batch-end hook.

    Projection: in ``on_before_optimizer_step`` (gradients complete, DDP-averaged and unscaled,
    before clipping), once per accumulation window:

    1. constraining tasks ``K``: ``"others"`` = every task with a memory that is not current;
       ``"past"`` = tasks first trained before the (latest-seen) current one, not current;
    2. memory gradients ``g_k`` (``k`` in ``K``) with ``torch.autograd.grad`` of
       ``pl_module.batch_loss`` on the unwrapped module under the precision plugin's
       ``forward_context()``: ``memory_batch_size * world_size`` remembered examples are drawn
       with a generator seeded by ``(seed, global_step, k)`` (fewer when the memory holds fewer),
       each rank takes its disjoint share, the gradients are summed across ranks weighted by
       each share's size (the gradient of the mean loss of the whole draw);
    3. ``M = [g, G][g, G]^T`` from per-tensor dot products on the gradients' device
       (:func:`gram_matrix`), broadcast from rank 0 so every rank takes the same decision;
    4. if some ``<g, g_k> < 0``: ``v`` from the dual QP (:func:`gem_coefficients`) and
       ``g~ = g + sum_k v_k g_k`` written in place into the participating ``p.grad``.

    A-GEM (``mode="agem"``): one reference gradient of a batch split over the constraining
    memories (example-weighted mean loss), ``g~ = g - (g.g_ref / g_ref.g_ref) g_ref`` when
    ``g.g_ref < 0``.

    Never writes non-finite values: a non-finite ``g`` or memory gradient leaves ``g`` alone
    (the module's guard, if any, deals with the step) and is counted in ``gem/skipped_nonfinite``.

    Logged each optimizer step (``on_step``): ``gem/constraints`` (rows of ``G``; 0 = nothing to do),
    ``gem/violated`` (0/1), ``gem/min_cosine`` (smallest ``cos(g, g_k)``; A-GEM: ``cos(g, g_ref)``;
    only when there are non-zero rows), ``gem/projection_ms`` (all of GEM's work this step: memory gradients, QP, write-back),
    ``gem/fallbacks`` and ``gem/skipped_nonfinite`` (cumulative), and for GEM ``gem/violation`` (the
    residual ``max_k -<g~, g_k> / (|g_k| |g~|)`` after the projection, 0 when exact).

    Duck-typed contract: the data module (``trainer.datamodule``, or the ``data`` argument of
    :meth:`project_step`) has ``train_batch(task, indices) -> batch`` that rebuilds a training
    batch of ``task``'s train-split positions ``indices`` (CPU tensors are fine, the callback moves
    them), and the module has ``batch_loss(batch) -> Tensor``; with ``parameters="shared"`` the
    module also has ``encoder.pretrained_parameters()`` (:class:`~pal_lightning.modeling.MultiTaskBert`).
    Training batches carry ``batch["task"]`` and ``batch["indices"]``.

    Args:
        memory_size: examples remembered per task.
        memory_batch_size: remembered examples per constraining task and rank for each memory gradient
            (A-GEM: in all, split over the constraining tasks).
        margin: GEM's ``memory_strength`` gamma (the dual's lower bound on ``v``).
        mode: ``"gem"`` (QP) or ``"agem"`` (one reference gradient).
        constraints: ``"others"`` (interleaved multi-task training) or ``"past"`` (continual training).
        parameters: ``"shared"`` (the pretrained encoder: task-specific adapters and heads cannot
            conflict) or ``"all"`` trainable parameters.
        refresh_every: recompute memory gradients every ``k`` optimizer steps (in between, and while
            the constraining set is unchanged, the last ones are reused; they are kept on the device).
        eps: relative ridge: ``eps * trace(GG^T) / t`` is added to the diagonal of ``GG^T``.
        seed: seed of the memories' reservoir draws and of the memory batches.
    """

    def __init__(
        self,
        memory_size: int = 256,
        memory_batch_size: int = 16,
        margin: float = 0.5,
        mode: str = "gem",
        constraints: str = "others",
        parameters: str = "shared",
        refresh_every: int = 1,
        eps: float = DEFAULT_EPS,
        seed: int = 0,
    ) -> None:
        super().__init__()
        for name, value, choices in (
            ("mode", mode, MODES),
            ("constraints", constraints, CONSTRAINTS),
            ("parameters", parameters, PARAMETERS),
        ):
            if value not in choices:
                raise PalUserError(f"GEMCallback {name}={value!r} is not supported: choose one of {choices}.")
        if memory_batch_size < 1:
            raise PalUserError(f"GEMCallback memory_batch_size must be >= 1, got {memory_batch_size}.")
        if refresh_every < 1:
            raise PalUserError(f"GEMCallback refresh_every must be >= 1, got {refresh_every}.")
        if not (margin >= 0 and np.isfinite(margin)):
            raise PalUserError(f"GEMCallback margin must be a finite number >= 0, got {margin}.")
        if not (eps > 0 and np.isfinite(eps)):
            raise PalUserError(f"GEMCallback eps must be a finite number > 0, got {eps}.")
        self.memory_size = int(memory_size)
        self.memory_batch_size = int(memory_batch_size)
        self.margin = float(margin)
        self.mode = mode
        self.constraints = constraints
        self.parameters = parameters
        self.refresh_every = int(refresh_every)
        self.eps = float(eps)
        self.seed = int(seed)
        self.memory = EpisodicMemory(memory_size, seed)
        self.task_order: list[str] = []
        """Tasks in the order they were first trained on (what ``constraints="past"`` looks at)."""
        self.fallbacks = 0
        self.skipped_nonfinite = 0
        self.violations = 0
        self.projections = 0
        self.last_stats: dict[str, float] = {}
        """What the last optimizer step logged (for inspection and tests)."""
        self._window_step: int | None = None
        self._window_tasks: list[str] = []
        self._cache: tuple[tuple[str, ...], int, list[Grads]] | None = None

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        return {
            "memory": self.memory.state_dict(),
            "task_order": list(self.task_order),
            "fallbacks": self.fallbacks,
            "skipped_nonfinite": self.skipped_nonfinite,
            "violations": self.violations,
            "projections": self.projections,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.memory.load_state_dict(state_dict["memory"])
        self.task_order = [str(t) for t in state_dict.get("task_order", [])]
        for key in ("fallbacks", "skipped_nonfinite", "violations", "projections"):
            setattr(self, key, int(state_dict.get(key, 0)))
        self._cache = None

    # ------------------------------------------------------------------ hooks

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        datamodule = getattr(trainer, "datamodule", None)
        if datamodule is None or not callable(getattr(datamodule, "train_batch", None)):
            raise PalUserError(
                "GEMCallback needs a data module with train_batch(task, indices) to rebuild remembered "
                "examples (e.g. pal_lightning.MultiTaskDataModule): pass datamodule= to Trainer.fit."
            )
        if not callable(getattr(pl_module, "batch_loss", None)):
            raise PalUserError(
                "GEMCallback needs a LightningModule with batch_loss(batch) (e.g. pal_lightning.MultiTaskModule)."
            )
        if not self.participating_parameters(pl_module):
            raise PalUserError(
                f"GEMCallback(parameters={self.parameters!r}) found no trainable parameters to project "
                "(frozen encoder?): use parameters='all' or unfreeze the encoder."
            )

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        try:
            task, indices = str(batch["task"]), [int(i) for i in batch["indices"]]
        except (KeyError, TypeError):
            raise PalUserError(
                "GEMCallback needs training batches with 'task' and 'indices' (positions in the train "
                "split), as pal_lightning.MultiTaskDataModule makes them."
            ) from None
        if trainer.global_step != self._window_step:  # a new accumulation window
            self._window_step = trainer.global_step
            self._window_tasks = []
        if task not in self._window_tasks:
            self._window_tasks.append(task)
        if task not in self.task_order:
            self.task_order.append(task)
        self.memory.add(task, self._gather_indices(trainer, pl_module, indices))

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        stats = self.project_step(
            pl_module,
            trainer.datamodule,
            step=trainer.global_step,
            current=self._window_tasks,
            forward_context=trainer.precision_plugin.forward_context,
            rank=trainer.global_rank,
            world_size=trainer.world_size,
        )
        for key, value in stats.items():
            pl_module.log(key, value, on_step=True, on_epoch=False, batch_size=1)

    # ------------------------------------------------------------------ pieces

    @staticmethod
    def _gather_indices(trainer: pl.Trainer, pl_module: pl.LightningModule, indices: list[int]) -> list[int]:
        """The batch's indices on every rank, in rank order (the same list on every rank)."""
        if trainer.world_size <= 1:
            return indices
        device = pl_module.device
        count = torch.tensor([len(indices)], dtype=torch.long, device=device)
        counts = trainer.strategy.all_gather(count).reshape(-1).tolist()
        padded = torch.full((max(counts),), -1, dtype=torch.long, device=device)
        padded[: len(indices)] = torch.tensor(indices, dtype=torch.long, device=device)
        gathered = trainer.strategy.all_gather(padded).reshape(len(counts), -1).tolist()
        return [i for row, n in zip(gathered, counts, strict=True) for i in row[:n]]

    def participating_parameters(self, module: nn.Module) -> list[nn.Parameter]:
        """Trainable parameters GEM projects: the shared encoder's (``"shared"``) or all (``"all"``).

        "Shared" means what every task updates: with a layer-sharing regime the embeddings and the S
        layers (``encoder.shared_parameters()``; F layers do not require gradients, and a task's own
        copies of I layers cannot conflict with another task's, like adapters and heads).
        """
        if self.parameters == "all":
            return [p for p in module.parameters() if p.requires_grad]
        encoder = getattr(module, "encoder", None)
        shared = getattr(encoder, "shared_parameters", None) or getattr(encoder, "pretrained_parameters", None)
        if encoder is None or not callable(shared):
            raise PalUserError(
                "GEMCallback(parameters='shared') needs module.encoder.pretrained_parameters() "
                "(pal_lightning.modeling.MultiTaskBert): use parameters='all' for another model."
            )
        return [p for _, p in shared() if p.requires_grad]

    def constraining_tasks(self, current: Sequence[str]) -> list[str]:
        """Tasks whose memories constrain a step on ``current`` (in first-seen order)."""
        with_memory = set(self.memory.tasks())
        if self.constraints == "others":
            return [t for t in self.task_order if t in with_memory and t not in current]
        positions = [self.task_order.index(t) for t in current if t in self.task_order]
        last = max(positions, default=-1)
        return [t for t in self.task_order[:last] if t in with_memory and t not in current]

    def _memory_loss(
        self, module: nn.Module, data: Any, task: str, indices: list[int], forward_context: Callable[[], Any]
    ) -> Tensor:
        batch = move_data_to_device(data.train_batch(task, indices), module.device)
        with forward_context():
            return module.batch_loss(batch)

    def _memory_gradients(
        self,
        module: nn.Module,
        data: Any,
        draws: Mapping[str, list[int]],
        params: list[nn.Parameter],
        forward_context: Callable[[], Any],
        rank: int,
        world_size: int,
    ) -> Grads:
        """Gradient of the example-weighted mean loss over ``draws`` (task -> indices of all ranks).

        Each rank takes every ``world_size``-th index from ``rank`` on; the local losses are
        weighted by their share of the whole draw and the gradients summed across ranks.
        """
        total = sum(len(idx) for idx in draws.values())
        loss: Tensor | None = None
        for task, idx in draws.items():
            share = idx[rank::world_size]
            if not share:
                continue
            part = self._memory_loss(module, data, task, share, forward_context) * (len(share) / total)
            loss = part if loss is None else loss + part
        grads: Grads = [None] * len(params)
        if loss is not None:
            grads = list(torch.autograd.grad(loss.float(), params, allow_unused=True))
        if world_size > 1:
            grads = _all_reduce_sum(grads, params)
        return grads

    def _constraint_gradients(
        self,
        module: nn.Module,
        data: Any,
        tasks: list[str],
        step: int,
        params: list[nn.Parameter],
        forward_context: Callable[[], Any],
        rank: int,
        world_size: int,
    ) -> list[Grads]:
        """Rows of ``G``: one per task (GEM), or the single A-GEM reference gradient."""
        want = self.memory_batch_size * world_size
        if self.mode == "gem":
            return [
                self._memory_gradients(
                    module,
                    data,
                    {task: self.memory.sample(task, want, step)},
                    params,
                    forward_context,
                    rank,
                    world_size,
                )
                for task in tasks
            ]
        # A-GEM: split the draw over the constraining tasks (the first ones get the remainder)
        counts = [want // len(tasks) + (i < want % len(tasks)) for i in range(len(tasks))]
        draws = {task: self.memory.sample(task, n, step) for task, n in zip(tasks, counts, strict=True)}
        return [self._memory_gradients(module, data, draws, params, forward_context, rank, world_size)]

    # ------------------------------------------------------------------ the step

    def project_step(
        self,
        module: nn.Module,
        data: Any,
        step: int,
        current: Sequence[str],
        forward_context: Callable[[], Any] = contextlib.nullcontext,
        rank: int = 0,
        world_size: int = 1,
    ) -> dict[str, float]:
        """Project ``module``'s gradients in place for an optimizer step on the tasks ``current``.

        What ``on_before_optimizer_step`` runs; callable without a Trainer (benchmarks, custom
        loops): ``data`` is anything with ``train_batch(task, indices)``. Under DDP every rank
        must call it with the same arguments except ``rank``.

        Returns:
            The step's statistics (the logged ``gem/...`` values).
        """
        start = time.perf_counter()
        stats: dict[str, float] = {"gem/constraints": 0.0, "gem/violated": 0.0}
        tasks = self.constraining_tasks(current)
        if tasks:
            self._project(module, data, step, tasks, forward_context, rank, world_size, stats)
        stats["gem/projection_ms"] = (time.perf_counter() - start) * 1000.0
        stats["gem/fallbacks"] = float(self.fallbacks)
        stats["gem/skipped_nonfinite"] = float(self.skipped_nonfinite)
        self.last_stats = stats
        return stats

    def _project(
        self,
        module: nn.Module,
        data: Any,
        step: int,
        tasks: list[str],
        forward_context: Callable[[], Any],
        rank: int,
        world_size: int,
        stats: dict[str, float],
    ) -> None:
        params = self.participating_parameters(module)
        g: Grads = [p.grad for p in params]
        key = (tuple(tasks), self.mode == "gem")
        cached = self._cache
        if cached is not None and cached[0] == key and step - cached[1] < self.refresh_every:
            rows = cached[2]
        else:
            rows = self._constraint_gradients(
                module, data, tasks, step, params, forward_context, rank, world_size
            )
            self._cache = (key, step, rows) if self.refresh_every > 1 else None
        M = gram_matrix([g, *rows])
        if world_size > 1 and dist.is_available() and dist.is_initialized():
            dist.broadcast(M, src=0)  # one decision for all ranks, even if their float sums differ
        M = M.cpu().numpy()
        stats["gem/constraints"] = float(len(rows))
        if not np.all(np.isfinite(M)):
            self.skipped_nonfinite += 1
            self._cache = None
            return
        gg, Gg, GGt = float(M[0, 0]), M[1:, 0], M[1:, 1:]
        if self.mode == "gem":
            result = gem_coefficients(GGt, Gg, gg, margin=self.margin, eps=self.eps)
            self.fallbacks += result.fallbacks
            violated, v, min_cosine = result.violated, result.v, result.min_cosine
            stats["gem/violation"] = float(result.violation or 0.0)
        else:
            ref_sq, dot = float(GGt[0, 0]), float(Gg[0])
            violated = dot < 0 and ref_sq > 0 and gg > 0
            v = np.array([-dot / ref_sq]) if violated else None
            min_cosine = dot / np.sqrt(ref_sq * gg) if ref_sq > 0 and gg > 0 else None
        stats["gem/violated"] = float(violated)
        if min_cosine is not None:
            stats["gem/min_cosine"] = float(min_cosine)
        self.violations += int(violated)
        if v is None:
            return
        self.projections += 1
        for coeff, row in zip(v.tolist(), rows, strict=True):
            if coeff == 0.0:
                continue
            for p, r in zip(params, row, strict=True):
                if r is None:
                    continue
                if p.grad is None:  # e.g. parameters="all": a head the current task did not use
                    p.grad = (r * coeff).to(p.dtype)
                else:
                    p.grad.add_(r.to(p.grad.dtype), alpha=coeff)


def _all_reduce_sum(grads: Grads, params: list[nn.Parameter]) -> Grads:
    """Sum gradients across ranks; a tensor stays ``None`` only if it is ``None`` on every rank.

    Every rank makes the same calls in the same order: one small reduction of the "present"
    mask (a rank with no memory examples cannot know which tensors its model would have
    touched), then one reduction per tensor that some rank has.
    """
    device = params[0].device
    present = torch.tensor([x is not None for x in grads], dtype=torch.float32, device=device)
    dist.all_reduce(present)
    out: Grads = []
    for p, x, used in zip(params, grads, present.tolist(), strict=True):
        if used == 0:  # None on every rank: no call on any rank
            out.append(None)
            continue
        x = torch.zeros_like(p) if x is None else x.contiguous()
        dist.all_reduce(x)
        out.append(x)
    return out

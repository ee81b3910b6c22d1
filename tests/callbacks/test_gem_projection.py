"""GEM / A-GEM pure functions against an independent solution of the same QP."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from pal_lightning.gem import qp
from pal_lightning.gem.projection import EPS_RETRIES, agem_project, gem_coefficients, project_gradient
from pal_lightning.gem.qp import solve_gem_dual


def exact_dual(GGt: np.ndarray, Gg: np.ndarray, margin: float) -> np.ndarray:
    """Solve min 1/2 v^T P v + q^T v s.t. v >= margin by enumerating the active sets (small t only).

    For each set A of bounds held with equality, the free part solves P_FF v_F = -(q_F + P_FA margin);
    the solution is the one that is primal feasible (v_F >= margin) and dual feasible (lambda_A >= 0).
    """
    t = len(Gg)
    best = None
    for r in range(t + 1):
        for A in itertools.combinations(range(t), r):
            F = [i for i in range(t) if i not in A]
            v = np.full(t, margin, dtype=np.float64)
            if F:
                rhs = -(Gg[F] + GGt[np.ix_(F, list(A))] @ v[list(A)])
                v[F] = np.linalg.solve(GGt[np.ix_(F, F)], rhs)
            lam = GGt @ v + Gg
            if np.all(v >= margin - 1e-9) and np.all(lam[list(A)] >= -1e-9):
                best = v
    assert best is not None
    return best


def violated_problem(seed: int, t: int, p: int = 40, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    G = torch.randn(t, p, generator=gen, dtype=torch.float64)
    g = -G[0] + 0.5 * torch.randn(p, generator=gen, dtype=torch.float64)  # row 0 certainly violated
    return g * scale, G * scale


@pytest.mark.parametrize("t", [1, 2, 3, 4])
@pytest.mark.parametrize("margin", [0.0, 0.5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_exact_dual_and_kkt(t: int, margin: float, seed: int) -> None:
    g, G = violated_problem(seed, t)
    eps = 1e-10  # effectively the exact QP
    GGt, Gg, gg = (G @ G.T).numpy(), (G @ g).numpy(), float(g @ g)
    result = gem_coefficients(GGt, Gg, gg, margin=margin, eps=eps)
    assert result.violated and result.fallbacks == 0 and result.rows == t
    v = result.v
    # KKT of the dual: primal feasibility, dual feasibility, complementary slackness
    lam = GGt @ v + Gg
    scale = np.abs(GGt).max() * max(1.0, np.abs(v).max())
    assert np.all(v >= margin - 1e-9)
    assert np.all(lam >= -1e-7 * scale)
    assert np.allclose((v - margin) * lam, 0.0, atol=1e-6 * scale)
    # the same v as the independent active-set solution, and the same projected gradient
    np.testing.assert_allclose(v, exact_dual(GGt, Gg, margin), rtol=1e-6, atol=1e-8)
    g_tilde = project_gradient(g, G, margin=margin, eps=eps)
    np.testing.assert_allclose(g_tilde.numpy(), (g + G.T @ torch.from_numpy(v)).numpy(), rtol=1e-9, atol=1e-9)
    # constraints hold after projection: G g~ = lambda >= 0
    assert torch.all(G @ g_tilde >= -1e-6 * G.norm(dim=1) * g_tilde.norm())


@pytest.mark.parametrize("seed", [0, 1])
def test_no_feasible_point_is_closer(seed: int) -> None:
    g, G = violated_problem(seed, t=3)
    g_tilde = project_gradient(g, G, margin=0.0, eps=1e-10)
    best = float((g_tilde - g).norm())
    assert best > 0
    # g~ itself is feasible (G g~ >= 0): without this, g + G^T v (sign flipped) is as close to g
    assert torch.all(G @ g_tilde >= -1e-9 * G.norm(dim=1) * g_tilde.norm()), G @ g_tilde
    assert torch.any(G @ g <= 0)  # and the problem really needed a projection
    gen = torch.Generator().manual_seed(100 + seed)
    feasible = 0
    for radius in (1e-3, 1e-2, 1e-1, 1.0, 10.0):
        z = g_tilde + radius * torch.randn(4000, g.shape[0], generator=gen, dtype=torch.float64)
        z = torch.cat([z, torch.randn(4000, g.shape[0], generator=gen, dtype=torch.float64) * radius * 3])
        ok = (z @ G.T >= 0).all(dim=1)
        feasible += int(ok.sum())
        dist = (z[ok] - g).norm(dim=1)
        if len(dist):
            assert float(dist.min()) >= best - 1e-7
    assert feasible > 1000  # the check really compared against feasible points


def test_noop_when_nothing_is_violated() -> None:
    gen = torch.Generator().manual_seed(0)
    G = torch.randn(3, 30, generator=gen)
    g = torch.linalg.lstsq(G, torch.ones(3, 1)).solution.squeeze(1)  # G g = 1 > 0
    assert torch.all(G @ g > 0)
    out = project_gradient(g, G, margin=0.5)
    assert torch.equal(out, g) and out is not g
    r = gem_coefficients((G @ G.T).double().numpy(), (G @ g).double().numpy(), float(g @ g))
    assert not r.violated and r.v is None and r.min_cosine is not None and r.min_cosine > 0


def _check_finite_and_satisfied(
    g: torch.Tensor, G: torch.Tensor, out: torch.Tensor, tol: float = 1e-2
) -> None:
    assert torch.isfinite(out).all()
    norms = G.double().norm(dim=1)
    nz = norms > 0
    cos = (G.double()[nz] @ out.double()) / (norms[nz] * out.double().norm())
    assert torch.all(cos >= -tol), cos


@pytest.mark.parametrize("scale", [1e-8, 1.0, 1e8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_scales(scale: float, dtype: torch.dtype) -> None:
    g, G = violated_problem(3, t=3, scale=scale)
    g, G = g.to(dtype), G.to(dtype)
    out = project_gradient(g, G, margin=0.5)
    assert out.dtype == dtype
    _check_finite_and_satisfied(g, G, out)
    # the result scales with the input: same direction as at scale 1
    ref = project_gradient(*(x.double() / scale for x in (g, G)), margin=0.5)
    np.testing.assert_allclose((out.double() / scale).numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)


def test_mixed_scales_g_tiny_memories_huge() -> None:
    g, G = violated_problem(4, t=2)
    for sg, sG in ((1e-8, 1e8), (1e8, 1e-8)):
        out = project_gradient(g * sg, G * sG, margin=0.5)
        _check_finite_and_satisfied(g * sg, G * sG, out)


def test_zero_rows_duplicates_and_one_row() -> None:
    g, G = violated_problem(5, t=2)
    zero = torch.zeros_like(G[:1])
    # a zero memory gradient is dropped: same result as without it
    with_zero = project_gradient(g, torch.cat([G, zero]), margin=0.5)
    np.testing.assert_allclose(with_zero.numpy(), project_gradient(g, G, margin=0.5).numpy(), rtol=1e-9)
    # every row zero: nothing to project against
    assert torch.equal(project_gradient(g, torch.zeros(3, g.shape[0], dtype=g.dtype)), g)
    # duplicated rows: GG^T singular, the ridge keeps quadprog happy
    dup = torch.cat([G[:1], G[:1], G[:1], G[1:]])
    out = project_gradient(g, dup, margin=0.0)
    _check_finite_and_satisfied(g, dup, out)
    # one row: the closed form g - (g.G0 / |G0|^2) G0 (margin 0, tiny ridge)
    one = project_gradient(g, G[:1], margin=0.0, eps=1e-12)
    expected = g - (g @ G[0]) / (G[0] @ G[0]) * G[0]
    np.testing.assert_allclose(one.numpy(), expected.numpy(), rtol=1e-8, atol=1e-10)


def test_non_finite_inputs_leave_g_alone() -> None:
    g, G = violated_problem(6, t=2)
    G_bad = G.clone()
    G_bad[1, 3] = float("nan")
    assert torch.equal(project_gradient(g, G_bad), g)
    g_bad = g.clone()
    g_bad[0] = float("inf")
    assert torch.equal(project_gradient(g_bad, G), g_bad)


def test_fallbacks_larger_eps_then_agem(monkeypatch: pytest.MonkeyPatch) -> None:
    g, G = violated_problem(7, t=2)
    GGt, Gg, gg = (G @ G.T).numpy(), (G @ g).numpy(), float(g @ g)
    calls: list[float] = []

    def fail_twice(P, q, margin, eps):  # noqa: ANN001, ANN202
        calls.append(eps)
        if len(calls) <= 2:
            raise ValueError("matrix G is not positive definite")
        return solve_gem_dual(P, q, margin, eps)

    monkeypatch.setattr(qp, "solve_gem_dual", fail_twice)
    r = gem_coefficients(GGt, Gg, gg, margin=0.0, eps=1e-3)
    assert r.fallbacks == 2 and r.v is not None
    np.testing.assert_allclose(calls, [1e-3, 1e-2, 1e-1])

    def always_fail(P, q, margin, eps):  # noqa: ANN001, ANN202
        raise ValueError("constraints are inconsistent, no solution")

    monkeypatch.setattr(qp, "solve_gem_dual", always_fail)
    r = gem_coefficients(GGt, Gg, gg, margin=0.0)
    assert r.fallbacks == EPS_RETRIES + 1 and r.v is not None
    # the A-GEM fallback against the violated rows: g~ orthogonal to their mean, finite
    out = g + G.T @ torch.from_numpy(r.v)
    V = torch.from_numpy(Gg < 0)
    g_ref = G[V].mean(0)
    assert torch.isfinite(out).all()
    assert abs(float(out @ g_ref)) <= 1e-9 * float(out.norm() * g_ref.norm())


def test_solve_gem_dual_is_the_quadprog_dual() -> None:
    g, G = violated_problem(8, t=3)
    GGt, Gg = (G @ G.T).numpy(), (G @ g).numpy()
    v = solve_gem_dual(GGt, Gg, margin=0.25, eps=1e-9)
    np.testing.assert_allclose(v, exact_dual(GGt + 1e-9 * np.eye(3), Gg, 0.25), rtol=1e-6, atol=1e-9)


def test_agem_closed_form() -> None:
    gen = torch.Generator().manual_seed(0)
    g_ref = torch.randn(20, generator=gen, dtype=torch.float64)
    g = -0.7 * g_ref + torch.randn(20, generator=gen, dtype=torch.float64)
    assert g @ g_ref < 0
    out = agem_project(g, g_ref)
    expected = g - (g @ g_ref) / (g_ref @ g_ref) * g_ref
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-12)
    assert abs(float(out @ g_ref)) < 1e-10
    # no conflict, zero or non-finite reference: unchanged
    assert torch.equal(agem_project(-g, g_ref), -g)
    assert torch.equal(agem_project(g, torch.zeros_like(g_ref)), g)
    assert torch.equal(agem_project(g, torch.full_like(g_ref, float("nan"))), g)
    # float32 in, float32 out, still orthogonal within float32 precision
    out32 = agem_project(g.float(), g_ref.float())
    assert out32.dtype == torch.float32
    assert abs(float(out32.double() @ g_ref)) < 1e-4 * float(g.norm() * g_ref.norm())

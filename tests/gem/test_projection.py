"""GEM / A-GEM pure functions against an independent solution of the same QP."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pal_lightning.gem import qp
from pal_lightning.gem.projection import (
    DEFAULT_EPS,
    EPS_RETRIES,
    ProjectionResult,
    agem_project,
    gem_coefficients,
    project_gradient,
    step_coefficients,
)
from pal_lightning.gem.qp import solve_gem_dual


def violated_problem(seed: int, t: int, p: int = 40, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    G = torch.randn(t, p, generator=gen, dtype=torch.float64)
    g = -G[0] + 0.5 * torch.randn(p, generator=gen, dtype=torch.float64)  # row 0 certainly violated
    return g * scale, G * scale


@pytest.mark.parametrize("t", [1, 2, 3, 4])
@pytest.mark.parametrize("margin", [0.0, 0.5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_exact_dual_and_kkt(t: int, margin: float, seed: int, brute_force_dual: Callable) -> None:
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
    np.testing.assert_allclose(v, brute_force_dual(GGt, Gg, margin), rtol=1e-6, atol=1e-8)
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

    _always_fail(monkeypatch)
    r = gem_coefficients(GGt, Gg, gg, margin=0.0)
    assert r.fallbacks == EPS_RETRIES + 1 and r.v is not None
    # the A-GEM fallback against the violated rows: g~ orthogonal to their mean, finite
    out = g + G.T @ torch.from_numpy(r.v)
    V = torch.from_numpy(Gg < 0)
    g_ref = G[V].mean(0)
    assert torch.isfinite(out).all()
    assert abs(float(out @ g_ref)) <= 1e-9 * float(out.norm() * g_ref.norm())


def test_solve_gem_dual_is_the_quadprog_dual(brute_force_dual: Callable) -> None:
    g, G = violated_problem(8, t=3)
    GGt, Gg = (G @ G.T).numpy(), (G @ g).numpy()
    v = solve_gem_dual(GGt, Gg, margin=0.25, eps=1e-9)
    np.testing.assert_allclose(v, brute_force_dual(GGt + 1e-9 * np.eye(3), Gg, 0.25), rtol=1e-6, atol=1e-9)


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


# ------------------------------------------------------------ edges (found by mutation testing)
def _fields(r: ProjectionResult) -> tuple:
    v = None if r.v is None else r.v.tolist()
    return (v, r.violated, r.fallbacks, r.min_cosine, r.rows)


def _always_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(P, q, margin, eps):  # noqa: ANN001, ANN202
        raise ValueError("constraints are inconsistent, no solution")

    monkeypatch.setattr(qp, "solve_gem_dual", fail)


def test_early_returns_report_every_field() -> None:
    # no rows at all
    assert _fields(gem_coefficients(np.zeros((0, 0)), np.zeros(0), 1.0)) == (None, False, 0, None, 0)
    # only zero rows
    assert _fields(gem_coefficients(np.zeros((2, 2)), np.zeros(2), 1.0)) == (None, False, 0, None, 0)
    # a zero gradient g: nothing to project, but the rows are counted
    assert _fields(gem_coefficients(np.eye(2), np.zeros(2), 0.0)) == (None, False, 0, None, 2)
    # nothing violated: cosines 0.6 and 0.8 (g = (3, 4), rows e1, e2): the smallest is reported
    r = gem_coefficients(np.eye(2), np.array([3.0, 4.0]), 25.0)
    assert (r.v, r.violated, r.fallbacks, r.rows) == (None, False, 0, 2) and r.min_cosine == pytest.approx(
        0.6
    )


def test_orthogonal_is_not_violated_and_unit_g_is_projected() -> None:
    # <g, g_1> = 0 exactly: allowed (the constraint is >= 0)
    r = gem_coefficients(np.eye(2), np.array([0.0, 1.0]), 1.0)
    assert r.violated is False and r.v is None
    # |g| = 1 exactly and violated: projected, v = -<g, g_1> / |g_1|^2 = 0.6 on row 1, 0 on row 2
    g = torch.tensor([-0.6, 0.8, 0.0], dtype=torch.float64)
    G = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    r = gem_coefficients((G @ G.T).numpy(), (G @ g).numpy(), 1.0, eps=1e-12)
    assert r.violated is True and r.fallbacks == 0 and r.rows == 2
    np.testing.assert_allclose(r.v, [0.6, 0.0], atol=1e-9)
    np.testing.assert_allclose(project_gradient(g, G, eps=1e-12).numpy(), [0.0, 0.8, 0.0], atol=1e-9)


def test_default_margin_is_zero() -> None:
    GGt, Gg = np.eye(2), np.array([-1.0, 2.0])  # row 1 violated, row 2 satisfied
    r = gem_coefficients(GGt, Gg, 5.0)
    # margin 0: the satisfied row gets v = 0, the violated one v = -<g, g_1> / |g_1|^2 = 1 (up to the
    # default ridge, DEFAULT_EPS relative to mean |g_k|^2 = 1)
    assert r.v is not None and r.v[1] == 0.0
    assert r.v[0] == pytest.approx(1.0, rel=2 * DEFAULT_EPS)


def test_relatively_tiny_rows_are_dropped() -> None:
    # |g_2|^2 = 1e-30 of |g_1|^2: a numerically zero row, dropped (not counted, v = 0), though violated
    GGt = np.diag([1.0, 1e-30])
    r = gem_coefficients(GGt, np.array([-1.0, -1e-16]), 1.0, eps=1e-12)
    assert r.rows == 1 and r.v is not None and r.v[1] == 0.0
    assert r.v[0] == pytest.approx(1.0, rel=1e-9)


def test_float32_and_column_inputs_are_computed_in_float64() -> None:
    rng = np.random.default_rng(0)
    G = rng.standard_normal((3, 9)).astype(np.float32)
    g = (rng.standard_normal(9) - 1.5 * G[0]).astype(np.float32)
    GGt32, Gg32, gg = G @ G.T, G @ g, float(g @ g)
    ref = gem_coefficients(GGt32.astype(np.float64), Gg32.astype(np.float64), gg, eps=1e-9)
    assert ref.violated
    got = gem_coefficients(GGt32, Gg32, gg, eps=1e-9)
    np.testing.assert_allclose(got.v, ref.v, rtol=1e-12, atol=0)
    column = gem_coefficients(GGt32.astype(np.float64), Gg32.astype(np.float64)[:, None], gg, eps=1e-9)
    np.testing.assert_allclose(column.v, ref.v, rtol=1e-12, atol=0)
    # quadprog's dual solver takes integer inputs too
    v = solve_gem_dual(np.array([[2, 0], [0, 1]]), np.array([-2, 1]), margin=0.0, eps=0.0)
    np.testing.assert_allclose(v, [1.0, 0.0], atol=1e-12)


@pytest.mark.parametrize("eps", [0.0, 0.3])
def test_solve_gem_dual_adds_the_ridge(eps: float) -> None:
    """min 1/2 v^T (P + eps I) v + q^T v, v >= 0, for diagonal P: v_k = max(0, -q_k / (P_kk + eps))."""
    P, q = np.diag([2.0, 4.0, 1.0]), np.array([-1.0, -2.0, 3.0])
    expected = np.maximum(0.0, -q / (np.diag(P) + eps))
    np.testing.assert_allclose(solve_gem_dual(P, q, margin=0.0, eps=eps), expected, rtol=1e-12, atol=1e-15)


def test_agem_fallback_over_several_violated_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """When quadprog always fails: A-GEM against the mean of the violated rows, in closed form.

    Rows g_1, g_2 violated, g_3 satisfied with a small positive dot (0.5, under one), g_4 orthogonal;
    small magnitudes (|g_ref|^2 < 1) so that no threshold at one can pass unnoticed.
    """
    _always_fail(monkeypatch)
    G = 0.1 * torch.tensor(
        [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]],
        dtype=torch.float64,
    )
    G[2, 0] = 0.1  # g_3 = (0.1, 0, 0.1, 0)
    g = torch.tensor([-2.0, -3.0, 7.0, 0.0], dtype=torch.float64)
    GGt, Gg = (G @ G.T).numpy(), (G @ g).numpy()
    assert Gg[0] < 0 and Gg[1] < 0 and 0 < Gg[2] < 1 and Gg[3] == 0
    r = gem_coefficients(GGt, Gg, float(g @ g))
    assert r.violated is True and r.fallbacks == EPS_RETRIES + 1 and r.rows == 4
    g_ref = G[:2].mean(0)
    coeff = -float(g @ g_ref) / float(g_ref @ g_ref) / 2  # the same on both violated rows
    np.testing.assert_allclose(r.v, [coeff, coeff, 0.0, 0.0], rtol=1e-12)
    out = g + G.T @ torch.from_numpy(r.v)
    assert abs(float(out @ g_ref)) <= 1e-12 * float(out.norm() * g_ref.norm())
    # the violation it reports, by hand: v = 25 on g_1 and g_2, g~ = (0.5, -0.5, 7, 0); g_2 is still
    # violated, <g~, g_2> = -0.05, |g_2| = 0.1, |g~| = sqrt(49.5): 0.05 / (0.1 sqrt(49.5))
    np.testing.assert_allclose(out.numpy(), [0.5, -0.5, 7.0, 0.0], rtol=1e-12, atol=1e-12)
    assert r.violation == pytest.approx(0.5 / np.sqrt(49.5), rel=1e-12)
    cos = Gg / np.sqrt(np.diag(GGt) * float(g @ g))
    assert r.min_cosine == pytest.approx(float(cos.min()))


def test_nothing_found_when_even_the_fallback_cannot_work(monkeypatch: pytest.MonkeyPatch) -> None:
    _always_fail(monkeypatch)
    # two violated rows whose cross term is infinite: no finite A-GEM reference either
    GGt = np.array([[1.0, np.inf], [np.inf, 1.0]])
    r = gem_coefficients(GGt, np.array([-1.0, -1.0]), 4.0)
    assert _fields(r) == (None, True, EPS_RETRIES + 1, pytest.approx(-0.5), 2)


def test_project_gradient_checks_shapes() -> None:
    g, G = torch.zeros(5), torch.zeros(2, 5)
    for bad_g, bad_G in ((g[:, None], G), (g, G[:, :4]), (g, G[0])):
        message = (
            f"project_gradient needs g [p] and G [t, p], got {tuple(bad_g.shape)} and {tuple(bad_G.shape)}"
        )
        with pytest.raises(ValueError, match=re.escape(message)):
            project_gradient(bad_g, bad_G)


def test_partly_non_finite_products_leave_g_alone() -> None:
    # GG^T overflows but G g does not, and the other way round: g comes back unchanged either way
    G = torch.tensor([[1e200, 0.0], [0.0, 1.0]], dtype=torch.float64)
    g = torch.tensor([-1e-200, 1.0], dtype=torch.float64)
    assert torch.isfinite(G @ g).all() and not torch.isfinite(G @ G.T).all()
    assert torch.equal(project_gradient(g, G), g)
    g2 = torch.tensor([-1e200, 0.0], dtype=torch.float64)
    G2 = torch.tensor([[1e-250, 0.0]], dtype=torch.float64)
    assert torch.isfinite(G2 @ g2).all() and not torch.isfinite(g2 @ g2)
    assert torch.equal(project_gradient(g2, G2), g2)
    # A-GEM: an infinite |g_ref|^2 with a finite <g, g_ref>
    g_ref = torch.tensor([1e200, 0.0], dtype=torch.float64)
    assert torch.equal(agem_project(torch.tensor([-1e-200, 1.0], dtype=torch.float64), g_ref), g)


def _bordered(g: list[float], rows: list[list[float]]) -> np.ndarray:
    X = np.array([g, *rows], dtype=np.float64)
    return X @ X.T


def test_step_coefficients_agem_by_hand() -> None:
    """A-GEM from M = [g, g_ref][g, g_ref]^T: v = -<g, g_ref> / |g_ref|^2 only when <g, g_ref> < 0."""
    # g = (-1, 2), g_ref = (2, 0): <g, g_ref> = -2, |g_ref|^2 = 4, |g|^2 = 5; v and the cosine do not
    # depend on the scale (0.1: every norm below one, so that no threshold at one passes unnoticed)
    for s in (1.0, 0.1):
        r = step_coefficients(_bordered([-s, 2 * s], [[2 * s, 0.0]]), "agem")
        assert (r.v.tolist(), r.violated, r.fallbacks, r.rows, r.violation) == (
            pytest.approx([0.5]),
            True,
            0,
            1,
            None,
        )
        assert r.min_cosine == pytest.approx(-2 / np.sqrt(20), rel=1e-12)
    # satisfied (<g, g_ref> = 2 > 0): left alone, its cosine reported
    r = step_coefficients(_bordered([1.0, 2.0], [[2.0, 0.0]]), "agem")
    assert (r.v, r.violated, r.rows) == (None, False, 1) and r.min_cosine == pytest.approx(2 / np.sqrt(20))
    # orthogonal (<g, g_ref> = 0): allowed, not projected
    r = step_coefficients(_bordered([0.0, 3.0], [[2.0, 0.0]]), "agem")
    assert (r.v, r.violated, r.rows, r.min_cosine) == (None, False, 1, 0.0)
    # a zero reference: no row, no cosine; a zero g: nothing to do, no cosine
    r = step_coefficients(_bordered([-1.0, 2.0], [[0.0, 0.0]]), "agem")
    assert (r.v, r.violated, r.rows, r.min_cosine) == (None, False, 0, None)
    r = step_coefficients(_bordered([0.0, 0.0], [[2.0, 0.0]]), "agem")
    assert (r.v, r.violated, r.rows, r.min_cosine) == (None, False, 1, None)


def test_step_coefficients_gem_by_hand() -> None:
    """GEM from M: G = I, g = (-1, 2), margin 0.3: v_k = max(margin, -<g, g_k>) = (1, 0.3)."""
    r = step_coefficients(_bordered([-1.0, 2.0], [[1.0, 0.0], [0.0, 1.0]]), "gem", margin=0.3, eps=1e-9)
    assert (r.violated, r.fallbacks, r.rows) == (True, 0, 2)
    np.testing.assert_allclose(r.v, [1.0, 0.3], rtol=1e-9, atol=1e-12)
    assert r.min_cosine == pytest.approx(-1 / np.sqrt(5), rel=1e-12)
    assert r.violation == pytest.approx(0.0, abs=1e-12)
    # the default margin is 0: v = (1, 0)
    r = step_coefficients(_bordered([-1.0, 2.0], [[1.0, 0.0], [0.0, 1.0]]), "gem")
    np.testing.assert_allclose(r.v, [1.0, 0.0], rtol=1e-6, atol=1e-12)


def test_step_coefficients_passes_the_ridge_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the exact solve the ridge shows: one row (1, 0) against g = (-1, 2), normalised
    (|g_1| = 1, |g| = sqrt 5): v = sqrt 5 (1 / sqrt 5) / (1 + eps) = 1 / (1 + eps)."""

    def broken(*args: object, **kwargs: object) -> np.ndarray:
        raise np.linalg.LinAlgError("SVD did not converge")

    monkeypatch.setattr(qp, "solve_gem_dual_exact", broken)
    for eps in (0.3, None):
        r = step_coefficients(_bordered([-1.0, 2.0], [[1.0, 0.0]]), "gem", eps=eps)
        assert r.v == pytest.approx([1 / (1 + (DEFAULT_EPS if eps is None else eps))], rel=1e-12)


# ------------------------------------------------------------ properties (hypothesis)
FAST = settings(max_examples=40, deadline=None)


def _problem(seed: int, t: int, p: int, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    G = rng.standard_normal((t, p))
    g = rng.standard_normal(p) - rng.uniform(0.0, 2.0) * G[0]  # often (not always) violating row 0
    return torch.from_numpy(g * scale), torch.from_numpy(G * scale)


@FAST
@given(
    seed=st.integers(0, 2**31),
    t=st.integers(1, 4),
    extra=st.integers(1, 12),
    scale=st.sampled_from([1e-6, 1.0, 1e6]),
)
def test_gem_projection_satisfies_kkt(seed: int, t: int, extra: int, scale: float) -> None:
    g, G = _problem(seed, t, t + extra, scale)
    out = project_gradient(g, G, margin=0.0, eps=1e-12)
    Gg = (G @ g).numpy()
    if np.all(Gg >= 0):
        assert torch.equal(out, g)  # nothing violated: g is returned unchanged
        return
    # recover v from g~ - g = G^T v (G has full row rank: t <= p - 1 random rows)
    v = np.linalg.lstsq(G.numpy().T, (out - g).numpy(), rcond=None)[0]
    np.testing.assert_allclose(G.numpy().T @ v, (out - g).numpy(), atol=1e-8 * scale, rtol=1e-6)
    lam = (G @ out).numpy()
    tol = 1e-7 * float(G.norm(dim=1).max() * max(float(g.norm()), float(out.norm())))
    assert np.all(v >= -1e-7 * np.abs(v).max())  # dual feasibility
    assert np.all(lam >= -tol), lam  # primal feasibility: every constraint holds
    assert np.all(np.abs(v * lam) <= tol * np.abs(v).max() + 1e-300)  # complementary slackness
    assert float((out - g).norm()) > 0
    # a projection is idempotent: g~ already satisfies the constraints
    again = project_gradient(out, G, margin=0.0, eps=1e-12)
    np.testing.assert_allclose(again.numpy(), out.numpy(), rtol=1e-6, atol=tol)


@FAST
@given(seed=st.integers(0, 2**31), t=st.integers(1, 4), margin=st.sampled_from([0.1, 0.5, 1.0]))
def test_gem_margin_is_a_lower_bound_on_v(seed: int, t: int, margin: float) -> None:
    g, G = _problem(seed, t, t + 8, 1.0)
    GGt, Gg = (G @ G.T).numpy(), (G @ g).numpy()
    result = gem_coefficients(GGt, Gg, float(g @ g), margin=margin, eps=1e-12)
    assert result.violated == bool(np.any(Gg < 0))
    if result.violated:
        assert result.v is not None and np.all(result.v >= margin - 1e-9)
        lam = GGt @ result.v + Gg  # = G g~, kept >= 0 by the margin as well
        assert np.all(lam >= -1e-7 * np.abs(GGt).max() * max(1.0, np.abs(result.v).max()))
    # the reported worst cosine is the smallest cos(g, g_k), by hand
    cos = Gg / np.sqrt(np.diag(GGt) * float(g @ g))
    assert result.min_cosine == pytest.approx(float(cos.min()), rel=1e-9, abs=1e-12)


@FAST
@given(seed=st.integers(0, 2**31), p=st.integers(2, 30), mix=st.floats(-2.0, 2.0))
def test_agem_projection(seed: int, p: int, mix: float) -> None:
    rng = np.random.default_rng(seed)
    g_ref = torch.from_numpy(rng.standard_normal(p))
    g = torch.from_numpy(rng.standard_normal(p)) + mix * g_ref
    out = agem_project(g, g_ref)
    dot = float(g @ g_ref)
    if dot >= 0:
        assert torch.equal(out, g)
        return
    # the closed form by hand, orthogonal to g_ref, and never longer than g
    np.testing.assert_allclose(out.numpy(), (g - dot / float(g_ref @ g_ref) * g_ref).numpy(), rtol=1e-12)
    assert abs(float(out @ g_ref)) <= 1e-9 * float(g.norm() * g_ref.norm())
    assert float(out.norm()) <= float(g.norm()) + 1e-12

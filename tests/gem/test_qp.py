"""GEM's projection is exact: no constraint left violated beyond 1e-9 relative, and the result equals
an independent brute-force solution of the dual (every active set tried, least squares on each)."""

from __future__ import annotations

import zlib
from collections.abc import Callable

import numpy as np
import pytest
import torch

from pal_lightning.gem.projection import gem_coefficients, project_gradient
from pal_lightning.gem.qp import solve_gem_dual, solve_gem_dual_exact

TOL = 1e-9


def reference_projection(dual: Callable, g: np.ndarray, G: np.ndarray, margin: float) -> np.ndarray:
    """The exact GEM update from the brute-force ``dual`` (conftest); a ``g`` that violates nothing is
    returned as it is, whatever the margin."""
    q = G @ g
    return g.copy() if np.all(q >= 0) else g + G.T @ dual(G @ G.T, q, margin)


def relative_violation(x: np.ndarray, G: np.ndarray, g: np.ndarray, v: np.ndarray | None = None) -> float:
    """``max_k -<x, g_k> / (|g_k| max(|x|, 1e-3 T))`` with ``T`` the size of the terms summed into
    ``x = g + G^T v``: ``max(|g|, sum_k |v_k| |g_k|)`` (``|x - g|`` in place of the sum when ``v`` is
    not given). The floor matters only when the projection is (nearly) the origin, where ``|x|`` is
    rounding noise of those terms."""
    rows = np.linalg.norm(G, axis=1)
    T = max(np.linalg.norm(g), np.linalg.norm(x - g) if v is None else float(np.abs(v) @ rows))
    norms = rows * max(np.linalg.norm(x), 1e-3 * T)
    keep = norms > 0
    return float(max(0.0, np.max(-(G[keep] @ x) / norms[keep], initial=0.0)))


def random_problem(rng: np.random.Generator, family: str) -> tuple[np.ndarray, np.ndarray, float]:
    t = int(rng.integers(2, 6))
    p = int(rng.integers(5, 401))
    scale = 10.0 ** rng.uniform(-6, 6)
    g = rng.standard_normal(p)
    G = rng.standard_normal((t, p))
    if family == "violating":  # rows built against g
        G -= (
            (1.0 + rng.uniform(0, 2, size=(t, 1)))
            * g
            / np.linalg.norm(g)
            * np.linalg.norm(G, axis=1)[:, None]
            / 2
        )
    elif family == "nearly_collinear":  # tasks that agree: one direction plus a little noise
        base = rng.standard_normal(p) - 1.5 * g
        G = base + 1e-4 * rng.standard_normal((t, p))
    elif family == "collinear":
        base = rng.standard_normal(p) - g
        G = rng.uniform(0.5, 2.0, size=(t, 1)) * base
    elif family == "duplicated":
        G[1] = G[0]
        G[0] -= g
        G[1] -= g
    elif family == "zero_row":
        G[0] = 0.0
        G[1:] -= g
    elif family == "rank_deficient":  # more constraints than the gradient's rank (p small)
        p = int(rng.integers(1, t))
        g = rng.standard_normal(p)
        G = rng.standard_normal((t, p))
    margin = float(rng.choice([0.0, 0.0, 0.1, 0.5]))
    return g * scale, G * scale * 10.0 ** rng.uniform(-3, 3), margin


FAMILIES = (
    "random",
    "violating",
    "nearly_collinear",
    "collinear",
    "duplicated",
    "zero_row",
    "rank_deficient",
)


def project(g: np.ndarray, G: np.ndarray, margin: float) -> np.ndarray:
    return project_gradient(torch.from_numpy(g), torch.from_numpy(G), margin=margin).numpy()


@pytest.mark.parametrize("family", FAMILIES)
def test_no_violation_and_equal_to_brute_force(family: str, brute_force_dual: Callable) -> None:
    rng = np.random.default_rng(zlib.crc32(family.encode()))  # a fixed seed per family (hash() is salted)
    for _ in range(40):
        g, G, margin = random_problem(rng, family)
        x = project(g, G, margin)
        result = gem_coefficients(G @ G.T, G @ g, float(g @ g), margin=margin)
        v = np.zeros(len(G)) if result.v is None else result.v
        np.testing.assert_allclose(
            x, g + G.T @ v, rtol=0, atol=1e-9 * (np.linalg.norm(g) + np.abs(v) @ np.linalg.norm(G, axis=1))
        )
        assert relative_violation(x, G, g, v) <= TOL, family
        ref = reference_projection(brute_force_dual, g, G, margin)
        assert np.linalg.norm(x - ref) <= 1e-6 * max(np.linalg.norm(ref), np.linalg.norm(g)), family


def test_ten_thousand_seeded_problems_have_no_violation_above_tolerance() -> None:
    rng = np.random.default_rng(0)
    worst = 0.0
    for i in range(10_000):
        g, G, margin = random_problem(rng, FAMILIES[i % len(FAMILIES)])
        P, q, qq = G @ G.T, G @ g, float(g @ g)
        result = gem_coefficients(P, q, qq, margin=margin)
        if result.v is None:  # nothing violated (or nothing to constrain): g itself is feasible
            assert relative_violation(g, G, g) == 0.0 or not result.violated
            continue
        x = g + G.T @ result.v
        worst = max(worst, relative_violation(x, G, g, result.v))
        assert result.violation is not None and result.violation <= TOL
    assert worst <= TOL


def test_exact_dual_removes_the_ridge_violation_of_nearly_collinear_rows(brute_force_dual: Callable) -> None:
    """The case that motivated it: two memory gradients 1e-4 apart, both against g. The ridged
    dual alone leaves a violation of the order of the ridge; the exact one none."""
    rng = np.random.default_rng(3)
    g = rng.standard_normal(50)
    base = -g + 0.3 * rng.standard_normal(50)
    G = np.stack([base, base + 1e-4 * rng.standard_normal(50)])
    P, q = G @ G.T, G @ g
    a, b = float(np.sqrt(np.mean(np.diag(P)))), float(np.linalg.norm(g))
    v_ridge = solve_gem_dual(P / a**2, q / (a * b), 0.0, 1e-3) * b / a
    assert relative_violation(g + G.T @ v_ridge, G, g) > 1e-6  # the ridge alone is not exact
    v = solve_gem_dual_exact(P / a**2, q / (a * b), 0.0) * b / a
    assert relative_violation(g + G.T @ v, G, g) <= TOL
    result = gem_coefficients(P, q, float(g @ g))
    assert result.violation is not None and result.violation <= TOL
    np.testing.assert_allclose(
        g + G.T @ result.v, reference_projection(brute_force_dual, g, G, 0.0), rtol=0, atol=1e-8 * b
    )


def test_a_failing_exact_solve_keeps_the_ridged_solution(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the exact solver's SVD does not converge, the step still gets the ridged projection."""
    import pal_lightning.gem.projection as gem
    from pal_lightning.gem import qp

    def broken(*args: object, **kwargs: object) -> np.ndarray:
        raise np.linalg.LinAlgError("SVD did not converge")

    rng = np.random.default_rng(5)
    g = rng.standard_normal(30)
    G = np.stack([-g + 0.5 * rng.standard_normal(30), rng.standard_normal(30)])
    monkeypatch.setattr(qp, "solve_gem_dual_exact", broken)
    result = gem.gem_coefficients(G @ G.T, G @ g, float(g @ g))
    assert result.violated and result.v is not None and np.all(np.isfinite(result.v))
    assert result.violation is not None and result.violation < 1e-2  # the ridge's residual, not exact
    v = result.v
    assert result.violation == pytest.approx(relative_violation(g + G.T @ v, G, g, v), rel=1e-9)
    # without the exact solve the caller's ridge shows: one row g_1 = (2, 0) against g = (-1, 1),
    # normalised (|g_1| = 2, |g| = sqrt 2) v = (|g| / |g_1|) (1 / sqrt 2) / (1 + eps) = 0.5 / (1 + eps)
    P, q = np.array([[4.0]]), np.array([-2.0])
    for eps in (None, 0.3):
        expected = 0.5 / (1 + (gem.DEFAULT_EPS if eps is None else eps))
        r = gem.gem_coefficients(P, q, 2.0, eps=eps)
        assert r.fallbacks == 0 and r.v == pytest.approx([expected], rel=1e-12)
        x = gem.project_gradient(
            torch.tensor([-1.0, 1.0], dtype=torch.float64), torch.tensor([[2.0, 0.0]]), eps=eps
        )
        np.testing.assert_allclose(x.numpy(), [-1.0 + 2 * expected, 1.0], rtol=1e-12)


@pytest.mark.parametrize("scale", [1e-9, 1.0, 1e9])
def test_exact_dual_at_any_scale(scale: float) -> None:
    """Two orthogonal rows, the second violated a hundred thousand times less than the first:
    v = -q_k / P_kk = (1, 1e-5) whatever the scale of the problem. The solver's threshold for a
    coefficient to enter is relative to the problem's scale (1e-13 of it): an absolute or inverted
    one would leave the small violation in place at one end of the range."""
    P, q = scale * np.eye(2), scale * np.array([-1.0, -1e-5])
    np.testing.assert_allclose(solve_gem_dual_exact(P, q, 0.0), [1.0, 1e-5], rtol=1e-9, atol=0)


def test_exact_dual_of_no_rows_and_of_float32_inputs() -> None:
    assert solve_gem_dual_exact(np.zeros((0, 0)), np.zeros(0), 0.5).shape == (0,)
    # a zero row with a non-zero product (no Gram matrix has one; gem_coefficients drops zero rows):
    # no coefficient can fix it, and the solver gives up on it (v = margin), not NaN or a crash
    np.testing.assert_array_equal(solve_gem_dual_exact(np.zeros((1, 1)), np.array([-1.0]), 0.2), [0.2])
    # float32 inputs are solved in float64: the same answer as the same values given in float64
    rng = np.random.default_rng(7)
    G = rng.standard_normal((3, 5)).astype(np.float32)
    g = (rng.standard_normal(5) - 3 * G[0] - 2 * G[1]).astype(np.float32)
    P32, q32 = G @ G.T, G @ g
    expected = solve_gem_dual_exact(P32.astype(np.float64), q32.astype(np.float64), 0.05)
    assert np.all(expected[:2] > 1.0) and expected[2] == 0.05  # two coefficients above the margin
    np.testing.assert_allclose(solve_gem_dual_exact(P32, q32, 0.05), expected, rtol=1e-13, atol=0)


def test_exact_dual_frees_one_coefficient_per_outer_iteration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """By hand: one row against g gives v = -<g, g_1> / |g_1|^2 (the A-GEM formula), or the margin above
    it; two orthogonal violated rows, independent one-row answers; a second row satisfied once the first is
    fixed keeps 0. Lawson-Hanson frees the most violated coefficient, solves, and stops at the KKT point:
    as many inner solves as coefficients that end up above the margin (no stepping back here)."""
    from pal_lightning.gem import qp

    calls: list[int] = []
    inner = qp._keep_free_positive

    def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        return inner(*args, **kwargs)

    monkeypatch.setattr(qp, "_keep_free_positive", counting)
    for P, q, margin, expected in (
        (np.array([[4.0]]), np.array([-2.0]), 0.0, [0.5]),
        (np.array([[4.0]]), np.array([-2.0]), 0.8, [0.8]),
        (np.eye(2), np.array([-1.0, 1.0]), 0.0, [1.0, 0.0]),
        (np.diag([1.0, 4.0]), np.array([-3.0, -2.0]), 0.0, [3.0, 0.5]),
        (np.array([[1.0, 1.0], [1.0, 2.0]]), np.array([-1.0, 0.5]), 0.0, [1.0, 0.0]),
    ):
        calls.clear()
        np.testing.assert_allclose(qp.solve_gem_dual_exact(P, q, margin), expected, rtol=1e-12, atol=1e-15)
        assert len(calls) == sum(v > margin for v in expected)


def test_exact_dual_alone_meets_kkt_and_equals_brute_force(brute_force_dual: Callable) -> None:
    """The exact solver by itself (inside gem_coefficients a wrong exact answer would be hidden:
    the ridged one is kept whenever it violates less). 2,000 seeded O(1) problems, a third with two
    nearly collinear rows, where Lawson-Hanson's inner loop has to step back (a wrong step back
    ends at a non-KKT point in about one problem in a few thousand): the KKT conditions of the dual
    (a certificate of the optimum of a convex QP) for each, brute force for the first 100."""
    rng = np.random.default_rng(1)
    for i in range(2000):
        t = int(rng.integers(2, 7))
        G = rng.standard_normal((t, int(rng.integers(t, 2 * t + 2))))
        if i % 3 == 0:
            G[1] = G[0] + 0.1 * rng.standard_normal(G.shape[1])
        g = rng.standard_normal(G.shape[1]) - rng.uniform(0, 2) * G[:2].sum(0)
        margin = float(rng.choice([0.0, 0.1, 1.0]))
        P, q = G @ G.T, G @ g
        v = solve_gem_dual_exact(P, q, margin)
        c = q + P @ v  # <g~, g_k>
        tol = 1e-9 * (np.abs(P).max() * np.abs(v).max() + np.abs(q).max())
        assert np.all(v >= margin) and np.all(c >= -tol), i
        assert np.all(np.abs(c[v > margin]) <= tol), i  # complementary slackness
        if i < 100 and np.any(q < 0):  # brute force leaves a feasible g alone; GEM never asks then
            x, ref = g + G.T @ v, reference_projection(brute_force_dual, g, G, margin)
            np.testing.assert_allclose(
                x, ref, rtol=0, atol=1e-8 * max(np.linalg.norm(ref), np.linalg.norm(g))
            )


def test_relative_violation_from_the_small_matrices_by_hand() -> None:
    """qp.relative_violation works from P = GG^T, q = Gg and |g|^2 alone; here against hand values
    and the formula on the vectors themselves (this file's relative_violation), small magnitudes
    (every norm below one) so that no floor or threshold at one can pass unnoticed."""
    import warnings

    from pal_lightning.gem import qp

    def both(g: np.ndarray, G: np.ndarray, v: np.ndarray) -> tuple[float, float]:
        got = qp.relative_violation(G @ G.T, G @ g, v, float(g @ g))
        return got, relative_violation(g + G.T @ v, G, g, v)

    # g~ = (-0.3, 0.1) + (0.1, 0) = (-0.2, 0.1): <g~, g_1> = -0.02, |g_1| = 0.1, |g~| = sqrt(0.05);
    # the second row is zero (0 / 0: not violated, and no warning)
    g, v = np.array([-0.3, 0.1]), np.array([1.0, 0.0, 0.0])
    G = np.array([[0.1, 0.0], [0.0, 0.2], [0.0, 0.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got, formula = both(g, G, v)
    assert got == pytest.approx(2 / np.sqrt(5), rel=1e-12) and formula == pytest.approx(got, rel=1e-12)
    # g~ nearly the origin: |g~| = 1e-5 is below 1e-3 of the terms summed into it (|g| = 0.1),
    # so the floor measures it: <g~, g_1> = -1e-6 over |g_1| 1e-3 |g| = 1e-2: 0.1
    g, G, v = np.array([-0.1, 0.0]), np.array([[0.1, 0.0]]), np.array([0.9999])
    got, formula = both(g, G, v)
    assert got == pytest.approx(0.1, rel=1e-9) and formula == pytest.approx(got, rel=1e-9)
    # nothing violated: 0; no rows: 0
    assert qp.relative_violation(np.eye(1), np.array([0.5]), np.zeros(1), 1.0) == 0.0
    assert qp.relative_violation(np.zeros((0, 0)), np.zeros(0), np.zeros(0), 1.0) == 0.0
    rng = np.random.default_rng(4)
    for _ in range(20):
        G = rng.standard_normal((3, 6)) * 10.0 ** rng.uniform(-3, 3)
        g = rng.standard_normal(6) * 10.0 ** rng.uniform(-3, 3)
        got, formula = both(g, G, rng.uniform(0, 1, 3) * np.linalg.norm(g) / np.linalg.norm(G, axis=1))
        assert got == pytest.approx(formula, rel=1e-9, abs=1e-12)

"""GEM maths at its edges: every early return of ``gem_coefficients`` with all its fields, the A-GEM
fallback's closed form over several violated rows, dtypes and shapes, and non-finite inputs.

Found by mutation testing (tools/mutation/run.sh gem_maths): each test kills mutants the KKT tests
cannot see, because they change only a reported field, a rarely taken branch or an input's dtype.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

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

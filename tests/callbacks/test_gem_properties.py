"""Properties of GEM's and A-GEM's projections for many random problems (hypothesis).

GEM's ``g~ = g + G^T v`` must satisfy the KKT conditions of ``min |g~ - g|^2 s.t. G g~ >= 0``:
``v >= 0`` (dual feasibility), ``G g~ >= 0`` (primal feasibility) and ``v_k (G g~)_k = 0``
(complementary slackness), which together make ``g~`` the Euclidean projection. These are checked
here with numpy, independently of quadprog.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pal_lightning.gem.projection import agem_project, gem_coefficients, project_gradient

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

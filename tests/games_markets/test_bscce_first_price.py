"""Kernels of the BSCCE chapter: the vectorised LP builder against the loop-built matrices and a hand-derived game,
the nesting of the three polytopes, the simplex projection against its reference, a bisection oracle and cvxpy, and
the projected-gradient learner against its NumPy reference and a pure Nash fixed point."""
import numpy as np
import pytest

from paperkit.games_markets import bscce_auction as ba
from paperkit.games_markets import equilibrium_lp as el
from paperkit.games_markets import simplex_projection as spj


# ----------------------------------------------------------------------------------------------------- builder

@pytest.mark.parametrize("family", el.FAMILIES)
@pytest.mark.parametrize("m,n", [(1, 1), (1, 3), (2, 2), (3, 2), (2, 4), (3, 3)])
@pytest.mark.parametrize("gamma", [0.0, 3.0])
def test_builder_matches_loop_reference(family, m, n, gamma):
    p = el.power_prior(m, gamma)
    fast, ref = el.build_lp(p, n, family), el.build_lp_ref(p, n, family)
    for a, b in zip(fast, ref):
        a = a.toarray() if hasattr(a, "toarray") else a
        b = b.toarray() if hasattr(b, "toarray") else b
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-15)
    sz = el.lp_size(m, n, family)
    assert fast[0].shape == (sz["ub_rows"], sz["variables"]) and fast[2].shape == (sz["eq_rows"], sz["variables"])


def test_hand_derived_one_value_two_bids():
    # one value v = 1/2, bids {0, 1/2}: y = (y00, y01, y10, y11) over (b1, b2)
    # U[b, c]: bid 0 vs 0 -> 1/4 (tie, half of 1/2), 0 vs 1/2 -> 0, 1/2 vs 0 -> 0, 1/2 vs 1/2 -> 0
    A_ub, _, A_eq, b_eq = el.build_lp(np.array([1.0]), 2, "bcce")
    # bidder 1, deviation to constant 0: gain = sum y[b1, b2] (U[0, b2] - U[b1, b2])
    want_b1_d0 = np.array([0.0, 0.0, 0.25, 0.0])
    want_b1_d1 = np.array([-0.25, 0.0, 0.0, 0.0])
    got = A_ub.toarray()
    np.testing.assert_allclose(got[0], want_b1_d0)
    np.testing.assert_allclose(got[1], want_b1_d1)
    np.testing.assert_allclose(got[2], [0.0, 0.25, 0.0, 0.0])          # bidder 2, to 0
    np.testing.assert_allclose(A_eq.toarray(), [[1.0, 1.0, 1.0, 1.0]])
    np.testing.assert_allclose(b_eq, [1.0])


def test_utility_and_bne_closed_forms():
    U = el.utility(2, 4)                                               # values 1/4, 3/4; bids 0, 1/4, 1/2, 3/4
    assert U[1, 2, 1] == pytest.approx(0.25)                            # win with 1/2 against 1/4
    assert U[1, 2, 2] == pytest.approx(0.125)                           # tie
    assert U[0, 1, 3] == 0.0
    assert el.bne_revenue(0.0) == pytest.approx(1 / 3)
    assert el.bne_revenue(3.0) == pytest.approx(32 / 45)
    # revenue of the continuous equilibrium by quadrature of b(max(v1, v2)) with F = v^(g+1)
    g = 2.0
    x = (np.arange(200000) + 0.5) / 200000
    dens_max = 2 * (g + 1) * x ** g * x ** (g + 1)
    assert np.mean(el.bne_bid(x, g) * dens_max) == pytest.approx(el.bne_revenue(g), abs=1e-6)


@pytest.mark.parametrize("gamma", [0.0, 3.0])
def test_ranges_nest_and_solvers_agree(gamma):
    m, n = 4, 5
    p = el.power_prior(m, gamma)
    for c in (el.revenue_objective(p, n), el.bid_gap_objective(p, n, gamma)):
        r = {f: el.lp_range(c, el.build_lp(p, n, f)) for f in el.FAMILIES}
        for inner, outer in (("bce", "bscce"), ("bscce", "bcce"), ("bcce", "none")):
            assert r[outer][0] <= r[inner][0] + 1e-8 and r[inner][1] <= r[outer][1] + 1e-8
        ipm = el.lp_range(c, el.build_lp(p, n, "bscce"), method="highs-ipm")
        np.testing.assert_allclose(ipm, r["bscce"], atol=1e-6)


def test_learner_average_is_type_agnostic_and_gains_nest():
    # more deviation rows can only raise the largest gain; averages of product strategies satisfy every equality row
    m, n = 3, 4
    p = el.power_prior(m, 0.0)
    rng = np.random.default_rng(0)
    y, last = ba.pga_learn(p, rng.dirichlet(np.ones(n), size=(2, m)), 3000, 0.5)
    lps = {f: el.build_lp(p, n, f) for f in ("bce", "bscce", "bcce")}
    g = {f: el.max_violation(y, lp) for f, lp in lps.items()}
    assert g["bcce"]["gain"] <= g["bscce"]["gain"] + 1e-15          # more rows, larger max gain
    assert all(v["eq"] < 1e-12 for v in g.values())                 # averages of products are type-agnostic
    assert g["bscce"]["gain"] < 0.01


def test_builder_refuses_bad_inputs():
    with pytest.raises(ValueError, match="prior"):
        el.build_lp(np.array([0.5, 0.0]), 3, "bce")
    with pytest.raises(ValueError, match="prior"):
        el.build_lp(np.array([[0.5, 0.5]]), 3, "bce")
    with pytest.raises(TypeError, match="prior"):
        el.build_lp(np.array([0.5 + 1j]), 3, "bce")
    with pytest.raises(ValueError, match="n_bids"):
        el.build_lp(np.array([1.0]), 0, "bce")
    with pytest.raises(TypeError, match="n_bids"):
        el.build_lp(np.array([1.0]), 2.5, "bce")
    with pytest.raises(ValueError, match="family"):
        el.build_lp(np.array([1.0]), 2, "nash")
    with pytest.raises(ValueError, match="y"):
        el.max_violation(np.ones(3), el.build_lp(np.array([1.0]), 2, "bce"))


# ----------------------------------------------------------------------------------------------------- projection

def _bisection(x, iters=200):
    lo, hi = x.min() - 1.0, x.max()
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if np.maximum(x - mid, 0).sum() > 1:
            lo = mid
        else:
            hi = mid
    return np.maximum(x - 0.5 * (lo + hi), 0)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("n", [1, 2, 5, 17])
@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 1e-5)])
def test_projection_matches_reference_and_bisection(seed, n, dtype, tol):
    rng = np.random.default_rng(seed)
    X = (rng.normal(size=(40, n)) * rng.choice([0.01, 1.0, 30.0])).astype(dtype)
    X[0] = X[0, :1]                                                     # ties
    P = spj.project_simplex(X)
    assert P.dtype == dtype and P.shape == X.shape
    np.testing.assert_allclose(P, spj.project_simplex_ref(X), rtol=0, atol=tol)
    np.testing.assert_allclose(P.sum(1), 1.0, atol=10 * tol)
    assert (P >= 0).all()
    want = np.array([_bisection(x) for x in X.astype(np.float64)])
    np.testing.assert_allclose(P, want, atol=max(tol, 1e-9))


def test_projection_matches_cvxpy():
    cp = pytest.importorskip("cvxpy")
    rng = np.random.default_rng(5)
    X = rng.normal(size=(3, 6))
    for x, got in zip(X, spj.project_simplex(X)):
        z = cp.Variable(6)
        cp.Problem(cp.Minimize(cp.sum_squares(z - x)), [z >= 0, cp.sum(z) == 1]).solve()
        np.testing.assert_allclose(got, z.value, atol=1e-5)


def test_projection_fixes_simplex_points_and_refuses_bad_input():
    rng = np.random.default_rng(1)
    S = rng.dirichlet(np.ones(7), size=10)
    np.testing.assert_allclose(spj.project_simplex(S), S, atol=1e-15)
    for bad, exc in ((np.ones((2, 0)), ValueError), (np.ones(3), ValueError), (np.array([[np.nan, 1.0]]), ValueError),
                     (np.ones((2, 2), dtype=complex), TypeError), ([[1.0, 2.0]], TypeError)):
        with pytest.raises(exc, match="X"):
            spj.project_simplex(bad)


# ----------------------------------------------------------------------------------------------------- learners

@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("m,n", [(1, 3), (3, 4), (4, 6)])
def test_pga_matches_reference(seed, m, n):
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.2, 1.0, m)
    b0 = rng.dirichlet(np.ones(n), size=(2, m))
    y, last = ba.pga_learn(p, b0, 150, 0.2)
    y_r, last_r = ba.pga_learn_ref(p, b0, 150, 0.2)
    np.testing.assert_allclose(y, y_r, atol=1e-12)
    np.testing.assert_allclose(last, last_r, atol=1e-12)
    np.testing.assert_allclose(y.reshape(m, m, n, n).sum((2, 3)), 1.0, atol=1e-12)


def test_pga_stays_at_a_strict_pure_nash():
    # one value 1/2, bids {0, 1/2}: both bidding 0 splits 1/2 (payoff 1/4 each); a deviation to 1/2 pays 0.
    # The gradient (1/4, 0) points into the vertex, so projected ascent never leaves it.
    p = np.array([1.0])
    b0 = np.zeros((2, 1, 2))
    b0[:, 0, 0] = 1.0
    U = el.utility(1, 2)
    assert U[0, 0, 0] == pytest.approx(0.25) and U[0, 1, 0] == 0.0
    y, last = ba.pga_learn(p, b0, 50, 0.1)
    np.testing.assert_allclose(last, b0, atol=1e-15)
    assert el.max_violation(y, el.build_lp(p, 2, "bce"))["gain"] == 0.0


def test_learners_refuse_bad_inputs():
    p = np.ones(2) / 2
    good = np.full((2, 2, 3), 1 / 3)
    with pytest.raises(ValueError, match="beta0"):
        ba.pga_learn(p, np.full((2, 3, 3), 1 / 3))
    with pytest.raises(ValueError, match="beta0"):
        ba.pga_learn(p, np.full((2, 2, 3), 0.5))
    with pytest.raises(ValueError, match="steps"):
        ba.pga_learn(p, good, steps=0)
    with pytest.raises(ValueError, match="lr"):
        ba.hedge_learn(p, good, lr=-1.0)
    with pytest.raises(TypeError, match="beta0"):
        ba.pga_learn(p, good.tolist())

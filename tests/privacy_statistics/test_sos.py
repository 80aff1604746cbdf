"""paperkit.privacy_statistics.sos: SOS bound against closed forms / a grid, dual gradient against finite differences, sparse = dense."""
import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from paperkit.privacy_statistics import sos


def univariate(a: float) -> dict:
    # f(x) = (x^2 - 1)^2 + a x = x^4 - 2x^2 + a x + 1
    return {(4,): 1.0, (2,): -2.0, (1,): a, (0,): 1.0}


@pytest.mark.parametrize("a", [0.0, 0.7, -1.3])
def test_univariate_quartic_bound_is_global_min(a):
    prog = sos.build(1, [[0]])
    g, grad = sos.solve(prog, univariate(a))
    fmin = minimize_scalar(lambda x: x**4 - 2 * x**2 + a * x + 1, bounds=(-3, 0), method="bounded").fun
    fmin = min(fmin, minimize_scalar(lambda x: x**4 - 2 * x**2 + a * x + 1, bounds=(0, 3), method="bounded").fun)
    # univariate nonnegative polynomials are SOS, so the bound is exact
    assert g == pytest.approx(fmin, abs=1e-6)
    # d gamma/d c_0 = 1, and d gamma/d a = x* (the minimiser) by the envelope theorem
    assert grad[prog.index[(0,)]] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bound_below_grid_minimum_n2_and_exact(seed):
    th = np.random.default_rng(seed).uniform(-1, 1, 1)
    prog = sos.build(2, sos.chain_cliques(2))
    g, _ = sos.solve(prog, sos.chain_poly(th))
    x = np.linspace(-2, 2, 801)
    X, Y = np.meshgrid(x, x)
    F = (X**2 - 1) ** 2 + (Y**2 - 1) ** 2 + th[0] * X * Y + 0.5 * X**2 * Y**2
    assert g <= F.min() + 1e-6
    assert g >= F.min() - 1e-3  # tight on these instances (grid spacing 5e-3)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dual_gradient_matches_finite_differences(seed):
    n = 4
    th = np.random.default_rng(seed).uniform(-1, 1, n - 1)
    prog = sos.build(n, sos.chain_cliques(n))
    f = sos.chain_poly(th)
    g, grad = sos.solve(prog, f)
    g_ref, grad_ref = sos.solve_ref(prog, f)
    assert g == pytest.approx(g_ref, abs=1e-9)
    support = [prog.index[e] for e in f]
    np.testing.assert_allclose(grad[support], grad_ref[support], rtol=1e-3, atol=1e-3)
    # a wrong gradient (another theta's) must be told apart
    g2 = sos.solve(prog, sos.chain_poly(-th))[1]
    assert np.abs(sos.theta_grad(prog, g2) - sos.theta_grad(prog, grad_ref)).max() > 0.1


@pytest.mark.parametrize("n", [3, 5])
def test_sparse_equals_dense_and_counts(n):
    th = np.random.default_rng(n).uniform(-1, 1, n - 1)
    ps, pd = sos.build(n, sos.chain_cliques(n)), sos.build(n, [list(range(n))])
    gs, grs = sos.solve(ps, sos.chain_poly(th))
    gd, grd = sos.solve(pd, sos.chain_poly(th))
    assert abs(gs - gd) <= 1e-5
    np.testing.assert_allclose(sos.theta_grad(ps, grs), sos.theta_grad(pd, grd), atol=1e-3)
    assert ps.block_sizes == [6] * (n - 1)
    assert pd.block_sizes == [(n + 1) * (n + 2) // 2]
    assert ps.n_sdp_vars < pd.n_sdp_vars


def test_bad_input_raises():
    with pytest.raises(ValueError, match="n"):
        sos.build(0, [[0]])
    with pytest.raises(ValueError, match="vars"):
        sos.monomial_basis([3], 2, 2)
    with pytest.raises(ValueError, match="theta"):
        sos.chain_poly(np.zeros((2, 2)))
    prog = sos.build(3, [[0], [1], [2]])  # no clique covers x_0 x_1
    with pytest.raises(ValueError, match="poly"):
        prog.coeff_vector(sos.chain_poly(np.zeros(2)))
    with pytest.raises(ValueError, match="h"):
        sos.solve_ref(sos.build(1, [[0]]), univariate(0.0), h=0.0)


@pytest.mark.parametrize("n", [2, 4])
def test_split_bound_is_valid_and_not_tighter(n):
    th = np.random.default_rng(n + 10).uniform(-1, 1, n - 1)
    g = sos.solve(sos.build(n, sos.chain_cliques(n)), sos.chain_poly(th))[0]
    gs = sos.split_bound(th)
    # the fixed split is one feasible choice of the clique-sparse program's split: never above its optimum
    assert gs <= g + 1e-6
    if n == 2:
        assert gs == pytest.approx(g, abs=1e-6)  # one clique: nothing to split
    with pytest.raises(ValueError, match="theta"):
        sos.split_bound(np.zeros((2, 2)))


def test_chain_value_matches_polynomial_coefficients():
    rng = np.random.default_rng(3)
    th, x = rng.uniform(-1, 1, 3), rng.normal(size=4)
    f = sos.chain_poly(th)
    direct = sum(c * np.prod(x ** np.array(e)) for e, c in f.items())
    assert np.isclose(sos.chain_value(x, th), direct)
    with pytest.raises(ValueError, match="x must be"):
        sos.chain_value(x[:3], th)


def test_chain_local_min_is_above_the_sos_bound():
    th = np.random.default_rng(4).uniform(-1, 1, 3)
    g = sos.solve(sos.build(4, sos.chain_cliques(4)), sos.chain_poly(th))[0]
    assert sos.chain_local_min(th, np.random.default_rng(0)) >= g - 1e-6
    with pytest.raises(ValueError, match="starts"):
        sos.chain_local_min(th, np.random.default_rng(0), starts=0)


def test_cycle_chordal_extension_matches_dense_and_edges_are_not_tighter():
    th = np.array([1.5, -1.2, 0.8, -1.9])
    f = sos.cycle_poly(th)
    gd = sos.solve(sos.build(4, [[0, 1, 2, 3]]), f)[0]
    gc = sos.solve(sos.build(4, sos.cycle_chordal_cliques(4)), f)[0]
    ge = sos.solve(sos.build(4, sos.cycle_edge_cliques(4)), f)[0]
    assert abs(gc - gd) < 1e-5
    assert ge <= gd + 1e-6
    x = np.random.default_rng(0).normal(size=4)
    direct = sum(c * np.prod(x ** np.array(e)) for e, c in f.items())
    assert np.isclose(direct, sos.chain_value(x, th[:-1]) + th[-1] * x[0] * x[-1] + 0.5 * x[0] ** 2 * x[-1] ** 2)
    with pytest.raises(ValueError, match="theta"):
        sos.cycle_poly(np.zeros(2))
    with pytest.raises(ValueError, match="n must"):
        sos.cycle_edge_cliques(2)

"""value_regret and value_coverage against their references, closed forms and scipy."""
import itertools

import numpy as np
import pytest
from scipy.spatial import Delaunay

from paperkit.games_markets import value_coverage as vc
from paperkit.games_markets import value_regret as vr


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 1e-6)])
def test_menu_regret_matches_reference(seed, dtype, tol):
    rng = np.random.default_rng(seed)
    U, M = rng.dirichlet(np.ones(5), 50).astype(dtype), rng.dirichlet(np.ones(5), 4).astype(dtype)
    np.testing.assert_allclose(vr.menu_regret(U, M), vr.menu_regret_ref(U, M), rtol=tol, atol=tol)


def test_full_vertex_menu_has_zero_regret_and_single_vertex_closed_form():
    rng = np.random.default_rng(3)
    U = rng.dirichlet(np.ones(5), 200)
    assert np.allclose(vr.menu_regret(U, np.eye(5)), 0.0)
    np.testing.assert_allclose(vr.menu_regret(U, np.eye(5)[[2]]), U.max(1) - U[:, 2])


def test_adding_a_profile_never_raises_regret_exhaustive():
    rng = np.random.default_rng(4)
    U, P = rng.dirichlet(np.ones(5), 60), rng.dirichlet(np.ones(5), 6)
    for k in (1, 2):
        for sub in itertools.combinations(range(6), k):
            for extra in set(range(6)) - set(sub):
                assert np.all(vr.menu_regret(U, P[list(sub) + [extra]]) <= vr.menu_regret(U, P[list(sub)]) + 1e-15)


def test_monotonicity_holds_for_leading_group_and_fails_for_others():
    rng = np.random.default_rng(5)
    U = rng.dirichlet(np.ones(5), 400)
    lead = U[U.argmax(1) == 3]
    second = U[np.argsort(-U, 1)[:, 1] == 3]
    assert vr.monotonicity_search(rng, lead, 3, 50, 3, [0.05, 0.2])[1] == 0
    assert vr.monotonicity_search(rng, second, 3, 50, 3, [0.05, 0.2])[1] > 0


def test_bad_input_names_parameter():
    U = np.random.default_rng(0).dirichlet(np.ones(5), 3)
    with pytest.raises(ValueError, match="M"):
        vr.menu_regret(U, np.zeros((0, 5)))
    with pytest.raises(ValueError, match="U"):
        vr.menu_regret(U * 3, U)
    with pytest.raises(ValueError, match="q"):
        vr.shift_away(U, 1, 0.1, np.eye(5)[:3])


@pytest.mark.parametrize("seed", [0, 1])
def test_in_hull_matches_lp_and_delaunay(seed):
    rng = np.random.default_rng(seed)
    V = rng.dirichlet(4 * np.ones(5), 15)
    P = rng.dirichlet(np.ones(5), 300)
    fast, ref = vc.in_hull(P, V), vc.in_hull_ref(P, V)
    np.testing.assert_array_equal(fast, ref)
    np.testing.assert_array_equal(fast, Delaunay(V[:, :-1]).find_simplex(P[:, :-1]) >= 0)
    assert 0 < fast.sum() < len(P)
    assert vc.in_hull(V, V).all()


def test_volume_ratio_closed_forms():
    rng = np.random.default_rng(2)
    E = np.eye(5)
    assert vc.hull_volume_ratio(E, E) == pytest.approx(1.0)
    # the simplex shrunk by half around its centre has 2^-4 of its volume
    assert vc.hull_volume_ratio(0.5 * E + 0.1, E) == pytest.approx(0.5 ** 4)
    D = rng.dirichlet(np.ones(5), 100)
    assert vc.hull_volume_ratio(D, np.vstack([D, E])) < 1.0
    with pytest.raises(ValueError, match="V"):
        vc.in_hull(D, D[:3])

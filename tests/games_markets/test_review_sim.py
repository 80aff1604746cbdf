import numpy as np
import pytest
import scipy.linalg as sla

from paperkit.games_markets.review_sim import fe_slope, fe_slope_ref, simulate_reviews, simulate_reviews_ref


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_simulator_matches_loop_reference(seed):
    a = simulate_reviews(50, 4, 0.3, 0.8, np.random.default_rng(seed))
    b = simulate_reviews_ref(50, 4, 0.3, 0.8, np.random.default_rng(seed))
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fe_slope_matches_reference_and_lstsq(seed):
    d = simulate_reviews(40, 3, 0.3, 0.8, np.random.default_rng(seed))
    b = fe_slope(d["s"], d["t"], d["paper"])
    assert b == pytest.approx(fe_slope_ref(d["s"], d["t"], d["paper"]), rel=1e-10)
    X = np.column_stack([d["t"], np.eye(40)[d["paper"]]])
    assert b == pytest.approx(sla.lstsq(X, d["s"])[0][0], rel=1e-8)


def test_fe_slope_recovers_planted_beta():
    d = simulate_reviews(6000, 4, 0.3, 0.8, np.random.default_rng(3))
    assert abs(fe_slope(d["s"], d["t"], d["paper"]) - 0.3) < 0.05


def test_bad_input_names_parameter():
    with pytest.raises(ValueError, match="n_papers"):
        simulate_reviews(0, 4, 0.3, 0.8, np.random.default_rng(0))
    with pytest.raises(ValueError, match="s"):
        fe_slope(np.array([np.nan, 1.0]), np.array([0.0, 1.0]), np.array([0, 0]))

import numpy as np
import pytest

from paperkit.privacy_statistics import certra_sim as cs
from paperkit.privacy_statistics import multiple_testing as mt

WORLD = dict(K=6, n_cal=40, m_test=20, hard=1, null_shift=1.5, signal=4.0, link_rate=0.3, hard_link_rate=0.05)


def test_independent_matches_block_trace_matrix():
    a = cs.dependent_trace_matrix(np.random.default_rng(1), 3, **WORLD)
    b = mt.block_trace_matrix(np.random.default_rng(1), 3, **WORLD)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("dep,rho", [("shared_scale", 1.0), ("test_factor", 0.9)])
def test_dependence_keeps_null_marginals_and_links(dep, rho):
    cal, test, link, mu = cs.dependent_trace_matrix(np.random.default_rng(2), 400, dependence=dep, rho=rho, **WORLD)
    assert cal.shape == (400, 6, 40) and test.shape == link.shape == (400, 6, 20)
    if dep == "test_factor":  # candidates equicorrelated, each still N(mu, 1)
        null = (test - mu[:, None])[:, 0][~link[:, 0]]
        assert abs(null.std() - 1) < 0.1
        c = np.corrcoef((test - mu[:, None] - 4.0 * link)[:, 0, :2].T)[0, 1]
        assert abs(c - rho) < 0.1


def test_simulate_shapes_and_level_monotone():
    out = cs.simulate_certra_levels(np.random.default_rng(3), 50, [0.05, 0.2], alpha=0.1, **WORLD)
    assert out["fdp"].shape == (2, 50, 6) and out["recall"].shape == (2, 50)
    assert out["oracle_fdp"].shape == out["marginal_fdp"].shape == (50, 6)
    assert (out["recall"][1] >= out["recall"][0]).all()  # e-BH rejects a superset at a larger level


def test_bad_dependence_rejected():
    with pytest.raises(ValueError):
        cs.dependent_trace_matrix(np.random.default_rng(0), 2, dependence="nope", **WORLD)
    with pytest.raises(ValueError):
        cs.dependent_trace_matrix(np.random.default_rng(0), 2, dependence="test_factor", rho=1.5, **WORLD)

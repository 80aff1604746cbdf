"""value_populations: drift slopes against scipy's linregress, the planted drift recovered in expectation, bad input."""
import numpy as np
import pytest
from scipy import stats

from paperkit.games_markets import value_populations as vp

BASE = np.array([0.30, 0.30, 0.15, 0.12, 0.13])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_drift_slopes_match_linregress(seed):
    rng = np.random.default_rng(seed)
    S, fam, gen = vp.supply(rng, 5, 4, BASE, 0.02 * np.array([0.5, 0, 0, -1, 0.5]), n_archetypes=19)
    sl, se = vp.drift_slopes(S, fam, gen, 3)
    for f in range(5):                                   # the last family keeps 3 of its 4 generations
        r = stats.linregress(gen[fam == f], S[fam == f, 3])
        assert sl[f] == pytest.approx(r.slope, abs=1e-12)
        assert se[f] == pytest.approx(r.stderr, abs=1e-12)
    S2, fam2, gen2 = vp.supply(rng, 2, 4, BASE, np.zeros(5), n_archetypes=6)
    sl2, se2 = vp.drift_slopes(S2, fam2, gen2, 3)
    assert np.isnan(sl2[1]) and np.isnan(se2[1])         # a family with 2 generations gets no slope


def test_planted_drift_sign_recovered_over_many_families():
    rng = np.random.default_rng(7)
    drift = 0.02 * np.array([0.5, 0, 0, -1, 0.5])
    sl, _ = vp.drift_slopes(*vp.supply(rng, 200, 4, BASE, drift, alpha=40.0), 3)
    sl0, _ = vp.drift_slopes(*vp.supply(rng, 200, 4, BASE, 0 * drift, alpha=40.0), 3)
    assert sl.mean() + 3 * sl.std(ddof=1) / np.sqrt(len(sl)) < 0
    assert abs(sl0.mean()) < 3 * sl0.std(ddof=1) / np.sqrt(len(sl0))


def test_bad_input_names_the_parameter():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="drift_vec"):
        vp.supply(rng, 2, 4, BASE, np.ones(5))
    with pytest.raises(ValueError, match="n_archetypes"):
        vp.supply(rng, 2, 4, BASE, np.zeros(5), n_archetypes=100)
    with pytest.raises(ValueError, match="shares"):
        vp.demand(rng, 10, [0.5, 0.5, 0, 0, 0.1])

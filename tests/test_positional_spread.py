import numpy as np
import pytest

from paperkit.positional_spread import (min_separation, min_separation_ref, positional_spread,
                                        positional_spread_ref, simplex_pe, spread_lower_bound, two_cluster_pe)

TOL = {np.float64: 1e-10, np.float32: 1e-5}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(1, 3), (2, 1), (7, 5), (40, 16)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kernels_match_reference(dtype, shape, seed):
    E = (np.random.default_rng(seed).normal(size=shape) * 3 + 1).astype(dtype)
    s, r = positional_spread(E), positional_spread_ref(E)
    assert abs(s - r) <= TOL[dtype] * max(1.0, r)
    assert min_separation(E) == pytest.approx(min_separation_ref(E), rel=TOL[dtype])


def test_closed_forms():
    # spread of the simplex: L rows at delta/sqrt2 * e_i -> L * delta^2/2 * (1 - 1/L) = (L-1) delta^2 / 2
    for L in (2, 5, 33):
        E = simplex_pe(L, 0.7)
        assert min_separation(E) == pytest.approx(0.7, rel=1e-12)
        assert positional_spread(E) == pytest.approx(spread_lower_bound(L, 0.7), rel=1e-12)
    # spread is translation invariant and scales as s^2
    E = np.random.default_rng(3).normal(size=(10, 4))
    assert positional_spread(E + 5.0) == pytest.approx(positional_spread(E), rel=1e-10)
    assert positional_spread(3 * E) == pytest.approx(9 * positional_spread(E), rel=1e-12)


def test_bound_holds_and_control_breaks_it():
    rng = np.random.default_rng(0)
    for _ in range(20):
        E = rng.normal(size=(int(rng.integers(2, 30)), int(rng.integers(1, 8))))
        assert positional_spread(E) >= spread_lower_bound(len(E), min_separation(E)) * (1 - 1e-12)
    C = two_cluster_pe(10, 2.0, 4, rng)
    assert min_separation(C) == 0.0
    assert positional_spread(C) < spread_lower_bound(10, 2.0)


def test_bad_input():
    with pytest.raises(ValueError, match="E"):
        positional_spread(np.zeros(5))
    with pytest.raises(ValueError, match="E"):
        min_separation(np.zeros((0, 3)))
    with pytest.raises(ValueError, match="L"):
        spread_lower_bound(0, 1.0)
    with pytest.raises(ValueError, match="delta"):
        spread_lower_bound(3, -1.0)

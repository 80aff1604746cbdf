import numpy as np
import pytest

from paperkit.arrays import real_array


def test_real_array_passes_float_arrays_through_uncopied():
    x = np.ones((2, 3), dtype=np.float32)
    assert real_array(x, "x", 2) is x
    assert real_array([1.0, 2.0], "v").dtype == np.float64


@pytest.mark.parametrize("bad, ndim, err, words", [
    (np.arange(3), None, TypeError, "W must be a real float array"),
    (np.ones(3, dtype=complex), None, TypeError, "W must be a real float array"),
    (np.ones(3), 2, ValueError, "W must have 2 axes"),
    (np.array([1.0, np.nan]), 1, ValueError, "W must be finite"),
    (np.array([np.inf]), None, ValueError, "W must be finite"),
])
def test_real_array_names_the_argument(bad, ndim, err, words):
    with pytest.raises(err, match=words):
        real_array(bad, "W", ndim)

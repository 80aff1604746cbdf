"""paperkit.geometry.knn: the Numba kernels against their NumPy references, scikit-learn, and hand-made cases."""
import numpy as np
import pytest
from sklearn.metrics import pairwise_distances
from sklearn.neighbors import NearestNeighbors

from paperkit.geometry.knn import in_any_ball, in_any_ball_ref, knn_distances, knn_distances_ref

# distances are accumulated in float64 either way; float32 differs only in how the squares are summed
RTOL = {np.float32: 1e-6, np.float64: 1e-12}
# scikit-learn's brute force uses |a|^2 + |b|^2 - 2ab, which loses digits to cancellation
RTOL_SKLEARN = {np.float32: 1e-4, np.float64: 1e-7}
SHAPES = [(1, 1, 1, 1), (7, 5, 1, 5), (40, 60, 3, 4), (200, 150, 16, 10), (33, 300, 64, 1)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,m,d,k", SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_knn_matches_reference(dtype, n, m, d, k, seed):
    rng = np.random.default_rng(seed)
    q, r = rng.normal(size=(n, d)).astype(dtype), rng.normal(size=(m, d)).astype(dtype)
    dist, idx = knn_distances(q, r, k)
    dist_ref, idx_ref = knn_distances_ref(q, r, k)
    assert dist.shape == (n, k) and idx.shape == (n, k) and dist.dtype == np.float64
    np.testing.assert_allclose(dist, dist_ref, rtol=RTOL[dtype], atol=0)
    np.testing.assert_array_equal(idx, idx_ref)
    assert np.all(np.diff(dist, axis=1) >= 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_knn_matches_sklearn(dtype, seed):
    rng = np.random.default_rng(seed)
    q, r = rng.normal(size=(80, 12)).astype(dtype), rng.normal(size=(120, 12)).astype(dtype)
    dist, idx = knn_distances(q, r, 7)
    d_sk, i_sk = NearestNeighbors(n_neighbors=7, algorithm="brute").fit(r).kneighbors(q)
    np.testing.assert_allclose(dist, d_sk, rtol=RTOL_SKLEARN[dtype])
    np.testing.assert_array_equal(idx, i_sk)


@pytest.mark.parametrize("seed", [0, 1])
def test_exclude_self_matches_sklearn_and_reference(seed):
    x = np.random.default_rng(seed).normal(size=(150, 5))
    dist, idx = knn_distances(x, x, 4, exclude_self=True)
    d_sk, i_sk = NearestNeighbors(n_neighbors=4, algorithm="brute").fit(x).kneighbors()  # no query: self excluded
    np.testing.assert_allclose(dist, d_sk, rtol=1e-7)
    np.testing.assert_array_equal(idx, i_sk)
    dist_ref, idx_ref = knn_distances_ref(x, x, 4, exclude_self=True)
    np.testing.assert_allclose(dist, dist_ref, rtol=1e-12)
    np.testing.assert_array_equal(idx, idx_ref)
    assert not np.any(idx == np.arange(150)[:, None])


def test_knn_hand_case_and_ties():
    ref = np.array([[1.0], [-1.0], [1.0], [3.0]])
    for fn in (knn_distances, knn_distances_ref):
        dist, idx = fn(np.array([[0.0]]), ref, 4)
        np.testing.assert_array_equal(dist, [[1.0, 1.0, 1.0, 3.0]])
        np.testing.assert_array_equal(idx, [[0, 1, 2, 3]])  # equal distances: lower index first
        dist, idx = fn(ref, ref, 1, exclude_self=True)
        np.testing.assert_array_equal(dist[:, 0], [0.0, 2.0, 0.0, 2.0])
        np.testing.assert_array_equal(idx[:, 0], [2, 0, 0, 0])


def test_knn_mixed_and_integer_dtypes():
    q, r = np.arange(6).reshape(3, 2), np.arange(8, dtype=np.float64).reshape(4, 2)
    dist, idx = knn_distances(q, r, 2)
    with pytest.raises(TypeError, match="query and ref must share one dtype"):
        knn_distances(q.astype(np.float64), r.astype(np.float32), 2)
    np.testing.assert_allclose(dist, knn_distances_ref(q.astype(float), r.astype(float), 2)[0])
    np.testing.assert_array_equal(idx[:, 0], [0, 1, 2])


@pytest.mark.parametrize("fn", [knn_distances, knn_distances_ref])
def test_knn_bad_input(fn):
    x = np.zeros((5, 2))
    with pytest.raises(ValueError, match="k must"):
        fn(x, x, 0)
    with pytest.raises(ValueError, match="k must"):
        fn(x, x, 6)
    with pytest.raises(ValueError, match="k must"):
        fn(x, x, 5, exclude_self=True)
    with pytest.raises(ValueError, match="k must be an integer"):
        fn(x, x, 2.0)
    with pytest.raises(ValueError, match="query must be a 2-D"):
        fn(np.zeros(3), x, 1)
    with pytest.raises(ValueError, match="ref must be a 2-D"):
        fn(x, np.zeros((2, 2, 2)), 1)
    with pytest.raises(ValueError, match="same number of columns"):
        fn(np.zeros((3, 3)), x, 1)
    with pytest.raises(ValueError, match="exclude_self"):
        fn(np.zeros((3, 2)), x, 1, exclude_self=True)
    with pytest.raises(ValueError, match="query contains NaN"):
        fn(np.full((2, 2), np.nan), x, 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_in_any_ball_matches_reference_and_brute_force(dtype, seed):
    rng = np.random.default_rng(seed)
    q, c = rng.normal(size=(300, 6)).astype(dtype), rng.normal(size=(50, 6)).astype(dtype)
    radii = rng.uniform(0.2, 1.5, size=50)
    got = in_any_ball(q, c, radii)
    brute = (pairwise_distances(q.astype(np.float64), c.astype(np.float64)) <= radii[None, :]).any(axis=1)
    np.testing.assert_array_equal(got, in_any_ball_ref(q, c, radii))
    np.testing.assert_array_equal(got, brute)
    assert 0 < got.mean() < 1  # the case must exercise both outcomes


def test_in_any_ball_hand_case_closed_ball():
    centers, radii = np.array([[0.0, 0.0], [10.0, 0.0]]), np.array([5.0, 1.0])
    q = np.array([[3.0, 4.0], [3.0, 4.1], [11.0, 0.0], [12.0, 0.0], [-5.0, 0.0]])
    for fn in (in_any_ball, in_any_ball_ref):
        np.testing.assert_array_equal(fn(q, centers, radii), [True, False, True, False, True])
        np.testing.assert_array_equal(fn(q, centers[:0], radii[:0]), [False] * 5)


@pytest.mark.parametrize("fn", [in_any_ball, in_any_ball_ref])
def test_in_any_ball_bad_input(fn):
    x = np.zeros((4, 2))
    with pytest.raises(ValueError, match="radii must have shape"):
        fn(x, x, np.ones(3))
    with pytest.raises(ValueError, match="radii must be finite and >= 0"):
        fn(x, x, -np.ones(4))
    with pytest.raises(ValueError, match="centers must be a 2-D"):
        fn(x, np.zeros(4), np.ones(4))
    with pytest.raises(ValueError, match="same number of columns"):
        fn(np.zeros((4, 3)), x, np.ones(4))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("exclude_self", [False, True])
def test_knn_blas_path_is_the_direct_scan_exactly(dtype, exclude_self):
    """For d >= 8 the BLAS block path returns the direct scan's squared distances and indices bit for bit, ties on
    an integer grid (many equal distances) and duplicated points included, across several query blocks."""
    from paperkit.geometry import knn
    rng = np.random.default_rng(3)
    for n, d in ((700, 8), (300, 16)):
        x = rng.integers(-2, 3, size=(n, d)).astype(dtype)
        x[n // 2:n // 2 + 20] = x[:20]  # exact duplicates
        sq, idx = knn.knn_sq_distances(x, x, 6, exclude_self=exclude_self)
        sq0, idx0 = np.empty_like(sq), np.empty_like(idx)
        knn._knn_kernel(x, x, 6, exclude_self, sq0, idx0)
        np.testing.assert_array_equal(sq, sq0)
        np.testing.assert_array_equal(idx, idx0)

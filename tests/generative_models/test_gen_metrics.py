"""paperkit.generative_models.gen_metrics: FID against closed forms and scipy's sqrtm, kNN precision/recall by hand and against a
prdc-style oracle, one-sided Chamfer against scikit-learn's KD-tree."""
import numpy as np
import pytest
import scipy.linalg
from sklearn.metrics import pairwise_distances
from sklearn.neighbors import KDTree

from paperkit.generative_models import gen_metrics as gm


def _spd(rng, d, rank=None):
    a = rng.normal(size=(d, rank or d))
    return a @ a.T + (0 if rank else 0.1 * np.eye(d))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("d", [1, 4, 32])
def test_sqrtm_psd_matches_scipy(seed, d):
    S = _spd(np.random.default_rng(seed), d)
    r = gm.sqrtm_psd(S)
    np.testing.assert_allclose(r, r.T, atol=1e-12)
    np.testing.assert_allclose(r @ r, S, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(r, np.real(scipy.linalg.sqrtm(S)), rtol=1e-7, atol=1e-9)


def test_sqrtm_psd_singular_stays_real():
    S = _spd(np.random.default_rng(0), 10, rank=3)
    r = gm.sqrtm_psd(S)
    assert np.all(np.isfinite(r)) and r.dtype == np.float64
    np.testing.assert_allclose(r @ r, S, atol=1e-9)


def test_frechet_closed_forms():
    # 1-D: d^2 = (m1 - m2)^2 + (s1 - s2)^2
    assert gm.frechet_distance([1.0], [[4.0]], [3.0], [[9.0]]) == pytest.approx(4.0 + 1.0, rel=1e-12)
    # diagonal (commuting) covariances: sum (mu diff)^2 + sum (sqrt a - sqrt b)^2
    a, b = np.array([1.0, 4.0, 0.25]), np.array([9.0, 1.0, 0.25])
    mu1, mu2 = np.array([0.0, 1.0, 2.0]), np.array([1.0, 1.0, 0.0])
    want = np.sum((mu1 - mu2) ** 2) + np.sum((np.sqrt(a) - np.sqrt(b)) ** 2)
    for fn in (gm.frechet_distance, gm.frechet_distance_ref):
        assert fn(mu1, np.diag(a), mu2, np.diag(b)) == pytest.approx(want, rel=1e-12)
    # a rotation of both covariances leaves the distance unchanged
    Q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(3, 3)))
    assert gm.frechet_distance(Q @ mu1, Q @ np.diag(a) @ Q.T, Q @ mu2, Q @ np.diag(b) @ Q.T) == pytest.approx(want)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("d", [2, 16, 64])
def test_frechet_matches_pytorch_fid_recipe(seed, d):
    rng = np.random.default_rng(seed)
    mu1, mu2, S1, S2 = rng.normal(size=d), rng.normal(size=d), _spd(rng, d), _spd(rng, d)
    got = gm.frechet_distance(mu1, S1, mu2, S2)
    assert got == pytest.approx(gm.frechet_distance_ref(mu1, S1, mu2, S2), rel=1e-8)
    assert got == pytest.approx(gm.frechet_distance(mu2, S2, mu1, S1), rel=1e-8)
    assert gm.frechet_distance(mu1, S1, mu1, S1) == pytest.approx(0.0, abs=1e-8 * np.trace(S1))


def test_frechet_singular_covariances():
    rng = np.random.default_rng(1)
    S1, S2 = _spd(rng, 12, rank=4), _spd(rng, 12, rank=4)
    got = gm.frechet_distance(np.zeros(12), S1, np.zeros(12), S2)
    assert np.isfinite(got) and got > 0
    # pytorch-fid's recipe needs its epsilon offset here; it agrees to the precision that offset allows
    assert got == pytest.approx(gm.frechet_distance_ref(np.zeros(12), S1, np.zeros(12), S2), rel=1e-3)
    assert gm.frechet_distance(np.zeros(12), S1, np.zeros(12), S1) == pytest.approx(0.0, abs=1e-7 * np.trace(S1))


def test_fid_equal_moments_is_zero_whatever_the_shape():
    # two clouds with identical mean and covariance, one Gaussian-like and one on 4 points: FID sees no difference
    cloud = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    rng = np.random.default_rng(0)
    g = rng.normal(size=(4000, 2))
    g = (g - g.mean(0)) @ np.linalg.inv(gm.sqrtm_psd(np.cov(g, rowvar=False))) @ gm.sqrtm_psd(np.cov(cloud, rowvar=False))
    assert gm.fid(cloud, g) == pytest.approx(0.0, abs=1e-9)
    assert gm.fid(cloud, g + [0.5, 0.0]) == pytest.approx(0.25, rel=1e-9)


def test_frechet_bad_input():
    with pytest.raises(ValueError, match="S1 must have shape"):
        gm.frechet_distance(np.zeros(3), np.eye(2), np.zeros(3), np.eye(3))
    with pytest.raises(ValueError, match="mu2 must have shape"):
        gm.frechet_distance(np.zeros(3), np.eye(3), np.zeros(2), np.eye(3))
    with pytest.raises(ValueError, match="S2 contains NaN"):
        gm.frechet_distance(np.zeros(2), np.eye(2), np.zeros(2), np.full((2, 2), np.nan))
    with pytest.raises(ValueError, match="X must be"):
        gm.gaussian_stats(np.zeros((1, 3)))
    with pytest.raises(ValueError, match="S must be a square"):
        gm.sqrtm_psd(np.zeros((2, 3)))


def test_precision_recall_by_hand():
    real = np.array([[0.0], [1.0], [2.0], [10.0]])
    gen = np.array([[0.5], [2.5], [5.0], [20.0]])
    # k=1 radii: real (1, 1, 1, 8); gen (2, 2, 2.5, 15). 5 sits in the lonely real point's ball of radius 8,
    # 20 is outside it; every real point is in some generated ball (10 is inside the ball of 20, radius 15).
    assert gm.knn_precision_recall(real, gen, 1) == (0.75, 1.0)
    # k=2 radii: real (2, 1, 2, 9); gen (4.5, 2.5, 4.5, 17.5)
    assert gm.knn_precision_recall(real, gen, 2) == (0.75, 1.0)
    # k=1 against a tight generated set: only the three real points near 1 are covered
    tight = np.array([[0.9], [1.0], [1.1], [1.2]])
    p, r = gm.knn_precision_recall(real, tight, 1)
    assert p == 1.0 and r == pytest.approx(0.25)
    # balls are closed: a point exactly on the radius is accepted
    assert gm.knn_precision_recall(np.array([[0.0], [2.0]]), np.array([[4.0], [4.5]]), 1)[0] == 0.5


def _prdc_precision_recall(real, gen, k):
    """The recipe of clovaai/generative-evaluation-prdc, written out with scikit-learn (prdc is not installed)."""
    r_rad = np.partition(pairwise_distances(real), k, axis=1)[:, k]  # k+1-th smallest, the 0 to itself included
    g_rad = np.partition(pairwise_distances(gen), k, axis=1)[:, k]
    d_rg = pairwise_distances(real, gen)
    precision = (d_rg < r_rad[:, None]).any(axis=0).mean()
    recall = (d_rg < g_rad[None, :]).any(axis=1).mean()
    return precision, recall


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_precision_recall_matches_prdc_recipe(seed, k):
    rng = np.random.default_rng(seed)
    real, gen = rng.normal(size=(200, 8)), rng.normal(loc=0.4, scale=1.3, size=(150, 8))
    got = gm.knn_precision_recall(real, gen, k)
    assert got == pytest.approx(_prdc_precision_recall(real, gen, k), abs=1e-12)
    assert 0 < got[0] < 1 and 0 < got[1] < 1


def test_precision_recall_ks_agrees_with_single_k():
    rng = np.random.default_rng(3)
    real, gen = rng.normal(size=(120, 4)), rng.normal(size=(90, 4)) * 1.5
    p, r = gm.knn_precision_recall_ks(real, gen, [3, 1, 10])
    for i, k in enumerate([3, 1, 10]):
        assert (p[i], r[i]) == gm.knn_precision_recall(real, gen, k)
    with pytest.raises(ValueError, match="ks must be"):
        gm.knn_precision_recall_ks(real, gen, [0, 3])
    with pytest.raises(ValueError, match="k must be a positive integer"):
        gm.knn_precision_recall(real, gen, 0)


def test_chamfer_by_hand_and_asymmetry():
    A = np.array([[0.0, 0.0]])
    B = np.array([[3.0, 4.0], [10.0, 0.0]])
    assert gm.chamfer_one_sided(A, B) == 5.0
    assert gm.chamfer_one_sided(B, A) == 7.5  # (5 + 10) / 2
    assert gm.chamfer_fidelity(real=A, gen=B) == 7.5
    assert gm.chamfer_coverage(real=A, gen=B) == 5.0
    assert gm.chamfer_one_sided(B, B) == 0.0


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_chamfer_matches_kdtree(seed, dtype):
    rng = np.random.default_rng(seed)
    A, B = rng.normal(size=(300, 5)).astype(dtype), rng.normal(size=(250, 5)).astype(dtype)
    want = KDTree(B.astype(np.float64)).query(A.astype(np.float64), k=1)[0].mean()
    assert gm.chamfer_one_sided(A, B) == pytest.approx(want, rel=1e-6 if dtype == np.float32 else 1e-12)


def test_evaluate_collects_the_five_metrics():
    rng = np.random.default_rng(4)
    real, gen = rng.normal(size=(100, 3)), rng.normal(size=(80, 3)) + 0.3
    got = gm.evaluate(real, gen, k=3)
    assert tuple(got) == gm.METRICS
    assert got["FID"] == gm.fid(real, gen)
    assert (got["precision"], got["recall"]) == gm.knn_precision_recall(real, gen, 3)
    assert got["Chamfer fidelity"] == gm.chamfer_one_sided(gen, real)
    assert got["Chamfer coverage"] == gm.chamfer_one_sided(real, gen)

"""The halfspace index returns exactly {k : q.k >= tau}: against brute force, over seeds, shapes, dtypes, bounds,
thresholds and inserts; its bounds are valid; its counted work adds up; bad input raises ValueError."""
import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

from paperkit.sequence_models import halfspace_index as hsi


@pytest.fixture(autouse=True)
def one_blas_thread():
    # OpenBLAS threads stall on a shared 2-core machine; these products are small
    with threadpool_limits(1, user_api="blas"):
        yield


def clustered_keys(rng, n, d, n_topics=16, spread=0.3, dtype=np.float32):
    mu = rng.standard_normal((n_topics, d))
    return (mu[rng.integers(n_topics, size=n)] + spread * rng.standard_normal((n, d))).astype(dtype)


def midpoint_thresholds(scores, quantiles):
    """Thresholds strictly between two consecutive scores, so that no key sits on tau (rounding-proof)."""
    s = np.sort(scores)
    out = []
    for qtl in quantiles:
        i = min(len(s) - 2, int(qtl * (len(s) - 1)))
        out.append(0.5 * (s[i] + s[i + 1]))
    return out + [s[-1] + 1.0, s[0] - 1.0]  # nothing above, everything above


def assert_same(got, ref):
    assert np.array_equal(got.ids, ref.ids), (np.setdiff1d(ref.ids, got.ids), np.setdiff1d(got.ids, ref.ids))
    np.testing.assert_allclose(got.scores, ref.scores, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n,d,C", [(1500, 8, 12), (3000, 32, 40), (2000, 64, 16), (257, 5, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_query_equals_brute_force(seed, n, d, C, dtype):
    rng = np.random.default_rng(seed)
    K = clustered_keys(rng, n, d, dtype=dtype)
    index = hsi.build_index(K, C, rng)
    for _ in range(12):
        # queries near a key (the realistic case) and isotropic ones (the hard case for the bounds)
        q = K[rng.integers(n)].astype(np.float64) * rng.uniform(0.5, 3) if rng.random() < 0.5 \
            else rng.standard_normal(d) * rng.uniform(0.1, 10)
        scores = K.astype(np.float64) @ q
        for tau in midpoint_thresholds(scores, (0.5, 0.9, 0.99, 0.999)):
            ref = hsi.query_ref(index, q, tau)
            for bound in hsi.BOUNDS:
                assert_same(hsi.query(index, q, tau, bound=bound), ref)


@pytest.mark.parametrize("seed", [0, 1])
def test_bounds_cover_every_member(seed):
    rng = np.random.default_rng(seed)
    K = clustered_keys(rng, 2000, 16, dtype=np.float64)
    index = hsi.build_index(K, 24, rng)
    for _ in range(10):
        q = rng.standard_normal(16) * 3
        for c in range(index.n_clusters):
            members = index.slots[index.start[c]: index.start[c] + index.count[c]]
            best = (members @ q).max()
            # ball: q.mu + ||q|| r ;  box: sum_j max(q_j lo_j, q_j hi_j)
            ball = q @ index.centres[c] + np.linalg.norm(q) * index.radius[c]
            box = np.maximum(q * index.lo[c], q * index.hi[c]).sum()
            assert best <= ball + 1e-9 and best <= box + 1e-9


def test_ties_at_tau_are_returned():
    """A key scoring exactly tau belongs to the halfspace (q.k >= tau) and must come back."""
    rng = np.random.default_rng(3)
    K = clustered_keys(rng, 1000, 8, dtype=np.float64)
    K[17] = np.array([1.0, 2, 0, 0, 0, 0, 0, 0])
    index = hsi.build_index(K, 10, rng)
    q = np.array([2.0, 1, 0, 0, 0, 0, 0, 0])
    r = hsi.query(index, q, 4.0)  # q.k_17 == 4 exactly
    assert 17 in r.ids
    assert_same(r, hsi.query_ref(index, q, 4.0))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_inserts_keep_answers_exact(seed, dtype):
    rng = np.random.default_rng(seed)
    d = 24
    K = clustered_keys(rng, 1500, d, dtype=dtype)
    index = hsi.build_index(K, 16, rng)
    n_before, c_before = index.n, index.n_clusters
    # near keys (join a cluster), far keys (open new clusters), many of them (relayout of the slots)
    new = np.concatenate([clustered_keys(rng, 600, d, dtype=dtype),
                          (20 * rng.standard_normal((150, d))).astype(dtype)])
    for i, k in enumerate(rng.permutation(new)):
        assert hsi.insert(index, k) == n_before + i
        if i % 50 == 0:
            q = rng.standard_normal(d) * 2
            scores = index.keys[: index.n].astype(np.float64) @ q
            for tau in midpoint_thresholds(scores, (0.9, 0.99)):
                assert_same(hsi.query(index, q, tau), hsi.query_ref(index, q, tau))
    assert index.n == n_before + len(new)
    assert index.n_clusters > c_before  # the far keys opened clusters of their own
    assert index.count[: index.n_clusters].sum() == index.n
    live = np.concatenate([index.ids[s: s + c] for s, c in zip(index.start[: index.n_clusters],
                                                              index.count[: index.n_clusters])])
    assert np.array_equal(np.sort(live), np.arange(index.n))


def test_work_counts_add_up():
    rng = np.random.default_rng(4)
    K = clustered_keys(rng, 4000, 32, spread=0.1)
    index = hsi.build_index(K, 32, rng)
    q = K[0].astype(np.float64) * 2
    tau = float(np.quantile(K.astype(np.float64) @ q, 0.99))
    r = hsi.query(index, q, tau)
    pruned_keys = sum(index.count[c] for c in range(index.n_clusters)) - r.keys_scanned
    assert 0 < r.clusters_pruned < index.n_clusters and pruned_keys > 0
    # the pruned clusters hold exactly the keys that were not scanned
    assert r.keys_scanned + pruned_keys == index.n
    ref = hsi.query_ref(index, q, tau)
    assert (ref.keys_scanned, ref.clusters_pruned) == (index.n, 0)


def test_clustered_keys_are_mostly_pruned():
    """On well-separated clusters and a query aimed at one of them, the bounds skip most keys."""
    rng = np.random.default_rng(5)
    K = clustered_keys(rng, 8000, 32, n_topics=32, spread=0.15)
    index = hsi.build_index(K, 64, rng)
    fractions = []
    for i in rng.integers(8000, size=20):
        q = K[i].astype(np.float64) * 2
        tau = float(np.quantile(K.astype(np.float64) @ q, 0.99))
        fractions.append(hsi.query(index, q, tau).keys_scanned / index.n)
    assert np.mean(fractions) < 0.2


def test_outliers_get_their_own_cluster():
    rng = np.random.default_rng(6)
    K = clustered_keys(rng, 3000, 16, spread=0.2, dtype=np.float64)
    far = rng.choice(3000, 5, replace=False)
    K[far] = 30 * rng.standard_normal((5, 16))
    index = hsi.build_index(K, 16, rng)
    for i in far:
        c = [c for c in range(index.n_clusters)
             if i in index.ids[index.start[c]: index.start[c] + index.count[c]]][0]
        assert index.count[c] == 1 and index.radius[c] == 0.0


def test_nearest_centre_matches_scipy():
    rng = np.random.default_rng(7)
    X, centres = rng.standard_normal((3000, 12)), rng.standard_normal((40, 12))
    got = hsi.nearest_centre(X, centres)
    dist = cdist(X, centres)
    # float32 arithmetic may break near-ties either way: the chosen centre is nearest up to that rounding
    np.testing.assert_allclose(dist[np.arange(len(X)), got], dist.min(axis=1), rtol=1e-5)
    assert (got == dist.argmin(axis=1)).mean() > 0.99


def test_kmeans_inertia_close_to_sklearn():
    rng = np.random.default_rng(8)
    mu = 10 * rng.standard_normal((12, 6))
    X = mu[rng.integers(12, size=3000)] + rng.standard_normal((3000, 6))
    ours = hsi.kmeans(X, 12, rng, n_iter=20, per_cluster=1000)
    inertia = (cdist(X, ours).min(axis=1) ** 2).sum()
    ref = KMeans(12, n_init=5, random_state=0).fit(X).inertia_
    assert inertia <= 1.05 * ref


@pytest.mark.parametrize("kw,match", [
    (dict(K=np.zeros((0, 4))), "K"), (dict(K=np.zeros(5)), "K"), (dict(K=np.zeros((5, 3), np.int64)), "K"),
    (dict(K=np.full((5, 3), np.nan)), "K"), (dict(n_clusters=0), "n_clusters"), (dict(n_clusters=11), "n_clusters"),
    (dict(n_iter=0), "n_iter"), (dict(outlier_factor=1.0), "outlier_factor")])
def test_build_rejects_bad_input(kw, match):
    args = dict(K=np.random.default_rng(0).standard_normal((10, 3)), n_clusters=2, n_iter=5, outlier_factor=2.0)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        hsi.build_index(args["K"], args["n_clusters"], np.random.default_rng(0), n_iter=args["n_iter"],
                        outlier_factor=args["outlier_factor"])


def test_query_and_insert_reject_bad_input():
    rng = np.random.default_rng(0)
    index = hsi.build_index(rng.standard_normal((100, 4)), 4, rng)
    for fn in (hsi.query, hsi.query_ref):
        with pytest.raises(ValueError, match="q"):
            fn(index, np.zeros(5), 0.0)
        with pytest.raises(ValueError, match="tau"):
            fn(index, np.zeros(4), float("nan"))
        with pytest.raises(ValueError, match="bound"):
            fn(index, np.zeros(4), 0.0, bound="cone")
    with pytest.raises(ValueError, match="k"):
        hsi.insert(index, np.zeros(3))
    with pytest.raises(ValueError, match="labels"):
        hsi.index_from_labels(np.zeros((4, 2)), np.array([0, 1]))

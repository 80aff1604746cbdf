"""Regression tests of issue 11's wrong results and silently accepted inputs (one per item)."""
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from paperkit.generative_models import gen_metrics as gm
from paperkit.geometry import knn
from paperkit.learning_dynamics import grpo
from paperkit.nn import selective_scan as ss
from paperkit.nn.tiny_transformer import TinyConfig, attention_probs
from paperkit.privacy_statistics import causation_bounds as cb
from paperkit.privacy_statistics import dp_mechanisms as dp
from paperkit.privacy_statistics import multiple_testing as mt
from paperkit.privacy_statistics import smoothing as sm
from paperkit.privacy_statistics import sos
from paperkit.sequence_models import halfspace_index as hi
from paperkit.sequence_models import sparse_attention as sa


# 1. kNN balls: points exactly on the boundary count -------------------------------------------------------------

def _exact_pr(real, gen, k):
    """Exact oracle: integer squared distances, k-th neighbour radius squared, <= comparison in integers."""
    def radii2(X):
        d2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
        np.fill_diagonal(d2, np.iinfo(np.int64).max)
        return np.sort(d2, axis=1)[:, k - 1]

    def inside(Q, C, r2):
        return (((Q[:, None, :] - C[None, :, :]) ** 2).sum(-1) <= r2[None, :]).any(1).mean()

    return inside(gen, real, radii2(real)), inside(real, gen, radii2(gen))


@pytest.mark.parametrize("k", [1, 5])
def test_knn_precision_recall_keeps_boundary_points_on_a_lattice(k):
    rng = np.random.default_rng(3)
    grid = np.array(np.meshgrid(*[np.arange(3)] * 6, indexing="ij")).reshape(6, -1).T  # {0,1,2}^6, exact ties
    real = grid[rng.choice(len(grid), 150, replace=False)]
    gen = grid[rng.choice(len(grid), 150, replace=False)] * 1  # integer coordinates
    want = _exact_pr(real, gen, k)
    got = gm.knn_precision_recall(real.astype(float), gen.astype(float), k)
    assert got == pytest.approx(want, abs=0)


def test_in_any_ball_squared_radius_keeps_the_boundary_point():
    # sqrt(3)**2 = 2.9999999999999996 < 3: a radius taken as sqrt and squared again drops (1, 1, 1)
    c, q = np.zeros((1, 3)), np.ones((1, 3))
    assert not knn.in_any_ball(q, c, np.sqrt([3.0]))[0]
    assert knn.in_any_ball(q, c, radii_sq=np.array([3.0]))[0] and knn.in_any_ball_ref(q, c, radii_sq=np.array([3.0]))[0]
    sq, _ = knn.knn_sq_distances(np.vstack([c, q]), np.vstack([c, q]), 1, exclude_self=True)
    assert sq[0, 0] == 3.0


def test_knn_refuses_overflowing_complex_and_empty_columns():
    x = np.ones((3, 2))
    with pytest.raises(ValueError, match="query has coordinates"):
        knn.knn_distances(x * 1e200, x, 1)
    with pytest.raises(TypeError, match="query"):
        knn.knn_distances(x + 1j, x, 1)
    with pytest.raises(ValueError, match="query"):
        knn.knn_distances(np.ones((3, 0)), np.ones((3, 0)), 1)
    with pytest.raises(ValueError, match="ks"):
        gm.knn_precision_recall_ks(x, x + 1, [2.7])


def test_fid_refuses_non_psd_and_chamfer_refuses_empty():
    with pytest.raises(ValueError, match="S2"):
        gm.frechet_distance(np.zeros(2), np.eye(2), np.zeros(2), -np.eye(2))
    with pytest.raises(ValueError, match="S1"):
        gm.frechet_distance(np.zeros(2), np.array([[1.0, 0.5], [0.0, 1.0]]), np.zeros(2), np.eye(2))
    with pytest.raises(ValueError, match="A is empty"):
        gm.chamfer_one_sided(np.zeros((0, 2)), np.ones((3, 2)))


# 2. and 5. halfspace index ------------------------------------------------------------------------------------

def test_insert_float64_key_into_float32_index_is_found():
    rng = np.random.default_rng(0)
    K = rng.normal(size=(64, 8)).astype(np.float32)
    index = hi.build_index(K, 4, rng)
    k = np.full(8, 1.0 + 2.0 ** -30)  # not representable in float32
    kid = hi.insert(index, k)
    q = np.ones(8)
    tau = float(index.keys[kid].astype(np.float64) @ q)  # the stored key scores exactly tau
    for bound in hi.BOUNDS:
        assert kid in hi.query(index, q, tau, bound).ids
    assert np.all(index.lo[: index.n_clusters] <= index.hi[: index.n_clusters])


def test_query_and_query_ref_agree_on_exact_ties_and_infinite_tau():
    rng = np.random.default_rng(1)
    K = rng.normal(size=(200, 16))
    index = hi.build_index(K, 8, rng)
    q = rng.normal(size=16)
    for i in range(0, 200, 7):  # tau equal to a key's score as the kernel's left-to-right sum computes it
        tau = 0.0
        for j in range(16):
            tau += q[j] * K[i, j]
        a, b = hi.query(index, q, tau), hi.query_ref(index, q, tau)
        assert i in a.ids and np.array_equal(a.ids, b.ids)
    assert hi.query(index, q, -np.inf).ids.size == 200 and hi.query(index, q, np.inf).ids.size == 0
    with pytest.raises(ValueError, match="tau"):
        hi.query(index, q, np.nan)
    with pytest.raises(TypeError, match="labels"):
        hi.index_from_labels(K, np.zeros(200) + 0.5)


# 3. probabilities of causation --------------------------------------------------------------------------------

def test_poc_bounds_refuses_contradictory_data_and_tolerates_rounding():
    with pytest.raises(ValueError, match="contradict"):
        cb.poc_bounds([0.1, 0.5], [0.4, 0.1, 0.25, 0.25])  # P(x,y) = 0.4 > P(y_x) = 0.1
    rng = np.random.default_rng(0)
    r, s = cb.random_models(rng, 2000)
    p_exp, p_obs, _ = cb.model_probabilities(r, s)
    lo, up = cb.poc_bounds(p_exp, p_obs)
    assert np.all(lo <= up + 1e-12)
    lo, up = cb.poc_bounds([1 + 2.2e-16, 0.5], [0.5, 0.0, 0.25, 0.25])
    assert 0 <= lo <= up <= 1


# 4. mixed-group probability -----------------------------------------------------------------------------------

def test_mixed_group_prob_exact_for_small_p_and_zero_for_one_rollout():
    for p in (1e-12, 1e-9, 3e-7, 0.01):
        G = 16
        pf = Fraction(p)
        exact = 1 - pf ** G - (1 - pf) ** G
        assert float(grpo.mixed_group_prob(p, G)) == pytest.approx(float(exact), rel=1e-14)
    assert np.all(grpo.mixed_group_prob(np.linspace(0, 1, 11), 1) == 0)


def test_grpo_advantages_all_same_group_with_eps_zero_is_zero():
    r = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    a = grpo.grpo_advantages(r, "std", eps=0.0)
    assert torch.isfinite(a).all() and torch.all(a[0] == 0)


# 6. SOS -------------------------------------------------------------------------------------------------------

def test_sos_raises_its_own_error_without_certificate_and_refuses_half_deg_zero():
    prog = sos.build(1, [[0]])
    with pytest.raises(sos.SOSError) as info:
        sos.solve(prog, {(4,): -1.0, (0,): 1.0})  # -x^4 + 1: unbounded below, no SOS certificate
    assert info.value.status != "optimal"
    with pytest.raises(ValueError, match="half_deg"):
        sos.build(1, [[0]], half_deg=0)
    g, _ = sos.solve(prog, {(4,): 1.0, (2,): -2.0, (0,): 0.0})  # min of x^4 - 2x^2 is -1
    assert g == pytest.approx(-1.0, abs=1e-6)


# selective scan, attention, statistics ------------------------------------------------------------------------

def test_selective_scan_refusals():
    kw = {k: v.numpy() for k, v in ss._scan_inputs_torch(np.random.default_rng(0), 4).items()}
    with pytest.raises(ValueError, match="L >= 1"):
        ss.selective_scan_numba(**{**kw, "u": kw["u"][..., :0], "delta": kw["delta"][..., :0],
                                   "B": kw["B"][..., :0], "C": kw["C"][..., :0]})
    with pytest.raises(TypeError, match="A has dtype float64 but u has float32"):
        ss.selective_scan_numba(**{**kw, "u": kw["u"].astype(np.float32), "delta": kw["delta"].astype(np.float32)})
    with pytest.raises(ValueError, match="delta must be >= 0"):
        ss.selective_scan_numba(**{**kw, "delta": -kw["delta"]})


def test_attention_masks_and_config():
    q = torch.randn(1, 1, 2, 4)
    k = torch.randn(1, 1, 5, 4)
    with pytest.raises(ValueError, match="allowed"):
        attention_probs(q, k, True, torch.tensor([[True] * 5, [False] * 5]))
    # bottom-right aligned causal mask: with Lq = 2 < Lk = 5 the first query sees keys 0..3, SDPA's top-left only 0
    p = attention_probs(q, k, True)
    assert (p[0, 0, 0, :4] > 0).all() and p[0, 0, 0, 4] == 0
    sdpa = torch.ones(2, 5, dtype=torch.bool).tril()
    assert not torch.equal(p[0, 0] > 0, sdpa)
    with pytest.raises(ValueError, match="pe_scale"):
        TinyConfig(vocab=4, pe_scale=float("nan"))
    K, V = np.random.default_rng(0).normal(size=(2, 5, 4))
    for bad, exc in ((np.array([True, False, True, False, False]), TypeError), (np.array([0.0, 1.5]), TypeError),
                     (np.array([1, 1]), ValueError)):
        with pytest.raises(exc, match="ids"):
            sa.subset_attention(K[0], K, V, bad)


def test_statistics_refusals():
    with pytest.raises(ValueError, match="p must"):
        mt.bh(np.array([-0.1, 0.5]), 0.1)
    with pytest.raises(ValueError, match="k must"):
        mt.proportion_ci(2.5, 10)
    with pytest.raises(ValueError, match="pmf must sum to 1"):
        dp.hockey_stick_delta(np.array([0.7, 0.7]), 1.0)
    for k, n in ((np.nan, 10), (2.5, 10), (2, 10.5)):
        with pytest.raises(ValueError, match="k must|n must"):
            sm.clopper_pearson_lower(k, n, 0.05)
    for p, sigma in ((1.5, 1.0), (np.nan, 1.0), (0.9, -1.0)):
        with pytest.raises(ValueError, match="p_lower|sigma"):
            sm.certified_radius(p, sigma)


def test_bh_on_the_line_follows_the_documented_float_comparison():
    rng = np.random.default_rng(0)
    m, alpha = 20, 0.1
    for _ in range(50):
        k = rng.integers(1, m + 1, size=m)
        p = alpha * k / m  # on the line, up to rounding
        rej = mt.bh(p, alpha)
        # documented rule: reject p_j iff p_j * m <= alpha * k* (float products); exact arithmetic can disagree
        ps = np.sort(p)
        ok = ps * m <= alpha * np.arange(1, m + 1)
        kstar = np.flatnonzero(ok).max() + 1 if ok.any() else 0
        assert np.array_equal(rej, (p * m <= alpha * kstar) & (kstar > 0))
        exact = [Fraction(x) * m <= Fraction(alpha) * kstar for x in p]
        assert all(r or not e for r, e in zip(rej, exact))  # never rejects less than exact; may reject more

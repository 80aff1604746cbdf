"""paperkit.network_structure.prune_transforms: the pruning masks against their loop references and their counting
identities, the structure counts against closed forms (Eckart-Young, scipy), the permutation and rank bounds
exactly, and the Hungarian grouping against brute force and a planted, hidden block structure."""
import itertools
import math

import numpy as np
import pytest
from scipy.linalg import hadamard
from scipy.stats import ortho_group

from paperkit.network_structure import prune_transforms as pt

SEEDS = [0, 1, 2]


# ---------------------------------------------------------------- masks

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", [(1, 8), (5, 12), (16, 33)])
@pytest.mark.parametrize("sparsity", [0.0, 0.3, 0.5, 0.9])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_wanda_mask_matches_reference_and_prunes_exactly_k_per_row(seed, shape, sparsity, dtype):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=shape).astype(dtype)
    a = rng.uniform(0.1, 3.0, shape[1]).astype(dtype)
    keep = pt.wanda_mask(W, a, sparsity)
    np.testing.assert_array_equal(keep, pt.wanda_mask_ref(W, a, sparsity))
    k = math.floor(sparsity * shape[1])
    assert (keep.sum(1) == shape[1] - k).all()
    # every kept entry scores at least every pruned entry of its row (Wanda: |W_ij| * ||x_j||)
    s = np.abs(W.astype(np.float64)) * a.astype(np.float64)
    for i in range(shape[0]):
        if 0 < k < shape[1]:
            assert s[i, keep[i]].min() >= s[i, ~keep[i]].max()


def test_wanda_differs_from_magnitude_when_inputs_differ_and_breaks_ties_by_index():
    W = np.array([[1.0, 2.0, 3.0, 4.0]])
    a = np.array([10.0, 1.0, 1.0, 0.1])         # scores 10, 2, 3, 0.4
    np.testing.assert_array_equal(pt.wanda_mask(W, a, 0.5), [[True, False, True, False]])
    np.testing.assert_array_equal(pt.wanda_mask(W, np.ones(4), 0.5), [[False, False, True, True]])
    np.testing.assert_array_equal(pt.wanda_mask(np.ones((1, 4)), np.ones(4), 0.5), [[False, False, True, True]])


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("nm", [(2, 4), (1, 4), (4, 8), (0, 2)])
def test_nm_mask_matches_reference_and_keeps_n_per_group(seed, nm):
    n_keep, group = nm
    rng = np.random.default_rng(seed)
    W, a = rng.normal(size=(7, 16)), rng.uniform(0.1, 2.0, 16)
    keep = pt.nm_mask(W, a, n_keep, group)
    np.testing.assert_array_equal(keep, pt.nm_mask_ref(W, a, n_keep, group))
    assert (keep.reshape(7, -1, group).sum(2) == n_keep).all()


def test_masks_refuse_bad_input():
    W, a = np.ones((3, 8)), np.ones(8)
    with pytest.raises(ValueError, match="act_norm"):
        pt.wanda_mask(W, np.ones(7), 0.5)
    with pytest.raises(ValueError, match="act_norm"):
        pt.wanda_mask(W, -a, 0.5)
    with pytest.raises(ValueError, match="sparsity"):
        pt.wanda_mask(W, a, 1.0)
    with pytest.raises(ValueError, match="group"):
        pt.nm_mask(np.ones((3, 6)), np.ones(6), 2, 4)
    with pytest.raises(ValueError, match="axis"):
        pt.line_mask(W, a, 0.5, 2)


def test_line_and_group_masks_are_structured():
    rng = np.random.default_rng(0)
    W, a = rng.normal(size=(10, 12)), rng.uniform(0.5, 1.5, 12)
    assert pt.zero_lines(W * pt.line_mask(W, a, 0.5, axis=0)) == (5, 0)
    assert pt.zero_lines(W * pt.line_mask(W, a, 0.5, axis=1)) == (0, 6)
    g = pt.group_mask(W, a, 0.5, 4)
    assert (g.reshape(10, 3, 4).all(2) | (~g).reshape(10, 3, 4).all(2)).all()   # whole blocks kept or pruned
    assert (g.sum(1) == 8).all()                  # floor(0.5 * 3) = 1 of 3 blocks pruned per row: 8 kept


# ---------------------------------------------------------------- counts

def test_zero_lines_and_structured_share_by_hand():
    A = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 2.0, 1e-15]])
    assert pt.zero_lines(A) == (1, 2)            # 1e-15 <= 1e-9 * 2 counts as zero
    assert pt.structured_share(A) == pytest.approx(3 / 6)
    assert pt.zero_lines(np.zeros((2, 3))) == (2, 3)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("tau", [0.0, 0.01, 0.2])
def test_removable_share_matches_reference_and_eckart_young(seed, tau):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(9, 6)) * rng.uniform(0.01, 2.0, size=(1, 6))
    assert pt.removable_share(A, tau) == pt.removable_share_ref(A, tau)
    if tau == 0:                                   # rounding-level rows are not exact zeros
        return
    # in the left singular basis the row norms are the singular values: removable rows = the Eckart-Young tail
    U, sv, _ = np.linalg.svd(A, full_matrices=True)
    B = U.T @ A
    tail = np.cumsum(np.sort(np.r_[sv, np.zeros(9 - 6)] ** 2))
    eckart_young = int((tail <= tau * (sv ** 2).sum() * (1 + 1e-9)).sum())
    assert pt._removable((B * B).sum(1), tau * float((B * B).sum()) * (1 + 1e-9)) == eckart_young


def test_zero_groups_and_bound_by_hand():
    Z = np.array([[1, 1, 1, 1, 0, 1, 1, 1], [1, 0, 1, 0, 1, 0, 1, 0]], dtype=bool)
    assert pt.zero_groups(Z, 4) == 1
    assert pt.zero_group_bound(Z, 4) == 1 + 1
    assert pt.zero_groups(Z[:, [0, 2, 4, 6, 1, 3, 5, 7]], 4) == 1 + 1      # the bound is attained here
    with pytest.raises(TypeError, match="Z"):
        pt.zero_groups(Z.astype(float), 4)


@pytest.mark.parametrize("seed", SEEDS)
def test_no_column_order_beats_the_group_bound_brute_force(seed):
    rng = np.random.default_rng(seed)
    Z = rng.random((3, 8)) < 0.6
    best = max(pt.zero_groups(Z[:, list(p)], 4) for p in itertools.permutations(range(8)))
    assert best <= pt.zero_group_bound(Z, 4)
    got = pt.zero_groups(Z[:, pt.hungarian_group_perm(Z, 4)], 4)
    assert got <= best


@pytest.mark.parametrize("seed", SEEDS)
def test_mask_row_corr_matches_reference_and_numpy(seed):
    rng = np.random.default_rng(seed)
    M = (rng.random((10, 30)) < 0.5).astype(float)
    M[3] = 1.0                                     # a constant row is left out
    got = pt.mask_row_corr(M)
    assert got == pytest.approx(pt.mask_row_corr_ref(M), abs=1e-12)
    C = np.corrcoef(np.delete(M, 3, axis=0))
    assert got == pytest.approx(np.abs(C[~np.eye(9, dtype=bool)]).mean(), abs=1e-12)
    with pytest.raises(ValueError, match="mask"):
        pt.mask_row_corr(M * 2)


def test_mask_row_corr_of_identical_rows_is_one():
    row = (np.arange(20) % 3 == 0).astype(float)
    assert pt.mask_row_corr(np.stack([row] * 5)) == pytest.approx(1.0)


def test_effective_rank_closed_forms():
    assert pt.effective_rank(np.eye(7)) == pytest.approx(7.0)
    assert pt.effective_rank(np.outer(np.arange(1.0, 5), np.ones(3))) == pytest.approx(1.0)


# ---------------------------------------------------------------- transforms and the two bounds

def test_hadamard_rotations_are_orthogonal_and_match_scipy():
    np.testing.assert_allclose(pt.orthonormal_hadamard(8) * math.sqrt(8), hadamard(8))
    for n in (1, 5, 12, 16, 37):
        H = pt.block_hadamard(n)
        np.testing.assert_allclose(H @ H.T, np.eye(n), atol=1e-12)


def test_random_orthogonal_is_orthogonal_and_haar_like():
    rng = np.random.default_rng(0)
    Q = pt.random_orthogonal(6, rng)
    np.testing.assert_allclose(Q @ Q.T, np.eye(6), atol=1e-12)
    # Haar: E[Q_11^2] = 1/n, as for scipy.stats.ortho_group
    ours = np.mean([pt.random_orthogonal(6, rng)[0, 0] ** 2 for _ in range(3000)])
    theirs = np.mean([ortho_group.rvs(6, random_state=k)[0, 0] ** 2 for k in range(3000)])
    assert ours == pytest.approx(1 / 6, abs=0.02) and theirs == pytest.approx(1 / 6, abs=0.02)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shape", [(12, 8), (8, 12), (8, 8)])
def test_every_transform_respects_the_permutation_and_rank_bounds(seed, shape):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=shape)
    P = W * pt.wanda_mask(W, rng.uniform(0.5, 2, shape[1]), 0.5)
    fixed = pt.fixed_transforms(*shape, rng, pt.random_orthogonal(shape[1], rng))
    rank = np.linalg.matrix_rank(P)
    assert rank == min(shape)                       # a random 50% mask keeps full rank
    z0 = pt.zero_lines(P)
    for name, (B, side) in pt.apply_transforms(P, fixed).items():
        zr, zc = pt.zero_lines(B)
        assert np.linalg.matrix_rank(B) == rank, name
        if side == "perm":
            assert (zr, zc) == z0, name
            assert pt.zero_groups(B == 0, 4) <= pt.zero_group_bound(B == 0, 4)
        if side == "left":                          # L A: a column is zero iff it was
            assert zc == z0[1] and zr <= shape[0] - rank, name
        if side == "right":
            assert zr == z0[0] and zc <= shape[1] - rank, name
        if side == "both":
            assert zr <= shape[0] - rank and zc <= shape[1] - rank, name
        if name.startswith(("SVD", "QR")):          # decompositions attain the bound on their side
            assert zr + zc == pt.rank_forced(shape, side, rank) + (z0[1] if side == "left" else z0[0]), name


def test_a_singular_basis_uncovers_lines_hidden_by_a_rotation():
    rng = np.random.default_rng(4)
    W = rng.normal(size=(10, 16))
    hidden = pt.random_orthogonal(10, rng) @ (W * pt.line_mask(W, np.ones(16), 0.5, axis=0))
    assert pt.zero_lines(hidden) == (0, 0)
    out = pt.apply_transforms(hidden, pt.fixed_transforms(10, 16, rng))
    assert pt.zero_lines(out["SVD basis, left"][0]) == (5, 0)
    assert pt.zero_lines(out["rotation, left"][0]) == (0, 0)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("group", [2, 4, 8])
def test_hungarian_grouping_recovers_planted_blocks_hidden_by_a_permutation(seed, group):
    rng = np.random.default_rng(seed)
    n, m = 40, 64
    Z = np.repeat(rng.random((n, m // group)) < 0.5, group, axis=1)
    hidden = Z[:, rng.permutation(m)]
    perm = pt.hungarian_group_perm(hidden, group)
    assert sorted(perm) == list(range(m))
    assert pt.zero_groups(hidden, group) < pt.zero_groups(Z, group)
    assert pt.zero_groups(hidden[:, perm], group) == pt.zero_groups(Z, group) == pt.zero_group_bound(Z, group)


def test_hungarian_grouping_refuses_bad_group():
    with pytest.raises(ValueError, match="group"):
        pt.hungarian_group_perm(np.zeros((2, 6), dtype=bool), 3)
    with pytest.raises(ValueError, match="group"):
        pt.hungarian_group_perm(np.zeros((2, 6), dtype=bool), 4)

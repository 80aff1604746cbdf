"""Signed permutations, correlation matching and the sign ceiling against references, brute force and NumPy."""
import itertools

import numpy as np
import pytest

from paperkit.network_structure import residual_gauge as rg


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_signed_perm_apply_matches_dense_matrix_on_every_axis(seed, dtype):
    rng = np.random.default_rng(seed)
    perm, signs = rg.random_signed_perm(rng, 6, 0.5)
    X = rng.normal(size=(3, 6, 4)).astype(dtype)
    for axis in (1, -2):
        Xa = np.moveaxis(X, 1, axis)
        np.testing.assert_array_equal(rg.signed_perm_apply(Xa, perm, signs, axis=axis),
                                      rg.signed_perm_apply_ref(Xa, perm, signs, axis=axis))
    T = rg.signed_perm_matrix(perm, signs)
    np.testing.assert_allclose(rg.signed_perm_apply(X[0].T, perm, signs), X[0].T @ T.T, rtol=0, atol=0)
    assert rg.signed_perm_apply(X, perm, signs, axis=1).dtype == dtype


def test_inverse_and_orthogonality():
    rng = np.random.default_rng(3)
    perm, signs = rg.random_signed_perm(rng, 9, 0.3)
    T = rg.signed_perm_matrix(perm, signs)
    np.testing.assert_array_equal(T @ T.T, np.eye(9))
    ip, isg = rg.signed_perm_invert(perm, signs)
    np.testing.assert_array_equal(rg.signed_perm_matrix(ip, isg), T.T)
    x = rng.normal(size=(5, 9))
    np.testing.assert_array_equal(rg.signed_perm_apply(rg.signed_perm_apply(x, perm, signs), ip, isg), x)


def test_random_signed_perm_has_the_exact_share_of_plus_signs():
    rng = np.random.default_rng(0)
    for d, p in [(16, 0.5), (10, 0.2), (7, 1.0), (7, 0.0)]:
        perm, signs = rg.random_signed_perm(rng, d, p)
        assert sorted(perm) == list(range(d)) and (signs > 0).sum() == round(p * d)


@pytest.mark.parametrize("seed", [0, 1])
def test_corr_matrix_agrees_with_numpy_corrcoef_and_reference(seed):
    rng = np.random.default_rng(seed)
    X, Y = rng.normal(size=(50, 4)), rng.normal(size=(50, 3)) * 1e3 + 7
    want = np.corrcoef(X.T, Y.T)[:4, 4:]
    np.testing.assert_allclose(rg.corr_matrix(X, Y), want, atol=1e-12)
    np.testing.assert_allclose(rg.corr_matrix_ref(X, Y), want, atol=1e-12)


def test_corr_matrix_constant_column_is_zero_and_huge_values_are_finite():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 3)); X[:, 1] = 5.0
    C = rg.corr_matrix(X, X)
    assert np.all(C[1] == 0) and np.all(C[:, 1] == 0)
    np.testing.assert_allclose(rg.corr_matrix(X * 1e300, X), C, atol=1e-12)


def test_corr_matrix_refuses_bad_input():
    with pytest.raises(ValueError, match="rows"):
        rg.corr_matrix(np.ones((3, 2)), np.ones((4, 2)))
    with pytest.raises(TypeError, match="X and Y"):
        rg.corr_matrix(np.ones((3, 2)), np.ones((3, 2), dtype=np.float32))


def _brute_force_signed(C):
    """Best (perm, signs) over all 2^d d! signed permutations of sum_i s_i C[i, perm[i]]."""
    d = C.shape[0]
    best, arg = -np.inf, None
    for p in itertools.permutations(range(d)):
        for s in itertools.product((-1.0, 1.0), repeat=d):
            v = sum(s[i] * C[i, p[i]] for i in range(d))
            if v > best:
                best, arg = v, (np.array(p), np.array(s))
    return arg, best


@pytest.mark.parametrize("seed", range(4))
def test_marginalized_matching_is_the_best_signed_permutation(seed):
    C = np.random.default_rng(seed).uniform(-1, 1, size=(4, 4))
    (p, s), best = _brute_force_signed(C)
    perm, signs = rg.hungarian_match(C, True)
    np.testing.assert_array_equal(perm, p)
    np.testing.assert_array_equal(signs, s)
    assert (signs * C[np.arange(4), perm]).sum() == pytest.approx(best)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("marg", [True, False])
def test_hungarian_match_equals_brute_force_reference(seed, marg):
    C = np.random.default_rng(seed).normal(size=(7, 7))
    for a, b in zip(rg.hungarian_match(C, marg), rg.hungarian_match_ref(C, marg)):
        np.testing.assert_array_equal(a, b)


def test_raw_matching_ceiling_on_an_exact_signed_permutation():
    # population version of the theorem: C = T exactly; raw matching keeps the + rows and misplaces every - row
    rng = np.random.default_rng(0)
    for p in (0.25, 0.5, 0.75):
        perm, signs = rg.random_signed_perm(rng, 8, p)
        C = rg.signed_perm_matrix(perm, signs)
        raw_acc = rg.match_accuracy(*rg.hungarian_match_ref(C + 1e-9 * rng.normal(size=C.shape), False),
                                    perm, signs)[0]
        assert raw_acc == pytest.approx(p)
        assert rg.match_accuracy(*rg.hungarian_match(C, True), perm, signs) == (1.0, 1.0)


def test_ceiling_on_sampled_decorrelated_sources():
    rng = np.random.default_rng(1)
    perm, signs = rg.random_signed_perm(rng, 32, 0.5)
    A, B = rg.ceiling_data(rng, 2000, perm, signs, 0.3)
    C = rg.corr_matrix(B, A)
    assert rg.match_accuracy(*rg.hungarian_match(C, False), perm, signs)[0] == pytest.approx(0.5)
    assert rg.match_accuracy(*rg.hungarian_match(C, True), perm, signs) == (1.0, 1.0)


def test_norm_identities_and_their_boundary():
    rng = np.random.default_rng(2)
    d = 8
    x, g, b = rng.normal(size=(10, d)), rng.uniform(0.5, 1.5, d), rng.normal(size=d)
    perm, signs = rg.random_signed_perm(rng, d, 0.5)
    T = rg.signed_perm_matrix(perm, signs)
    np.testing.assert_allclose(rg.rmsnorm(x @ T.T, g[perm]), rg.rmsnorm(x, g) @ T.T, atol=1e-13)
    assert np.abs(rg.layernorm(x @ T.T, g[perm], T @ b) - rg.layernorm(x, g, b) @ T.T).max() > 0.1
    P = rg.signed_perm_matrix(perm, -np.ones(d))
    np.testing.assert_allclose(rg.layernorm(x @ P.T, g[perm], P @ b), rg.layernorm(x, g, b) @ P.T, atol=1e-13)
    R = np.linalg.qr(rng.normal(size=(d, d)))[0]
    assert np.abs(rg.rmsnorm(x @ R.T, g) - rg.rmsnorm(x, g) @ R.T).max() > 0.01


def test_refusals_name_the_argument():
    with pytest.raises(ValueError, match="perm"):
        rg.signed_perm_apply(np.ones((2, 3)), np.array([0, 0, 1]), np.ones(3))
    with pytest.raises(ValueError, match="signs"):
        rg.signed_perm_apply(np.ones((2, 3)), np.array([0, 2, 1]), np.array([1.0, 0.5, 1.0]))
    with pytest.raises(ValueError, match="C"):
        rg.hungarian_match(np.ones((2, 3)))
    with pytest.raises(ValueError, match="C"):
        rg.hungarian_match_ref(np.ones((10, 10)))

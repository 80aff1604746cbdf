import numpy as np
import pytest

from paperkit.sequence_models.circuit_rank import (balanced_vtree, mixture_head, pc_joint_table, pc_joint_table_ref,
                                   separation_rank, separation_rank_ref, softmax_head, vtree_splits)


@pytest.mark.parametrize("n", [2, 3, 5, 6])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_separation_rank_matches_ref(n, seed):
    rng = np.random.default_rng(seed)
    P = rng.random(2 ** n) * (rng.random(2 ** n) < 0.5)
    for split in [(0,), tuple(range(0, n, 2)), (n - 1, 0)]:
        assert separation_rank(P, split) == separation_rank_ref(P, split)


def test_separation_rank_closed_forms():
    a, b = np.array([0.3, 0.7]), np.array([0.1, 0.9])
    assert separation_rank(np.multiply.outer(a, b), (0,)) == 1  # independent: rank 1
    assert separation_rank(np.eye(4) / 4, (0, 1)) == 4  # copy x_AB = x_CD: full rank
    # P = [x0 = x2][x1 = x3] / 4 factorises as f(x0, x2) g(x1, x3): rank 1 across (x0, x2)|(x1, x3)
    assert separation_rank(np.eye(4) / 4, (0, 2)) == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pc_table_matches_ref_and_normalises(dtype, seed):
    tree = balanced_vtree([3, 0, 4, 1, 2])
    P = pc_joint_table(tree, 5, 3, np.random.default_rng(seed)).astype(dtype)
    R = pc_joint_table_ref(tree, 5, 3, np.random.default_rng(seed)).astype(dtype)
    tol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(P, R, atol=tol)
    assert abs(float(P.sum()) - 1) < tol * 10


@pytest.mark.parametrize("k", [1, 2, 3])
def test_aligned_rank_bounded_by_width(k):
    tree = balanced_vtree(range(8))
    P = pc_joint_table(tree, 8, k, np.random.default_rng(k))
    assert max(separation_rank(P, s) for s in vtree_splits(tree)) <= k
    # misaligned split exceeds the width (k = 1 is fully factorised, rank 1 everywhere)
    assert separation_rank(P, range(0, 8, 2)) == (1 if k == 1 else 2 ** 4)


def test_heads_rank():
    rng = np.random.default_rng(0)
    Pi, Phi = rng.dirichlet(np.ones(4), 40), rng.dirichlet(np.ones(30), 4)
    assert np.linalg.matrix_rank(mixture_head(Pi, Phi)) == 4
    P = softmax_head(rng.normal(size=(40, 2)), rng.normal(size=(2, 30)))
    np.testing.assert_allclose(P.sum(1), 1)
    assert np.linalg.matrix_rank(P) == 30


def test_bad_input():
    with pytest.raises(ValueError, match="split"):
        separation_rank(np.ones(8), (0, 5))
    with pytest.raises(ValueError, match="P"):
        separation_rank(np.ones(6), (0,))
    with pytest.raises(ValueError, match="k"):
        pc_joint_table(balanced_vtree(range(3)), 3, 0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="tree"):
        pc_joint_table(balanced_vtree(range(3)), 4, 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="Pi"):
        mixture_head(np.ones((3, 2)), np.ones((3, 4)))
    with pytest.raises(ValueError, match="H"):
        softmax_head(np.ones((3, 2)), np.ones((3, 4)))


def test_circle_logit_head_sharpens_with_beta():
    from paperkit.sequence_models.circuit_rank import circle_logit_head
    sigma = np.random.default_rng(0).permutation(16)
    p = [circle_logit_head(sigma, b)[np.arange(16), sigma].mean() for b in (1.0, 10.0, 100.0, 1000.0)]
    assert all(a < b for a, b in zip(p, p[1:])) and p[-1] > 0.99
    P = circle_logit_head(sigma, 5.0)
    np.testing.assert_array_equal(P.argmax(1), sigma)
    with pytest.raises(ValueError, match="sigma"):
        circle_logit_head([0, 0, 1], 1.0)
    with pytest.raises(ValueError, match="beta"):
        circle_logit_head(sigma, -1.0)


def test_fit_mixture_em_reaches_the_cap():
    from paperkit.sequence_models.circuit_rank import fit_mixture_em
    rng = np.random.default_rng(0)
    V, K = 12, 3
    sigma = rng.permutation(V)
    Pi, Phi = fit_mixture_em(sigma, V, K, rng)
    np.testing.assert_allclose(Pi.sum(1), 1)
    np.testing.assert_allclose(Phi.sum(1), 1)
    p = mixture_head(Pi, Phi)[np.arange(V), sigma].mean()
    assert p <= K / V + 1e-9 and p > 0.8 * K / V
    with pytest.raises(ValueError, match="targets"):
        fit_mixture_em([0, 12], V, K, rng)
    with pytest.raises(ValueError, match="K"):
        fit_mixture_em(sigma, V, 0, rng)

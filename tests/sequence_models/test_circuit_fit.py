import itertools

import numpy as np
import pytest
import torch

from paperkit.sequence_models import circuit_fit as cf
from paperkit.sequence_models.circuit_rank import _params, balanced_vtree, pc_joint_table


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("order,k", [([0, 1, 2, 3], 2), ([3, 0, 4, 1, 2], 3)])
def test_torch_table_matches_numpy_circuit(seed, order, k):
    tree, n = balanced_vtree(order), len(order)
    prm = {p: torch.as_tensor(v) for p, v in _params(tree, k, np.random.default_rng(seed)).items()}
    Q = cf.pc_table_torch(tree, n, prm).numpy()
    np.testing.assert_allclose(Q, pc_joint_table(tree, n, k, np.random.default_rng(seed)), atol=1e-14)


def test_kl_and_mutual_information_closed_forms():
    a = 0.9
    P = cf.pair_target(2, [(0, 1)], a)
    np.testing.assert_allclose(P, [[a / 2, (1 - a) / 2], [(1 - a) / 2, a / 2]])
    h = -(a * np.log(a) + (1 - a) * np.log(1 - a))
    assert cf.mutual_information(P, (0,)) == pytest.approx(np.log(2) - h)
    U = np.full((2, 2), 0.25)
    assert cf.kl(P, U) == pytest.approx(np.log(2) - h)  # KL to the product of the marginals = MI
    assert cf.kl(P, P) == 0.0
    # scipy's entropy is KL for two distributions
    from scipy.stats import entropy
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(8)), rng.dirichlet(np.ones(8))
    assert cf.kl(p, q) == pytest.approx(entropy(p, q))


def test_pair_target_is_product_of_pairs():
    P = cf.pair_target(4, [(0, 2), (1, 3)], 0.8)
    Q = np.einsum("ac,bd->abcd", cf.pair_target(2, [(0, 1)], 0.8), cf.pair_target(2, [(0, 1)], 0.8))
    np.testing.assert_allclose(P, Q)
    assert cf.mutual_information(P, (0, 1)) == pytest.approx(2 * cf.mutual_information(Q.sum((1, 3)), (0,)))


def test_fit_pc_aligned_exact_and_root_information_capped():
    rng_t = torch.Generator().manual_seed(0)
    al = cf.pair_target(4, [(0, 1), (2, 3)], 0.95)
    mis = cf.pair_target(4, [(0, 2), (1, 3)], 0.95)
    tree = balanced_vtree(range(4))
    _, d = cf.fit_pc(al, tree, 2, rng_t, steps=200)
    assert d < 1e-3
    Q, d = cf.fit_pc(mis, tree, 2, rng_t, steps=200)
    assert cf.mutual_information(Q, (0, 1)) <= np.log(2) + 1e-9  # a mixture of 2 products across the root
    assert d > 0.3


def test_transformer_table_normalises_and_fits():
    g = torch.Generator().manual_seed(0)
    P = cf.pair_target(4, [(0, 2), (1, 3)], 0.9)
    Q, d = cf.fit_transformer(P, g, steps=60, lr=1e-2, d_model=16)
    assert abs(Q.sum() - 1) < 1e-6 and d < 0.1


def test_states_order_matches_table():
    X = cf._states(3).numpy()
    assert [tuple(x) for x in X] == list(itertools.product((0, 1), repeat=3))


def test_bad_input():
    with pytest.raises(ValueError, match="P"):
        cf.kl(np.ones(3) / 3, np.ones(3) / 3)
    with pytest.raises(ValueError, match="Q"):
        cf.kl(np.ones(4) / 4, np.ones(4))
    with pytest.raises(ValueError, match="agree"):
        cf.pair_target(2, [(0, 1)], 1.0)
    with pytest.raises(ValueError, match="pairs"):
        cf.pair_target(3, [(0, 1), (1, 2)], 0.9)
    with pytest.raises(ValueError, match="split"):
        cf.mutual_information(np.ones(4) / 4, (2,))
    with pytest.raises(ValueError, match="steps"):
        cf.fit_pc(np.ones(4) / 4, balanced_vtree(range(2)), 2, torch.Generator(), steps=0)
    with pytest.raises(ValueError, match="tree"):
        cf.fit_pc(np.ones(8) / 8, balanced_vtree(range(2)), 2, torch.Generator())


def test_registered_torch_table_matches_per_state_reference():
    from paperkit.sequence_models.circuit_rank import pc_joint_table_ref
    tree = balanced_vtree([2, 0, 3, 1])
    np.testing.assert_allclose(cf.pc_joint_table_torch(tree, 4, 3, np.random.default_rng(5)),
                               pc_joint_table_ref(tree, 4, 3, np.random.default_rng(5)), atol=1e-14)


def test_batched_table_is_one_table_per_restart():
    tree = balanced_vtree([1, 3, 0, 2, 4])
    prms = [{p: torch.as_tensor(v) for p, v in _params(tree, 2, np.random.default_rng(s)).items()} for s in range(3)]
    batched = {p: torch.stack([prm[p] for prm in prms]) for p in prms[0]}
    Q = cf.pc_table_torch(tree, 5, batched)
    assert Q.shape == (3,) + (2,) * 5
    for r, prm in enumerate(prms):
        torch.testing.assert_close(Q[r], cf.pc_table_torch(tree, 5, prm), rtol=0, atol=1e-15)


def test_restarts_never_worse_than_the_first():
    P = cf.pair_target(4, [(0, 2), (1, 3)], 0.95)
    tree = balanced_vtree(range(4))
    _, d1 = cf.fit_pc(P, tree, 2, torch.Generator().manual_seed(3), steps=100, restarts=1)
    _, d8 = cf.fit_pc(P, tree, 2, torch.Generator().manual_seed(3), steps=100, restarts=8)
    assert d8 <= d1 + 1e-9
    with pytest.raises(ValueError, match="restarts"):
        cf.fit_pc(P, tree, 2, torch.Generator(), restarts=0)

"""Deployment-portfolio kernels: coverage matrix and lazy greedy against their references, the MILP optimum against
itertools enumeration, and the tight instance on which greedy attains 1 - (1 - 1/K)^K of OPT."""
import itertools

import numpy as np
import pytest

from paperkit.games_markets import portfolio_archive as pa
from paperkit.games_markets import portfolio_coverage as pc
from paperkit.games_markets import portfolio_study as ps


def brute(C, w, K):
    return max(pc.coverage_value(C, w, S) for S in itertools.combinations(range(C.shape[1]), K))


@pytest.mark.parametrize("seed", range(4))
def test_coverage_matrix_matches_reference_on_archive(seed):
    rng = np.random.default_rng(seed)
    arch = pa.synthetic_archive(rng, M=40, D=3)
    prof = pa.profiles(rng, arch, 60, 1.5)
    C = pc.coverage_matrix(arch["values"], prof["lo"], prof["hi"])
    assert C.dtype == np.bool_ and C.shape == (60, 40)
    np.testing.assert_array_equal(C, pc.coverage_matrix_ref(arch["values"], prof["lo"], prof["hi"]))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("K", [1, 2, 4])
def test_greedy_matches_reference_and_bound(seed, K):
    rng = np.random.default_rng(seed)
    C = rng.random((50, 9)) < 0.25
    w = rng.random(50) if seed % 2 else np.ones(50)  # unit weights: many ties, lowest index must win
    S = pc.greedy_max_coverage(C, w, K)
    np.testing.assert_array_equal(S, pc.greedy_max_coverage_ref(C, w, K))
    opt = brute(C, w, K)
    assert pc.coverage_value(C, w, S) >= (1 - (1 - 1 / K) ** K) * opt - 1e-12


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("K", [1, 2, 3])
def test_milp_equals_enumeration(seed, K):
    rng = np.random.default_rng(100 + seed)
    C = rng.random((30, 8)) < 0.3
    w = rng.random(30)
    S, opt = pc.exact_max_coverage(C, w, K)
    assert len(set(S.tolist())) == K
    assert opt == pytest.approx(brute(C, w, K), abs=1e-12)
    assert pc.coverage_value(C, w, S) == pytest.approx(opt, abs=1e-12)


def test_compress_rows_preserves_coverage():
    rng = np.random.default_rng(7)
    C = rng.random((80, 6)) < 0.2
    w = rng.random(80)
    Cu, wu = pc.compress_rows(C, w)
    assert Cu.shape[0] <= 80 and Cu.any(1).all()
    for S in itertools.combinations(range(6), 2):
        assert pc.coverage_value(Cu, wu, S) == pytest.approx(pc.coverage_value(C, w, S), abs=1e-12)


@pytest.mark.parametrize("K", [2, 3, 5])
def test_tight_instance_ratio(K):
    C, w = ps.tight_instance(K)
    S = pc.greedy_max_coverage(C, w, K)
    np.testing.assert_array_equal(np.sort(S), np.arange(K))
    _, opt = pc.exact_max_coverage(C, w, K)
    ratio = pc.coverage_value(C, w, S) / opt
    assert ratio == pytest.approx(1 - (1 - 1 / K) ** K, abs=1e-5)
    if K <= 3:
        assert opt == pytest.approx(brute(C, w, K), abs=1e-12)


def test_bad_input_names_parameter():
    C = np.zeros((3, 2), dtype=bool)
    with pytest.raises(ValueError, match="K"):
        pc.greedy_max_coverage(C, np.ones(3), 3)
    with pytest.raises(TypeError, match="C"):
        pc.greedy_max_coverage(C.astype(int), np.ones(3), 1)
    with pytest.raises(ValueError, match="w"):
        pc.greedy_max_coverage(C, -np.ones(3), 1)


@pytest.mark.parametrize("seed", range(3))
def test_marginal_rows_and_to_bundle(seed):
    rng = np.random.default_rng(seed)
    arch = pa.synthetic_archive(rng, M=30, D=4)
    prof = pa.profiles(rng, arch, 50, 1.5)
    R = ps.marginal_rows(arch, prof)
    assert R.shape == (200, 30)
    C = pc.coverage_matrix(arch["values"], prof["lo"], prof["hi"])
    np.testing.assert_array_equal(R.reshape(4, 50, 30).all(0), C)
    S = ps.marginal_greedy(arch, prof, np.full(50, 1 / 50), 3)
    assert len(set(S.tolist())) == 3

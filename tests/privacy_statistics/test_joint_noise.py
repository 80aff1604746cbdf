"""Dealer-free shared binomial noise (paperkit.privacy_statistics.joint_noise).

Completeness, the released value against the plain product of the provers' sign bits, every listed tampering
rejected by the full verifier (and accepted by the proof-free control), the rogue key, fair slots under adaptive
cheaters when one prover is honest (scipy binomial test), and the variant without re-randomisation that they beat.
"""
import numpy as np
import pytest
import scipy.stats

from paperkit.privacy_statistics import commitments as cm
from paperkit.privacy_statistics import joint_noise as jn


@pytest.fixture(scope="module")
def G():
    return cm.modp2048_group()


@pytest.fixture(scope="module")
def run(G):
    return jn.run_joint(G, np.array([1, 0, 1]), 3, 4, b"test", np.random.default_rng(3))


def test_honest_run_is_accepted_and_releases_count_plus_noise(G, run):
    v = jn.verify_joint(G, run.transcript, 3, 3, 4)
    assert v.ok and v.count == run.count + run.noise
    m = jn.slot_signs(G, run)
    # the plain reading: slot l ends at prod_j (-1)^{s_lj}, the noise is -sum_l m_l / 2
    assert np.array_equal(m, (-1) ** run.signs.sum(1)) and run.noise == -m.sum() // 2


@pytest.mark.parametrize("name", list(jn.JOINT_TAMPERINGS))
def test_every_tampering_is_rejected_and_the_control_misses_it(G, run, name):
    tr = jn.JOINT_TAMPERINGS[name][1](G, run, np.random.default_rng(5))
    assert not jn.verify_joint(G, tr, 3, 3, 4).ok
    ctrl = jn.verify_joint(G, tr, 3, 3, 4, check_proofs=False)
    assert ctrl.ok and ctrl.count != run.count + run.noise or name == "slot replaced"


def test_rogue_key_is_rejected_and_would_let_one_prover_decrypt(G):
    r = jn.run_joint(G, np.array([1, 1]), 2, 2, b"rogue", np.random.default_rng(7), rogue_last=True)
    assert jn.verify_joint(G, r.transcript, 2, 2, 2).reason == "key proof"
    assert jn.verify_joint(G, r.transcript, 2, 2, 2, check_proofs=False).ok
    assert np.array_equal(jn.slot_signs(G, r), (-1) ** r.signs.sum(1))  # the rogue's key alone opens every slot


def test_one_honest_prover_gives_fair_slots_and_the_broken_variant_does_not(G):
    ad = jn.make_adaptive(G)
    rng = np.random.default_rng(11)
    real = jn.run_joint(G, np.array([0]), 3, 24, b"fair", rng, strategies=[jn.honest, ad, ad])
    broken = jn.run_joint(G, np.array([0]), 3, 24, b"broken", rng, strategies=[jn.honest, ad, ad],
                          rerandomize=False)
    assert jn.verify_joint(G, real.transcript, 1, 3, 24).ok
    hits = int((jn.slot_signs(G, real) == 1).sum())
    assert scipy.stats.binomtest(hits, 24).pvalue > 1e-3
    assert (jn.slot_signs(G, broken) == 1).all()


def test_a_coalition_with_all_but_the_honest_key_share_cannot_fix_the_slots_but_one_with_every_share_can(G):
    rng = np.random.default_rng(13)
    part = jn.run_joint(G, np.array([0]), 3, 24, b"coalition", rng,
                        strategies=lambda xs: [jn.honest] + [jn.make_coalition(G, xs[1:])] * 2)
    full = jn.run_joint(G, np.array([0]), 3, 24, b"whole key", rng,
                        strategies=lambda xs: [jn.honest] + [jn.make_coalition(G, xs)] * 2)
    assert jn.verify_joint(G, part.transcript, 1, 3, 24).ok and jn.verify_joint(G, full.transcript, 1, 3, 24).ok
    assert scipy.stats.binomtest(int((jn.slot_signs(G, part) == 1).sum()), 24).pvalue > 1e-3
    assert (jn.slot_signs(G, full) == 1).all()  # the honest prover's hidden share is what keeps the slots fair


def test_bad_input_names_the_parameter(G):
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="x must"):
        jn.run_joint(G, [2], 2, 2, b"s", rng)
    with pytest.raises(ValueError, match="n_bits"):
        jn.run_joint(G, [1], 2, 3, b"s", rng)
    with pytest.raises(ValueError, match="k must"):
        jn.run_joint(G, [1], 0, 2, b"s", rng)
    with pytest.raises(ValueError, match="strategies"):
        jn.run_joint(G, [1], 2, 2, b"s", rng, strategies=[jn.honest])

"""Pedersen commitments, bit proofs and the shared-noise counting verifier (paperkit.privacy_statistics.commitments).

Fast kernels (comb tables, Straus multi-exponentiation, batched proof verification) against their plain-``pow``
references; the group constants against RFC 3526's formula and sympy's primality test; completeness of every
mechanism; and a listed set of tamperings, each of which the verifier must reject.
"""
import mpmath
import numpy as np
import pytest
import sympy

from paperkit.privacy_statistics import commitments as cm
from paperkit.privacy_statistics import dp_mechanisms as dm

# the cheats only the bit proofs can catch: the proof-free control verifier must accept exactly these
PROOF_ONLY = {"client not a bit", "noise not a bit", "simulated proof", "replayed proof", "proof response altered"}


@pytest.fixture(scope="module")
def G():
    return cm.modp2048_group()


def _elements(G, rng, n):
    return [cm.signed(cm.random_scalar(G.p, rng) + 2, G.p) for _ in range(n)]


def _specs(k=3):
    return [cm.MechanismSpec("sn-vbm", k, n_bits=8), cm.MechanismSpec("indep-vbm", k, n_bits=4),
            cm.MechanismSpec("sn-vlm", k, thresholds=dm.bit_thresholds(1.0, 2, 3), precision=3)]


@pytest.fixture(scope="module")
def runs(G):
    rng, beacon = np.random.default_rng(11), np.random.default_rng(12)
    batch = cm.submit_clients(G, np.array([1, 0, 1]), 3, b"test-session", rng)
    return [cm.run_counting(G, spec, batch, rng, beacon) for spec in _specs()]


def test_group_is_rfc3526_group14_with_prime_order_subgroup(G):
    mpmath.mp.prec = 2200
    formula = 2**2048 - 2**1984 - 1 + 2**64 * (int(mpmath.floor(mpmath.mpf(2) ** 1918 * mpmath.pi)) + 124476)
    assert G.p == formula and G.p.bit_length() == 2048
    assert sympy.isprime(G.p) and sympy.isprime(G.q) and G.p == 2 * G.q + 1
    assert G.p % 8 == 7 and pow(G.g, G.q, G.p) == 1  # g = 2 is a quadratic residue: order q
    assert pow(G.h, G.q, G.p) in (1, G.p - 1)  # h is a residue up to sign: order q in the signed group
    assert G.is_element(G.g) and G.is_element(G.h) and G.h not in (1, G.g)
    assert cm.modp2048_group().h == G.h and cm.modp2048_group(b"other label").h != G.h


def test_signed_representation_is_closed_and_rejects_the_other_sign(G):
    rng = np.random.default_rng(0)
    a, b = _elements(G, rng, 2)
    assert G.is_element(G.mul(a, b)) and G.mul(a, b) == G.mul(b, a)
    assert not G.is_element(G.p - a) and G.is_element(cm.signed(G.p - a, G.p))
    for bad in (0, G.q + 1, G.p, -a, True, 3.0):
        assert not G.is_element(bad)


@pytest.mark.parametrize("seed", [0, 1])
def test_commit_matches_pow_reference_and_is_homomorphic(G, seed):
    rng = np.random.default_rng(seed)
    for m, r in [(0, 0), (1, 0), (0, 1), (-1, 5), (G.q, G.q - 1), (G.q + 7, -3), (2**2100 + 3, -(2**2050))] + [
            (cm.random_scalar(G.q, rng), cm.random_scalar(G.q, rng)) for _ in range(2)]:
        assert cm.commit(G, m, r) == cm.commit_ref(G, m, r)
    m1, r1, m2, r2 = (cm.random_scalar(G.q, rng) for _ in range(4))
    assert G.mul(cm.commit(G, m1, r1), cm.commit(G, m2, r2)) == cm.commit(G, m1 + m2, r1 + r2)
    assert cm.commit(G, 1, r1) != cm.commit(G, 0, r1)


@pytest.mark.parametrize("n, bits", [(0, 64), (1, 1), (5, 64), (20, 193), (7, 2048)])
def test_multi_exp_matches_reference(G, n, bits):
    rng = np.random.default_rng(n + bits)
    bases = _elements(G, rng, n)
    exps = [int.from_bytes(rng.bytes(bits // 8 + 1), "big") % 2**bits for _ in range(n)]
    if n >= 5:
        exps[:3] = [0, 1, G.q + 2]
    assert cm.multi_exp(G, bases, exps) == cm.multi_exp_ref(G, bases, exps)
    # and against the one-base-at-a-time group power
    acc = 1
    for b, e in zip(bases, exps):
        acc = G.mul(acc, G.pow(b, e))
    assert cm.multi_exp(G, bases, exps) == acc


def test_multi_exp_rejects_mismatched_lengths(G):
    with pytest.raises(ValueError, match="bases and exps"):
        cm.multi_exp(G, [G.g], [])
    with pytest.raises(ValueError, match="bases and exps"):
        cm.multi_exp_ref(G, [], [1])


def test_additive_sharing(G):
    rng = np.random.default_rng(3)
    for k in (1, 2, 5):
        s = cm.share(12345, k, G.q, rng)
        assert len(s) == k and sum(s) % G.q == 12345 and all(0 <= v < G.q for v in s)
    assert cm.share(-1, 3, G.q, rng)[0] != cm.share(-1, 3, G.q, rng)[0]  # fresh randomness each time
    for bad in (0, -2, True, 2.0):
        with pytest.raises(ValueError, match="k must be"):
            cm.share(1, bad, G.q, rng)


def _honest_proofs(G, rng, n):
    cs, prs, ctxs = [], [], []
    for i in range(n):
        b, r = i % 2, cm.random_scalar(G.q, rng)
        c = cm.commit(G, b, r)
        ctx = f"t|{i}".encode()
        cs.append(c), prs.append(cm.prove_bit(G, c, b, r, ctx, rng)), ctxs.append(ctx)
    return cs, prs, ctxs


def test_honest_bit_proofs_pass_both_verifiers(G):
    rng = np.random.default_rng(4)
    cs, prs, ctxs = _honest_proofs(G, rng, 6)
    assert cm.verify_bit_proofs(G, cs, prs, ctxs, rng) and cm.verify_bit_proofs_ref(G, cs, prs, ctxs, rng)
    assert cm.verify_bit_proofs(G, [], [], [], rng)
    with pytest.raises(ValueError, match="b must be 0 or 1"):
        cm.prove_bit(G, cm.commit(G, 2, 1), 2, 1, b"x", rng)
    with pytest.raises(ValueError, match="one entry each"):
        cm.verify_bit_proofs(G, cs, prs[:-1], ctxs, rng)


def _bad_proofs(G, cs, prs, ctxs, rng):
    """(name, commitments, proofs, contexts) with proof 2 of an honest batch broken in one way."""
    p2 = prs[2]
    r7 = cm.random_scalar(G.q, rng)
    c_two = cm.commit(G, 2, r7)
    cases = {
        "wrong context": (cs, prs, ctxs[:2] + [b"elsewhere"] + ctxs[3:]),
        "other commitment": (cs[:2] + [cs[3]] + cs[3:], prs, ctxs),
        "z0 + 1": (cs, prs[:2] + [cm.BitProof(p2.a0, p2.a1, p2.e0, p2.e1, (p2.z0 + 1) % G.q, p2.z1)] + prs[3:], ctxs),
        "e0, e1 swapped": (cs, prs[:2] + [cm.BitProof(p2.a0, p2.a1, p2.e1, p2.e0, p2.z0, p2.z1)] + prs[3:], ctxs),
        "a0 replaced": (cs, prs[:2] + [cm.BitProof(G.h, p2.a1, p2.e0, p2.e1, p2.z0, p2.z1)] + prs[3:], ctxs),
        "a0 negated": (cs, prs[:2] + [cm.BitProof(G.p - p2.a0, p2.a1, p2.e0, p2.e1, p2.z0, p2.z1)] + prs[3:], ctxs),
        "e0 out of range": (cs, prs[:2] + [cm.BitProof(p2.a0, p2.a1, p2.e0 + 2**128, p2.e1, p2.z0, p2.z1)] + prs[3:],
                            ctxs),
        "z1 non-canonical": (cs, prs[:2] + [cm.BitProof(p2.a0, p2.a1, p2.e0, p2.e1, p2.z0, p2.z1 + G.q)] + prs[3:],
                             ctxs),
        "simulated forgery": (cs, prs[:2] + [cm._simulated_proof(G, cs[2], ctxs[2], rng)] + prs[3:], ctxs),
        "commits to 2, forged": (cs[:2] + [c_two] + cs[3:],
                                 prs[:2] + [cm._hash_consistent_forgery(G, c_two, ctxs[2], rng)] + prs[3:], ctxs),
        "not a proof": (cs, prs[:2] + [(1, 2, 3, 4, 5, 6)] + prs[3:], ctxs),
    }
    return cases


@pytest.mark.parametrize("seed", [5, 6])
def test_broken_bit_proofs_are_rejected_by_both_verifiers(G, seed):
    rng = np.random.default_rng(seed)
    cs, prs, ctxs = _honest_proofs(G, rng, 8)
    for name, (c, p, x) in _bad_proofs(G, cs, prs, ctxs, rng).items():
        assert not cm.verify_bit_proofs(G, c, p, x, rng), name
        assert not cm.verify_bit_proofs_ref(G, c, p, x, rng), name


def test_every_mechanism_is_complete_and_releases_count_plus_noise(G, runs):
    vrng = np.random.default_rng(7)
    for run in runs:
        v = cm.verify(G, run.spec, run.transcript, run.record, vrng)
        assert v.ok and v.reason == "ok", run.spec.kind
        assert v.count == run.count + run.noise == cm.release(G, run.spec, run.transcript.outputs)
        slots, rels, offset = cm.noise_layout(run.spec)
        vals = [sum(o[0] for o in row) % G.q for row in run.openings.noise]
        assert set(vals) <= {0, 1}
        assert run.noise == sum(s.weight * (v ^ c) for s, v, c in zip(slots, vals, run.record.coins)) - offset
        for rel in rels:  # beta = [U < T] for U the public-coin-flipped bits
            u = sum((vals[l] ^ run.record.coins[l]) << t for t, l in enumerate(rel.u))
            assert vals[rel.beta] == int(u < rel.threshold)


def test_every_tampering_is_rejected_and_only_proof_cheats_fool_the_proof_free_control(G, runs):
    rng, vrng = np.random.default_rng(8), np.random.default_rng(9)
    applicable = {}
    for run in runs:
        fooled, applicable[run.spec.kind] = set(), set()
        for name, (_, fn) in cm.TAMPERINGS.items():
            out = fn(G, run, rng)
            if out is None:
                continue
            applicable[run.spec.kind].add(name)
            tr, record = out
            assert not cm.verify(G, run.spec, tr, record, vrng).ok, (run.spec.kind, name)
            if cm.verify(G, run.spec, tr, record, vrng, check_proofs=False).ok:
                fooled.add(name)
        assert fooled == PROOF_ONLY, run.spec.kind
    assert "share moved" in applicable["indep-vbm"] and "relation opened wrongly" in applicable["sn-vlm"]
    assert min(len(v) for v in applicable.values()) >= 17


def test_verifier_rejects_a_transcript_checked_against_another_spec(G, runs):
    vrng = np.random.default_rng(10)
    run = runs[0]
    other = cm.MechanismSpec("sn-vbm", 3, n_bits=10)
    assert cm.verify(G, other, run.transcript, run.record, vrng).reason == "shape"
    assert cm.verify(G, runs[1].spec, run.transcript, run.record, vrng).reason == "shape"


def test_released_count_can_be_negative(G):
    rng, beacon = np.random.default_rng(20), np.random.default_rng(21)
    batch = cm.submit_clients(G, np.zeros(2, dtype=int), 2, b"neg", rng)
    spec = cm.MechanismSpec("sn-vbm", 2, n_bits=2)
    counts = set()
    for _ in range(40):  # noise is -1 with probability 1/4 per run
        if -1 in counts:
            break
        run = cm.run_counting(G, spec, batch, rng, beacon)
        v = cm.verify(G, spec, run.transcript, run.record, rng)
        assert v.ok and v.count == run.noise
        counts.add(v.count)
    assert counts <= {-1, 0, 1} and -1 in counts


def test_bad_arguments_raise_value_errors_naming_them(G):
    with pytest.raises(ValueError, match="kind"):
        cm.MechanismSpec("vbm", 3, n_bits=4)
    with pytest.raises(ValueError, match="k must be"):
        cm.MechanismSpec("sn-vbm", 0, n_bits=4)
    with pytest.raises(ValueError, match="n_bits"):
        cm.MechanismSpec("sn-vbm", 2, n_bits=5)
    with pytest.raises(ValueError, match="thresholds"):
        cm.MechanismSpec("sn-vlm", 2, thresholds=(9,), precision=3)
    with pytest.raises(ValueError, match="precision"):
        cm.MechanismSpec("sn-vlm", 2, thresholds=(1,), precision=0)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="x must be"):
        cm.submit_clients(G, np.array([0, 2]), 2, b"s", rng)
    batch = cm.submit_clients(G, np.array([1]), 2, b"s", rng)
    with pytest.raises(ValueError, match="provers"):
        cm.run_counting(G, cm.MechanismSpec("sn-vbm", 3, n_bits=2), batch, rng, rng)


def test_vlm_layout_ties_each_biased_bit_to_its_uniform_bits_and_witness():
    spec = cm.MechanismSpec("sn-vlm", 2, thresholds=(5, 2, 1), precision=4)
    slots, rels, offset = cm.noise_layout(spec)
    assert offset == 0 and len(rels) == 6 and len(slots) == 6 * (2 * 4 + 1)
    assert sorted(abs(slots[r.beta].weight) for r in rels) == [1, 1, 2, 2, 4, 4]
    assert sum(slots[r.beta].weight for r in rels) == 0  # G1 - G2
    assert all(slots[l].flipped for r in rels for l in r.u) and not any(slots[l].flipped for r in rels for l in r.d)
    assert cm.noise_layout(cm.MechanismSpec("indep-vbm", 3, n_bits=4))[2] == 6


def test_a_dealer_committing_all_ones_is_accepted_and_the_coins_make_its_bits_fair(G):
    rng, beacon = np.random.default_rng(21), np.random.default_rng(22)
    batch = cm.submit_clients(G, np.array([1, 0]), 2, b"dealer-ones", rng)
    spec = cm.MechanismSpec("sn-vbm", 2, n_bits=16)
    run = cm.run_counting(G, spec, batch, rng, beacon, dealer_bit=1)
    committed, flipped = cm.fair_bits(G, run)
    assert committed.tolist() == [1] * 16
    assert flipped.tolist() == [1 - c for c in run.transcript.coins]  # bit XOR coin, the coins being fair
    v = cm.verify(G, spec, run.transcript, run.record, rng)
    assert v.ok and v.count == run.count + run.noise == run.count + int(flipped.sum()) - 8
    with pytest.raises(ValueError, match="dealer_bit"):
        cm.run_counting(G, spec, batch, rng, beacon, dealer_bit=2)


def test_a_dealer_that_sees_the_coins_first_fixes_every_noise_bit_and_still_verifies(G):
    rng, beacon = np.random.default_rng(23), np.random.default_rng(24)
    batch = cm.submit_clients(G, np.array([1, 0]), 2, b"coins-first", rng)
    for spec in (cm.MechanismSpec("sn-vbm", 2, n_bits=8),
                 cm.MechanismSpec("sn-vlm", 2, thresholds=(5, 2), precision=3)):
        run = cm.run_counting(G, spec, batch, rng, beacon, dealer_bit=1, coins_first=True)
        committed, flipped = cm.fair_bits(G, run)
        coins = np.array([run.transcript.coins[l] for l, s in enumerate(cm.noise_layout(spec)[0]) if s.flipped])
        assert flipped.all() and np.array_equal(committed, 1 - coins)  # it committed 1 XOR coin
        v = cm.verify(G, spec, run.transcript, run.record, rng)
        assert v.ok and v.count == run.count + run.noise  # the ordering, not the verifier, is what stops it
    with pytest.raises(ValueError, match="coins_first"):
        cm.run_counting(G, spec, batch, rng, beacon, coins_first=True)

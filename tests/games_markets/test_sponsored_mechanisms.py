"""Sponsored-suggestion kernels: joint VCG against enumeration, the modular game, best-response dynamics and the
misreport search against their plain references, and hand-solved instances."""
import numpy as np
import pytest

from paperkit.games_markets import sponsored_mechanisms as sm
from paperkit.games_markets import sponsored_study as ss


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("slots", [1, 2, 3])
def test_vcg_matches_enumeration(seed, slots):
    d = sm.random_instance(np.random.default_rng(seed), 4, 4, slots)
    a, b = sm.vcg_joint(d["q"], d["V"], d["theta"]), sm.vcg_joint_ref(d["q"], d["V"], d["theta"])
    assert a["welfare"] == pytest.approx(b["welfare"], abs=1e-12)
    assert a["welfare"] == pytest.approx(sm.optimal_welfare(**d), abs=1e-12)
    np.testing.assert_allclose(a["pay"], b["pay"], atol=1e-12)
    assert (a["pay"] >= -1e-12).all() and (a["util"] >= -1e-12).all()


def test_vcg_hand_instance():
    # one slot, intents with q = (0.5, 0.5); values: A (1, 0), B1 (0, 4), B2 (0, 4): show b, B1 wins, pays 2
    q, V, th = np.array([0.5, 0.5]), np.array([[1.0, 0.0], [0.0, 4.0], [0.0, 4.0]]), np.array([1.0])
    out = sm.vcg_joint(q, V, th)
    assert out["order"].tolist() == [1] and out["winners"].tolist() == [1]
    np.testing.assert_allclose(out["pay"], [0.0, 2.0, 0.0], atol=1e-12)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("rule", [0, 1, 2, 3])
@pytest.mark.parametrize("rho", [0.0, 0.5, 1.0])
def test_modular_outcome_matches_reference(seed, rule, rho):
    rng = np.random.default_rng(seed)
    d = sm.random_instance(rng, 4, 5, 1 + seed % 2)
    it, bd = rng.integers(0, 4, 5), rng.random(5) * 0.3 * (rng.random(5) < 0.8)
    u1, w1 = sm.modular_outcome(**d, rule=rule, rho=rho, intent=it, bid=bd)
    u2, w2 = sm.modular_outcome_ref(**d, rule=rule, rho=rho, intent=it, bid=bd)
    np.testing.assert_allclose(u1, u2, atol=1e-12)
    assert w1 == pytest.approx(w2, abs=1e-12)


def test_modular_hand_instance():
    # hard family, M = 8: A bids 0.2 on a, nobody on b: a shown, A pays 0 (second price), welfare q_a = 0.5
    inst = sm.family_instance(8.0)
    u, w = sm.modular_outcome(**inst, rule=0, rho=0.0, intent=np.array([0, 0, 1]), bid=np.array([0.0, 0.0, 0.2]))
    np.testing.assert_allclose(u, [0.0, 0.0, 0.5])
    assert w == pytest.approx(0.5)
    # B1 bids 1 on b: b shown, B1 pays 0.2 and gets no surplus (B2 ties it at 8); with rho = 1 it gets 0.5 * 8 back
    it, bd = np.array([0, 0, 1]), np.array([1.0, 0.0, 0.2])
    u, w = sm.modular_outcome(**inst, rule=0, rho=0.0, intent=it, bid=bd)
    np.testing.assert_allclose(u, [-0.2, 0.0, 0.0])
    assert w == pytest.approx(4.0)
    u, _ = sm.modular_outcome(**inst, rule=0, rho=1.0, intent=it, bid=bd)
    np.testing.assert_allclose(u, [3.8, 0.0, 0.0])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("rule", [0, 1, 3])
def test_brd_matches_reference_and_is_nash(seed, rule):
    rng = np.random.default_rng(seed)
    d = sm.random_instance(rng, 3, 3, 1 + seed % 2)
    tab = sm.bid_table(d["q"], d["V"], d["theta"], 6)
    st = rng.integers(0, tab.shape[1], 3)
    a = sm.best_response_dynamics(**d, rule=rule, rho=0.0, table=tab, start=st)
    b = sm.best_response_dynamics_ref(**d, rule=rule, rho=0.0, table=tab, start=st)
    assert a[0].tolist() == b[0].tolist() and a[1:] == b[1:]
    if a[1]:
        assert sm.nash_gap(**d, rule=rule, rho=0.0, table=tab, profile=a[0]) <= 1e-12


def test_pure_nash_enumeration_contains_brd_equilibrium():
    inst = sm.family_instance(16.0)
    tab = sm.bid_table(inst["q"], inst["V"], inst["theta"], 5)
    w = sm.pure_nash_welfare(**inst, rule=1, rho=0.0, table=tab)
    r = ss.family_run(16.0, 1, 1, 0.0, 5)
    assert r["gap"] <= 1e-12
    assert np.isclose(sm.optimal_welfare(**inst) / w, r["ratio"]).any()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("payment", sm.PAYMENTS)
def test_misreport_gain_matches_reference(seed, payment):
    d = sm.random_instance(np.random.default_rng(seed), 3, 4, 2)
    g = np.linspace(0, 2 * d["V"].max(), 4)
    for i in range(4):
        a = sm.misreport_gain(**d, i=i, grid=g, payment=payment)
        assert a == pytest.approx(sm.misreport_gain_ref(**d, i=i, grid=g, payment=payment), abs=1e-12)
        if payment == "vcg":
            assert a <= 1e-12


def test_family_ratio_matches_prediction():
    for label, (rule, S) in ss.PAIRS.items():
        r = ss.family_run(64.0, rule, S, 0.0, 11)
        assert r["converged"] and r["gap"] <= 1e-12
        assert r["ratio"] == pytest.approx(sm.predicted_family_ratio(64.0, S), rel=1e-12), label
        assert ss.family_run(64.0, rule, S, 1.0, 11)["ratio"] == pytest.approx(1.0)


def test_bad_input_names_parameter():
    q, V, th = np.array([0.5, 0.5]), np.ones((2, 2)), np.array([1.0])
    with pytest.raises(ValueError, match="rule"):
        sm.modular_outcome(q, V, th, 4, 0.0, np.array([0, 1]), np.zeros(2))
    with pytest.raises(ValueError, match="rho"):
        sm.modular_outcome(q, V, th, 0, 1.5, np.array([0, 1]), np.zeros(2))
    with pytest.raises(ValueError, match="q"):
        sm.vcg_joint(np.array([0.5, 0.6]), V, th)
    with pytest.raises(ValueError, match="levels"):
        sm.bid_table(q, V, th, 1)
    with pytest.raises(ValueError, match="payment"):
        sm.misreport_gain(q, V, th, 0, np.ones(2), "gsp")


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("rule,slots", [(0, 1), (1, 1), (0, 2)])
def test_refined_gap_keeps_the_coarse_bids(seed, rule, slots):
    rng = np.random.default_rng(seed)
    d = sm.random_instance(rng, 3, 4, slots)
    tab = sm.bid_table(d["q"], d["V"], d["theta"], 5)
    prof, conv, _ = sm.best_response_dynamics(**d, rule=rule, rho=1.0, table=tab, start=rng.integers(0, 15, 4))
    coarse = sm.nash_gap(**d, rule=rule, rho=1.0, table=tab, profile=prof)
    assert ss.refined_gap(**d, rule=rule, rho=1.0, levels=5, profile=prof, factor=1) == pytest.approx(coarse, abs=1e-12)
    fine = ss.refined_gap(**d, rule=rule, rho=1.0, levels=5, profile=prof, factor=3)
    assert fine >= coarse - 1e-12          # the finer grid holds every coarse strategy
    # the mapped profile places the same bids: the outcome is unchanged
    tab3 = sm.bid_table(d["q"], d["V"], d["theta"], 13)
    u1, w1 = sm.profile_outcome(**d, rule=rule, rho=1.0, table=tab, profile=prof)
    u3, w3 = sm.profile_outcome(**d, rule=rule, rho=1.0, table=tab3, profile=(prof // 5) * 13 + (prof % 5) * 3)
    np.testing.assert_allclose(u1, u3, atol=1e-12)
    assert w3 == pytest.approx(w1)
    with pytest.raises(ValueError, match="factor"):
        ss.refined_gap(**d, rule=rule, rho=1.0, levels=5, profile=prof, factor=0)


def test_random_sweep_profiles_and_robust_inefficiency():
    rec = ss.random_sweep(np.random.default_rng(5), 25, 4, 5, 6, rhos=(0.0,), pairs={"GSP/SP": (0, 2)})[("GSP/SP", 0.0)]
    tol = 1 + 2 / 5
    for t in range(25):                    # the stored worst profile gives the stored ratio
        if not np.isnan(rec["ratio"][t]):
            inst = {"q": rec["q"][t], "V": rec["V"][t], "theta": 0.6 ** np.arange(2.0)}
            tab = sm.bid_table(**inst, levels=6)
            w = sm.profile_outcome(**inst, rule=0, rho=0.0, table=tab, profile=rec["profile"][t])[1]
            assert sm.optimal_welfare(**inst) / w == pytest.approx(rec["ratio"][t], rel=1e-12)
    bad = ss.robust_inefficient(rec, 0, 2, 0.0, 6, tol)
    assert np.array_equal(np.isnan(bad), np.isnan(rec["ratio"]))
    assert not np.any(bad[rec["ratio"] <= tol])
    assert np.nansum(bad) >= 1             # GSP without redistribution leaves some instance inefficient
    for t in np.flatnonzero(bad == 1):
        inst = {"q": rec["q"][t], "V": rec["V"][t], "theta": 0.6 ** np.arange(2.0)}
        assert ss.refined_gap(**inst, rule=0, rho=0.0, levels=6, profile=rec["profile"][t]) <= 1e-12

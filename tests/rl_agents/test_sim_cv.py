"""paperkit.rl_agents.sim_cv and sim_cv_study: the Numba rollout against its reference and gymnasium's env.step;
the linear-solve values and exact moments against iteration and Monte Carlo; the control variate's zero mean; the
estimators against explicit loops and closed forms."""
import math

import gymnasium as gym
import numpy as np
import pytest

from paperkit.rl_agents import sim_cv as sc
from paperkit.rl_agents import sim_cv_study as st

SEEDS = [0, 1, 2]


def _random_mdp(rng, S=6, A=3, n_term=1):
    P = rng.dirichlet(np.full(S, 0.5), size=(S, A))
    term = np.zeros(S, dtype=bool)
    term[S - n_term:] = True
    return P, rng.normal(size=(S, A, S)), term, rng.dirichlet(np.ones(A), size=S)


@pytest.fixture(scope="module")
def lake():
    return st.make_problem()


# ---------------------------------------------------------------- rollouts

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("K", [0, 1, 3])
def test_rollout_matches_reference_exactly(seed, K):
    rng = np.random.default_rng(seed)
    P, R, term, pi = _random_mdp(rng)
    tabs = rng.normal(size=(K,) + pi.shape)
    args = (P, R, term, pi, 0, 50, 40, 0.9, tabs, int(rng.integers(1 << 63)))
    for a, b in zip(sc.rollout(*args), sc.rollout_ref(*args)):
        np.testing.assert_array_equal(a, b)


def test_rollout_never_takes_zero_probability_actions_or_moves():
    rng = np.random.default_rng(4)
    P, R, term, pi = _random_mdp(rng, S=5, A=3)
    P[:, :, 2] = 0.0
    P /= P.sum(2, keepdims=True)
    pi[:, 1] = 0.0
    pi /= pi.sum(1, keepdims=True)
    # statistics of one-hot tables count the visits of each (s, a) pair
    onehot = np.zeros((P.shape[0] * 3,) + pi.shape)
    for s in range(P.shape[0]):
        for a in range(3):
            onehot[s * 3 + a, s, a] = 1.0
    _, C, _ = sc.rollout(P, R, term, pi, 0, 3000, 30, 1.0, onehot, 9)
    visits = C.sum(0).reshape(P.shape[0], 3)
    assert visits[:, 1].sum() == 0 and visits[:, [0, 2]].sum() > 0
    assert visits[2].sum() == 0          # state 2 is never entered


def test_rollout_mean_matches_linear_solve_and_gymnasium(lake):
    p = lake
    V0 = p["V"][p["s0"]]
    G, _, steps = sc.rollout(p["P"], p["R"], p["term"], p["pi"], p["s0"], 100000, 400, p["gamma"],
                             np.zeros((0,) + p["pi"].shape), 3)
    assert abs(G.mean() - V0) < 4 * G.std() / math.sqrt(len(G))
    g = st.gym_rollout_returns(p, 3000, np.random.default_rng(5))
    assert abs(g.mean() - V0) < 4 * g.std() / math.sqrt(len(g))
    assert steps.max() < 400


def test_rollout_refuses_bad_inputs():
    rng = np.random.default_rng(0)
    P, R, term, pi = _random_mdp(rng)
    tabs = np.zeros((1,) + pi.shape)
    ok = dict(P=P, R=R, term=term, pi=pi, s0=0, n=3, T=5, gamma=0.9, tables=tabs, seed=1)
    bad = [("P", P * 1.1, ValueError), ("pi", pi[:, ::-1] * 0.5, ValueError), ("term", term.astype(int), TypeError),
           ("s0", 5, ValueError), ("s0", 99, ValueError), ("tables", np.zeros((1, 2, 2)), ValueError),
           ("T", 0, ValueError), ("gamma", 1.5, ValueError), ("seed", -1, ValueError), ("n", 2.0, ValueError)]
    for name, value, exc in bad:
        with pytest.raises(exc, match=name):
            sc.rollout(**{**ok, name: value})


# ---------------------------------------------------------------- exact values and moments

def test_tables_from_gym_reads_frozen_lake():
    env = gym.make("FrozenLake-v1", map_name="4x4", is_slippery=True, success_rate=0.8)
    P, R, term, s0 = sc.tables_from_gym(env)
    desc = "".join(row.decode() for row in env.unwrapped.desc.ravel())
    np.testing.assert_allclose(P.sum(2), 1.0, atol=1e-12)
    assert s0 == desc.index("S")
    assert set(np.flatnonzero(term)) == {i for i, c in enumerate(desc) if c in "HG"}
    assert R.max() == 1.0 and set(np.unique(R)) == {0.0, 1.0}
    assert P[14, 2, 15] == pytest.approx(0.8)      # right from the cell left of the goal


@pytest.mark.parametrize("seed", SEEDS)
def test_policy_eval_is_the_fixed_point_of_iterative_evaluation(seed):
    P, R, term, pi = _random_mdp(np.random.default_rng(seed))
    V, Q = sc.policy_eval(P, R, term, pi, 0.8)
    rbar = (P * R).sum(2)
    W = np.zeros(len(term))
    for _ in range(400):
        W = np.where(term, 0.0, (pi * (rbar + 0.8 * P @ (W * ~term))).sum(1))
    np.testing.assert_allclose(V, W, atol=1e-12)
    np.testing.assert_allclose((pi * Q).sum(1), V, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_return_moments_match_monte_carlo(seed):
    rng = np.random.default_rng(seed)
    P, R, term, pi = _random_mdp(rng)
    gamma = 0.7
    tabs = np.stack([sc.action_cv_table(rng.normal(size=pi.shape), pi), rng.normal(size=pi.shape)])
    m = sc.return_moments(P, R, term, pi, gamma, 0, tabs)
    G, C, _ = sc.rollout(P, R, term, pi, 0, 200000, 200, gamma, tabs, seed + 11)
    n = len(G)
    assert abs(G.mean() - m["mean_G"]) < 4 * G.std() / math.sqrt(n)
    assert G.var() == pytest.approx(m["var_G"], rel=0.03)
    np.testing.assert_allclose(C.var(0), m["var_C"], rtol=0.03)
    np.testing.assert_allclose(np.cov(G, C.T)[0, 1:], m["cov_GC"], rtol=0.05, atol=0.01 * math.sqrt(m["var_G"]))
    assert m["mean_G"] == pytest.approx(sc.policy_eval(P, R, term, pi, gamma)[0][0], abs=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_action_cv_has_mean_zero_under_any_environment(seed):
    rng = np.random.default_rng(seed)
    P, R, term, pi = _random_mdp(rng)
    f = sc.action_cv_table(rng.normal(size=pi.shape) * 5, pi)     # any table, unrelated to the MDP
    np.testing.assert_allclose((pi * f).sum(1), 0.0, atol=1e-12)
    m = sc.return_moments(P, R, term, pi, 0.9, 0, f[None])
    assert abs(m["mean_C"][0]) < 1e-12
    _, C, _ = sc.rollout(P, R, term, pi, 0, 100000, 300, 0.9, f[None], seed)
    assert abs(C.mean()) < 4 * C.std() / math.sqrt(len(C))


def test_perturb_keeps_support_and_is_exact_at_zero(lake):
    P, R, term = lake["P"], lake["R"], lake["term"]
    P0, R0 = sc.perturb(P, R, term, 0.0, np.random.default_rng(0))
    np.testing.assert_array_equal(P0, P)
    np.testing.assert_array_equal(R0, R)
    P1, _ = sc.perturb(P, R, term, 1.0, np.random.default_rng(0))
    np.testing.assert_allclose(P1.sum(2), 1.0, atol=1e-12)
    nb = P.sum(1) > 0
    assert np.all(P1[~np.broadcast_to(nb[:, None, :], P.shape)] == 0)
    with pytest.raises(ValueError, match="eps"):
        sc.perturb(P, R, term, 1.5, np.random.default_rng(0))


# ---------------------------------------------------------------- estimators

def test_cv_estimate_loo_and_insample_match_explicit_loops():
    rng = np.random.default_rng(0)
    G, C = rng.normal(size=(5, 12)), rng.normal(size=(5, 12))
    G += 0.7 * C
    loo = sc.cv_estimate(G, C, "loo")
    ins = sc.cv_estimate(G, C, "insample")
    for r in range(5):
        want = 0.0
        for i in range(12):
            keep = np.arange(12) != i
            b = np.polyfit(C[r, keep], G[r, keep], 1)[0]
            want += (G[r, i] - b * C[r, i]) / 12
        assert loo[r] == pytest.approx(want, rel=1e-12)
        b = np.polyfit(C[r], G[r], 1)[0]
        assert ins[r] == pytest.approx(G[r].mean() - b * C[r].mean(), rel=1e-12)
    np.testing.assert_allclose(sc.cv_estimate(G, C, 0.5), (G - 0.5 * C).mean(1))
    with pytest.raises(ValueError, match="beta"):
        sc.cv_estimate(G, C, "ols")


def test_cv_with_beta_star_reduces_variance_by_one_minus_rho_squared():
    rng = np.random.default_rng(1)
    rho, R, n = 0.8, 40000, 8
    C = rng.normal(size=(R, n))
    G = rho * C + math.sqrt(1 - rho ** 2) * rng.normal(size=(R, n))
    r, lo, hi = sc.paired_ratio_ci((sc.cv_estimate(G, C, rho)) ** 2, G.mean(1) ** 2)
    assert lo < 1 - rho ** 2 < hi
    assert abs(sc.cv_estimate(G, C, "loo").mean()) < 4 / math.sqrt(R * n)


def test_shrink_mix_limits():
    rng = np.random.default_rng(2)
    G = rng.normal(size=(200, 30))
    np.testing.assert_allclose(sc.shrink_mix(G, G.mean(1)), G.mean(1))                # no gap: either is fine
    np.testing.assert_allclose(sc.shrink_mix(G, G.mean(1) + 1e6), G.mean(1), atol=1e-6)  # huge gap: real mean
    w_mid = sc.shrink_mix(G, G.mean(1) + 0.3)
    assert np.all((w_mid >= G.mean(1)) & (w_mid <= G.mean(1) + 0.3))


def test_paired_ratio_ci_covers_the_ratio():
    x, y = np.arange(1.0, 101.0), np.arange(1.0, 101.0) * 2
    r, lo, hi = sc.paired_ratio_ci(x, y)
    assert r == pytest.approx(0.5) and lo == pytest.approx(0.5) and hi == pytest.approx(0.5)


# ---------------------------------------------------------------- study

def test_run_batches_shapes_and_unbiased_cv(lake):
    rng = np.random.default_rng(3)
    sims = st.make_simulators(lake, [0.0, 0.6], rng)
    assert sims[0]["rho"] == pytest.approx(sims[0]["rho_sim"])
    assert sims[0]["beta_star"] == pytest.approx(1.0)
    err = st.run_batches(lake, sims, 16, 32, 600, rng)
    for k in st.ESTIMATORS:
        assert err[k].shape == (2, 600)
    res = st.summarise(err)
    assert np.all(np.abs(res["cv"]["z"]) < 4)
    assert np.abs(res["mix_pool"]["z"][1]) > 10


def test_beta_sim_is_one_and_paired_z_of_beta_star_is_zero(lake):
    rng = np.random.default_rng(6)
    sims = st.make_simulators(lake, [0.0, 1.0], rng)
    assert all(s["beta_sim"] == pytest.approx(1.0, abs=1e-9) for s in sims)    # Q_sim is exact inside the sim
    res = st.summarise(st.run_batches(lake, sims, 16, 8, 300, rng))
    assert np.all(res["cv_star"]["zp"] == 0)
    assert np.abs(res["cv_placebo"]["z"]).max() < 4

"""paperkit.learning_dynamics.grpo: the mixed-group gate, group advantages, the tabular GRPO step, rollouts, schedules and fits."""
import math

import numpy as np
import pytest
import torch
from scipy.stats import binom
from sklearn.metrics import r2_score

from paperkit.learning_dynamics import grpo
from paperkit.params import ParameterError

SEEDS = [0, 1, 2]


# ---------------------------------------------------------------- the gate

@pytest.mark.parametrize("G", [1, 2, 3, 8, 128, 1000])
def test_mixed_group_prob_matches_binomial_and_closed_form(G):
    p = np.concatenate([[0.0, 1.0], np.geomspace(1e-6, 0.5, 60), 1 - np.geomspace(1e-6, 0.5, 60)])
    fast = grpo.mixed_group_prob(p, G)
    np.testing.assert_allclose(fast, grpo.mixed_group_prob_ref(p, G), rtol=1e-9, atol=1e-13)
    np.testing.assert_allclose(fast, 1 - binom.pmf(0, G, p) - binom.pmf(G, G, p), rtol=1e-9, atol=1e-13)
    np.testing.assert_allclose(fast, 1 - p**G - (1 - p) ** G, rtol=1e-7, atol=1e-12)
    assert fast[0] == 0.0 and fast[1] == 0.0
    assert np.all(fast >= 0) and np.all(fast <= 1)


def test_mixed_group_prob_keeps_precision_for_tiny_p():
    # for p << 1/G, P_mix = G p - C(G, 2) p^2 + ...; the naive 1 - (1-p)^G loses digits there
    p, G = 1e-12, 8
    assert grpo.mixed_group_prob(p, G) == pytest.approx(G * p - G * (G - 1) / 2 * p**2, rel=1e-10)


def test_mixed_group_prob_keeps_shape_and_rejects_bad_input():
    assert grpo.mixed_group_prob(np.full((3, 4), 0.2), 5).shape == (3, 4)
    for bad_p in (-0.1, 1.1, np.nan):
        with pytest.raises(ValueError, match="p must lie"):
            grpo.mixed_group_prob(bad_p, 8)
    for bad_G in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="G must be"):
            grpo.mixed_group_prob(0.3, bad_G)


@pytest.mark.parametrize("G", [3, 8, 16, 64, 128, 1024])
def test_threshold_is_the_exact_half_crossing_and_close_to_ln2_over_G(G):
    pc = grpo.threshold_pass_rate(G)
    assert grpo.mixed_group_prob(pc, G) == pytest.approx(0.5, abs=1e-12)
    # P_mix(ln2/G) > 1/2 (exp(-pG) overestimates (1-p)^G), so the exact crossing sits just below ln2/G
    assert pc < math.log(2) / G
    assert pc * G / math.log(2) > (0.95 if G >= 8 else 0.85)
    if G >= 8:
        assert abs(grpo.mixed_group_prob(math.log(2) / G, G) - 0.5) < 0.02
        assert grpo.mixed_group_prob(pc / 4, G) < 1 / 6 and grpo.mixed_group_prob(4 * pc, G) > 0.9


def test_threshold_edge_cases():
    assert grpo.threshold_pass_rate(2) == 0.5
    with pytest.raises(ValueError, match="G must be"):
        grpo.threshold_pass_rate(1)


def test_binomial_pmf_matches_scipy():
    p = np.array([1e-5, 0.01, 0.3, 0.5, 0.97])[:, None]
    k = np.arange(65)[None, :]
    np.testing.assert_allclose(grpo.binomial_pmf(k, 64, p), binom.pmf(k, 64, p), rtol=1e-9, atol=1e-300)


# ---------------------------------------------------------------- advantages and the update

def _rewards(seed, n_groups, G, p_low=-9, p_high=3):
    rng = np.random.default_rng(seed)
    theta = rng.uniform(p_low, p_high, n_groups)
    return theta, grpo.sample_rewards(theta, np.arange(n_groups), G, rng)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
@pytest.mark.parametrize("seed", SEEDS)
def test_grpo_advantages_match_trl_formula(dtype, tol, seed):
    _, r = _rewards(seed, 50, 8)
    r = torch.tensor(r, dtype=dtype)
    mean, std = r.mean(1, keepdim=True), r.std(1, keepdim=True)
    torch.testing.assert_close(grpo.grpo_advantages(r), (r - mean) / (std + 1e-4), atol=tol, rtol=tol)
    torch.testing.assert_close(grpo.grpo_advantages(r, "none"), r - mean, atol=tol, rtol=tol)
    torch.testing.assert_close(grpo.grpo_advantages(r, "batch"), r - r.mean(), atol=tol, rtol=tol)
    assert grpo.grpo_advantages(r).dtype == dtype


def test_grpo_advantages_reject_bad_input():
    with pytest.raises(ValueError, match="shape"):
        grpo.grpo_advantages(torch.zeros(8))
    with pytest.raises(ValueError, match="G >= 2"):
        grpo.grpo_advantages(torch.zeros(4, 1))
    with pytest.raises(ValueError, match="norm"):
        grpo.grpo_advantages(torch.zeros(4, 8), norm="max")
    with pytest.raises(ValueError, match="eps"):
        grpo.grpo_advantages(torch.zeros(4, 8), eps=-1.0)


@pytest.mark.parametrize("norm", ["std", "none", "batch"])
@pytest.mark.parametrize("G", [2, 8, 64])
@pytest.mark.parametrize("seed", SEEDS)
def test_autograd_of_surrogate_equals_closed_form(norm, G, seed):
    theta, r = _rewards(seed, 300, G, -4, 4)
    th = torch.tensor(theta, requires_grad=True)
    rt = torch.tensor(r)
    logp = rt * torch.nn.functional.logsigmoid(th[:, None]) + (1 - rt) * torch.nn.functional.logsigmoid(-th[:, None])
    (grpo.grpo_advantages(rt, norm) * logp).sum().backward()
    closed = grpo.group_logit_grad(r, grpo.pass_rate(theta), norm)
    np.testing.assert_allclose(th.grad.numpy(), closed, rtol=1e-10, atol=1e-12)


def test_closed_form_is_the_group_std_and_ignores_the_policy():
    _, r = _rewards(5, 400, 16, -3, 3)
    q = r.mean(1)
    # eps = 0: G q(1-q) / s with s the unbiased std = G * sqrt((G-1)/G) * population std
    grad = grpo.group_logit_grad(r, np.full(400, 0.3), eps=0.0)
    mixed = (q > 0) & (q < 1)
    np.testing.assert_allclose(grad[mixed], 16 * np.sqrt(15 / 16) * r.std(1)[mixed], rtol=1e-12)
    for norm in ("std", "none"):
        np.testing.assert_array_equal(grpo.group_logit_grad(r, np.full(400, 0.01), norm),
                                      grpo.group_logit_grad(r, np.full(400, 0.99), norm))


@pytest.mark.parametrize("norm", ["std", "none"])
def test_all_same_groups_give_exactly_zero_update(norm):
    rng = np.random.default_rng(3)
    theta = rng.normal(0, 3, 20)
    rewards = np.zeros((20, 8))
    rewards[10:] = 1.0
    rewards[5, :3] = 1.0  # one mixed group
    for step in (grpo.grpo_step, grpo.grpo_step_ref):
        new = step(theta, np.arange(20), rewards, lr=50.0, norm=norm)
        moved = np.flatnonzero(new != theta)
        assert moved.tolist() == [5]


@pytest.mark.parametrize("norm", ["std", "none", "batch"])
@pytest.mark.parametrize("G", [2, 16])
@pytest.mark.parametrize("seed", SEEDS)
def test_grpo_step_matches_autograd_reference(norm, G, seed):
    rng = np.random.default_rng(seed)
    theta = rng.uniform(-6, 3, 100)
    idx = rng.integers(0, 100, 64)  # repeated prompts accumulate
    rewards = grpo.sample_rewards(theta, idx, G, rng)
    fast = grpo.grpo_step(theta, idx, rewards, 200.0, norm)
    np.testing.assert_allclose(fast, grpo.grpo_step_ref(theta, idx, rewards, 200.0, norm), rtol=1e-12, atol=1e-12)
    assert not np.shares_memory(fast, theta)


def test_grpo_step_rejects_bad_input():
    theta, r = np.zeros(5), np.zeros((3, 4))
    with pytest.raises(ValueError, match="theta"):
        grpo.grpo_step(np.zeros((5, 2)), np.arange(3), r, 1.0)
    with pytest.raises(ValueError, match="idx must lie"):
        grpo.grpo_step(theta, np.array([0, 1, 5]), r, 1.0)
    with pytest.raises(ValueError, match="idx must be a 1-D integer"):
        grpo.grpo_step(theta, np.array([0.0, 1.0, 2.0]), r, 1.0)
    with pytest.raises(ValueError, match="groups"):
        grpo.grpo_step(theta, np.arange(2), r, 1.0)
    with pytest.raises(ValueError, match="lr"):
        grpo.grpo_step(theta, np.arange(3), r, -1.0)
    with pytest.raises(ValueError, match="p must have shape"):
        grpo.group_logit_grad(r, np.zeros(2))


# ---------------------------------------------------------------- rollouts

@pytest.mark.parametrize("G", [1, 5, 32])
@pytest.mark.parametrize("seed", SEEDS)
def test_fast_and_reference_rollouts_agree_exactly_with_one_generator(G, seed):
    theta = np.random.default_rng(seed).normal(0, 2, 40)
    idx = np.random.default_rng(seed + 10).integers(0, 40, 25)
    rng_fast, rng_ref = np.random.default_rng(seed), np.random.default_rng(seed)
    fast = grpo.sample_rewards(theta, idx, G, rng_fast)
    ref = grpo.sample_rewards_ref(theta, idx, G, rng_ref)
    assert fast.shape == (25, G) and fast.dtype == np.float64
    np.testing.assert_array_equal(fast, ref)
    assert rng_fast.random() == rng_ref.random()  # both consumed the same number of draws


def test_rollouts_have_the_policy_pass_rate():
    theta = np.array([-3.0, 0.0, 2.0])
    r = grpo.sample_rewards(theta, np.repeat(np.arange(3), 1000), 100, np.random.default_rng(0))
    p = grpo.pass_rate(theta)
    observed = r.reshape(3, -1).mean(1)
    # 100,000 Bernoulli draws per prompt: within 5 standard errors
    assert np.all(np.abs(observed - p) < 5 * np.sqrt(p * (1 - p) / 100_000))
    k = r.sum(1)[:1000]  # group successes of the first prompt follow Bin(100, p)
    assert abs(k.mean() - 100 * p[0]) < 5 * np.sqrt(100 * p[0] * (1 - p[0]) / 1000)


def test_sample_rewards_rejects_bad_input():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="G must be"):
        grpo.sample_rewards(np.zeros(3), np.arange(3), 0, rng)
    with pytest.raises(ValueError, match="idx must lie"):
        grpo.sample_rewards(np.zeros(3), np.array([-1]), 4, rng)


# ---------------------------------------------------------------- training and schedules

def test_train_grpo_spends_the_budget_and_gates_every_visit():
    theta0 = np.random.default_rng(0).uniform(-9, 3, 300)
    run = grpo.train_grpo(theta0, 20_000, 256, 200.0, np.random.default_rng(1), grpo.FixedG(16))
    assert run.used[-1] == 20_000 - 20_000 % 256 and np.all(np.diff(run.used) == 256)
    mixed = (run.visit_k > 0) & (run.visit_k < 16)
    assert np.all(run.visit_delta[~mixed] == 0) and np.all(run.visit_delta[mixed] > 0)
    # each visit's logit change is lr / N times the closed form
    rewards = (np.arange(16)[None, :] < run.visit_k[:, None]).astype(float)
    expect = 200.0 / 256 * grpo.group_logit_grad(rewards, run.visit_p)
    np.testing.assert_allclose(run.visit_delta, expect, rtol=1e-9, atol=1e-12)
    assert run.acc[-1] > grpo.pass_rate(theta0).mean()
    assert run.acc[-1] == pytest.approx(grpo.pass_rate(run.theta).mean(), abs=1e-12)  # running mean stays exact


@pytest.mark.parametrize("G", [8, 32])
def test_train_grpo_equals_replaying_the_kernels(G):
    """The loop inlines sample_rewards and grpo_step; replaying those kernels on the same generator gives the same run."""
    n, budget, N, lr = 150, 12_000, 256, 120.0
    theta0 = np.random.default_rng(4).uniform(-9, 3, n)
    run = grpo.train_grpo(theta0, budget, N, lr, np.random.default_rng(5), grpo.FixedG(G))
    rng, theta, used, m = np.random.default_rng(5), theta0.copy(), 0, N // G
    order, pos = rng.permutation(n), 0
    while used + N <= budget:
        if pos + m > n:
            order, pos = rng.permutation(n), 0
        idx, pos = order[pos:pos + m], pos + m
        theta = grpo.grpo_step(theta, idx, grpo.sample_rewards(theta, idx, G, rng), lr)
        used += m * G
    np.testing.assert_allclose(run.theta, theta, rtol=1e-13, atol=1e-13)


def test_train_grpo_is_deterministic_for_one_seed():
    theta0 = np.linspace(-6, 2, 100)
    a = grpo.train_grpo(theta0, 5000, 128, 100.0, np.random.default_rng(7), grpo.FixedG(8))
    b = grpo.train_grpo(theta0, 5000, 128, 100.0, np.random.default_rng(7), grpo.FixedG(8))
    np.testing.assert_array_equal(a.theta, b.theta)


def test_schedules_only_grow_and_record_switches():
    theta0 = np.random.default_rng(2).uniform(-9, 3, 400)
    Gs = (8, 16, 32, 64)
    for sch in (grpo.FrontierTracking(Gs, 0.25), grpo.YieldSwitch(Gs, 200 / 512), grpo.TwoPhase(8, 64, 0.5)):
        run = grpo.train_grpo(theta0, 60_000, 512, 200.0, np.random.default_rng(3), sch)
        assert run.G[0] == 8 and np.all(np.diff(run.G) >= 0) and set(run.G) <= set(Gs)
        assert [G for _, G in run.switches] == sorted(set(run.G))[1:]
    two = grpo.train_grpo(theta0, 60_000, 512, 200.0, np.random.default_rng(3), grpo.TwoPhase(8, 64, 0.5))
    assert two.switches[0][0] >= 30_000 and two.G[-1] == 64


def test_frontier_tracking_puts_the_threshold_at_the_frontier():
    n = 1000
    # decayed counts: all prompts solved except a block at p_hat = 3.5/201 = 0.017, so ln2/G <= p_hat first at G = 64
    succ, trials = np.full(n, 200.0), np.full(n, 200.0)
    succ[:400] = 3.0
    s = grpo.TraceState(step=10, used=0, budget=1, G=8, succ=succ, trials=trials)
    assert grpo.FrontierTracking((8, 16, 32, 64, 128), 0.5)(s) == 64
    assert grpo.FrontierTracking((8, 16, 32, 64, 128), 0.5)(grpo.TraceState(0, 0, 1, 0, succ, trials)) == 8


def test_train_grpo_rejects_bad_input():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="budget"):
        grpo.train_grpo(np.zeros(10), 100, 256, 1.0, rng, grpo.FixedG(8))
    with pytest.raises(ValueError, match="rollouts_per_step"):
        grpo.train_grpo(np.zeros(10), 1000, 8, 1.0, rng, grpo.FixedG(16))
    with pytest.raises(ValueError, match="theta0"):
        grpo.train_grpo(np.zeros((2, 2)), 1000, 64, 1.0, rng, grpo.FixedG(8))
    with pytest.raises(ValueError, match="schedule"):
        grpo.train_grpo(np.zeros(10), 1000, 64, 1.0, rng, grpo.FixedG(1))


def test_expected_gain_matches_a_direct_sum():
    p, G, step = np.array([0.001, 0.05, 0.5, 0.9]), 16, 0.2
    direct = 0.0
    for pi in p:
        for k in range(G + 1):
            r = (np.arange(G) < k).astype(float)[None, :]
            d = step * grpo.group_logit_grad(r, np.array([pi]))[0]
            direct += binom.pmf(k, G, pi) * (grpo.pass_rate(math.log(pi / (1 - pi)) + d) - pi)
    assert grpo.expected_gain_per_rollout(p, G, step) == pytest.approx(direct / len(p) / G, rel=1e-10)
    with pytest.raises(ValueError, match="strictly inside"):
        grpo.expected_gain_per_rollout(np.array([0.0, 0.5]), G, step)


# ---------------------------------------------------------------- traces and fits

def test_trace_mixed_rates_on_a_known_trace():
    traces = np.zeros((3, 16))
    traces[1, 0] = 1            # one success: exactly one of the 4 groups of 4 is mixed
    traces[2] = 1
    traces[2, [1, 5, 9, 13]] = 0  # one failure in every group of 4
    emp, pred = grpo.trace_mixed_rates(traces, 4)
    np.testing.assert_allclose(emp, [0.0, 0.25, 1.0])
    np.testing.assert_allclose(pred, grpo.mixed_group_prob(np.array([0, 1 / 16, 12 / 16]), 4))
    with pytest.raises(ValueError, match="exceeds"):
        grpo.trace_mixed_rates(traces, 32)


def test_trace_rates_follow_the_binomial_on_long_traces():
    rng = np.random.default_rng(0)
    p = np.repeat([0.002, 0.02, 0.1], 200)
    traces = (rng.random((600, 4096)) < p[:, None]).astype(float)
    emp, _ = grpo.trace_mixed_rates(traces, 32)
    for block, pi in enumerate([0.002, 0.02, 0.1]):
        assert abs(emp[block * 200:(block + 1) * 200].mean() - grpo.mixed_group_prob(pi, 32)) < 0.01


@pytest.mark.parametrize("seed", SEEDS)
def test_binned_r2_matches_sklearn_on_bin_means(seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, 2000)
    f = np.sin(3 * x) + 1.5
    y = 2.0 * f + rng.normal(0, 0.5, x.size)
    edges = np.linspace(0, 1, 11)
    r2, a, xb, yb, fb = grpo.binned_r2(x, y, f, edges)
    assert a == pytest.approx(fb @ yb / (fb @ fb))
    assert r2 == pytest.approx(r2_score(yb, a * fb), rel=1e-12)
    assert a == pytest.approx(2.0, abs=0.05) and xb.shape == (10,)
    assert grpo.binned_r2(x, 3 * f, f, edges)[0] == pytest.approx(1.0)
    assert grpo.binned_r2(x, y, np.ones_like(x), edges)[0] < 0.5  # a flat shape cannot follow sin


def test_binned_helpers_reject_bad_input():
    with pytest.raises(ValueError, match="one length"):
        grpo.binned_r2(np.zeros(3), np.zeros(4), np.zeros(3), np.linspace(0, 1, 3))
    with pytest.raises(ValueError, match="two non-empty bins"):
        grpo.binned_r2(np.full(5, 0.1), np.zeros(5), np.ones(5), np.linspace(0, 1, 3))
    assert grpo.binned_abs_gap(np.array([0.1, 0.2, 0.8]), np.array([1.0, 0, 0.5]), np.array([0.0, 0, 0.5]),
                               np.array([0, 0.5, 1])) == pytest.approx(2 / 3 * 0.5)
    with pytest.raises(ValueError, match="inside edges"):
        grpo.binned_abs_gap(np.array([2.0]), np.zeros(1), np.zeros(1), np.array([0, 1]))


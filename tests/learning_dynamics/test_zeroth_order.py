"""paperkit.learning_dynamics.zeroth_order and zo_policy: batched two-point ZO estimates, oracles, closed forms."""
import numpy as np
import pytest
import torch

from paperkit.learning_dynamics import zeroth_order as zo
from paperkit.learning_dynamics import zo_policy as zop

SEEDS = [0, 1, 2]
TOL = {torch.float64: (1e-10, 1e-12), torch.float32: (1e-4, 1e-5)}


def _policy_inputs(seed, K=3, B=5, p=4, c=6, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(K, p * c, generator=g, dtype=dtype)
    X = torch.randn(K, B, p, generator=g, dtype=dtype)
    T = torch.rand(K, B, c, generator=g, dtype=dtype)
    return theta, X, T, c


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shape", [(1, 1, 2, 2), (3, 5, 4, 6), (2, 17, 3, 10)])
def test_target_ce_matches_reference(seed, dtype, shape):
    theta, X, T, c = _policy_inputs(seed, *shape, dtype=dtype)
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(zo.target_ce(theta, X, T, c), zo.target_ce_ref(theta, X, T, c).to(dtype),
                               rtol=rtol * 10, atol=atol * 10)


@pytest.mark.parametrize("seed", SEEDS)
def test_target_ce_equals_torch_cross_entropy_for_probability_targets(seed):
    theta, X, T, c = _policy_inputs(seed)
    T = T / T.sum(-1, keepdim=True)
    logits = zo.policy_logits(theta, X, c)
    want = torch.stack([torch.nn.functional.cross_entropy(logits[k], T[k]) for k in range(theta.shape[0])])
    torch.testing.assert_close(zo.target_ce(theta, X, T, c), want, rtol=1e-12, atol=1e-12)


def test_target_ce_broadcasts_over_extra_leading_axes():
    theta, X, T, c = _policy_inputs(0)
    th4, X4, T4 = theta[:, None].expand(3, 2, -1), X[:, None].expand(3, 2, -1, -1), T[:, None].expand(3, 2, -1, -1)
    out = zo.target_ce(th4, X4, T4, c)
    assert out.shape == (3, 2)
    torch.testing.assert_close(out[:, 0], zo.target_ce(theta, X, T, c))


@pytest.mark.parametrize("seed", SEEDS)
def test_sampled_reward_matches_reference_exactly(seed):
    theta, X, _, c = _policy_inputs(seed, K=2, B=7, p=3, c=5)
    g = torch.Generator().manual_seed(seed + 10)
    y = torch.randint(0, c, (2, 7), generator=g)
    U = torch.rand(2, 7, 9, generator=g, dtype=torch.float64)
    assert torch.equal(zo.sampled_reward(theta, X, y, U, c), zo.sampled_reward_ref(theta, X, y, U, c))


def test_sampled_reward_is_unbiased_for_the_probability_of_the_correct_answer():
    theta, X, _, c = _policy_inputs(3, K=2, B=6, p=3, c=4)
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, c, (2, 6), generator=g)
    G = 200_000
    U = torch.rand(2, 6, G, generator=g, dtype=torch.float64)
    probs = torch.softmax(zo.policy_logits(theta, X, c), -1)
    exact = probs.gather(-1, y[..., None])[..., 0].mean(-1)
    se = (exact * (1 - exact) / (6 * G)).sqrt()
    assert torch.all((zo.sampled_reward(theta, X, y, U, c) - exact).abs() < 5 * se)


def test_sample_answers_frequencies_follow_the_softmax():
    theta, X, _, c = _policy_inputs(1, K=1, B=3, p=2, c=5)
    U = torch.rand(1, 3, 100_000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    a = zo.sample_answers(theta, X, U, c)
    freq = torch.nn.functional.one_hot(a, c).double().mean(-2)
    torch.testing.assert_close(freq, torch.softmax(zo.policy_logits(theta, X, c), -1), atol=6e-3, rtol=0)


def _ce(pts, Xb, Tb):
    return zo.target_ce(pts, Xb, Tb, 3)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("q", [1, 4])
def test_zo_two_point_matches_per_sample_loop(seed, q):
    g = torch.Generator().manual_seed(seed)
    K, B, p, c = 2, 5, 2, 3
    theta = torch.randn(K, p * c, generator=g, dtype=torch.float64)
    dirs = torch.randn(K, q, p * c, generator=g, dtype=torch.float64)
    plus = (torch.randn(K, q, B, p, generator=g, dtype=torch.float64), torch.rand(K, q, B, c, generator=g, dtype=torch.float64))
    minus = (torch.randn(K, q, B, p, generator=g, dtype=torch.float64), torch.rand(K, q, B, c, generator=g, dtype=torch.float64))
    for a, b in zip(zo.zo_two_point(_ce, theta, dirs, 1e-2, plus, minus), zo.zo_two_point_ref(_ce, theta, dirs, 1e-2, plus, minus)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def test_matched_pair_cancels_additive_noise_exactly_and_mismatched_does_not():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 5, generator=g, dtype=torch.float64)
    u = torch.randn(1, 1000, 5, generator=g, dtype=torch.float64)
    e1, e2 = (torch.randn(1, 1000, generator=g, dtype=torch.float64) for _ in range(2))
    f = lambda pts, e: zo.quadratic_zo_oracle(pts, e, 0.3)
    proj_m = zo.zo_two_point(f, x, u, 1e-3, (e1,), (e1,))[1]
    torch.testing.assert_close(proj_m, (u * x[:, None]).sum(-1), rtol=1e-7, atol=1e-8)
    proj_x = zo.zo_two_point(f, x, u, 1e-3, (e1,), (e2,))[1]
    torch.testing.assert_close(proj_x - proj_m, 0.3 * (e1 - e2) / 2e-3, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("matched", [True, False])
@pytest.mark.parametrize("mu", [0.1, 0.01])
def test_second_moment_closed_form_by_monte_carlo(matched, mu):
    d, sigma, N = 8, 0.2, 200_000
    g = torch.Generator().manual_seed(5)
    x = torch.ones(1, d, dtype=torch.float64)
    u = torch.randn(1, N, d, generator=g, dtype=torch.float64)
    e1, e2 = (torch.randn(1, N, generator=g, dtype=torch.float64) for _ in range(2))
    f = lambda pts, e: zo.quadratic_zo_oracle(pts, e, sigma)
    proj = zo.zo_two_point(f, x, u, mu, (e1,), (e1,) if matched else (e2,))[1]
    m2 = float((proj[..., None] ** 2 * u**2).sum(-1).mean())
    assert m2 == pytest.approx(zo.quadratic_second_moment(d, d, sigma, mu, matched), rel=0.03)


def test_estimate_is_unbiased_on_the_quadratic():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 6, generator=g, dtype=torch.float64)
    u = torch.randn(1, 400_000, 6, generator=g, dtype=torch.float64)
    e = torch.zeros(1, 400_000, dtype=torch.float64)
    est = zo.zo_two_point(lambda pts, n: zo.quadratic_zo_oracle(pts, n, 0.0), x, u, 0.05, (e,), (e,))[0]
    torch.testing.assert_close(est, x, atol=0.03, rtol=0)


def test_quadratic_floor_by_simulation():
    d, sigma, mu, lr, chains = 10, 0.1, 0.05, 0.05, 512
    g = torch.Generator().manual_seed(0)
    x = torch.ones(chains, d, dtype=torch.float64)
    f = lambda pts, e: zo.quadratic_zo_oracle(pts, e, sigma)
    tail = []
    for s in range(600):
        u = torch.randn(chains, 1, d, generator=g, dtype=torch.float64)
        e1, e2 = (torch.randn(chains, 1, generator=g, dtype=torch.float64) for _ in range(2))
        x = x - lr * zo.zo_two_point(f, x, u, mu, (e1,), (e2,))[0]
        if s >= 300:
            tail.append(float((x**2).sum(-1).mean()))
    assert np.mean(tail) == pytest.approx(zo.quadratic_floor(d, sigma, mu, lr), rel=0.06)
    with pytest.raises(ValueError, match="lr"):
        zo.quadratic_floor(d, sigma, mu, 1.0)


def test_bad_inputs_name_the_argument():
    theta, X, T, c = _policy_inputs(0)
    with pytest.raises(ValueError, match="theta"):
        zo.target_ce(theta[:, :-1], X, T, c)
    with pytest.raises(TypeError, match="X"):
        zo.target_ce(theta, X.float(), T, c)
    with pytest.raises(ValueError, match="T"):
        zo.target_ce(theta, X, T[..., :-1], c)
    with pytest.raises(ValueError, match="theta"):
        zo.target_ce(theta * float("nan"), X, T, c)
    with pytest.raises(ValueError, match="n_answers"):
        zo.target_ce(theta, X, T, 1)
    with pytest.raises(TypeError, match="theta"):
        zo.target_ce(theta.numpy(), X, T, c)
    y = torch.zeros(3, 5, dtype=torch.int64)
    with pytest.raises(ValueError, match="uniforms"):
        zo.sampled_reward(theta, X, y, torch.full((3, 5, 2), 1.5, dtype=torch.float64), c)
    with pytest.raises(ValueError, match="y"):
        zo.sampled_reward(theta, X, y + 99, torch.rand(3, 5, 2, dtype=torch.float64), c)
    dirs = torch.randn(3, 2, theta.shape[1], dtype=torch.float64)
    with pytest.raises(ValueError, match="mu"):
        zo.zo_two_point(_ce, theta, dirs, 0.0, (), ())
    with pytest.raises(ValueError, match="dirs"):
        zo.zo_two_point(_ce, theta, dirs[:, :, :-1], 0.1, (), ())


# ------------------------------------------------------------------------------------------ zo_policy

@pytest.fixture(scope="module")
def task():
    from paperkit.data.datasets import sklearn_digits

    X, y, _ = sklearn_digits()
    return zop.digits_task(X / 16.0, y, 8, 600, np.random.default_rng(0))


def test_digits_task_and_boltzmann_targets(task):
    assert task.Z.shape == (1797, 9) and task.dim == 90 and len(task.train) == 600
    assert torch.allclose(task.Z[task.train, :-1].std(0, unbiased=False), torch.ones(8, dtype=torch.float64))
    T, share = zop.boltzmann_targets(task, torch.zeros(task.dim, dtype=torch.float64), 8, 0.2,
                                     torch.Generator().manual_seed(0))
    assert T.shape == (600, 10) and float(T.sum(1).mean()) == pytest.approx(1.0)
    assert 0.05 < share < 0.15
    with pytest.raises(ValueError, match="beta"):
        zop.boltzmann_targets(task, torch.zeros(task.dim, dtype=torch.float64), 8, 0.0, torch.Generator())


def test_grpo_targets_give_the_grpo_surrogate(task):
    # target_ce with GRPO targets equals -(1/B) sum_b (1/G) sum_j A_bj log pi(a_bj), rebuilt from the same uniforms
    g = torch.Generator().manual_seed(0)
    theta = 0.3 * torch.randn(1, task.dim, generator=g, dtype=torch.float64)
    idx = torch.arange(6)[None]
    T = zop.grpo_targets(task, theta, idx, 4, torch.Generator().manual_seed(1))
    assert torch.allclose(T.sum(-1), torch.zeros(1, 6, dtype=torch.float64), atol=1e-9)  # advantages sum to zero
    U = torch.rand(1, 6, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    Xb, yb = task.Z[task.train][idx], task.y[task.train][idx]
    a = zo.sample_answers(theta, Xb, U, 10)
    r = (a == yb[..., None]).double()
    A = (r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-4)
    th2 = 0.5 * torch.randn(1, task.dim, generator=g, dtype=torch.float64)
    logp = torch.log_softmax(zo.policy_logits(th2, Xb, 10), -1).gather(-1, a)
    want = -(A * logp).mean(-1).mean(-1)
    torch.testing.assert_close(zo.target_ce(th2, Xb, T, 10), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("method", zop.METHODS)
@pytest.mark.parametrize("order", ["fo", "zo"])
def test_train_policy_runs_and_counts_evaluations(task, method, order):
    theta0 = torch.zeros(2, task.dim, dtype=torch.float64)
    T, _ = zop.boltzmann_targets(task, theta0[0], 4, 0.2, torch.Generator().manual_seed(0))
    run = zop.train_policy(task, method, order, theta0, 20, 8, 0.1, torch.Generator().manual_seed(0),
                           np.random.default_rng(0), T_off=T, n_dirs=3, log_every=10)
    assert run.acc.shape == (3, 2) and list(run.steps_logged) == [0, 10, 20]
    assert run.evaluations == (2 * 20 if order == "fo" else 2 * 2 * 3 * 20)
    assert torch.isfinite(run.theta).all()


def test_common_random_numbers_cancel_most_reward_noise(task):
    # grpo_crn shares the rollout uniforms between the two sides: at a tiny mu almost no sampled answer changes, so
    # almost every projected difference is exactly zero; with fresh uniforms (grpo) almost none is
    g = torch.Generator().manual_seed(0)
    theta = 0.3 * torch.randn(1, task.dim, generator=g, dtype=torch.float64)
    dirs = torch.randn(1, 200, task.dim, generator=g, dtype=torch.float64)
    idx = torch.arange(8)
    Xb = task.Z[task.train][idx].expand(1, 200, -1, -1)
    yb = task.y[task.train][idx].expand(1, 200, -1)
    u1, u2 = (torch.rand(1, 200, 8, 4, generator=g, dtype=torch.float64) for _ in range(2))
    reward = lambda pts, X, y, U: zo.sampled_reward(pts, X, y, U, 10)
    crn = zo.zo_two_point(reward, theta, dirs, 1e-6, (Xb, yb, u1), (Xb, yb, u1))[1]
    fresh = zo.zo_two_point(reward, theta, dirs, 1e-6, (Xb, yb, u1), (Xb, yb, u2))[1]
    assert float((crn == 0).double().mean()) > 0.95
    assert float((fresh == 0).double().mean()) < 0.5


def test_fo_bolt_learns(task):
    theta0 = torch.zeros(2, task.dim, dtype=torch.float64)
    T, _ = zop.boltzmann_targets(task, theta0[0], 8, 0.2, torch.Generator().manual_seed(0))
    run = zop.train_policy(task, "bolt", "fo", theta0, 200, 32, 0.5, torch.Generator().manual_seed(0),
                           np.random.default_rng(0), T_off=T)
    assert run.acc[-1].min() > 0.8


def test_train_policy_rejects_bad_arguments(task):
    theta0 = torch.zeros(1, task.dim, dtype=torch.float64)
    with pytest.raises(ValueError, match="method"):
        zop.train_policy(task, "ppo", "zo", theta0, 5, 4, 0.1, torch.Generator(), np.random.default_rng(0))
    with pytest.raises(ValueError, match="order"):
        zop.train_policy(task, "grpo", "so", theta0, 5, 4, 0.1, torch.Generator(), np.random.default_rng(0))
    with pytest.raises(ValueError, match="T_off"):
        zop.train_policy(task, "bolt", "zo", theta0, 5, 4, 0.1, torch.Generator(), np.random.default_rng(0))


def test_zo_sgd_floors_shape_and_order(task):
    th = zop.fo_warm_start(task, 50, 0.5)
    mat, mis = zop.zo_sgd_floors(task, th, [0.1, 0.02], 2, 200, 16, 5e-4, torch.Generator().manual_seed(0),
                                 np.random.default_rng(0))
    assert mat.shape == mis.shape == (2,)
    assert mis[1] > mis[0] and mis[1] > mat[1]

"""Speed of the GRPO kernels against their plain references (ratios from interleaved repeats)."""
from __future__ import annotations

import numpy as np

from paperkit.learning_dynamics import grpo
from paperkit.timing import speed_ratio


def _reference_training(theta0, budget, rollouts_per_step, lr, seed, G):
    """The training loop of grpo.train_grpo (fixed G) written with the reference kernels."""
    rng, theta, used, m = np.random.default_rng(seed), theta0.copy(), 0, rollouts_per_step // G
    order, pos = rng.permutation(theta.size), 0
    while used + rollouts_per_step <= budget:
        if pos + m > theta.size:
            order, pos = rng.permutation(theta.size), 0
        idx, pos = order[pos:pos + m], pos + m
        theta = grpo.grpo_step_ref(theta, idx, grpo.sample_rewards_ref(theta, idx, G, rng), lr)
        used += m * G
    return theta


def run(quick: bool) -> list[dict]:
    reps = 3 if quick else 7
    n, G = (500, 16) if quick else (2000, 64)
    theta = np.random.default_rng(0).uniform(-9, 3, n)
    idx = np.arange(n)
    rows = []

    r = speed_ratio(lambda: grpo.sample_rewards(theta, idx, G, np.random.default_rng(1)),
                    lambda: grpo.sample_rewards_ref(theta, idx, G, np.random.default_rng(1)), repeats=reps)
    rows.append(dict(kernel="sample_rewards (NumPy, vectorised)", baseline="sample_rewards_ref (Python loop)",
                     ratio=r.ratio, shape=f"{n} prompts x G={G}", work=f"{n * G} Bernoulli rollouts"))

    rewards = grpo.sample_rewards(theta, idx, G, np.random.default_rng(2))
    r = speed_ratio(lambda: grpo.grpo_step(theta, idx, rewards, 200.0),
                    lambda: grpo.grpo_step_ref(theta, idx, rewards, 200.0), repeats=reps)
    rows.append(dict(kernel="grpo_step (closed form, NumPy)", baseline="grpo_step_ref (Torch autograd)",
                     ratio=r.ratio, shape=f"{n} groups x G={G}", work="one SGD step on the GRPO surrogate"))

    p = np.random.default_rng(3).uniform(0, 1, 20_000 if quick else 200_000)
    r = speed_ratio(lambda: grpo.mixed_group_prob(p, G), lambda: grpo.mixed_group_prob_ref(p, G), repeats=reps)
    rows.append(dict(kernel="mixed_group_prob (log1p/exp)", baseline="mixed_group_prob_ref (scipy.stats.binom)",
                     ratio=r.ratio, shape=f"{p.size} pass rates", work=f"{p.size} evaluations of P_mix"))

    budget, per_step = (8_192, 256) if quick else (65_536, 1024)
    r = speed_ratio(lambda: grpo.train_grpo(theta, budget, per_step, 200.0, np.random.default_rng(4), grpo.FixedG(G)),
                    lambda: _reference_training(theta, budget, per_step, 200.0, 4, G), repeats=reps)
    rows.append(dict(kernel="train_grpo (fixed G)", baseline="same loop on the reference kernels", ratio=r.ratio,
                     shape=f"{n} prompts, G={G}, {per_step} rollouts/step", work=f"{budget} rollouts of training"))
    return rows


if __name__ == "__main__":
    for row in run(quick=False):
        print(row)

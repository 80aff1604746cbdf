"""The policy-evaluation experiment of the chapter 'A wrong simulator as a control variate'.

The real environment is gymnasium's FrozenLake (slippery, with a chosen success rate), read into tables; the policy
is a softmax of the optimal action values; the simulators are perturbed copies of strength ``eps``
(:func:`paperkit.rl_agents.sim_cv.perturb`). For each simulator the study draws ``reps`` independent batches of
``n`` real episodes (one Numba rollout shared by every estimator, so that all comparisons are paired) and ``m``
simulated episodes per batch for the mixing estimators, and returns every estimator's error against the exact
value ``V^pi(s0)`` of the real environment.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np

from paperkit.rl_agents import sim_cv as sc

ESTIMATORS = ("real", "cv", "cv_insample", "cv_star", "cv_dr", "cv_wrong_mean", "cv_placebo", "mix_pool",
              "mix_shrink", "mix_oracle")


def make_problem(map_name: str = "4x4", success_rate: float = 0.8, gamma: float = 0.95,
                 temperature: float = 0.3) -> dict:
    """The real MDP (tables of ``gym.make('FrozenLake-v1', ...)``), the policy ``pi = softmax(Q*/temperature)`` and
    its exact ``V``, ``Q`` (linear solve)."""
    env = gym.make("FrozenLake-v1", map_name=map_name, is_slippery=True, success_rate=success_rate)
    P, R, term, s0 = sc.tables_from_gym(env)
    pi = sc.softmax_policy(sc.optimal_q(P, R, term, gamma), temperature)
    V, Q = sc.policy_eval(P, R, term, pi, gamma)
    return {"P": P, "R": R, "term": term, "s0": s0, "pi": pi, "V": V, "Q": Q, "gamma": gamma,
            "env_kwargs": {"map_name": map_name, "is_slippery": True, "success_rate": success_rate}}


def make_simulators(prob: dict, eps_list, rng: np.random.Generator) -> list[dict]:
    """One simulator per ``eps`` along one random direction (the same perturbation draws for every ``eps``). Each has
    its tables, ``V_sim``, ``Q_sim``, the action-CV table ``f`` and the expected-reward table ``r_sim``; the exact
    real-environment moments of both statistics (``rho``, ``beta_star``, the mean of the wrong-mean statistic), and
    ``rho_sim`` and ``beta_sim``, the correlation of ``G`` and ``C`` and the optimal slope computed inside the
    simulator."""
    P, R, term, pi, g, s0 = prob["P"], prob["R"], prob["term"], prob["pi"], prob["gamma"], prob["s0"]
    direction = int(rng.integers(1 << 62))
    sims = []
    for eps in eps_list:
        Ps, Rs = sc.perturb(P, R, term, float(eps), np.random.default_rng(direction))
        Vs, Qs = sc.policy_eval(Ps, Rs, term, pi, g)
        f = sc.action_cv_table(Qs, pi)
        r_sim = (Ps * Rs).sum(2)
        real = sc.return_moments(P, R, term, pi, g, s0, np.stack([f, r_sim]))
        inside = sc.return_moments(Ps, Rs, term, pi, g, s0, f[None])
        sims.append({"eps": float(eps), "P": Ps, "R": Rs, "V_sim": Vs, "Q_sim": Qs, "f": f, "r_sim": r_sim,
                     "rho": float(real["rho"][0]), "beta_star": float(real["beta_star"][0]),
                     "mean_C": float(real["mean_C"][0]), "var_G": real["var_G"],
                     "wrong_mean_offset": float(real["mean_C"][1] - Vs[s0]), "rho_sim": float(inside["rho"][0]),
                     "beta_sim": float(inside["beta_star"][0])})
    return sims


def run_batches(prob: dict, sims: list[dict], n: int, m: int, reps: int, rng: np.random.Generator,
                T: int = 400) -> dict:
    """Errors (estimate - V^pi(s0)) of every estimator in :data:`ESTIMATORS`, shape (len(sims), reps), plus the
    batch means ``C_bar`` of the action CV (len(sims), reps). The estimators:

    * ``real``: the mean of the n real returns;
    * ``cv``: the action CV with a cross-fitted slope; ``cv_insample``: with the in-batch least-squares slope;
      ``cv_star``: with the exact beta*; ``cv_dr``: with the slope the simulator predicts for itself, beta_sim
      (1 when Q_sim is the simulator's exact Q: the doubly robust estimator);
    * ``cv_wrong_mean``: the simulator's expected reward along the real path, centred with the simulator's value
      V_sim(s0), cross-fitted slope;
    * ``cv_placebo``: the action CV built from a random Q table (no information about either environment; one table
      for every simulator), cross-fitted slope;
    * ``mix_pool``: the n real and m simulated returns pooled; ``mix_shrink``: the plug-in MSE-weighted mix
      (:func:`~paperkit.rl_agents.sim_cv.shrink_mix`); ``mix_oracle``: the weight that minimises the MSE given the
      true bias (a ceiling no practitioner has).
    """
    P, R, term, pi, g, s0 = prob["P"], prob["R"], prob["term"], prob["pi"], prob["gamma"], prob["s0"]
    V0 = prob["V"][s0]
    placebo = sc.action_cv_table(rng.normal(size=pi.shape) * float(prob["Q"].std()), pi)
    tables = np.concatenate([np.stack([s["f"], s["r_sim"]]) for s in sims] + [placebo[None]])
    G, C, _ = sc.rollout(P, R, term, pi, s0, n * reps, T, g, tables, int(rng.integers(1 << 62)))
    G = G.reshape(reps, n)
    C_placebo = C[:, -1].reshape(reps, n)
    C = C[:, :-1].reshape(reps, n, len(sims), 2)
    out = {k: np.zeros((len(sims), reps)) for k in ESTIMATORS}
    out["C_bar"] = np.zeros((len(sims), reps))
    for j, s in enumerate(sims):
        Cf, X = C[:, :, j, 0], C[:, :, j, 1] - s["V_sim"][s0]
        Gs, _, _ = sc.rollout(s["P"], s["R"], term, pi, s0, m * reps, T, g, np.zeros((0,) + pi.shape),
                              int(rng.integers(1 << 62)))
        Gs = Gs.reshape(reps, m)
        sim_mean = Gs.mean(1)
        out["real"][j] = G.mean(1) - V0
        out["cv"][j] = sc.cv_estimate(G, Cf, "loo") - V0
        out["cv_insample"][j] = sc.cv_estimate(G, Cf, "insample") - V0
        out["cv_star"][j] = sc.cv_estimate(G, Cf, s["beta_star"]) - V0
        out["cv_dr"][j] = sc.cv_estimate(G, Cf, s["beta_sim"]) - V0
        out["cv_wrong_mean"][j] = sc.cv_estimate(G, X, "loo") - V0
        out["cv_placebo"][j] = sc.cv_estimate(G, C_placebo, "loo") - V0
        out["mix_pool"][j] = (G.sum(1) + Gs.sum(1)) / (n + m) - V0
        out["mix_shrink"][j] = sc.shrink_mix(G, sim_mean, Gs.var(1, ddof=1) / m) - V0
        v, b = s["var_G"] / n, s["V_sim"][s0] - V0
        w = v / (v + b * b) if v + b * b > 0 else 1.0
        out["mix_oracle"][j] = w * sim_mean + (1 - w) * G.mean(1) - V0
        out["C_bar"][j] = Cf.mean(1)
    return out


def summarise(err: dict) -> dict:
    """Per estimator and simulator: bias, its z-score (bias / standard error over batches), the paired z-score
    ``zp`` of its difference from the estimate at the exact beta* on the same batches (which is unbiased by
    construction, so ``zp`` isolates the bias an estimator adds to it), MSE with its 95% interval, and the MSE
    ratio to real-only (paired, delta-method 95% interval). Arrays of shape (len(sims),)."""
    res = {}
    for k in ESTIMATORS:
        e = err[k]
        R = e.shape[1]
        bias = e.mean(1)
        se = e.std(1, ddof=1) / np.sqrt(R)
        mse = (e ** 2).mean(1)
        mse_se = (e ** 2).std(1, ddof=1) / np.sqrt(R)
        ratio = np.array([sc.paired_ratio_ci(e[j] ** 2, err["real"][j] ** 2) for j in range(e.shape[0])])
        d = e - err["cv_star"]
        sd = d.std(1, ddof=1)
        zp = np.where(sd > 0, d.mean(1) / np.where(sd > 0, sd, 1.0) * np.sqrt(R), 0.0)
        res[k] = {"bias": bias, "z": bias / se, "zp": zp, "mse": mse, "mse_lo": mse - 1.96 * mse_se,
                  "mse_hi": mse + 1.96 * mse_se, "ratio": ratio[:, 0], "ratio_lo": ratio[:, 1],
                  "ratio_hi": ratio[:, 2]}
    return res


def gym_rollout_returns(prob: dict, n_episodes: int, rng: np.random.Generator, T: int = 400) -> np.ndarray:
    """Discounted returns of ``n_episodes`` episodes of the policy run through gymnasium's own ``env.step``
    (``FrozenLake-v1`` with the problem's arguments), actions drawn from ``pi`` with ``rng``: the oracle check of
    the tables, the linear solve and the Numba rollout."""
    env = gym.make("FrozenLake-v1", max_episode_steps=T, **prob["env_kwargs"])
    pi, g = prob["pi"], prob["gamma"]
    out = np.zeros(n_episodes)
    for i in range(n_episodes):
        s, _ = env.reset(seed=int(rng.integers(1 << 31)))
        disc, done = 1.0, False
        while not done:
            a = int(rng.choice(pi.shape[1], p=pi[s]))
            s, r, terminated, truncated, _ = env.step(a)
            out[i] += disc * r
            disc *= g
            done = terminated or truncated
    env.close()
    return out

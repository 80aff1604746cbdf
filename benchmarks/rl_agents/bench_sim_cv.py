"""Kernels of the simulator-control-variate chapter. ``ratio`` = baseline time / kernel time (> 1: the kernel is
faster). The Numba rollout against its plain-Python reference (same random stream, same episodes) and against
gymnasium's own ``env.step`` loop (the library a user would pick; it returns the rewards only, no control variate).
"""
from __future__ import annotations

import numpy as np

from paperkit.rl_agents import sim_cv as sc
from paperkit.rl_agents import sim_cv_study as st
from paperkit.timing import speed_ratio


def run(quick: bool = True) -> list[dict]:
    """One row per (kernel, baseline, size)."""
    reps = 3 if quick else 7
    prob = st.make_problem()
    sims = st.make_simulators(prob, [0.0, 0.3, 1.0], np.random.default_rng(0))
    tabs = np.stack([s["f"] for s in sims])
    P, R, term, pi, s0, g = prob["P"], prob["R"], prob["term"], prob["pi"], prob["s0"], prob["gamma"]
    rows = []
    n = 200 if quick else 1000
    steps = int(sc.rollout(P, R, term, pi, s0, n, 400, g, tabs, 1)[2].sum())
    r = speed_ratio(lambda: sc.rollout(P, R, term, pi, s0, n, 400, g, tabs, 1),
                    lambda: sc.rollout_ref(P, R, term, pi, s0, n, 400, g, tabs, 1), repeats=reps)
    rows.append({"kernel": "sim_cv.rollout", "baseline": "sim_cv.rollout_ref", "ratio": round(r.ratio, 3),
                 "shape": f"episodes={n}, S=16, A=4, K={len(tabs)}", "work": f"{steps} steps"})
    r = speed_ratio(lambda: sc.rollout(P, R, term, pi, s0, n, 400, g, tabs, 1),
                    lambda: st.gym_rollout_returns(prob, n, np.random.default_rng(1)), repeats=reps)
    rows.append({"kernel": "sim_cv.rollout", "baseline": "gymnasium FrozenLake-v1 env.step loop", "vs": "library",
                 "ratio": round(r.ratio, 3), "shape": f"episodes={n}, S=16, A=4",
                 "work": f"about {steps} steps"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)

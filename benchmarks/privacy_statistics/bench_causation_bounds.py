"""Speed of the plug-in bound kernel (paperkit.privacy_statistics.causation_bounds.bound_estimates) against its plain reference and
against the vectorised NumPy bounds of the plug-in probabilities."""
from __future__ import annotations

import numpy as np

from paperkit.privacy_statistics import causation_bounds as cb
from paperkit.timing import speed_ratio


def _counts(reps: int):
    rng = np.random.default_rng(0)
    r, s = cb.random_models(rng, 10)
    p_exp, p_obs, _ = cb.model_probabilities(r, s)
    return cb.draw_counts(rng, p_exp, p_obs, 2000, 2000, reps)


def run(quick: bool) -> list[dict]:
    rows = []
    reps = 200 if quick else 1000
    k_exp, k_obs, n_arm, n_obs = _counts(reps)
    shape = f"{k_exp.shape[0]} models x {reps} repetitions"
    for poc in ("PNS", "PN"):
        cb.bound_estimates(k_exp, k_obs, n_arm, n_obs, poc)  # compile outside the timing
        fast = lambda: cb.bound_estimates(k_exp, k_obs, n_arm, n_obs, poc)  # noqa: E731
        ref = speed_ratio(fast, lambda: cb.bound_estimates_ref(k_exp, k_obs, n_arm, n_obs, poc),
                          repeats=3)
        vec = speed_ratio(fast, lambda: cb.poc_bounds(k_exp / n_arm[..., None], k_obs / n_obs[..., None], poc, allow_contradiction=True),
                          repeats=5 if quick else 15)
        work = f"{k_exp.shape[0] * reps} estimated {poc} bounds"
        rows.append({"kernel": f"bound_estimates[{poc}] (numba)", "baseline": "bound_estimates_ref (row loop)",
                     "ratio": ref.ratio, "shape": shape, "work": work})
        rows.append({"kernel": f"bound_estimates[{poc}] (numba)", "baseline": "poc_bounds (numpy, vectorised)",
                     "ratio": vec.ratio, "shape": shape, "work": work})
    return rows


if __name__ == "__main__":
    for row in run(quick=False):
        print(row)

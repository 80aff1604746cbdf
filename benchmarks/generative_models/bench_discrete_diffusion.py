"""Kernels of the discrete-diffusion chapter. ``ratio`` = baseline time / kernel time (> 1: the kernel is faster).
The exact forward marginals by per-token kernels against scipy.linalg.expm of the full generator (the reference, and
the library call a user would write); the vectorised reverse rates against the one-edit-at-a-time reference; the
uniform reverse-step matrix against its entry-by-entry reference.
"""
from __future__ import annotations

import numpy as np

from paperkit.generative_models import diffusion_training as dt
from paperkit.generative_models import discrete_diffusion as dd
from paperkit.timing import speed_ratio


def run(quick: bool = True) -> list[dict]:
    """One row per (kernel, baseline, size)."""
    reps = 3 if quick else 7
    rows = []
    L, N = (7, 2) if quick else (9, 2)
    S = dd.forbidden_pattern_support(L, N, "11")
    p0 = dd.zipf_law(S, 1.0, np.random.default_rng(0))
    t = np.geomspace(1e-8, 1e-6, 5)
    r = speed_ratio(lambda: dd.forward_marginals(p0, t, L, N, "uniform"),
                    lambda: dd.forward_marginals_ref(p0, t, L, N, "uniform"), repeats=reps)
    rows.append({"kernel": "discrete_diffusion.forward_marginals",
                 "baseline": "scipy.linalg.expm of the full generator (forward_marginals_ref)", "vs": "library",
                 "ratio": round(r.ratio, 3), "shape": f"L={L}, N={N}, {len(t)} times",
                 "work": f"{len(t)} marginals over {N ** L} strings"})
    q = dd.forward_marginals(p0, t, L, N, "uniform")
    src, dst, _ = dd.single_edits(L, N, "uniform")
    r = speed_ratio(lambda: dd.edit_rates(q, src, dst, N, "uniform"),
                    lambda: dd.edit_rates_ref(q, src, dst, N, "uniform"), repeats=reps)
    rows.append({"kernel": "discrete_diffusion.edit_rates", "baseline": "discrete_diffusion.edit_rates_ref",
                 "ratio": round(r.ratio, 3), "shape": f"{len(t)} times x {len(src)} edits",
                 "work": f"{len(t) * len(src)} rate ratios"})
    Ls = 4 if quick else 5
    X = dd.all_strings(Ls, N)
    pr = np.random.default_rng(1).random((len(X), Ls, N))
    pr /= pr.sum(2, keepdims=True)
    r = speed_ratio(lambda: dt.uniform_step_matrix(pr, X, 0.3, 0.6, N),
                    lambda: dt.uniform_step_matrix_ref(pr, X, 0.3, 0.6, N), repeats=reps)
    rows.append({"kernel": "diffusion_training.uniform_step_matrix",
                 "baseline": "diffusion_training.uniform_step_matrix_ref", "ratio": round(r.ratio, 3),
                 "shape": f"L={Ls}, N={N}", "work": f"{len(X) ** 2} transition entries x {Ls} positions"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)

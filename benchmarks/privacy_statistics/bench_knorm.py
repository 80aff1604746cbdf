"""Speed of paperkit.privacy_statistics.knorm's kernels against their plain references, as interleaved ratios.

``ratio`` = baseline time / kernel time (> 1: the kernel is faster). Both MCMC forms draw the same random numbers
(they share the generator-side cost), so the ratio measures the Metropolis sweeps themselves diluted by that cost;
work is counted as single-site Vandermonde updates (chains * steps * d moves of d - 1 log terms each).
"""
from __future__ import annotations

import numpy as np

from paperkit.privacy_statistics.knorm import knorm_eigs_mcmc, knorm_eigs_mcmc_ref, psd_trace_projection, psd_trace_projection_ref
from paperkit.timing import speed_ratio


def _row(kernel, baseline, r, shape, work):
    return {"kernel": kernel, "baseline": baseline, "ratio": round(r.ratio, 3), "shape": shape, "work": work,
            "t_kernel_s": r.t_candidate_s, "t_baseline_s": r.t_baseline_s}


def run(quick: bool = True) -> list[dict]:
    """Time the kernels at the chapter's sizes (quick) or a larger grid; one dict per (kernel, baseline, shape)."""
    sizes = [(8, 200, 300)] if quick else [(8, 200, 1000), (16, 200, 1000), (8, 2000, 300)]
    repeats = 3 if quick else 7
    rows = []
    for d, chains, steps in sizes:
        rows.append(_row(
            "knorm_eigs_mcmc (numba)", "knorm_eigs_mcmc_ref (numpy, vectorised over chains)",
            speed_ratio(lambda: knorm_eigs_mcmc(d, chains, steps, np.random.default_rng(0)),
                        lambda: knorm_eigs_mcmc_ref(d, chains, steps, np.random.default_rng(0)), repeats),
            f"d={d}, chains={chains}, steps={steps}", f"{chains * steps * d * (d - 1)} log-ratio terms"))
    rng = np.random.default_rng(1)
    for m, d in ([(200, 8)] if quick else [(200, 8), (2000, 8), (200, 32)]):
        G = rng.standard_normal((m, d, d))
        M = G + G.transpose(0, 2, 1)
        rows.append(_row(
            "psd_trace_projection (batched eigh + sort threshold)", "psd_trace_projection_ref (loop + bisection)",
            speed_ratio(lambda: psd_trace_projection(M, 1.0), lambda: psd_trace_projection_ref(M, 1.0), repeats),
            f"{m} matrices, d={d}", f"{m} eigendecompositions of {d}x{d}"))
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)

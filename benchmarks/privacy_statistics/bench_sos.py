"""Dense vs clique-sparse SOS layer: solve + backward (dual read-off) time as interleaved ratios.

``ratio`` = dense time / sparse time (> 1: the sparse layer is faster). ``work`` counts the PSD blocks: the sum of
s_k^3 (one factorisation / eigendecomposition per block per iteration) for dense and sparse programs.
"""
from __future__ import annotations

import numpy as np

from paperkit.privacy_statistics import sos
from paperkit.timing import speed_ratio


def run(quick: bool = True) -> list[dict]:
    """One row per chain length n; both programs are built once (parametrised) and only solve+backward is timed."""
    sizes = [4, 6] if quick else [4, 6, 8, 10]
    rows = []
    for n in sizes:
        f = sos.chain_poly(np.random.default_rng(n).uniform(-1, 1, n - 1))
        ps, pd = sos.build(n, sos.chain_cliques(n)), sos.build(n, [list(range(n))])
        r = speed_ratio(lambda: sos.solve(ps, f), lambda: sos.solve(pd, f), repeats=3 if quick else 5)
        rows.append({"kernel": "sos.solve (chain cliques, sparse)", "baseline": "sos.solve (one dense Gram)",
                     "ratio": round(r.ratio, 3), "shape": f"n={n}",
                     "work": f"sum s_k^3 dense {sum(s**3 for s in pd.block_sizes)} vs sparse "
                             f"{sum(s**3 for s in ps.block_sizes)}; SDP vars {pd.n_sdp_vars} vs {ps.n_sdp_vars}",
                     "t_kernel_s": r.t_candidate_s, "t_baseline_s": r.t_baseline_s})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)

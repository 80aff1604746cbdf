"""Backward pass of the barrier SOS layer: banded (clique structure kept) vs dense H on the same sparse program, and
against the dense program's layer. ``ratio`` = baseline time / kernel time (> 1: the banded backward is faster);
``work`` gives the counted flops of both (:func:`paperkit.privacy_statistics.sos_barrier.backward_flops`).
"""
from __future__ import annotations

import numpy as np

from paperkit.privacy_statistics import sos
from paperkit.privacy_statistics import sos_barrier as sb
from paperkit.timing import speed_ratio


def _setup(n, cliques, linalg, rng):
    mb = sb.moment_blocks(n, cliques)
    p = sb.barrier_solve(mb, mb.coeff_vector(sos.chain_poly(rng.uniform(-1, 1, n - 1))), 1e-3, linalg)
    _, G, Lg = sb.cert_loss(p, 0.05)
    return mb, p, G, Lg


def run(quick: bool = True) -> list[dict]:
    """One row per (comparison, n): structure kept vs dropped on the sparse program; sparse vs dense layer."""
    rng = np.random.default_rng(0)
    rows = []
    for n in ([16, 32] if quick else [16, 32, 64, 128, 256]):
        mb, p, G, Lg = _setup(n, sos.chain_cliques(n), "band", rng)
        r = speed_ratio(lambda: sb.backward(mb, p, G, Lg, "band"), lambda: sb.backward(mb, p, G, Lg, "dense"),
                        repeats=3 if quick else 7)
        rows.append({"kernel": "sos_barrier.backward (band)", "baseline": "sos_barrier.backward (dense H)",
                     "ratio": round(r.ratio, 3), "shape": f"chain n={n}, m={mb.m}",
                     "work": f"flops banded {sb.backward_flops(mb, 'band'):.3g} vs dense {sb.backward_flops(mb, 'dense'):.3g}"})
    for n in ([5, 6] if quick else [5, 6, 7, 8]):
        mb, p, G, Lg = _setup(n, sos.chain_cliques(n), "band", rng)
        md, pd, Gd, Lgd = _setup(n, [list(range(n))], "dense", rng)
        r = speed_ratio(lambda: sb.backward(mb, p, G, Lg, "band"), lambda: sb.backward(md, pd, Gd, Lgd, "dense"),
                        repeats=3 if quick else 7)
        rows.append({"kernel": "sos_barrier.backward (sparse program, band)",
                     "baseline": "sos_barrier.backward (dense program)", "ratio": round(r.ratio, 3),
                     "shape": f"n={n}, m sparse {mb.m} / dense {md.m}",
                     "work": f"flops sparse {sb.backward_flops(mb, 'band'):.3g} vs dense {sb.backward_flops(md, 'dense'):.3g}"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)

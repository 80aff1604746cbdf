"""Halfspace index (query + attention over the keys it returns) against dense torch SDPA and against the
brute-force halfspace query, at the same cache size, as wall-time ratios from interleaved repeats.

``run(quick)`` returns one row per (cache size, baseline): ``ratio`` = baseline time / index time (> 1: the
index is faster), ``work`` = the mean fraction of the cache the index scanned. CPU numbers; the paper's claim
is about GPUs and FlashAttention.
"""
from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_limits

from paperkit.device import setup_torch
from paperkit.sequence_models.sparse_attention import index_speed


def run(quick: bool) -> list[dict]:
    setup_torch("cpu")
    sizes = [16384] if quick else [16384, 32768, 65536]
    rows = []
    with threadpool_limits(1, user_api="blas"):  # OpenBLAS threads stall on a shared 2-core machine
        for n in sizes:
            # one cluster per 128 keys, and at least two per topic of the synthetic cache (64 topics)
            r = index_speed(n, 64, np.random.default_rng(0), max(128, n // 128), repeats=3 if quick else 7)
            shape = f"n={r['n']}, d=64, one query"
            work = f"scanned fraction {r['scanned']:.4f}"
            rows.append({"kernel": "halfspace_index.query + subset_attention",
                         "baseline": "torch scaled_dot_product_attention (dense, float32)",
                         "ratio": r["ratio_dense"], "shape": shape, "work": work, "vs": "library"})
            rows.append({"kernel": "halfspace_index.query + subset_attention",
                         "baseline": "halfspace_index.query_ref (brute force) + subset_attention",
                         "ratio": r["ratio_brute"], "shape": shape, "work": work})
    return rows


if __name__ == "__main__":
    import sys

    for row in run(quick="--quick" in sys.argv):
        print(row)

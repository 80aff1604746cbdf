"""Selective scan: the Numba kernel against the per-timestep reference, the Torch chunked scan (the form used for
training), and this machine's limit for its work: one float32 exp per state update (exp(Delta_t A) for every
(batch, channel, t, n)), at the all-core exp rate :func:`roofline.exp_rate_f32` measured in the same run. The two
multiply-adds per update (recurrence and readout) come on top of that limit, so 1.0 is not reachable."""
import numpy as np
import roofline
import torch

from paperkit.nn.selective_scan import selective_scan_numba, selective_scan_ref, selective_scan_torch
from paperkit.timing import speed_ratio


def run(quick: bool) -> list[dict]:
    bsz, d, L, n = (2, 16, 256, 16) if quick else (8, 64, 2048, 16)
    g = torch.Generator().manual_seed(0)
    u, delta = torch.randn(bsz, d, L, generator=g), torch.rand(bsz, d, L, generator=g) * 0.1
    A = -torch.rand(d, n, generator=g) - 0.1
    B, C = torch.randn(bsz, n, L, generator=g), torch.randn(bsz, n, L, generator=g)
    npa = [t.numpy() for t in (u, delta, A, B, C)]
    fast = lambda: selective_scan_numba(*npa)  # noqa: E731
    updates = bsz * d * L * n
    shape = f"B={bsz} D={d} L={L} N={n} float32"
    reps = 3 if quick else 5
    with torch.no_grad():
        r_ref = speed_ratio(fast, lambda: selective_scan_ref(u, delta, A, B, C), repeats=reps)
        r_torch = speed_ratio(fast, lambda: selective_scan_torch(u, delta, A, B, C), repeats=reps)
    t_fast = roofline.best_time(fast, reps)
    work = f"{updates:.3g} state updates, Numba at {updates / t_fast / 1e9:.2f} G updates/s"
    return [
        {"kernel": "selective_scan_numba", "baseline": "selective_scan_ref (per-timestep Torch loop)",
         "ratio": r_ref.ratio, "shape": shape, "work": work},
        {"kernel": "selective_scan_numba", "baseline": "selective_scan_torch (chunked parallel scan)",
         "ratio": r_torch.ratio, "shape": shape, "work": work},
        roofline.limit_row("selective_scan_numba", f"{updates:.3g} float32 exp on all cores", t_fast,
                           updates / roofline.exp_rate_f32(), shape, work),
    ]

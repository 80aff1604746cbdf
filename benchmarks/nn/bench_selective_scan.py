"""Selective scan: the Numba kernel against the per-timestep reference, the Torch chunked scan, and this machine's
limit for the same elementwise work (one vectorised exp-multiply-add per state update)."""
import numpy as np
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
    # the machine's limit for the same work: x = exp(dt*a) * x + b over as many elements, vectorised by NumPy
    x, a, b = (np.random.default_rng(0).random(updates, dtype=np.float32) for _ in range(3))
    limit = speed_ratio(lambda: np.exp(a * 0.1, out=np.empty_like(a)) * x + b, fast, repeats=reps)
    work = f"{updates:.3g} state updates"
    return [
        {"kernel": "selective_scan_numba", "baseline": "selective_scan_ref (per-timestep Torch loop)",
         "ratio": r_ref.ratio, "shape": shape, "work": work},
        {"kernel": "selective_scan_numba", "baseline": "selective_scan_torch (chunked parallel scan)",
         "ratio": r_torch.ratio, "shape": shape, "work": work},
        {"kernel": "vectorised exp-mul-add (machine limit)", "baseline": "selective_scan_numba",
         "ratio": limit.ratio, "shape": shape,
         "work": f"{work}; Numba at {updates / r_ref.t_candidate_s / 1e6:.0f} M updates/s"},
    ]

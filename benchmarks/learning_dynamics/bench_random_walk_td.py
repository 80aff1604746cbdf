"""Kernels of the random-walk TD chapter. ``ratio`` = baseline time / kernel time (> 1: the kernel is faster).
The vectorised linearised-TD gradient against its loop reference and against Torch autograd of the same loss (the
library a user would pick); the vectorised junta evaluation against its loop reference.
"""
from __future__ import annotations

import numpy as np
import torch

from paperkit.learning_dynamics import random_walk_td as rw
from paperkit.timing import speed_ratio


def _torch_td_grad(W, a, b, x, x2, fx, fx2):
    Wt = torch.tensor(W, requires_grad=True)
    xt, x2t = torch.from_numpy(x), torch.from_numpy(x2)
    s = (((xt + x2t) / 2 @ Wt.T + torch.from_numpy(b)) > 0).double()
    dnet = ((s * torch.from_numpy(a)) * ((x2t - xt) @ Wt.T)).sum(1) / W.shape[0]
    loss = ((dnet - torch.from_numpy(fx2 - fx)) ** 2).mean()
    return torch.autograd.grad(loss, Wt)[0]


def run(quick: bool = True) -> list[dict]:
    """One row per (kernel, baseline, size)."""
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    reps = 3 if quick else 7
    rows = []
    m, d, B = (32, 16, 16) if quick else (128, 64, 16)
    S = np.arange(4, dtype=np.int64)
    T = rw.parity_table(4)
    x = rng.choice([-1.0, 1.0], size=(B, d))
    x2, _ = rw.lazy_walk_step(x, rng)
    args = (rng.normal(size=(m, d)), rng.choice([-1.0, 1.0], m), rng.uniform(-1, 1, m), x, x2,
            rw.junta_value(x, S, T), rw.junta_value(x2, S, T))
    shape = f"m={m}, d={d}, B={B}"
    r = speed_ratio(lambda: rw.td_linear_grad(*args), lambda: rw.td_linear_grad_ref(*args), repeats=reps)
    rows.append({"kernel": "random_walk_td.td_linear_grad", "baseline": "random_walk_td.td_linear_grad_ref",
                 "ratio": round(r.ratio, 3), "shape": shape, "work": f"{B * m * d} multiply-adds"})
    r = speed_ratio(lambda: rw.td_linear_grad(*args), lambda: _torch_td_grad(*args), repeats=reps)
    rows.append({"kernel": "random_walk_td.td_linear_grad", "baseline": "torch.autograd of the same loss",
                 "vs": "library", "ratio": round(r.ratio, 3), "shape": shape, "work": "one minibatch gradient"})
    n = 2000 if quick else 20000
    xs = rng.choice([-1.0, 1.0], size=(n, d))
    r = speed_ratio(lambda: rw.junta_value(xs, S, T), lambda: rw.junta_value_ref(xs, S, T), repeats=reps)
    rows.append({"kernel": "random_walk_td.junta_value", "baseline": "random_walk_td.junta_value_ref",
                 "ratio": round(r.ratio, 3), "shape": f"n={n}, d={d}, k=4", "work": f"{n} table look-ups"})
    r = speed_ratio(lambda: rw.junta_value(xs, S, T), lambda: xs[:, S].prod(1), repeats=reps)
    rows.append({"kernel": "random_walk_td.junta_value", "baseline": "numpy prod over the relevant columns (parity)",
                 "vs": "library", "ratio": round(r.ratio, 3), "shape": f"n={n}, d={d}, k=4",
                 "work": f"{n} evaluations"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)

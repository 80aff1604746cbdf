"""Kernels of the spiking-turbulence chapter. ``ratio`` = baseline time / kernel time (> 1: the kernel is faster).
The Numba LIF sheet against its vectorised NumPy step (the reference), and against snntorch.Leaky stepping the same
delay-free network with a sparse recurrent matrix (the maintained library), at the chapter's size (48 x 48 sheet,
about 60 synapses per neuron).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import snntorch as snn

from paperkit.spiking_cognition import lif_sheet as ls
from paperkit.timing import speed_ratio


def _snntorch_sheet(drive_t, W, beta):
    lif = snn.Leaky(beta=torch.tensor(beta, dtype=torch.float64), threshold=1.0, reset_mechanism="zero")
    mem = torch.zeros(drive_t.shape[1], dtype=torch.float64)
    spk = torch.zeros_like(mem)
    n = 0
    with torch.no_grad():
        for t in range(drive_t.shape[0]):
            spk, mem = lif(drive_t[t] + torch.sparse.mm(W, spk.to(torch.float64)[:, None])[:, 0], mem)
            n += int(spk.sum())
    return n


def run(quick: bool = True) -> list[dict]:
    """One row per (kernel, baseline)."""
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    L = 48
    T = 400 if quick else 4000
    reps = 3 if quick else 5
    dt, tau = 0.5, 20.0
    beta = math.exp(-dt / tau)
    rows = []
    for delays_on in (True, False):
        net = ls.torus_network(rng, L, 3.0, 60, 0.8, 0.15, 0.75, 0.1 if delays_on else None, min_delay=2 if
                               delays_on else 1)
        drive = ls.poisson_drive(rng, T, L * L, -0.9, 0.3, 0.1, beta)
        kw = dict(drive=drive, indptr=net[0], indices=net[1], weights=net[2], delays=net[3], v0=np.zeros(L * L),
                  beta=beta, alpha_d=math.exp(-dt / 10.0) if delays_on else 0.0)
        n_spk = int(ls.lif_sheet(**kw)[0].sum())
        work = f"{T * L * L} neuron steps, {n_spk} spikes x ~60 synapses"
        r = speed_ratio(lambda: ls.lif_sheet(**kw), lambda: ls.lif_sheet_ref(**kw), repeats=reps)
        rows.append({"kernel": "lif_sheet.lif_sheet", "baseline": "lif_sheet.lif_sheet_ref (vectorised NumPy step)",
                     "ratio": round(r.ratio, 3), "shape": f"L={L}, T={T}, delays={'distance' if delays_on else 1}",
                     "work": work})
        if not delays_on:
            N = L * L
            pre = np.repeat(np.arange(N), np.diff(net[0]))
            W = torch.sparse_coo_tensor(np.stack([net[1], pre]), torch.tensor(net[2]), (N, N)).coalesce()
            dt_t = torch.tensor(drive)
            r = speed_ratio(lambda: ls.lif_sheet(**kw), lambda: _snntorch_sheet(dt_t, W, beta), repeats=reps)
            rows.append({"kernel": "lif_sheet.lif_sheet", "baseline": "snntorch.Leaky + torch.sparse.mm per step",
                         "vs": "library", "ratio": round(r.ratio, 3), "shape": f"L={L}, T={T}, delays=1",
                         "work": work})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)

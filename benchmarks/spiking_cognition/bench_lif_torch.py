"""Kernels of the dormant-spiking-neuron chapter. ``ratio`` = baseline time / kernel time (> 1: the kernel is faster).
The batched LIF layer (forward and backward through time) against ``snntorch.Leaky`` stepped over time at the
chapter's size (T = 8 steps, a batch of 128 digits, 128 neurons), against its own plain per-step reference, and the
gated layer against the plain one (the price of the gate in Torch, where dormant neurons are still computed: the
saving the chapter counts is in operations, not in Torch time). The energy count against its spike-by-spike
reference.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from paperkit.spiking_cognition import lif_torch as lt
from paperkit.timing import speed_ratio


def _snntorch_layer(I, beta, thr):
    import snntorch as snn
    from snntorch import surrogate

    leaky = snn.Leaky(beta=beta, threshold=thr, spike_grad=surrogate.fast_sigmoid(slope=25))
    mem = leaky.reset_mem()
    out = []
    for t in range(I.shape[0]):
        spk, mem = leaky(I[t], mem)
        out.append(spk)
    return torch.stack(out)


def run(quick: bool = True) -> list[dict]:
    """One row per (kernel, baseline, size)."""
    torch.set_num_threads(1)
    reps = 5 if quick else 15
    g = torch.Generator().manual_seed(0)
    rows = []
    T, B, N = 8, 128, 128
    I = torch.randn(T, B, N, generator=g) * 0.8 + 0.3
    work = f"{T * B * N} neuron-steps, forward + backward"

    def ours(theta_d=math.inf):
        x = I.clone().requires_grad_(True)
        s, _, a = lt.lif_layer(x, 0.9, 1.0, theta_d)
        (s.sum() + a.sum()).backward()

    def theirs():
        x = I.clone().requires_grad_(True)
        _snntorch_layer(x, 0.9, 1.0).sum().backward()

    r = speed_ratio(ours, theirs, repeats=reps)
    rows.append({"kernel": "lif_torch.lif_layer", "baseline": "snntorch.Leaky 1.0.0 stepped over T", "vs": "library",
                 "ratio": round(r.ratio, 3), "shape": f"T={T}, B={B}, N={N}", "work": work})
    r = speed_ratio(lambda: ours(0.5), ours, repeats=reps)
    rows.append({"kernel": "lif_torch.lif_layer (gate on, theta_d=0.5)", "baseline": "lif_torch.lif_layer (gate off)",
                 "ratio": round(r.ratio, 3), "shape": f"T={T}, B={B}, N={N}", "work": work})
    Ts, Bs, Ns = 8, 16, 64
    Ir = I[:Ts, :Bs, :Ns].double()
    r = speed_ratio(lambda: lt.lif_layer(Ir, 0.9, 1.0, 0.5), lambda: lt.lif_layer_ref(Ir, 0.9, 1.0, 0.5),
                    repeats=reps)
    rows.append({"kernel": "lif_torch.lif_layer", "baseline": "lif_torch.lif_layer_ref",
                 "ratio": round(r.ratio, 3), "shape": f"T={Ts}, B={Bs}, N={Ns}", "work": f"{Ts * Bs * Ns} neuron-steps"})
    kw = lt._energy_inputs(np.random.default_rng(0), 40)
    r = speed_ratio(lambda: lt.snn_energy(**kw), lambda: lt.snn_energy_ref(**kw), repeats=reps)
    rows.append({"kernel": "lif_torch.snn_energy", "baseline": "lif_torch.snn_energy_ref", "ratio": round(r.ratio, 3),
                 "shape": "T=4, B=3, M=40, N=5", "work": "synaptic operations counted"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)

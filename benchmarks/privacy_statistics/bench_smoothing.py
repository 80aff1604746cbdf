"""Batched randomized-smoothing CERTIFY against the per-input reference, as a speed ratio.

Both push the same number of noisy copies through the same MLP (784-256-10, the chapter's base model); the batched
kernel stacks many inputs' copies into one forward pass, the reference makes one pass per input.
"""
from __future__ import annotations

import torch

from paperkit.device import setup_torch
from paperkit.privacy_statistics.smoothing import certify, certify_ref
from paperkit.timing import speed_ratio


def run(quick: bool) -> list[dict]:
    setup_torch("cpu")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    # the chapter's default (n0 + n = 232 copies per input) and a larger estimation sample
    sizes = [(20, 32, 200)] if quick else [(100, 32, 200), (100, 32, 1000)]
    rows = []
    for m, n0, n in sizes:
        x = torch.rand(m, 784, generator=torch.Generator().manual_seed(1))
        args = dict(sigma=0.25, n0=n0, n=n, alpha=0.001, num_classes=10)
        r = speed_ratio(lambda: certify(net, x, generator=torch.Generator().manual_seed(2), **args),
                        lambda: certify_ref(net, x, generator=torch.Generator().manual_seed(2), **args),
                        repeats=3 if quick else 7)
        rows.append({"kernel": "smoothing.certify", "baseline": "smoothing.certify_ref", "ratio": r.ratio,
                     "shape": f"m={m} inputs, d=784, MLP 784-256-10, n0={n0}, n={n}",
                     "work": f"{m * (n0 + n)} forward passes (rows) each"})
    return rows


if __name__ == "__main__":
    for row in run(quick=False):
        print(row)

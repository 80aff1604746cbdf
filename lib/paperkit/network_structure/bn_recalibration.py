"""BatchNorm recalibration: the weight-preserving operator that rewrites a network's normalisation state.

A BatchNorm layer (channel ``c``) in eval mode computes ``y = gamma_c (x - mu_c) / sqrt(sigma2_c + eps) + beta_c``
with *running statistics* ``(mu, sigma2)`` stored as buffers, not weights. Anything that runs the network in train
mode (an unlearning method fine-tuning on forget batches, for instance) overwrites those buffers with an exponential
moving average of the batch statistics it saw. The recalibration operator ``R`` of this module

1. resets every BatchNorm layer's running statistics,
2. runs the retain images ``X`` (N, 64) through the network in train mode with ``momentum=None`` (a cumulative,
   equally weighted average over the batches of the pass), under ``torch.no_grad`` (no weight can change),
3. returns the network in eval mode.

So ``R`` changes no weight (only the buffers ``mu``, ``sigma2``, ``num_batches_tracked``), ``R(R(m)) = R(m)`` on a
fixed retain set (the new buffers depend only on the weights and ``X``), and ``R`` is the identity on a network
without running statistics (GroupNorm normalises each image by its own statistics). Any change of a prediction
from ``m`` to ``R(m)`` is therefore caused by the running statistics alone.

Kernels (registered in ``KERNELS``): :func:`recalibration_stats` (Torch, one train-mode pass per batch) and
:func:`recalibration_stats_ref` (a plain layer-by-layer walk in float64 that normalises each batch by its own
statistics explicitly, then averages them as torch's cumulative average does: means, and *unbiased* variances
``m/(m-1)`` times the biased ones, ``m`` = images x positions of the batch). :func:`bn_recalibrate` applies them.
"""
from __future__ import annotations

import contextlib
import copy

import numpy as np
import torch
from torch import nn

NORM_TYPES = (nn.BatchNorm1d, nn.BatchNorm2d)


def bn_layers(model: nn.Module) -> list[nn.Module]:
    """The model's BatchNorm layers, in module order (an empty list for a GroupNorm network)."""
    return [m for m in model.modules() if isinstance(m, NORM_TYPES)]


def _check(model, X, batch_size):
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(X, torch.Tensor):
        raise TypeError(f"X must be a torch.Tensor, got {type(X).__name__}")
    if X.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"X must be float32 or float64, got {X.dtype}")
    p = next(model.parameters(), None)
    if p is not None and p.dtype != X.dtype:
        raise TypeError(f"X has dtype {X.dtype} but the model's weights are {p.dtype}")
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (images, pixels), got shape {tuple(X.shape)}")
    if X.shape[0] < 1:
        raise ValueError("X must hold at least one image to recalibrate on")
    if not bool(torch.isfinite(X).all()):
        raise ValueError("X must be finite")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 0:
        raise ValueError(f"batch_size must be a non-negative integer (0: one batch of all images), got {batch_size!r}")
    return X, (batch_size or X.shape[0])


def _batches(n, bs):
    return [slice(i, min(i + bs, n)) for i in range(0, n, bs)]


def _flat_stats(layers) -> torch.Tensor:
    if not layers:
        return torch.zeros(0, dtype=torch.float64)
    return torch.cat([torch.cat([b.running_mean, b.running_var]) for b in layers]).to(torch.float64)


@torch.no_grad()
def recalibration_stats(model: nn.Module, X: torch.Tensor, batch_size: int = 0) -> torch.Tensor:
    """The running statistics ``R`` installs: for each BatchNorm layer in order, its running mean ``mu`` (C,) then
    its running variance ``sigma2`` (C,), concatenated into one float64 vector (2 * sum of C,); empty for a network
    without BatchNorm. ``X`` (N, d_in) retain images (labels never used), passed in batches of ``batch_size`` (0: one
    batch). ``model`` is left as it was (its buffers, momenta and mode are restored)."""
    X, bs = _check(model, X, batch_size)
    layers = bn_layers(model)
    if not layers:                                  # no running statistics: nothing to compute (R is the identity)
        return _flat_stats(layers)
    saved = [(b.running_mean.clone(), b.running_var.clone(), b.num_batches_tracked.clone(), b.momentum)
             for b in layers]
    modes = [m.training for m in model.modules()]
    try:
        for b in layers:
            b.reset_running_stats()
            b.momentum = None
        model.train()
        for sl in _batches(X.shape[0], bs):
            model(X[sl])
        return _flat_stats(layers)
    finally:
        for b, (mu, var, nbt, mom) in zip(layers, saved):
            b.running_mean.copy_(mu); b.running_var.copy_(var); b.num_batches_tracked.copy_(nbt)
            b.momentum = mom
        for m, t in zip(model.modules(), modes):
            m.training = t


@torch.no_grad()
def recalibration_stats_ref(model: nn.Module, X: torch.Tensor, batch_size: int = 0) -> torch.Tensor:
    """Reference for :func:`recalibration_stats`: walks the top-level modules of ``model`` (an ``nn.Sequential``) in
    float64; at each BatchNorm layer it computes the batch's per-channel mean and biased variance over images and
    positions by explicit sums, normalises by them (train-mode semantics), and keeps ``(mean, var * m / (m - 1))``;
    the result is the average over batches."""
    X, bs = _check(model, X, batch_size)
    if not isinstance(model, nn.Sequential):
        raise TypeError("model must be an nn.Sequential for the reference walk")
    m = copy.deepcopy(model).double().eval()
    sums: dict[int, list] = {}
    batches = _batches(X.shape[0], bs)
    for sl in batches:
        h = X[sl].to(torch.float64)
        for i, mod in enumerate(m):
            if isinstance(mod, NORM_TYPES):
                axes = (0,) + tuple(range(2, h.ndim))
                cnt = int(np.prod([h.shape[a] for a in axes]))
                mean = h.sum(axes) / cnt
                shape = (1, -1) + (1,) * (h.ndim - 2)
                var = ((h - mean.reshape(shape)) ** 2).sum(axes) / cnt
                unbiased = var * cnt / (cnt - 1) if cnt > 1 else var
                acc = sums.setdefault(i, [0.0, 0.0])
                acc[0] = acc[0] + mean
                acc[1] = acc[1] + unbiased
                h = (h - mean.reshape(shape)) / torch.sqrt(var.reshape(shape) + mod.eps)
                if mod.affine:
                    h = h * mod.weight.reshape(shape) + mod.bias.reshape(shape)
            else:
                h = mod(h)
    parts = [torch.cat([sums[i][0], sums[i][1]]) / len(batches) for i in sorted(sums)]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def bn_recalibrate(model: nn.Module, X: torch.Tensor, batch_size: int = 0) -> nn.Module:
    """``R(model)``: a copy of ``model`` in eval mode whose BatchNorm running statistics are those of
    :func:`recalibration_stats` on ``X``; every weight is copied unchanged. The identity (a copy) without BatchNorm."""
    stats = recalibration_stats(model, X, batch_size)
    out = copy.deepcopy(model).eval()
    _install(bn_layers(out), stats)
    with torch.no_grad():
        for b in bn_layers(out):
            b.num_batches_tracked.fill_(len(_batches(X.shape[0], batch_size or X.shape[0])))
    return out


@contextlib.contextmanager
def recalibrated(model: nn.Module, X: torch.Tensor, batch_size: int = 0):
    """``with recalibrated(model, X) as m:`` gives ``model`` itself holding ``R``'s statistics, in eval mode, and
    puts its own statistics and mode back on exit (what :func:`bn_recalibrate` does, without the copy)."""
    stats = recalibration_stats(model, X, batch_size)
    layers = bn_layers(model)
    saved = [(b.running_mean.clone(), b.running_var.clone()) for b in layers]
    modes = [m.training for m in model.modules()]
    _install(layers, stats)
    model.eval()
    try:
        yield model
    finally:
        with torch.no_grad():
            for b, (mu, var) in zip(layers, saved):
                b.running_mean.copy_(mu); b.running_var.copy_(var)
        for m, t in zip(model.modules(), modes):
            m.training = t


def _install(layers, stats):
    k = 0
    with torch.no_grad():
        for b in layers:
            c = b.num_features
            b.running_mean.copy_(stats[k:k + c].to(b.running_mean.dtype))
            b.running_var.copy_(stats[k + c:k + 2 * c].to(b.running_var.dtype))
            k += 2 * c


def reset_stats(model: nn.Module) -> nn.Module:
    """The data-free alternative to ``R``: a copy in eval mode with every running mean 0 and variance 1."""
    out = copy.deepcopy(model).eval()
    for b in bn_layers(out):
        b.reset_running_stats()
    return out


def max_weight_change(a: nn.Module, b: nn.Module) -> float:
    """Largest absolute difference between the parameters (weights, not buffers) of two copies of one network."""
    return max((float((p.detach() - q.detach()).abs().max()) for p, q in zip(a.parameters(), b.parameters())),
               default=0.0)


# ----------------------------------------------------------------------------------------------------- registry

def _net(rng, norm="bn"):
    g = torch.Generator().manual_seed(int(rng.integers(1 << 30)))
    norm_layer = (lambda c: nn.BatchNorm2d(c)) if norm == "bn" else (lambda c: nn.GroupNorm(2, c))
    net = nn.Sequential(nn.Unflatten(1, (1, 4, 4)), nn.Conv2d(1, 4, 3, padding=1), norm_layer(4), nn.ReLU(),
                        nn.Conv2d(4, 3, 3, padding=1), norm_layer(3) if norm == "bn" else nn.Identity(), nn.ReLU(),
                        nn.Flatten(), nn.Linear(48, 3))
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.7)
    return net.double()


def _stats_inputs(rng, size):
    return {"model": _net(rng), "X": torch.tensor(rng.normal(size=(size, 16)) * 2 + 1), "batch_size": 3}


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    return [Kernel("bn_recalibration.recalibration_stats", recalibration_stats, recalibration_stats_ref,
                   _stats_inputs,
                   Contract(args=(Arg("X", ("float64",), ndim=2),), empty="error",
                            shapes="X: (N, d_in) retain images; returns (2 * total BN channels,) float64"),
                   tol={"float64": (1e-9, 1e-11)}, benchmark="bn_recalibration.recalibration_stats",
                   oracle="numpy mean / var(ddof=1) over images and positions (the first BN layer's input); "
                          "torch's own momentum=None cumulative average")]


KERNELS = _registry()

"""Approximate unlearning of one class on a small CNN, with BatchNorm or GroupNorm, and what recalibration does to it.

The network (:func:`make_cnn`) reads 8x8 digit images given as rows ``X`` (N, 64) scaled to [0, 1]:
conv 3x3 (1 -> ``width``) - norm - ReLU - maxpool 2 - conv 3x3 (``width`` -> 2 ``width``) - norm - ReLU - maxpool 2
- flatten (8 ``width`` features) - linear -> 10 logits. ``norm`` is ``"bn"``
(BatchNorm2d, running statistics) or ``"gn"`` (GroupNorm with 4 groups, no running statistics).

Unlearning (:func:`unlearn`) starts from a trained network ``theta_o`` and a forget set ``D_f`` (the training images
of one class) with the retain set ``D_r`` (all other training images), and runs ``steps`` SGD steps of one method
(our reading of the standard approximate-unlearning recipes; the abstract names none of its nine methods):

* ``"ga"``: gradient ascent on the cross-entropy of forget batches (NegGrad);
* ``"rl"``: cross-entropy towards random wrong labels on forget batches (random labelling);
* ``"neggrad+"``: a forget batch's ascent and a retain batch's descent in the same step (two forward passes);
* ``"scrub"``: SCRUB-like: a max-step pushing the student's softmax away from the original network's on a forget
  batch (KL ascent), then a min-step on a retain batch (cross-entropy plus KL to the original);
* ``"ft"``: plain fine-tuning on retain batches;
* ``"prune"``: magnitude pruning of a fraction ``prune_frac`` of every conv/linear weight, then fine-tuning on
  retain batches with the pruned weights held at zero (pruning-based unlearning);
* ``"forward"``: forward passes over forget batches with no weight update at all (the pure artifact).

``bn_mode="train"`` runs every forward pass of the method in train mode, as the published recipes do (BatchNorm then
normalises by the batch and updates its running statistics with momentum 0.1); ``bn_mode="eval"`` freezes the
statistics during unlearning (the BatchNorm layers stay in eval mode), the control in which the statistics cannot be
polluted. Every batch is drawn with the generator ``gen``.
"""
from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

METHODS = ("ga", "rl", "neggrad+", "scrub", "ft", "prune", "forward")


def make_cnn(norm: str, width: int, gen: torch.Generator) -> nn.Sequential:
    """The small CNN of the module docstring, weights drawn with ``gen`` (Kaiming-uniform, torch's default rule)."""
    if norm not in ("bn", "gn"):
        raise ValueError(f"norm must be 'bn' or 'gn', got {norm!r}")
    if width < 4 or width % 4:
        raise ValueError(f"width must be a positive multiple of 4, got {width!r}")

    def norm_layer(c):
        return nn.BatchNorm2d(c) if norm == "bn" else nn.GroupNorm(4, c)

    net = nn.Sequential(nn.Unflatten(1, (1, 8, 8)),
                        nn.Conv2d(1, width, 3, padding=1), norm_layer(width), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(width, 2 * width, 3, padding=1), norm_layer(2 * width), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(8 * width, 10))
    with torch.no_grad():
        for mod in net:
            if isinstance(mod, (nn.Conv2d, nn.Linear)):
                bound = 1.0 / np.sqrt(mod.weight[0].numel())
                mod.weight.copy_((torch.rand(mod.weight.shape, generator=gen) * 2 - 1) * bound * np.sqrt(3))
                mod.bias.copy_((torch.rand(mod.bias.shape, generator=gen) * 2 - 1) * bound)
    return net


def accuracy(net: nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
    """Share of ``X`` (N, 64) whose arg-max logit in eval mode equals ``y``; nan for an empty set."""
    if len(y) == 0:
        return float("nan")
    net.eval()
    with torch.no_grad():
        return float((net(X).argmax(1) == y).double().mean())


def train(net: nn.Module, X: torch.Tensor, y: torch.Tensor, epochs: int, lr: float, gen: torch.Generator,
          batch: int = 64) -> nn.Module:
    """Adam on the cross-entropy, minibatches of ``batch`` in an order drawn with ``gen``; returns ``net``."""
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    net.train()
    for _ in range(epochs):
        perm = torch.randperm(len(y), generator=gen)
        for i in range(0, len(y), batch):
            idx = perm[i:i + batch]
            if len(idx) < 2:
                continue
            opt.zero_grad()
            F.cross_entropy(net(X[idx]), y[idx]).backward()
            opt.step()
    return net.eval()


def _set_mode(net, bn_mode):
    net.train()
    if bn_mode == "eval":
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eval()


def _draw(n, batch, gen):
    return torch.randint(0, n, (batch,), generator=gen)


def _prune_masks(net, frac):
    ws = [m.weight for m in net if isinstance(m, (nn.Conv2d, nn.Linear))]
    masks = []
    for w in ws:
        k = int(frac * w.numel())
        thr = w.detach().abs().flatten().kthvalue(k).values if k > 0 else torch.tensor(-1.0)
        masks.append((w.detach().abs() > thr).to(w.dtype))
    return ws, masks


def unlearn(net: nn.Module, Xf: torch.Tensor, yf: torch.Tensor, Xr: torch.Tensor, yr: torch.Tensor, method: str,
            lr: float, steps: int, gen: torch.Generator, batch: int = 32, bn_mode: str = "train",
            prune_frac: float = 0.5, n_classes: int = 10, momentum: float = 0.0, callback=None) -> nn.Module:
    """One approximate-unlearning run (see the module docstring) on a copy of ``net``: ``Xf`` (N_f, 64), ``yf``
    (N_f,) the forget set, ``Xr``/``yr`` the retain set; ``steps`` SGD steps (rate ``lr``, ``momentum``) on
    batches of ``batch`` drawn with ``gen``. ``callback(step, net)``, if given, is called after every step with the
    network in eval mode (it may evaluate it, and must leave its weights alone; the training mode is set back after
    it). Returns the unlearned copy in eval mode."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if bn_mode not in ("train", "eval"):
        raise ValueError(f"bn_mode must be 'train' or 'eval', got {bn_mode!r}")
    student = copy.deepcopy(net)
    teacher = copy.deepcopy(net).eval()
    opt = torch.optim.SGD(student.parameters(), lr=lr, momentum=momentum)
    ws, masks = _prune_masks(student, prune_frac) if method == "prune" else ([], [])
    with torch.no_grad():
        for w, mk in zip(ws, masks):
            w.mul_(mk)
    _set_mode(student, bn_mode)
    for step in range(1, steps + 1):
        fi, ri = _draw(len(yf), batch, gen), _draw(len(yr), batch, gen)
        opt.zero_grad()
        if method == "forward":
            with torch.no_grad():
                student(Xf[fi])
            _after(student, step, callback, bn_mode)
            continue
        if method == "ga":
            loss = -F.cross_entropy(student(Xf[fi]), yf[fi])
        elif method == "rl":
            wrong = (yf[fi] + torch.randint(1, n_classes, (batch,), generator=gen)) % n_classes
            loss = F.cross_entropy(student(Xf[fi]), wrong)
        elif method == "neggrad+":
            loss = -F.cross_entropy(student(Xf[fi]), yf[fi]) + F.cross_entropy(student(Xr[ri]), yr[ri])
        elif method == "scrub":
            with torch.no_grad():
                tf, tr = F.log_softmax(teacher(Xf[fi]), 1), F.log_softmax(teacher(Xr[ri]), 1)
            kl_f = F.kl_div(F.log_softmax(student(Xf[fi]), 1), tf, log_target=True, reduction="batchmean")
            (-kl_f).backward()
            opt.step()
            opt.zero_grad()
            out = student(Xr[ri])
            loss = F.cross_entropy(out, yr[ri]) + F.kl_div(F.log_softmax(out, 1), tr, log_target=True,
                                                           reduction="batchmean")
        else:                                           # "ft" and "prune": retain batches only
            loss = F.cross_entropy(student(Xr[ri]), yr[ri])
        loss.backward()
        opt.step()
        with torch.no_grad():
            for w, mk in zip(ws, masks):
                w.mul_(mk)
        _after(student, step, callback, bn_mode)
    return student.eval()


def _after(net, step, callback, bn_mode):
    if callback is not None:
        net.eval()
        callback(step, net)
        _set_mode(net, bn_mode)

"""One seed of the BatchNorm-unlearning study: train, unlearn one class with every method, recalibrate, measure.

:func:`split_digits` draws a stratified train/test split of the 8x8 digits and separates the forget class.
:func:`run_seed` trains a BatchNorm and a GroupNorm CNN from the same generator seed, plus a BatchNorm CNN trained
without the forget class (the model that never saw it: genuine forgetting), runs every unlearning method of
:mod:`paperkit.network_structure.bn_unlearning` in train mode (and, for BatchNorm and the methods of ``FROZEN_METHODS``, also with frozen statistics),
and at each checkpoint measures forget-set accuracy before and after recalibration ``R`` on the retain set,
retain-test accuracy, and the *operating point*: the first checkpoint at which the forget accuracy an evaluator
sees (before ``R``) has fallen to ``target`` or below (the last checkpoint if it never does).
"""
from __future__ import annotations

import numpy as np
import torch

from paperkit.network_structure import bn_recalibration as br
from paperkit.network_structure import bn_unlearning as bu

FORGET_METHODS = ("ga", "rl", "neggrad+", "scrub")
FROZEN_METHODS = ("ga", "rl", "neggrad+")       # also run with frozen statistics (SCRUB-like then barely moves)


def split_digits(X: np.ndarray, y: np.ndarray, forget_class: int, test_frac: float, rng: np.random.Generator):
    """Stratified split of ``X`` (N, 64) pixel values 0-16, ``y`` (N,): a dict of float32 tensors scaled to [0, 1]:
    ``Xtr, ytr`` (all training images), ``Xf, yf`` (training images of ``forget_class``: the forget set),
    ``Xr, yr`` (the other training images: the retain set), ``Xte, yte`` and the test masks ``te_f`` / ``te_r``."""
    tr, te = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        k = int(round(test_frac * len(idx)))
        te += list(idx[:k]); tr += list(idx[k:])
    tr, te = rng.permutation(tr), np.array(te)
    Xt, yt = torch.tensor(X / 16.0, dtype=torch.float32), torch.tensor(y, dtype=torch.int64)
    d = {"Xtr": Xt[tr], "ytr": yt[tr], "Xte": Xt[te], "yte": yt[te]}
    f = d["ytr"] == forget_class
    d.update(Xf=d["Xtr"][f], yf=d["ytr"][f], Xr=d["Xtr"][~f], yr=d["ytr"][~f])
    d.update(te_f=d["yte"] == forget_class, te_r=d["yte"] != forget_class)
    return d


def _light(net, d):
    """Forget-set accuracy of ``net`` before and after R on the full retain set."""
    pre = bu.accuracy(net, d["Xf"], d["yf"])
    with br.recalibrated(net, d["Xr"]) as R:
        return {"pre": pre, "post": bu.accuracy(R, d["Xf"], d["yf"])}


def _measure(net, d, attack):
    """Forget/retain accuracies of ``net`` before and after R (full retain set), plus R with each attacker set."""
    R = br.bn_recalibrate(net, d["Xr"])
    out = {"pre": bu.accuracy(net, d["Xf"], d["yf"]), "post": bu.accuracy(R, d["Xf"], d["yf"]),
           "pre_test_f": bu.accuracy(net, d["Xte"][d["te_f"]], d["yte"][d["te_f"]]),
           "post_test_f": bu.accuracy(R, d["Xte"][d["te_f"]], d["yte"][d["te_f"]]),
           "retain_pre": bu.accuracy(net, d["Xte"][d["te_r"]], d["yte"][d["te_r"]]),
           "retain_post": bu.accuracy(R, d["Xte"][d["te_r"]], d["yte"][d["te_r"]])}
    for name, Xa in attack.items():
        if Xa is None:
            Rz = br.reset_stats(net)
            out["att " + name] = bu.accuracy(Rz, d["Xf"], d["yf"])
            out["att_retain " + name] = bu.accuracy(Rz, d["Xte"][d["te_r"]], d["yte"][d["te_r"]])
        else:
            with br.recalibrated(net, Xa) as Ra:
                out["att " + name] = bu.accuracy(Ra, d["Xf"], d["yf"])
                out["att_retain " + name] = bu.accuracy(Ra, d["Xte"][d["te_r"]], d["yte"][d["te_r"]])
    return out


def run_seed(d: dict, seed: int, *, width: int, epochs: int, train_lr: float, lr: float, steps: int,
             show_every: int, attack_n: tuple, target: float, methods=bu.METHODS, prune_frac: float = 0.5) -> dict:
    """All runs of one seed on the split ``d`` (:func:`split_digits`); generators seeded from ``seed``.

    Every unlearning run takes ``steps`` SGD steps of rate ``lr``; after each step the forget accuracy before R is
    recorded, after every ``show_every`` steps also the forget accuracy after R, and at the operating point (the
    first step whose forget accuracy before R is at most ``target``, the last step if none is) the full measures.

    Returns a dict with ``orig`` (forget accuracy of each trained network), ``nets`` (the trained networks),
    ``pre[key]`` (steps,) and ``post[key]`` ({step: accuracy}) for ``key = (norm, mode, method)``, ``op[key]`` (the
    operating point), ``at_op[key]`` (measures there), ``final[key]`` (the network after the last step) and
    ``retrained`` (measures of the network trained without the forget class). Attacker sets for R: ``attack_n``
    random retain images (unlabelled), as many Gaussian-noise images with the retain pixels' mean and standard
    deviation as the largest of them (``"noise"``), the data-free reset (``"reset"``), and three competing
    refreshes: as many such noise images as the retain set has images (``"noise all"``), ``max(attack_n)`` random
    forget-set images (``"forget n=..."``) and the whole forget set (``"forget all"``). Each gives ``"att <name>"``
    (forget accuracy after that refresh) and ``"att_retain <name>"`` (retain-test accuracy after it), for the
    BatchNorm runs and the retrained network (on GroupNorm every refresh is the identity; not measured)."""
    g = torch.Generator().manual_seed(seed)
    nets = {}
    for norm in ("bn", "gn"):
        nets[norm] = bu.train(bu.make_cnn(norm, width, torch.Generator().manual_seed(seed)), d["Xtr"], d["ytr"],
                              epochs, train_lr, torch.Generator().manual_seed(seed + 1))
    nets["retrained"] = bu.train(bu.make_cnn("bn", width, torch.Generator().manual_seed(seed)), d["Xr"], d["yr"],
                                 epochs, train_lr, torch.Generator().manual_seed(seed + 1))
    perm = torch.randperm(len(d["yr"]), generator=g)
    attack = {f"n={n}": d["Xr"][perm[:n]] for n in attack_n}
    mu, sd = float(d["Xr"].mean()), float(d["Xr"].std())
    attack["noise"] = (mu + sd * torch.randn(max(attack_n), d["Xr"].shape[1], generator=g)).clamp(0, 1)
    attack["reset"] = None
    # competing refreshes: the same pass on inputs other than retain images
    attack["noise all"] = (mu + sd * torch.randn(len(d["yr"]), d["Xr"].shape[1], generator=g)).clamp(0, 1)
    perm_f = torch.randperm(len(d["yf"]), generator=g)
    attack[f"forget n={max(attack_n)}"] = d["Xf"][perm_f[:max(attack_n)]]
    attack["forget all"] = d["Xf"]
    res = {"orig": {k: bu.accuracy(v, d["Xf"], d["yf"]) for k, v in nets.items()}, "nets": nets, "pre": {},
           "post": {}, "op": {}, "at_op": {}, "final": {}, "retrained": _measure(nets["retrained"], d, attack)}
    for norm in ("bn", "gn"):
        for mode in (("train", "eval") if norm == "bn" else ("train",)):
            for m in (methods if mode == "train" else [m for m in methods if m in FROZEN_METHODS]):
                key, pre, post, state = (norm, mode, m), [], {}, {}

                def cb(step, net):
                    pre.append(bu.accuracy(net, d["Xf"], d["yf"]))
                    if step % show_every == 0:
                        post[step] = _light(net, d)["post"]
                    if "op" not in state and (pre[-1] <= target or step == steps):
                        state["op"] = step
                        # GroupNorm: R and every refresh are the identity (no running statistics), so no attacker sets
                        state["at_op"] = _measure(net, d, attack if norm == "bn" else {})

                res["final"][key] = bu.unlearn(nets[norm], d["Xf"], d["yf"], d["Xr"], d["yr"], m, lr, steps,
                                               torch.Generator().manual_seed(seed + 2), bn_mode=mode,
                                               prune_frac=prune_frac, callback=cb)
                res["pre"][key], res["post"][key] = np.array(pre), post
                res["op"][key], res["at_op"][key] = state["op"], state["at_op"]
    return res


def recovered_fraction(orig: float, pre: float, post: float, min_drop: float = 0.1) -> float:
    """Share of the apparent drop ``orig - pre`` that R gives back, ``(post - pre) / (orig - pre)``; nan when the
    apparent drop is under ``min_drop`` (nothing to give back)."""
    drop = orig - pre
    return float((post - pre) / drop) if drop >= min_drop else float("nan")


def largest_gain(res: dict, key: tuple) -> float:
    """The largest gain of R in forget accuracy, post - pre, over the run ``key`` of :func:`run_seed`'s result
    ``res``: at the operating point and at every checkpoint where R was applied (``post[key]``), so the reading of
    "up to" is not capped by the stopping rule (at the operating point the gain is at most ``1 - target``)."""
    pre, post = res["pre"][key], res["post"][key]
    op = res["at_op"][key]
    return float(max([op["post"] - op["pre"]] + [v - pre[step - 1] for step, v in post.items()]))


def pooled_share(at_op: dict, keys, name: str) -> float:
    """What the refresh ``name`` (an attacker set of :func:`run_seed`) gives back, as a share of what R on the whole
    retain set gives back, summed over the runs ``keys`` at their operating points:
    ``sum(att - pre) / sum(post - pre)``; nan when R itself gives back nothing (the sum is not positive)."""
    full = sum(at_op[k]["post"] - at_op[k]["pre"] for k in keys)
    got = sum(at_op[k]["att " + name] - at_op[k]["pre"] for k in keys)
    return float(got / full) if full > 0 else float("nan")

"""The experiments of the chapter on fixed tag-driven routing: coarse category tags for real digits (aligned with the
digit, drawn at random, or one tag per mixed training unit), one training run per model and tag condition on a
stratified split, and the per-branch pruning read-out (:mod:`paperkit.network_structure.tag_routing`).
"""
from __future__ import annotations

import numpy as np
import torch

from paperkit.network_structure import tag_routing as tr

CONDITIONS = ("aligned", "mixed_units", "random")


def superclass_of(groups: list[list[int]], n_classes: int) -> np.ndarray:
    """Category (superclass) of each class: ``groups`` is a partition of ``0..n_classes-1`` into ``K`` lists."""
    flat = sorted(c for g in groups for c in g)
    if flat != list(range(n_classes)):
        raise ValueError(f"groups must partition the classes 0..{n_classes - 1}, got {groups}")
    out = np.zeros(n_classes, dtype=np.int64)
    for k, g in enumerate(groups):
        out[list(g)] = k
    return out


def make_tags(cats: np.ndarray, condition: str, rng: np.random.Generator, unit: int = 8) -> np.ndarray:
    """Tags (N,) int64 for samples of true categories ``cats`` (N,) in ``0..K-1``.

    ``aligned``: the sample's own category. ``random``: uniform at random, independent of the sample.
    ``mixed_units``: the samples are dealt at random into units of ``unit`` samples (mixed categories, like a
    document that spans topics) and every sample of a unit carries the category of one member drawn at random."""
    K = int(cats.max()) + 1
    if condition == "aligned":
        return cats.astype(np.int64).copy()
    if condition == "random":
        return rng.integers(0, K, len(cats)).astype(np.int64)
    if condition == "mixed_units":
        order = rng.permutation(len(cats))
        tags = np.empty(len(cats), dtype=np.int64)
        for s in range(0, len(cats), unit):
            idx = order[s:s + unit]
            tags[idx] = cats[idx[rng.integers(0, len(idx))]]
        return tags
    raise ValueError(f"condition must be one of {CONDITIONS}, got {condition!r}")


def stratified_split(X: np.ndarray, y: np.ndarray, test_share: float, rng: np.random.Generator):
    """Float32 images scaled to [0, 1] and int64 labels, a share ``test_share`` of every class held out.
    Returns ``(Xtr, ytr, Xte, yte)`` as tensors."""
    tr_i, te_i = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        n_te = int(round(test_share * len(idx)))
        te_i.append(idx[:n_te]); tr_i.append(idx[n_te:])
    tr_i, te_i = rng.permutation(np.concatenate(tr_i)), rng.permutation(np.concatenate(te_i))
    Xs, ys = torch.tensor(X / X.max(), dtype=torch.float32), torch.tensor(y, dtype=torch.int64)
    return Xs[tr_i], ys[tr_i], Xs[te_i], ys[te_i]


def run(split, tags_tr, tags_te, mode: str, *, K: int, h: int, w: int, steps: int, batch: int, seed: int,
        p_a: float = 0.7, p_i: float = 0.1, lr: float = 3e-3, lb_coef: float = 0.01) -> dict:
    """Train one :class:`~paperkit.network_structure.tag_routing.BranchNet` (weights and minibatches from one
    generator seeded with ``seed``, so every mode starts from the same stream). Returns ``acc`` (test accuracy with
    the test tags), ``net``, ``loss`` (every 25th step), ``params`` (:func:`~paperkit.network_structure.tag_routing.count_parameters`) and,
    for learned routers, ``load`` (share of test samples whose largest gate weight is on each branch)."""
    Xtr, ytr, Xte, yte = split
    g = torch.Generator().manual_seed(seed)
    net = tr.BranchNet(Xtr.shape[1], int(ytr.max()) + 1, K, h, w, mode, g, p_a, p_i)
    t_tr, t_te = torch.as_tensor(tags_tr), torch.as_tensor(tags_te)
    loss = tr.train(net, Xtr, ytr, t_tr, steps, batch, g, lr=lr, lb_coef=lb_coef)
    out = {"acc": tr.accuracy(net, Xte, yte, t_te), "net": net, "params": tr.count_parameters(net), "loss": loss}
    if mode in tr.GATED:
        with torch.no_grad():
            z = torch.relu(Xte @ net.W_s + net.E[t_te] + net.c_s)
            out["load"] = np.bincount(torch.softmax(z @ net.G, 1).argmax(1).numpy(), minlength=K) / len(Xte)
    return out


def specialisation(S: np.ndarray) -> float:
    """Mean of the diagonal of a pruning-sensitivity matrix (branch k on its own category k) minus the mean of the
    off-diagonal entries, in accuracy points (0: no branch matters more for its own category)."""
    K = S.shape[0]
    off = (S.sum() - np.trace(S)) / (K * K - K)
    return float(np.trace(S) / K - off)


def pool_images(X: np.ndarray, side: int, f: int) -> np.ndarray:
    """Average-pool square images ``X`` (N, side*side) over ``f`` x ``f`` blocks: (N, (side/f)^2)."""
    if side % f:
        raise ValueError(f"f must divide side, got side={side}, f={f}")
    n, s = X.shape[0], side // f
    return X.reshape(n, s, f, s, f).mean((2, 4)).reshape(n, s * s)


def paired_se(ok_a: np.ndarray, ok_b: np.ndarray) -> float:
    """Standard error of the difference of two accuracies on the same test images (``ok_a``, ``ok_b`` (N,) bool,
    correct or not): ``sqrt(n_01 + n_10 - (n_01 - n_10)^2 / N) / N`` from the discordant images."""
    n = len(ok_a)
    n01, n10 = int((~ok_a & ok_b).sum()), int((ok_a & ~ok_b).sum())
    return float(np.sqrt(max(n01 + n10 - (n01 - n10) ** 2 / n, 0.0)) / n)


PLAN = {"aligned": tr.MODES, "mixed_units": ("norouting", "specdrop"), "random": ("norouting", "specdrop", "hard")}


@torch.no_grad()
def _correct(net, X, y, tags) -> np.ndarray:
    return (net(X, tags)[0].argmax(1) == y).numpy()


def run_seed(X: np.ndarray, y: np.ndarray, groups: list[list[int]], seed: int, rng: np.random.Generator, *,
             h: int, w: int, steps: int, batch: int, p_a: float, p_i: float, unit: int, lr: float = 3e-3) -> dict:
    """Everything one seed of the chapter needs: a stratified split (a fifth held out), tags for each condition of
    :data:`PLAN` (train and test alike), one run per (condition, mode) from the same seed, a second No-Routing run
    with other initial weights (seed noise), and per-sample correctness ``ok``.

    Also: ``spec[cond, mode]`` the specialisation (:func:`specialisation`) of :func:`tag_routing.prune_sensitivity`
    with SpecDrop's weights of the *true* categories (for No-Routing nets also ``(cond, "norouting_own")``, with
    equal weights); ``("random_test", mode)`` and ``("mixed_units_test", mode)`` the aligned SpecDrop and
    No-Routing nets tested with the other conditions' test tags; ``params`` per mode;
    ``trained`` whether every run's loss fell; ``load`` the largest branch share of each learned router; ``S`` the
    sensitivity matrices; ``nets`` the aligned SpecDrop and No-Routing networks; ``split`` and ``cats_te`` (the
    test digits' true categories)."""
    Xtr, ytr, Xte, yte = split = stratified_split(X, y, 0.2, rng)
    sup = superclass_of(groups, int(y.max()) + 1)
    c_tr, c_te = sup[ytr.numpy()], sup[yte.numpy()]
    K = len(groups)
    C = torch.tensor(c_te)
    W_true = tr.specdrop_weights(C, K, p_a, p_i).to(Xte.dtype)
    W_eq = torch.full((len(C), K), 1.0 / K, dtype=Xte.dtype)
    out = {"acc": {}, "ok": {}, "spec": {}, "params": {}, "load": {}, "trained": True, "S": {}}
    kw = dict(K=K, h=h, w=w, steps=steps, batch=batch, p_a=p_a, p_i=p_i, lr=lr)
    tags = {cond: (make_tags(c_tr, cond, rng, unit), make_tags(c_te, cond, rng, unit)) for cond in PLAN}
    for cond, modes in PLAN.items():
        t_tr, t_te = tags[cond]
        T = torch.as_tensor(t_te)
        for mode in modes:
            r = run(split, t_tr, t_te, mode, seed=seed, **kw)
            key = (cond, mode)
            out["ok"][key] = _correct(r["net"], Xte, yte, T)
            out["acc"][key] = r["acc"]
            out["params"][mode] = r["params"]
            out["trained"] &= r["loss"][-1] < r["loss"][0]
            if "load" in r:
                out["load"][key] = float(r["load"].max())
            if mode in ("specdrop", "norouting"):
                S = tr.prune_sensitivity(r["net"], Xte, yte, C, C, W_true)
                out["S"][key], out["spec"][key] = S, specialisation(S)
                if mode == "norouting":
                    out["spec"][cond, "norouting_own"] = specialisation(
                        tr.prune_sensitivity(r["net"], Xte, yte, T, C, W_eq))
            if cond == "aligned" and mode in ("specdrop", "norouting"):
                out.setdefault("nets", {})[mode] = r["net"]
                for other in ("mixed_units", "random"):       # the aligned net given misaligned tags at test time
                    out["ok"][other + "_test", mode] = ok = _correct(r["net"], Xte, yte, torch.as_tensor(tags[other][1]))
                    out["acc"][other + "_test", mode] = float(ok.mean())
    r = run(split, c_tr, c_te, "norouting", seed=seed + 10_000, **kw)
    out["acc"]["aligned", "norouting_2"] = r["acc"]
    out["ok"]["aligned", "norouting_2"] = _correct(r["net"], Xte, yte, C)
    out["split"], out["cats_te"] = split, c_te
    return out

"""The experiments of the chapter 'What Forward-Forward should measure': one FF training run per goodness
configuration on a stratified split of real digits, and the baselines it is compared with (logistic regression and a
backprop MLP of the same shape on the same split).

A configuration is a dict with ``kind`` (a goodness of :mod:`paperkit.learning_dynamics.ff_goodness`), ``theta``
(the FF threshold), and optionally ``lr`` (Adam, default 1e-3), ``k`` (units of top-k / random-k) and ``alpha``
(the entmax parameter of kind ``"entmax"``, default 1.5).
"""
from __future__ import annotations

import numpy as np
import torch

from paperkit.learning_dynamics import ff_goodness as fg


def stratified_split(X: np.ndarray, y: np.ndarray, test_share: float, rng: np.random.Generator,
                     n_per_class: int | None = None):
    """Train and test tensors (float32 images scaled to [0, 1] by the largest pixel value, int64 labels): in every
    class a share ``test_share`` of its rows (after keeping ``n_per_class`` of them, if given) goes to the test
    set. Returns ``(Xtr, ytr, Xte, yte)``."""
    tr, te = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        if n_per_class is not None:
            idx = idx[:n_per_class]
        n_te = int(round(test_share * len(idx)))
        te.append(idx[:n_te]); tr.append(idx[n_te:])
    tr, te = rng.permutation(np.concatenate(tr)), rng.permutation(np.concatenate(te))
    Xs = torch.tensor(X / X.max(), dtype=torch.float32)
    ys = torch.tensor(y, dtype=torch.int64)
    return Xs[tr], ys[tr], Xs[te], ys[te]


def run_ff(split, conf: dict, *, width: int, layers: int, epochs: int, seed: int, normalize: bool = True) -> dict:
    """Train one FF network (:func:`~paperkit.learning_dynamics.ff_goodness.ff_train`) with configuration ``conf``
    on ``split`` = (Xtr, ytr, Xte, yte); weights, negatives, minibatch order and the random-k units all from one
    ``torch.Generator`` seeded with ``seed``. Returns the test accuracy ``acc``, the network ``net``, the
    ``units`` and the loss history ``loss``."""
    Xtr, ytr, Xte, yte = split
    g = torch.Generator().manual_seed(seed)
    net = fg.FFNet(Xtr.shape[1], width, layers, 10, g, normalize=normalize)
    units = torch.randperm(width, generator=g)[:conf.get("k", 16)]
    k, alpha = conf.get("k", 16), conf.get("alpha", 1.5)
    hist = fg.ff_train(net, Xtr, ytr, conf["kind"], conf["theta"], epochs, g, k=k, units=units,
                       lr=conf.get("lr", 1e-3), alpha=alpha)
    acc = accuracy(net, Xte, yte, conf["kind"], k, units, alpha=alpha)
    return {"acc": acc, "net": net, "units": units, "loss": hist, "k": k}


def accuracy(net, X, y, kind, k, units, scale: float = 1.0, alpha: float = 1.5) -> float:
    """Test accuracy of :func:`~paperkit.learning_dynamics.ff_goodness.ff_predict` on images ``X * scale``."""
    return float((fg.ff_predict(net, X * scale, kind, k, units, alpha) == y).float().mean())


def logistic_baseline(split) -> float:
    """Test accuracy of multinomial logistic regression (scikit-learn, lbfgs, C = 1) on the same split."""
    from sklearn.linear_model import LogisticRegression

    Xtr, ytr, Xte, yte = split
    clf = LogisticRegression(max_iter=300).fit(Xtr.numpy(), ytr.numpy())
    return float((clf.predict(Xte.numpy()) == yte.numpy()).mean())


def backprop_baseline(split, *, width: int, layers: int, epochs: int, seed: int, lr: float = 1e-3,
                      batch: int = 64) -> float:
    """Test accuracy of an MLP of the same shape (ReLU, softmax output) trained end to end by backprop with Adam
    for the same number of epochs: the ceiling FF is compared with."""
    Xtr, ytr, Xte, yte = split
    g = torch.Generator().manual_seed(seed)
    sizes = [Xtr.shape[1]] + [width] * layers
    mods = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        mods += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    net = torch.nn.Sequential(*mods, torch.nn.Linear(width, 10))
    with torch.no_grad():
        for p in net.parameters():
            p.uniform_(-1 / np.sqrt(p.shape[-1]), 1 / np.sqrt(p.shape[-1]), generator=g)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    for _ in range(epochs):
        perm = torch.randperm(len(ytr), generator=g)
        for s in range(0, len(ytr), batch):
            idx = perm[s:s + batch]
            loss = torch.nn.functional.cross_entropy(net(Xtr[idx]), ytr[idx])
            opt.zero_grad(); loss.backward(); opt.step()
    with torch.no_grad():
        return float((net(Xte).argmax(1) == yte).float().mean())


@torch.no_grad()
def layer_kurtosis(net, X, y) -> float:
    """Median over images of the excess kurtosis of the first layer's activity (across its units) for positive
    inputs ``(x, y)``: how heavy-tailed a layer's activity is."""
    h = net.layer_outputs(net.embed(X, y))[0]
    return float(fg.goodness(h.double(), "kurtosis").median())


def shuffled_copy(net, generator: torch.Generator):
    """A copy of ``net`` with every weight matrix and bias permuted at random (the same values, no structure)."""
    import copy

    twin = copy.deepcopy(net)
    with torch.no_grad():
        for p in twin.parameters():
            flat = p.reshape(-1)
            flat.copy_(flat[torch.randperm(flat.numel(), generator=generator)])
    return twin


def conf_label(conf: dict) -> str:
    """A short label of a configuration, e.g. ``'sos th=0.5 lr=0.003'``, ``'topk k=8 th=0.5 lr=0.003'`` or
    ``'entmax a=2 th=0.5 lr=0.003'``."""
    k = f" k={conf['k']}" if conf["kind"] in ("topk", "randk") else ""
    k += f" a={conf.get('alpha', 1.5):g}" if conf["kind"] == "entmax" else ""
    return f"{conf['kind']}{k} th={conf['theta']:g} lr={conf.get('lr', 1e-3):g}"


def run_grid(split, confs: list[dict], *, width: int, layers: int, epochs: int, seed: int,
             normalize: bool = True) -> dict:
    """:func:`run_ff` for every configuration of ``confs`` with the same ``seed`` (so every goodness starts from
    the same weights and sees the same minibatches: paired comparisons). A top-k configuration with ``k = width``
    is the sum of squares and is run once. Returns ``{conf_label(conf): result}``."""
    out = {}
    for conf in confs:
        key = conf_label(conf)
        if key not in out:
            out[key] = run_ff(split, conf, width=width, layers=layers, epochs=epochs, seed=seed,
                              normalize=normalize)
    return out

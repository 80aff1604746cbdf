"""Experiments of the chapter on learning k-juntas from a lazy random walk with a temporal-difference loss.

Two trainers, each run until its test accuracy reaches a target or a sample budget is spent:

* :func:`stylised_run`, our reading of the paper's stylised SGD: phase 1 trains only the first layer, by online SGD
  with weight decay on a stream of consecutive pairs (the linearised TD step of
  :func:`~paperkit.learning_dynamics.random_walk_td.td_linear_grad`) or of single points (pointwise squared loss);
  at each checkpoint phase 2 fits the second layer by ridge regression on fresh i.i.d. labelled points over the
  normalised first-layer features. The samples counted are phase-1 samples plus the phase-2 points.
* :func:`adam_run`, a plain trainer: both layers of a width-``m`` ReLU network trained end to end by Adam on the TD
  loss of walk pairs, or on the squared loss of i.i.d. or walk points.

:func:`counting_floor` is the information-theoretic reference: walk steps until every relevant coordinate has been
seen to change the target once.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from paperkit.learning_dynamics import random_walk_td as rw

DATA = ("walk_td", "redraw_td", "iid_mse", "walk_mse")


def _cube(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    return rng.choice([-1.0, 1.0], size=(n, d))


def stylised_run(d: int, S: np.ndarray, table: np.ndarray, rng: np.random.Generator, *, data: str = "walk_td",
                 width: int = 128, walkers: int = 16, lr: float = 0.5, decay: float = 0.3, n_readout: int = 512,
                 ridge: float = 1e-3, max_pairs: int = 20000, check_every: int = 64, target: float = 0.95,
                 n_test: int = 2048, stop: bool = True) -> dict:
    """One phase-1 / phase-2 run on the junta ``table[x_S]`` in dimension ``d``.

    ``data``: ``"walk_td"`` (TD on consecutive lazy-walk pairs), ``"redraw_td"`` (TD on pairs whose second point is
    drawn independently: the walk's correlation removed), ``"iid_mse"`` (squared loss on i.i.d. points),
    ``"walk_mse"`` (squared loss on the walkers' points). ``walkers`` parallel streams give one minibatch per step;
    the first layer starts at ``N(0, 1/d)``, the second layer ``a`` is fixed at ``+-1`` and the biases at
    ``U[-1, 1]``. SGD step ``lr * m * grad`` followed by weight decay ``W *= 1 - decay * walkers / d`` (a decay rate
    of ``decay / d`` per sample). Every ``check_every`` samples the readout is refitted on ``n_readout`` fresh points
    and scored on ``n_test`` i.i.d. points.

    Returns a dict: ``samples`` (phase-1 samples at each checkpoint), ``acc``, ``ratio`` (mean squared relevant
    weight over mean squared irrelevant weight, 1 for no selection), ``first`` (phase-1 samples at the first
    checkpoint reaching ``target``; inf if none) and ``total`` (``first + n_readout``)."""
    if data not in DATA:
        raise ValueError(f"data must be one of {DATA}, got {data!r}")
    k = len(S)
    Sc = np.setdiff1d(np.arange(d), S)
    a = rng.choice([-1.0, 1.0], width)
    b = rng.uniform(-1.0, 1.0, width)
    W = rng.normal(size=(width, d)) / math.sqrt(d)
    x = _cube(rng, walkers, d)
    erng = np.random.default_rng(rng.integers(2 ** 63))       # test and readout points: their own stream
    xt = _cube(erng, n_test, d)
    yt = rw.junta_value(xt, S, table)
    shrink = 1.0 - decay * walkers / d
    out = {"samples": [], "acc": [], "ratio": [], "first": math.inf}
    every = max(1, check_every // walkers)
    for t in range(1, max_pairs // walkers + 1):
        if data == "iid_mse":
            x = _cube(rng, walkers, d)
            G = rw.mse_grad(W, a, b, x, rw.junta_value(x, S, table))
        elif data == "walk_mse":
            x, _ = rw.lazy_walk_step(x, rng)
            G = rw.mse_grad(W, a, b, x, rw.junta_value(x, S, table))
        else:
            x2, _ = rw.lazy_walk_step(x, rng) if data == "walk_td" else rw.redraw_step(x, rng)
            G, _ = rw.td_linear_grad(W, a, b, x, x2, rw.junta_value(x, S, table), rw.junta_value(x2, S, table))
            x = x2
        with np.errstate(over="ignore", invalid="ignore"):
            W = (W - lr * width * G) * shrink
        if not np.isfinite(W).all() or np.abs(W).max() > 1e100:
            break                                             # diverged: counts as never reaching the target
        if t % every == 0:
            xs = _cube(erng, n_readout, d)
            c = rw.ridge_readout(rw.relu_features(W, b, xs, math.sqrt(k)), rw.junta_value(xs, S, table), ridge)
            acc = float(np.mean(np.sign(rw.relu_features(W, b, xt, math.sqrt(k)) @ c) == yt))
            ratio = float(np.mean(W[:, S] ** 2) / max(np.mean(W[:, Sc] ** 2), 1e-300))
            out["samples"].append(t * walkers); out["acc"].append(acc); out["ratio"].append(ratio)
            if acc >= target and math.isinf(out["first"]):
                out["first"] = t * walkers
                if stop:
                    break
    out["total"] = out["first"] + n_readout
    return out


class _MLP(torch.nn.Module):
    def __init__(self, d: int, width: int):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(d, width), torch.nn.Linear(width, 1)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x))).squeeze(-1)


def adam_run(d: int, S: np.ndarray, table: np.ndarray, rng: np.random.Generator, tgen: torch.Generator, *,
             data: str = "iid_mse", width: int = 128, batch: int = 64, lr: float = 3e-3, max_samples: int = 200000,
             check_every: int = 4096, target: float = 0.95, n_test: int = 2048) -> dict:
    """A plain trainer: Adam on both layers of ``relu`` network (PyTorch default initialisation, seeded by ``tgen``).

    ``data``: ``"walk_td"`` (TD loss on the consecutive pairs of ``batch`` lazy walkers), ``"iid_mse"`` (squared
    loss on i.i.d. points), ``"walk_mse"`` (squared loss on the points of ``batch`` walkers, one step each: with a
    large ``batch`` this is the large-batch pointwise method of the paper's negative result). Returns ``samples``,
    ``acc`` at each checkpoint and ``first`` (samples at the first checkpoint reaching ``target``; inf if none)."""
    if data not in ("walk_td", "iid_mse", "walk_mse"):
        raise ValueError(f"data must be 'walk_td', 'iid_mse' or 'walk_mse', got {data!r}")
    net = _MLP(d, width).double()
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.empty_like(p).uniform_(-1, 1, generator=tgen) * (1 / math.sqrt(p.shape[-1])))
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    xt = torch.from_numpy(_cube(rng, n_test, d))
    yt = torch.from_numpy(rw.junta_value(xt.numpy(), S, table))
    x = _cube(rng, batch, d)
    out = {"samples": [], "acc": [], "first": math.inf}
    every = max(1, check_every // batch)
    for t in range(1, max_samples // batch + 1):
        if data == "iid_mse":
            x = _cube(rng, batch, d)
        if data == "walk_td":
            x2, _ = rw.lazy_walk_step(x, rng)
            xa, xb = torch.from_numpy(x), torch.from_numpy(x2)
            target_inc = torch.from_numpy(rw.junta_value(x2, S, table) - rw.junta_value(x, S, table))
            loss = ((net(xb) - net(xa)) - target_inc).pow(2).mean()
            x = x2
        else:
            if data == "walk_mse":
                x, _ = rw.lazy_walk_step(x, rng)
            loss = (net(torch.from_numpy(x)) - torch.from_numpy(rw.junta_value(x, S, table))).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if t % every == 0:
            with torch.no_grad():
                pred = net(xt)
                if data == "walk_td":     # TD fixes the output up to a constant: read it off 64 labelled points
                    xo = _cube(rng, 64, d)
                    pred = pred - float((net(torch.from_numpy(xo)) - torch.from_numpy(rw.junta_value(xo, S, table))).mean())
                acc = float((torch.sign(pred) == yt).double().mean())
            out["samples"].append(t * batch); out["acc"].append(acc)
            if acc >= target:
                out["first"] = t * batch
                break
    return out


def counting_floor(d: int, S: np.ndarray, table: np.ndarray, rng: np.random.Generator, max_steps: int = 10 ** 7
                   ) -> int:
    """Steps of one lazy walk until every coordinate of ``S`` has been flipped at least once at a point where the
    flip changes ``f``: after that, the rule 'j is relevant iff flipping it was seen to change f' names ``S``."""
    x = _cube(rng, 1, d)
    seen = set()
    fx = rw.junta_value(x, S, table)[0]
    for t in range(1, max_steps + 1):
        x2, j = rw.lazy_walk_step(x, rng)
        f2 = rw.junta_value(x2, S, table)[0]
        if j[0] >= 0 and f2 != fx:
            seen.add(int(j[0]))
            if len(seen) == len(S):
                return t
        x, fx = x2, f2
    return max_steps


KINDS = ("parity", "junta")


def task(d: int, k: int, kind: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The relevant set ``S`` (k distinct coordinates of ``d``, sorted, int64) and the truth table: the k-parity
    (``kind="parity"``) or a random balanced k-junta (``kind="junta"``)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    S = np.sort(rng.choice(d, k, replace=False)).astype(np.int64)
    return S, (rw.parity_table(k) if kind == "parity" else rw.random_junta_table(k, rng))


def sweep(seed: int, n_seeds: int, d_list, k: int, kind: str, data: str, trainer: str = "stylised",
          tgen_seed: int = 0, check_per_d: int | None = None, **kw) -> dict:
    """Run :func:`stylised_run` (or :func:`adam_run`, ``trainer="adam"``) for seeds ``0..n_seeds-1`` and every ``d``.

    Each run draws its task and data from ``np.random.default_rng([seed, i, d, k, kind, data])`` (numbers), so a
    run does not depend on which other runs are in the sweep. ``check_per_d``: checkpoints every
    ``check_per_d * d`` samples (overrides ``check_every``). Returns ``first`` (n_seeds, len(d_list)) array of
    phase-1 samples (``adam``: samples) to the target, and ``runs`` (the dicts, same layout)."""
    first = np.full((n_seeds, len(d_list)), math.inf)
    runs = [[None] * len(d_list) for _ in range(n_seeds)]
    for i in range(n_seeds):
        for jd, d in enumerate(d_list):
            rng = np.random.default_rng([seed, i, d, k, KINDS.index(kind), DATA.index(data)])
            S, T = task(d, k, kind, rng)
            if check_per_d is not None:
                kw["check_every"] = check_per_d * d
            if trainer == "adam":
                r = adam_run(d, S, T, rng, torch.Generator().manual_seed(1000 * seed + 10 * i + tgen_seed),
                             data=data, **kw)
            else:
                r = stylised_run(d, S, T, rng, data=data, **kw)
            first[i, jd], runs[i][jd] = r["first"], r
    return {"first": first, "runs": runs}


def slopes(d_list, first: np.ndarray) -> np.ndarray:
    """Per seed (rows of ``first``), the log-log slope of samples against ``d``; inf where some ``d`` never reached
    the target (no finite sample complexity to fit)."""
    return np.array([rw.loglog_slope(d_list, row) if np.all(np.isfinite(row)) else math.inf for row in first])

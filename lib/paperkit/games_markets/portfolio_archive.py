"""A synthetic measured archive of models on several devices, deployment profiles, demand weights and the
portfolio baselines that do not look at the profiles (scalarised score, Pareto spread, random).

The archive mimics the layout of a hardware-aware NAS benchmark (one accuracy per model; latency and energy per
model and device; one memory footprint per model), generated from two latents per model: a size ``f ~ U(0, 1)``
(bigger models are more accurate and slower everywhere) and a style ``g ~ U(-1, 1)`` (which devices run it well):

    acc_m      = 0.6 + 0.35 (1 - exp(-3 f_m)) + 0.02 e,
    log lat_md = 2 f_m s_d - 0.6 a_d g_m + noise e,        s_d in [0.5, 1.5] (device speed), a_d in [-1, 1],
    log mem_m  = 1.5 f_m + noise e,    log energy_md = log lat_md + 0.5 f_m + noise e,     e ~ N(0, 1).

``values`` (M, F) lays them out as [acc, log mem, log lat_1..D, log energy_1..D] (F = 2 + 2D), the layout of
:func:`paperkit.games_markets.portfolio_coverage.coverage_matrix`.

A profile names one device and four bounds, each an archive quantile: accuracy >= Q_acc(t_1) and latency,
memory, energy on its device <= Q(1 - t_j), with tightness t_j = U^(1 / hardness): ``hardness`` 1 gives uniform
tightness, larger values tighter bundles and fewer coverable profiles.
"""
from __future__ import annotations

import math

import numpy as np


def _int(v, name: str, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    return int(v)


def synthetic_archive(rng: np.random.Generator, M: int = 120, D: int = 6, noise: float = 0.1) -> dict:
    """M models on D devices: dict with ``acc`` (M,), ``lat`` and ``energy`` (M, D), ``mem`` (M,), ``values``
    (M, 2 + 2D) (accuracy and log costs, see the module docstring) and the latents ``f``, ``g`` (M,)."""
    M, D = _int(M, "M", 1), _int(D, "D", 1)
    if not 0 <= noise <= 1:
        raise ValueError(f"noise must be in [0, 1], got {noise}")
    f, g = rng.uniform(0, 1, M), rng.uniform(-1, 1, M)
    s, a = np.linspace(0.5, 1.5, D), np.linspace(-1, 1, D)
    acc = 0.6 + 0.35 * (1 - np.exp(-3 * f)) + 0.02 * rng.standard_normal(M)
    log_lat = 2 * f[:, None] * s - 0.6 * g[:, None] * a + noise * rng.standard_normal((M, D))
    log_mem = 1.5 * f + noise * rng.standard_normal(M)
    log_en = log_lat + 0.5 * f[:, None] + noise * rng.standard_normal((M, D))
    values = np.column_stack([acc, log_mem, log_lat, log_en])
    return {"acc": acc, "lat": np.exp(log_lat), "mem": np.exp(log_mem), "energy": np.exp(log_en),
            "values": values, "f": f, "g": g, "D": D}


def remeasure(rng: np.random.Generator, archive: dict, sigma: float) -> dict:
    """The same models measured again: every log cost gets N(0, sigma^2) noise, accuracy N(0, (sigma / 10)^2)."""
    if not 0 <= sigma <= 1:
        raise ValueError(f"sigma must be in [0, 1], got {sigma}")
    v = archive["values"].copy()
    v[:, 0] += 0.1 * sigma * rng.standard_normal(v.shape[0])
    v[:, 1:] += sigma * rng.standard_normal(v[:, 1:].shape)
    return {**archive, "values": v}


def profiles(rng: np.random.Generator, archive: dict, P: int, hardness: float) -> dict:
    """P deployment profiles on ``archive``: ``lo``/``hi`` (P, F) boxes and ``device`` (P,) (see module docstring)."""
    P = _int(P, "P", 1)
    if not 0.2 <= hardness <= 10:
        raise ValueError(f"hardness must be in [0.2, 10], got {hardness}")
    v, D = archive["values"], archive["D"]
    dev = rng.integers(0, D, P)
    t = rng.uniform(0, 1, (P, 4)) ** (1.0 / hardness)
    lo, hi = np.full((P, v.shape[1]), -np.inf), np.full((P, v.shape[1]), np.inf)
    rows = np.arange(P)
    lo[:, 0] = np.quantile(v[:, 0], t[:, 0])
    hi[:, 1] = np.quantile(v[:, 1], 1 - t[:, 1])
    lat, en = v[:, 2:2 + D], v[:, 2 + D:]
    hi[rows, 2 + dev] = [np.quantile(lat[:, d], 1 - q) for d, q in zip(dev, t[:, 2])]
    hi[rows, 2 + D + dev] = [np.quantile(en[:, d], 1 - q) for d, q in zip(dev, t[:, 3])]
    return {"lo": lo, "hi": hi, "device": dev}


DEMANDS = ("uniform", "zipf", "hard-heavy", "device-skewed")


def demand_weights(rng: np.random.Generator, C: np.ndarray, device: np.ndarray, kind: str) -> np.ndarray:
    """Profile weights summing to one: ``uniform``; ``zipf`` (w ~ 1/rank over a random ranking);
    ``hard-heavy`` (w ~ 1/#models covering the profile; uncoverable ones as if one model did); ``device-skewed``
    (w ~ 1/(d + 1) for the profile's device d)."""
    P = C.shape[0]
    if kind == "uniform":
        w = np.ones(P)
    elif kind == "zipf":
        w = 1.0 / (1 + rng.permutation(P))
    elif kind == "hard-heavy":
        w = 1.0 / np.maximum(C.sum(1), 1)
    elif kind == "device-skewed":
        w = 1.0 / (1 + np.asarray(device, dtype=np.float64))
    else:
        raise ValueError(f"kind must be one of {DEMANDS}, got {kind!r}")
    return w / w.sum()


def scalarised_top_k(values: np.ndarray, K: int) -> np.ndarray:
    """The K models with the best equal-weight score: z(accuracy) minus the mean z-score of the log costs."""
    z = (values - values.mean(0)) / np.maximum(values.std(0), 1e-12)
    return np.argsort(-(z[:, 0] - z[:, 1:].mean(1)), kind="stable")[:_int(K, "K", 1)]


def pareto_mask(X: np.ndarray) -> np.ndarray:
    """Non-dominated rows of ``X`` (M, d), every column to be minimised: bool (M,) (O(M^2 d))."""
    X = np.asarray(X, dtype=np.float64)
    le, lt = (X[:, None] <= X[None]).all(-1), (X[:, None] < X[None]).any(-1)
    return ~((le & lt).any(0))


def pareto_spread(values: np.ndarray, K: int) -> np.ndarray:
    """K models spread evenly by accuracy along the (accuracy, mean log latency over devices) Pareto front; when
    the front has fewer than K models, the next fronts fill in."""
    K = _int(K, "K", 1)
    D = (values.shape[1] - 2) // 2
    X = np.column_stack([-values[:, 0], values[:, 2:2 + D].mean(1)])
    left, front = np.arange(len(X)), []
    while len(front) < K and left.size:
        mask = pareto_mask(X[left])
        layer = left[mask][np.argsort(X[left[mask], 0])]
        need = K - len(front)
        pick = layer if layer.size <= need else layer[np.round(np.linspace(0, layer.size - 1, need)).astype(int)]
        front.extend(pick.tolist())
        left = left[~mask]
    return np.array(front[:K], dtype=np.int64)


def random_k(rng: np.random.Generator, M: int, K: int) -> np.ndarray:
    """K distinct models drawn uniformly at random."""
    return rng.choice(_int(M, "M", 1), size=_int(K, "K", 1), replace=False)


def top_singletons(C: np.ndarray, w: np.ndarray, K: int) -> np.ndarray:
    """The K models with the largest covered weight on their own (no account of overlap; not guaranteed)."""
    return np.argsort(-(w @ C), kind="stable")[:_int(K, "K", 1)]


def sample_bound(n: int, K: int, M: int, delta: float) -> float:
    """Sample-then-optimise gap bound 2 sqrt((K ln M + ln(2 / delta)) / (2 n)): with probability >= 1 - delta,
    the portfolio optimal on n i.i.d. profiles has population coverage within it of the population optimum
    (Hoeffding for each of the <= M^K portfolios, a union bound, applied at both portfolios)."""
    n, K, M = _int(n, "n", 1), _int(K, "K", 1), _int(M, "M", 1)
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    return 2 * math.sqrt((K * math.log(M) + math.log(2 / delta)) / (2 * n))

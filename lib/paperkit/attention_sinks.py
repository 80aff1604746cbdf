"""Attention sinks as on/off switches: sink-augmented attention, smoothing energy, and the minimal scale of a switch.

Three kernels, each beside a plain reference of the same signature:

* :func:`sink_attention_probs` / :func:`sink_attention_probs_ref`: softmax attention with an optional extra key
  ``k_s`` (the sink) prepended at position 0 and visible to every query, built on
  :func:`paperkit.tiny_transformer.attention_probs`.
* :func:`smoothing_energy` / :func:`smoothing_energy_ref`: mu(X) = ||X - 1 xbar^T||_F, the distance of the token
  matrix from its mean token (zero means every token was averaged into the same vector: oversmoothing).
* :func:`min_scale_bisect` / :func:`min_scale_ref`: the least logit scale beta >= 0 at which softmax(beta S) puts
  mass >= p on a target key in every row (the cost of a hard switch, or of a self-only "diagonal" pattern).
"""
from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit

from paperkit.tiny_transformer import attention_probs


def _check_qk(q: torch.Tensor, k: torch.Tensor, sink_key: torch.Tensor | None) -> None:
    if q.ndim != 4:
        raise ValueError(f"q must be (batch, heads, Lq, dh), got shape {tuple(q.shape)}")
    if k.ndim != 4 or k.shape[:2] != q.shape[:2] or k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k must be (batch, heads, Lk, dh) matching q {tuple(q.shape)}, got {tuple(k.shape)}")
    if sink_key is not None and sink_key.shape != (q.shape[-1],):
        raise ValueError(f"sink_key must have shape ({q.shape[-1]},), got {tuple(sink_key.shape)}")


def sink_attention_probs(q: torch.Tensor, k: torch.Tensor, causal: bool,
                         sink_key: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q [k_s; k]^T / sqrt(dh)); q (B, H, Lq, dh), k (B, H, Lk, dh), sink_key (dh,) or None.

    Returns (B, H, Lq, Lk + 1) with column 0 the sink's mass when ``sink_key`` is given, else (B, H, Lq, Lk).
    The sink sits before every key, so under a causal mask every query still sees it.
    """
    _check_qk(q, k, sink_key)
    if sink_key is None:
        return attention_probs(q, k, causal)
    ks = sink_key.to(k.dtype).expand(*k.shape[:2], 1, k.shape[-1])
    # attention_probs' causal mask is tril(Lk' - Lq): with Lk' = Lk + 1 query i sees the sink and keys 0..i
    return attention_probs(q, torch.cat([ks, k], dim=-2), causal)


def sink_attention_probs_ref(q: torch.Tensor, k: torch.Tensor, causal: bool,
                             sink_key: torch.Tensor | None = None) -> torch.Tensor:
    """Same as :func:`sink_attention_probs`, one query row at a time with explicit exponentials."""
    _check_qk(q, k, sink_key)
    B, H, Lq, dh = q.shape
    Lk = k.shape[-2]
    off = 1 if sink_key is not None else 0
    out = torch.zeros(B, H, Lq, Lk + off, dtype=q.dtype)
    for b in range(B):
        for h in range(H):
            for i in range(Lq):
                n_vis = (i + Lk - Lq + 1) if causal else Lk
                keys = k[b, h, :n_vis]
                if sink_key is not None:
                    keys = torch.cat([sink_key.to(k.dtype)[None], keys])
                # a_j = q_i . k_j / sqrt(dh); p_j = exp(a_j - max a) / sum exp(a - max a)
                a = keys @ q[b, h, i] / math.sqrt(dh)
                e = torch.exp(a - a.max())
                out[b, h, i, : e.shape[0]] = e / e.sum()
    return out


def smoothing_energy(X: np.ndarray) -> float:
    """mu(X) = ||X - 1 xbar^T||_F for X (n_tokens, d), xbar the mean token."""
    X = np.asarray(X, dtype=float)
    if X.ndim != 2:
        raise ValueError(f"X must be (n_tokens, d), got shape {X.shape}")
    # centre first: the shortcut ||X||^2 - n||xbar||^2 cancels catastrophically once the tokens have nearly merged
    return float(np.linalg.norm(X - X.mean(0, keepdims=True)))


def smoothing_energy_ref(X: np.ndarray) -> float:
    """Same as :func:`smoothing_energy`, one token at a time: sqrt(sum_i ||x_i - xbar||^2)."""
    X = np.asarray(X, dtype=float)
    if X.ndim != 2:
        raise ValueError(f"X must be (n_tokens, d), got shape {X.shape}")
    xbar = X.sum(0) / X.shape[0]
    return float(math.sqrt(sum(float(np.dot(x - xbar, x - xbar)) for x in X)))


def _check_scale_args(S: np.ndarray, target: np.ndarray, p: float) -> tuple[np.ndarray, np.ndarray]:
    S = np.asarray(S, dtype=np.float64)
    target = np.asarray(target)
    if S.ndim != 2 or S.shape[1] < 2:
        raise ValueError(f"S must be (n_queries, n_keys >= 2), got shape {S.shape}")
    if target.shape != (S.shape[0],) or not np.issubdtype(target.dtype, np.integer):
        raise ValueError(f"target must be integer (n_queries,) = ({S.shape[0]},), got {target.dtype} {target.shape}")
    if np.any((target < 0) | (target >= S.shape[1])):
        raise ValueError("target entries must index a key in [0, n_keys)")
    if not 0.5 < p < 1.0:
        raise ValueError(f"p must lie in (0.5, 1), got {p}")
    return S, target.astype(np.int64)


@njit(cache=True)
def _log_rival_mass(S, i, t, beta):
    # log sum_{j != t} exp(beta (S_ij - S_it)): falls with beta when every rival logit is below the target's
    s = 0.0
    for j in range(S.shape[1]):
        if j != t:
            s += math.exp(beta * (S[i, j] - S[i, t]))
    return math.log(s)


@njit(cache=True)
def _max_row_scale(S, target, p, iters):
    n, m = S.shape
    log_odds = math.log((1.0 - p) / p)
    gap = np.empty(n)
    for i in range(n):
        g = np.inf
        for j in range(m):
            if j != target[i]:
                g = min(g, S[i, target[i]] - S[i, j])
        gap[i] = g
    if gap.min() <= 0.0:
        return np.inf
    best = 0.0
    # rows with the smallest gap usually need the largest scale: visit them first, so that most later rows
    # already meet mass p at the running maximum and cost one evaluation instead of a bisection
    for i in np.argsort(gap):
        t = target[i]
        if _log_rival_mass(S, i, t, best) <= log_odds:
            continue
        lo, hi = best, max(2.0 * best, 1.0)
        while _log_rival_mass(S, i, t, hi) > log_odds:
            lo, hi = hi, 2.0 * hi
        for _ in range(iters):
            mid = 0.5 * (lo + hi)
            if _log_rival_mass(S, i, t, mid) <= log_odds:
                hi = mid
            else:
                lo = mid
        best = hi
    return best


def min_scale_bisect(S: np.ndarray, target: np.ndarray, p: float, iters: int = 60) -> float:
    """Least beta >= 0 with softmax(beta S)[i, target_i] >= p for every row i; inf when no beta works.

    S (n_queries, n_keys) are the unscaled logits q_i . k_j; p in (0.5, 1). A row can reach mass p > 1/2 only if its
    target logit strictly beats every other logit (the alignment condition); then its mass rises with beta, so the
    answer is the largest per-row threshold, each found by bisection (``iters`` halvings) in the log domain; rows
    already satisfied at the running maximum are skipped after one evaluation.
    """
    S, target = _check_scale_args(S, target, p)
    return float(_max_row_scale(S, target, float(p), int(iters)))


def min_scale_ref(S: np.ndarray, target: np.ndarray, p: float, iters: int = 60) -> float:
    """Same as :func:`min_scale_bisect`: one bisection on the whole matrix with scipy's exact softmax."""
    from scipy.special import softmax

    S, target = _check_scale_args(S, target, p)
    rows = np.arange(S.shape[0])
    gaps = np.where(np.arange(S.shape[1])[None] == target[:, None], -np.inf, S - S[rows, target][:, None])
    if np.any(gaps.max(1) >= 0):
        return float("inf")

    def ok(beta: float) -> bool:
        return bool(np.all(softmax(beta * S, axis=1)[rows, target] >= p))

    lo, hi = 0.0, 1.0
    while not ok(hi):
        lo, hi = hi, 2.0 * hi
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def switch_scale_closed_form(n_keys: int, p: float, cos_theta: np.ndarray) -> np.ndarray:
    """beta*(theta) = log((n_keys - 1) p / (1 - p)) / cos(theta) for a unit query at angle theta to a unit sink key
    whose n_keys - 1 rivals are orthogonal to the query (logit 0); inf where cos(theta) <= 0 (no alignment)."""
    cos_theta = np.asarray(cos_theta, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(cos_theta > 0, math.log((n_keys - 1) * p / (1 - p)) / np.where(cos_theta > 0, cos_theta, 1.0),
                        np.inf)

"""Positional spread of an additive positional encoding and the exact lower bound for separating encodings.

An encoding is a matrix E of shape (L, d): row i (e_i) is added to the token at position i. Its *spread* is the
squared Frobenius norm of the row-centred matrix, ||E~||_F^2 with E~ = E - 1 mean(E, 0). The variance identity

    sum_i ||e_i - mean||^2 = (1 / 2L) sum_{i,j} ||e_i - e_j||^2

gives, for any E whose rows are pairwise at least delta apart, spread >= (L - 1) delta^2 / 2, with equality for a
regular simplex (all pairwise distances equal delta).

Kernels and their plain references share one signature:
  positional_spread(E)  (vectorised centring)   vs positional_spread_ref(E)  (pairwise double loop, the identity)
  min_separation(E)     (Numba, O(L^2 d))        vs min_separation_ref(E)     (all pairwise distances in NumPy)
"""
from __future__ import annotations

import numpy as np
from numba import njit


def _check_E(E) -> np.ndarray:
    E = np.asarray(E)
    if E.ndim != 2 or E.shape[0] < 1 or E.shape[1] < 1:
        raise ValueError(f"E must be a non-empty (L, d) matrix, got shape {E.shape}")
    if not np.issubdtype(E.dtype, np.floating):
        E = E.astype(np.float64)
    if not np.all(np.isfinite(E)):
        raise ValueError("E must be finite")
    return E


def positional_spread(E) -> float:
    """Spread ||E~||_F^2 of E (L, d), computed by centring the rows (float64 accumulation)."""
    E = _check_E(E).astype(np.float64)
    # E~ = E - 1 mean(E, 0); spread = sum of squares of E~
    Et = E - E.mean(axis=0, keepdims=True)
    return float(np.sum(Et * Et))


def positional_spread_ref(E) -> float:
    """Spread of E (L, d) by the pairwise side of the identity: (1 / 2L) sum_{i,j} ||e_i - e_j||^2."""
    E = _check_E(E).astype(np.float64)
    L = E.shape[0]
    total = 0.0
    for i in range(L):
        for j in range(L):
            diff = E[i] - E[j]
            total += float(diff @ diff)
    return total / (2 * L)


@njit(cache=True)
def _min_sep_sq(E):
    L, d = E.shape
    best = np.inf
    for i in range(L):
        for j in range(i + 1, L):
            s = 0.0
            for k in range(d):
                t = E[i, k] - E[j, k]
                s += t * t
                if s >= best:  # early exit: this pair cannot beat the running minimum
                    break
            if s < best:
                best = s
    return best


def min_separation(E) -> float:
    """delta(E) = min_{i<j} ||e_i - e_j||_2 over rows of E (L, d); inf when L == 1. Numba kernel."""
    E = np.ascontiguousarray(_check_E(E), dtype=np.float64)
    return float(np.sqrt(_min_sep_sq(E)))


def min_separation_ref(E) -> float:
    """delta(E) from the full (L, L) matrix of pairwise distances (NumPy), same contract as min_separation."""
    E = _check_E(E).astype(np.float64)
    L = E.shape[0]
    if L == 1:
        return float("inf")
    D2 = np.sum((E[:, None, :] - E[None, :, :]) ** 2, axis=-1)
    return float(np.sqrt(D2[np.triu_indices(L, k=1)].min()))


def spread_lower_bound(L: int, delta: float) -> float:
    """(L - 1) delta^2 / 2: the least spread of any L-row encoding whose rows are pairwise >= delta apart."""
    if L < 1:
        raise ValueError(f"L must be >= 1, got {L}")
    if not delta >= 0:
        raise ValueError(f"delta must be >= 0, got {delta}")
    return (L - 1) * delta**2 / 2


def simplex_pe(L: int, delta: float) -> np.ndarray:
    """A regular simplex of L rows, all pairwise distances exactly delta: (delta / sqrt 2) I_L, shape (L, L)."""
    if L < 1:
        raise ValueError(f"L must be >= 1, got {L}")
    return np.eye(L) * (delta / np.sqrt(2.0))


def two_cluster_pe(L: int, gap: float, d: int, rng: np.random.Generator) -> np.ndarray:
    """Non-separating control (L, d): the first half of the rows equals a, the rest a + gap * u (|u| = 1).

    Its min separation is 0, so the theorem's premise fails for delta = gap even though most pairs are gap apart.
    """
    if L < 2 or d < 1:
        raise ValueError(f"L must be >= 2 and d >= 1, got L={L}, d={d}")
    a = rng.normal(size=d)
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    E = np.tile(a, (L, 1))
    E[L // 2:] += gap * u
    return E

"""Brute-force nearest-neighbour queries: a Numba kernel and a plain NumPy reference of the same signature.

Two queries, each in a fast form and a reference form:

* :func:`knn_distances` / :func:`knn_distances_ref`: for every query row, the Euclidean distances to (and indices
  of) its ``k`` nearest rows of ``ref``, sorted ascending; ties go to the lower index. ``exclude_self=True`` skips
  ``ref[i]`` for query ``i`` (the "k-th neighbour within the same set" that kNN-ball radii need).
* :func:`in_any_ball` / :func:`in_any_ball_ref`: whether each query row lies in at least one closed ball
  ``||q - c_j|| <= r_j`` (the membership test of kNN precision/recall).

The Numba kernels are serial (no ``prange``: chapters may run two at a time on two cores) and scan ``ref`` once per
query, keeping the ``k`` best in a small sorted buffer, so memory is O(k) per query instead of an n x m matrix.
Squared distances are accumulated in float64 for float32 and float64 inputs alike.
"""
from __future__ import annotations

import numpy as np
from numba import njit

# Reference implementations materialise a (rows, m, d) block; this caps it at ~32 MiB of float64.
_REF_BLOCK_ELEMS = 4_000_000


def _as_points(x, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n, d), got shape {x.shape}")
    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float64)
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contains NaN or inf")
    return np.ascontiguousarray(x)


def _check_knn(query, ref, k, exclude_self) -> tuple[np.ndarray, np.ndarray, int]:
    query, ref = _as_points(query, "query"), _as_points(ref, "ref")
    if query.shape[1] != ref.shape[1]:
        raise ValueError(f"query and ref must have the same number of columns, got {query.shape} and {ref.shape}")
    if query.dtype != ref.dtype:
        query, ref = query.astype(np.float64), ref.astype(np.float64)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ValueError(f"k must be an integer, got {k!r}")
    if exclude_self and query.shape[0] != ref.shape[0]:
        raise ValueError(f"exclude_self needs query and ref with the same rows, got {query.shape[0]} and {ref.shape[0]}")
    available = ref.shape[0] - int(bool(exclude_self))
    if not 1 <= k <= available:
        raise ValueError(f"k must be in [1, {available}] for ref with {ref.shape[0]} rows, got {k}")
    return query, ref, int(k)


@njit(cache=True)
def _knn_kernel(query, ref, k, exclude_self, out_sq, out_idx):
    n, m, d = query.shape[0], ref.shape[0], query.shape[1]
    for i in range(n):
        best_sq = out_sq[i]
        best_idx = out_idx[i]
        filled = 0
        for j in range(m):
            if exclude_self and j == i:
                continue
            s = 0.0
            for c in range(d):
                t = query[i, c] - ref[j, c]
                s += t * t
            # strict '<' keeps the earlier index on ties, like a stable argsort
            if filled < k or s < best_sq[k - 1]:
                pos = filled if filled < k else k - 1
                while pos > 0 and best_sq[pos - 1] > s:
                    best_sq[pos] = best_sq[pos - 1]
                    best_idx[pos] = best_idx[pos - 1]
                    pos -= 1
                best_sq[pos] = s
                best_idx[pos] = j
                if filled < k:
                    filled += 1


def knn_distances(query, ref, k: int, exclude_self: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Distances and indices of the ``k`` nearest ``ref`` rows of every ``query`` row (Numba, serial).

    query: (n, d), ref: (m, d), float32 or float64 (other dtypes are cast to float64).
    Returns ``dist`` (n, k) float64, ascending, ``dist[i, j] = ||query[i] - ref[idx[i, j]]||_2``, and
    ``idx`` (n, k) int64. With ``exclude_self`` (needs n == m), ``ref[i]`` is never a neighbour of ``query[i]``.
    """
    query, ref, k = _check_knn(query, ref, k, exclude_self)
    sq = np.empty((query.shape[0], k), dtype=np.float64)
    idx = np.empty((query.shape[0], k), dtype=np.int64)
    _knn_kernel(query, ref, k, bool(exclude_self), sq, idx)
    return np.sqrt(sq), idx


def knn_distances_ref(query, ref, k: int, exclude_self: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Plain NumPy reference for :func:`knn_distances`: same signature, same output, same tie rule."""
    query, ref, k = _check_knn(query, ref, k, exclude_self)
    n, m = query.shape[0], ref.shape[0]
    rows = max(1, _REF_BLOCK_ELEMS // max(1, m * query.shape[1]))
    dist = np.empty((n, k), dtype=np.float64)
    idx = np.empty((n, k), dtype=np.int64)
    for s in range(0, n, rows):
        diff = query[s:s + rows, None, :] - ref[None, :, :]
        sq = np.sum(diff * diff, axis=-1, dtype=np.float64)
        if exclude_self:
            r = np.arange(s, min(s + rows, n))
            sq[r - s, r] = np.inf
        order = np.argsort(sq, axis=1, kind="stable")[:, :k]
        idx[s:s + rows] = order
        dist[s:s + rows] = np.sqrt(np.take_along_axis(sq, order, axis=1))
    return dist, idx


def _check_balls(query, centers, radii) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    query, centers = _as_points(query, "query"), _as_points(centers, "centers")
    if query.shape[1] != centers.shape[1]:
        raise ValueError(f"query and centers must have the same number of columns, got {query.shape} and "
                         f"{centers.shape}")
    if query.dtype != centers.dtype:
        query, centers = query.astype(np.float64), centers.astype(np.float64)
    radii = np.asarray(radii, dtype=np.float64)
    if radii.shape != (centers.shape[0],):
        raise ValueError(f"radii must have shape ({centers.shape[0]},) to match centers, got {radii.shape}")
    if not np.all(np.isfinite(radii)) or np.any(radii < 0):
        raise ValueError("radii must be finite and >= 0")
    return query, centers, np.ascontiguousarray(radii)


@njit(cache=True)
def _ball_kernel(query, centers, radii_sq, out):
    n, m, d = query.shape[0], centers.shape[0], query.shape[1]
    for i in range(n):
        hit = False
        for j in range(m):
            s = 0.0
            for c in range(d):
                t = query[i, c] - centers[j, c]
                s += t * t
            if s <= radii_sq[j]:
                hit = True
                break
        out[i] = hit


def in_any_ball(query, centers, radii) -> np.ndarray:
    """Whether each query row lies in some closed ball: ``exists j: ||query[i] - centers[j]||_2 <= radii[j]``.

    query: (n, d), centers: (m, d), radii: (m,) >= 0. Returns (n,) bool. Numba, serial, stops at the first hit.
    """
    query, centers, radii = _check_balls(query, centers, radii)
    out = np.empty(query.shape[0], dtype=np.bool_)
    _ball_kernel(query, centers, radii * radii, out)
    return out


def in_any_ball_ref(query, centers, radii) -> np.ndarray:
    """Plain NumPy reference for :func:`in_any_ball`: same signature, same output."""
    query, centers, radii = _check_balls(query, centers, radii)
    n, m = query.shape[0], centers.shape[0]
    rows = max(1, _REF_BLOCK_ELEMS // max(1, m * query.shape[1]))
    out = np.empty(n, dtype=np.bool_)
    for s in range(0, n, rows):
        diff = query[s:s + rows, None, :] - centers[None, :, :]
        sq = np.sum(diff * diff, axis=-1, dtype=np.float64)
        out[s:s + rows] = np.any(sq <= radii * radii, axis=1)
    return out

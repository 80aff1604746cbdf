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

For d >= 8, :func:`knn_sq_distances` (and so :func:`knn_distances`) does what scikit-learn's brute force does,
approximate squared distances ||q||^2 + ||r||^2 - 2 q.r for a cache-sized block of queries by one BLAS float64
matmul, and then (unlike scikit-learn) recomputes the exact squared distance of every candidate within a
rounding-error bound of the k-th smallest: the result (values, indices, tie rule) is the direct scan's, at BLAS
speed (at least scikit-learn's NearestNeighbors brute at n = m = 1000, d = 16, k = 5; benchmarks/geometry).
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
    if x.shape[1] < 1:
        raise ValueError(f"{name} must have at least one column (d >= 1), got shape {x.shape}")
    if x.dtype not in (np.float32, np.float64):
        if x.dtype == np.bool_ or not np.issubdtype(x.dtype, np.number) or np.iscomplexobj(x):
            raise TypeError(f"{name} must be a real float or integer array, got dtype {x.dtype}")
        x = x.astype(np.float64)  # integers: exact below 2**53
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contains NaN or inf")
    return np.ascontiguousarray(x)


def _check_scale(x: np.ndarray, name: str) -> None:
    """Refuse coordinates so large that a squared distance would overflow: |x| <= 0.5 sqrt(max / d), with max the
    largest float of x's dtype for the products (float32 differences are squared in float32) and of float64 for
    the sum over the d columns (O(n d), no effect on valid inputs)."""
    if x.size == 0:
        return
    d = x.shape[1]
    limit = 0.5 * min(np.sqrt(np.finfo(x.dtype).max), np.sqrt(np.finfo(np.float64).max / d))
    amax = float(np.max(np.abs(x)))
    if amax > limit:
        raise ValueError(f"{name} has coordinates up to {amax:.3g}: beyond {limit:.3g} squared distances in d = {d} "
                         f"would overflow {x.dtype}; rescale the points")


def _same_dtype(a: np.ndarray, b: np.ndarray, na: str, nb: str) -> None:
    if a.dtype != b.dtype:
        raise TypeError(f"{na} and {nb} must share one dtype (no silent cast), got {a.dtype} and {b.dtype}")


def check_point_sets(a, b, name_a: str = "query", name_b: str = "ref") -> tuple[np.ndarray, np.ndarray]:
    """Validate two point sets (n, d) and (m, d) for a distance kernel; errors name ``name_a`` / ``name_b``.

    Real float32/float64 of one dtype (integers are cast to float64), finite, d >= 1 columns shared, and small
    enough that squared distances cannot overflow. Returns both as contiguous arrays. O(n d).
    """
    a, b = _as_points(a, name_a), _as_points(b, name_b)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"{name_a} and {name_b} must have the same number of columns, got {a.shape} and {b.shape}")
    _same_dtype(a, b, name_a, name_b)
    _check_scale(a, name_a), _check_scale(b, name_b)
    return a, b


def _check_knn(query, ref, k, exclude_self) -> tuple[np.ndarray, np.ndarray, int]:
    query, ref = check_point_sets(query, ref, "query", "ref")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ValueError(f"k must be an integer, got {k!r}")
    if exclude_self and query.shape[0] != ref.shape[0]:
        raise ValueError(f"exclude_self needs query and ref with the same rows, got {query.shape[0]} and {ref.shape[0]}")
    available = ref.shape[0] - int(bool(exclude_self))
    if not 1 <= k <= available:
        raise ValueError(f"k must be in [1, {available}] for ref with {ref.shape[0]} rows, got {k}")
    return query, ref, int(k)


@njit(cache=True, inline="always")
def _sq_dist(query, i, ref, j):
    """Exact squared distance ||query[i] - ref[j]||^2, accumulated in the order every kernel here uses."""
    s = 0.0
    for c in range(query.shape[1]):
        t = query[i, c] - ref[j, c]
        s += t * t
    return s


@njit(cache=True, inline="always")
def _insert(best_sq, best_idx, filled, k, s, j):
    """Insert (s, j) into the sorted buffers of the k best so far (``filled`` of them); return the new count.
    Strict '<' keeps the earlier index on ties, like a stable argsort. Callers first test ``filled < k or
    s < best_sq[k - 1]`` themselves: a call per candidate pair costs about 20x that test (Numba reference-counts
    the array arguments of every call), and the test rejects almost every pair."""
    pos = filled if filled < k else k - 1
    while pos > 0 and best_sq[pos - 1] > s:
        best_sq[pos] = best_sq[pos - 1]
        best_idx[pos] = best_idx[pos - 1]
        pos -= 1
    best_sq[pos] = s
    best_idx[pos] = j
    return filled + 1 if filled < k else filled


@njit(cache=True)
def _knn_kernel(query, ref, k, exclude_self, out_sq, out_idx):
    n, m = query.shape[0], ref.shape[0]
    for i in range(n):
        filled = 0
        for j in range(m):
            if exclude_self and j == i:
                continue
            s = _sq_dist(query, i, ref, j)
            if filled < k or s < out_sq[i, k - 1]:
                filled = _insert(out_sq[i], out_idx[i], filled, k, s, j)


@njit(cache=True)
def _knn_select_kernel(query, ref, dots, nq2, nr2, row0, nq, k, exclude_self, slack, out_sq, out_idx, cand):
    """Rows row0 .. row0 + nq of :func:`_knn_kernel`'s result from ``dots`` (nq, m) = BLAS-computed q.r: the
    approximate squared distances approx = (-2 q.r + ||q||^2) + ||r||^2 (``nq2``, ``nr2``), formed here in
    registers rather than by three NumPy passes over the block, are each within ``slack[i] / 2`` of the exact one.
    Pass 1 keeps the ``k + _SPARE`` smallest approximate values; with tau the k-th of them, every true k-nearest row
    (ties included) has approx <= tau + slack[i]. When the last kept value already exceeds that bound, the
    candidates are among the kept rows; otherwise (near-ties wider than the spare) pass 2 scans the row again.
    Candidates, in ascending index order, are recomputed exactly as :func:`_knn_kernel` does (same tie rule)."""
    m = ref.shape[0]
    kk = k + _SPARE
    best, best_j = np.empty(kk), np.empty(kk, dtype=np.int64)
    for r in range(nq):
        i = row0 + r
        qi = nq2[i]
        filled = 0
        for j in range(m):
            if exclude_self and j == i:
                continue
            s = (dots[r, j] * -2.0 + qi) + nr2[j]
            if filled < kk or s < best[kk - 1]:
                filled = _insert(best, best_j, filled, kk, s, j)
        tau = best[k - 1] + slack[r]
        nc = 0
        if filled < kk or best[kk - 1] > tau:
            for q in range(filled):
                if best[q] <= tau:
                    cand[nc] = best_j[q]
                    nc += 1
            cand[:nc].sort()
        else:
            for j in range(m):
                if (dots[r, j] * -2.0 + qi) + nr2[j] <= tau and not (exclude_self and j == i):
                    cand[nc] = j
                    nc += 1
        filled = 0
        for q in range(nc):
            j = cand[q]
            s = _sq_dist(query, i, ref, j)
            if filled < k or s < out_sq[i, k - 1]:
                filled = _insert(out_sq[i], out_idx[i], filled, k, s, j)


# The BLAS path pays off once a distance costs more than a few flops; below this d the direct scan is as fast.
_GEMM_MIN_D = 8
_GEMM_BLOCK_ELEMS = 1 << 18  # dot-product block (rows x m) of float64: 2 MiB, cache-resident
_SPARE = 4  # extra approximate neighbours kept in pass 1, so that a second scan of the row is rarely needed


def _knn_gemm(query, ref, k, exclude_self, sq, idx) -> None:
    """:func:`_knn_kernel`'s exact result through BLAS: per block of query rows, approximate squared distances by
    one float64 matmul of dot products, then :func:`_knn_select_kernel` (exact recomputation of the few
    candidates)."""
    q64, r64 = query.astype(np.float64, copy=False), ref.astype(np.float64, copy=False)
    nq2, nr2 = np.einsum("ij,ij->i", q64, q64), np.einsum("ij,ij->i", r64, r64)
    d = query.shape[1]
    # |fl(approx) - exact kernel value| <= (d + 4) eps (|q|^2 + |r|^2) for either dtype (the kernel squares
    # float32 differences in float32: eps of the input dtype); the slack is twice that, doubled again for margin.
    eps = float(np.finfo(query.dtype).eps)
    coef = 4.0 * (d + 4) * eps
    n, m = query.shape[0], ref.shape[0]
    rows = max(1, _GEMM_BLOCK_ELEMS // max(1, m))
    cand = np.empty(m, dtype=np.int64)
    nr2_max = float(nr2.max())
    for s in range(0, n, rows):
        e = min(n, s + rows)
        slack = coef * (nq2[s:e] + nr2_max)
        _knn_select_kernel(query, ref, q64[s:e] @ r64.T, nq2, nr2, s, e - s, k, exclude_self, slack, sq, idx, cand)


def knn_distances(query, ref, k: int, exclude_self: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Distances and indices of the ``k`` nearest ``ref`` rows of every ``query`` row (Numba, serial).

    query: (n, d), ref: (m, d), d >= 1, float32 or float64 of one dtype (integer arrays are cast to float64;
    complex, bool, mixed float dtypes and coordinates whose squared distances would overflow are refused).
    Returns ``dist`` (n, k) float64, ascending, ``dist[i, j] = ||query[i] - ref[idx[i, j]]||_2``, and
    ``idx`` (n, k) int64. With ``exclude_self`` (needs n == m), ``ref[i]`` is never a neighbour of ``query[i]``.
    """
    sq, idx = knn_sq_distances(query, ref, k, exclude_self)
    return np.sqrt(sq), idx


def knn_sq_distances(query, ref, k: int, exclude_self: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """:func:`knn_distances` before the square root: squared distances (n, k) float64, ascending, and indices."""
    query, ref, k = _check_knn(query, ref, k, exclude_self)
    sq = np.empty((query.shape[0], k), dtype=np.float64)
    idx = np.empty((query.shape[0], k), dtype=np.int64)
    if query.shape[1] >= _GEMM_MIN_D and query.shape[0] > 0:
        _knn_gemm(query, ref, k, bool(exclude_self), sq, idx)
    else:
        _knn_kernel(query, ref, k, bool(exclude_self), sq, idx)
    return sq, idx


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


def _check_balls(query, centers, radii, squared: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validated query, centers and the squared radii (``radii`` squared, or ``radii_sq`` as given)."""
    query, centers = check_point_sets(query, centers, "query", "centers")
    name = "radii_sq" if squared else "radii"
    radii = np.asarray(radii)
    if np.iscomplexobj(radii) or radii.dtype == np.bool_ or not np.issubdtype(radii.dtype, np.number):
        raise TypeError(f"{name} must be a real array, got dtype {radii.dtype}")
    radii = radii.astype(np.float64)
    if radii.shape != (centers.shape[0],):
        raise ValueError(f"{name} must have shape ({centers.shape[0]},) to match centers, got {radii.shape}")
    if not np.all(np.isfinite(radii)) or np.any(radii < 0):
        raise ValueError(f"{name} must be finite and >= 0")
    # the kernels compare squared distances with squared radii
    return query, centers, np.ascontiguousarray(radii if squared else radii * radii)


@njit(cache=True)
def _ball_kernel(query, centers, radii_sq, out):
    n, m = query.shape[0], centers.shape[0]
    for i in range(n):
        hit = False
        for j in range(m):
            if _sq_dist(query, i, centers, j) <= radii_sq[j]:
                hit = True
                break
        out[i] = hit


def _radii_arg(radii, radii_sq):
    if (radii is None) == (radii_sq is None):
        raise TypeError("give exactly one of radii and radii_sq")
    return (radii, False) if radii_sq is None else (radii_sq, True)


def in_any_ball(query, centers, radii=None, *, radii_sq=None) -> np.ndarray:
    """Whether each query row lies in some closed ball: ``exists j: ||query[i] - centers[j]||_2 <= radii[j]``.

    query: (n, d), centers: (m, d), radii: (m,) >= 0. Returns (n,) bool. Numba, serial, stops at the first hit.
    The test is ``squared distance <= radii[j]**2``; pass ``radii_sq`` (squared radii, as :func:`knn_sq_distances`
    returns them) instead of ``radii`` to compare with them as computed: a point exactly on the boundary then
    stays inside (sqrt and squaring again can round a squared radius down by one ulp).
    """
    query, centers, r2 = _check_balls(query, centers, *_radii_arg(radii, radii_sq))
    out = np.empty(query.shape[0], dtype=np.bool_)
    _ball_kernel(query, centers, r2, out)
    return out


def in_any_ball_ref(query, centers, radii=None, *, radii_sq=None) -> np.ndarray:
    """Plain NumPy reference for :func:`in_any_ball`: same signature, same output."""
    query, centers, radii = _check_balls(query, centers, *_radii_arg(radii, radii_sq))
    n, m = query.shape[0], centers.shape[0]
    rows = max(1, _REF_BLOCK_ELEMS // max(1, m * query.shape[1]))
    out = np.empty(n, dtype=np.bool_)
    for s in range(0, n, rows):
        diff = query[s:s + rows, None, :] - centers[None, :, :]
        sq = np.sum(diff * diff, axis=-1, dtype=np.float64)
        out[s:s + rows] = np.any(sq <= radii, axis=1)  # radii: squared by _check_balls
    return out


# ----------------------------------------------------------------------------------------------------- registry

def _knn_inputs(rng, size):
    return {"query": rng.normal(size=(size, 3)), "ref": rng.normal(size=(6, 3)), "k": 2}


def _ball_inputs(rng, size):
    return {"query": rng.normal(size=(size, 3)), "centers": rng.normal(size=(6, 3)),
            "radii": rng.uniform(0.2, 1.0, size=6)}


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    pts = "query: (n, d), ref/centers: (m, d), one float dtype, d >= 1"
    return [
        Kernel("knn.knn_distances", knn_distances, knn_distances_ref, _knn_inputs,
               Contract(args=(Arg("query", ndim=2, same_dtype_as="ref", scale=True), Arg("ref", ndim=2, scale=True)),
                        empty="value", empty_value=lambda kw: (np.zeros((0, kw["k"])), np.zeros((0, kw["k"]))),
                        shapes=pts + "; 1 <= k <= m"),
               tol={"float64": (1e-12, 1e-12), "float32": (1e-6, 1e-6)}, benchmark="knn_distances (numba)",
               oracle="scikit-learn NearestNeighbors (brute force)"),
        Kernel("knn.in_any_ball", in_any_ball, in_any_ball_ref, _ball_inputs,
               Contract(args=(Arg("query", ndim=2, same_dtype_as="centers", scale=True),
                              Arg("centers", ndim=2, scale=True), Arg("radii", ("float64",), 1, low=0.0)),
                        empty="value", empty_value=lambda kw: np.zeros(0), shapes=pts + "; radii: (m,) >= 0"),
               tol={"float64": (0, 0), "float32": (0, 0)}, benchmark="in_any_ball (numba)",
               oracle="exact integer lattice with hand-counted boundary points"),
    ]


KERNELS = _registry()

"""A KV-cache index for halfspace range search: every key k with q.k >= tau, and never one missed.

Sparse attention as a range query (Louver, seed file 003, abstract 7, line 15): the keys that matter for a query q
are those in the halfspace {k : q.k >= tau}. The abstract names the problem and the guarantee (zero false negatives) but not the
structure, so this index is OUR reading, not Louver's:

* build: k-means splits the n keys into clusters; a key farther than ``outlier_factor`` times its cluster's median
  member distance becomes a cluster of its own (one far key would otherwise inflate a whole cluster's ball).
  Cluster c keeps its centre mu_c (member mean), a radius r_c = max ||k - mu_c|| over members (a ball), and
  per-coordinate bounds lo_c <= k <= hi_c (a box).
* query(q, tau): each cluster gets an upper bound on q.k over its members::

      ball:  q.k <= q.mu_c + ||q|| r_c                       (Cauchy-Schwarz)
      box:   q.k <= sum_j max(q_j lo_cj, q_j hi_cj)          (coordinate-wise)

  A cluster whose bound is below tau cannot hold a key of the halfspace and is skipped; every other cluster is
  scanned exactly. The answer is therefore exactly {k : q.k >= tau}, whatever q, tau or the clustering.
* insert(k): the new key joins the nearest cluster if it lies within that cluster's reach (``outlier_factor``
  times its median member distance at build), growing the ball and box to cover it; otherwise it opens a new
  cluster centred on itself. Either way every key stays inside its cluster's ball and box, so queries stay exact.

Scores are accumulated in float64 for float32 and float64 keys alike. :func:`query_ref` is the brute-force
reference with the same signature. Both return the counted work (keys scanned, clusters pruned).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

BOUNDS = ("ball+box", "ball", "box")
_BOUND_CODE = {b: i for i, b in enumerate(BOUNDS)}
# Relative slack added to every bound before pruning, far above float64 rounding (~1e-13 at d <= 4096), so a key
# scoring exactly tau is never lost to rounding in the bound; it costs nothing measurable in pruning.
_SLACK = 1e-9
_MIN_ROOM = 16  # spare slots given to every cluster, so that inserts rarely move a cluster


@dataclass
class HalfspaceIndex:
    """The index over ``n`` keys of dimension d in ``n_clusters`` clusters (arrays grow on insert).

    ``keys`` (cap, d): keys in insertion order, rows ``[:n]`` live (row = the key's id, its KV-cache position).
    Per cluster c < n_clusters (arrays have spare rows beyond): ``centres`` (., d), ``radius``, ``reach``,
    ``lo``/``hi`` (., d), float64; cluster c's keys are ``slots[start[c] : start[c] + count[c]]`` with ids
    ``ids[...]``, and it may grow to ``capacity[c]`` slots before the slots are laid out again. Rows of
    ``slots`` from ``slots_end`` on are free room for new clusters.
    """

    keys: np.ndarray
    n: int
    n_clusters: int
    centres: np.ndarray
    radius: np.ndarray
    reach: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    start: np.ndarray
    count: np.ndarray
    capacity: np.ndarray
    slots: np.ndarray
    ids: np.ndarray
    slots_end: int

    @property
    def d(self) -> int:
        return self.centres.shape[1]


@dataclass(frozen=True)
class QueryResult:
    """``ids`` (m,) int64 sorted positions of the keys with q.k >= tau; ``scores`` (m,) their q.k in float64;
    ``keys_scanned``: keys whose q.k was computed; ``clusters_pruned``: clusters skipped by their bound."""

    ids: np.ndarray
    scores: np.ndarray
    keys_scanned: int
    clusters_pruned: int


def _check_keys(K: np.ndarray, name: str = "K") -> np.ndarray:
    K = np.asarray(K)
    if K.ndim != 2 or K.shape[0] < 1 or K.shape[1] < 1:
        raise ValueError(f"{name} must be a non-empty (n, d) array, got shape {K.shape}")
    if K.dtype not in (np.float32, np.float64):
        raise ValueError(f"{name} must be float32 or float64, got {K.dtype}")
    if not np.all(np.isfinite(K)):
        raise ValueError(f"{name} must be finite")
    return np.ascontiguousarray(K)


@njit(cache=True)
def _cluster_stats(K, labels, centres, radius, lo, hi):
    """Ball radius and box of each cluster around its centre (float64 accumulation), in place."""
    n, d = K.shape
    for i in range(n):
        c = labels[i]
        dist2 = 0.0
        for j in range(d):
            x = np.float64(K[i, j])
            diff = x - centres[c, j]
            dist2 += diff * diff
            if x < lo[c, j]:
                lo[c, j] = x
            if x > hi[c, j]:
                hi[c, j] = x
        r = np.sqrt(dist2)
        if r > radius[c]:
            radius[c] = r


def _layout(keys: np.ndarray, labels: np.ndarray, ids: np.ndarray, C: int, c_cap: int):
    """Group keys by cluster into slots with spare room per cluster and free rows at the end.

    Returns start, count, capacity (each (c_cap,)), slots, slot ids and slots_end."""
    count = np.zeros(c_cap, np.int64)
    count[:C] = np.bincount(labels, minlength=C)
    capacity = np.zeros(c_cap, np.int64)
    capacity[:C] = count[:C] + np.maximum(_MIN_ROOM, count[:C] // 4)
    start = np.zeros(c_cap, np.int64)
    start[1:C] = np.cumsum(capacity[:C])[:-1]
    slots_end = int(capacity[:C].sum())
    total = slots_end + max(64 * _MIN_ROOM, slots_end // 4)
    slots = np.zeros((total, keys.shape[1]), keys.dtype)
    slot_ids = np.full(total, -1, np.int64)
    order = np.argsort(labels, kind="stable")
    rank = np.arange(len(labels)) - np.repeat(np.cumsum(count[:C]) - count[:C], count[:C])
    where = start[labels[order]] + rank
    slots[where] = keys[order]
    slot_ids[where] = ids[order]
    return start, count, capacity, slots, slot_ids, slots_end


def _member_distances(K: np.ndarray, labels: np.ndarray, centres: np.ndarray) -> np.ndarray:
    return np.linalg.norm(K.astype(np.float64) - centres[labels], axis=1)


def _means(K: np.ndarray, labels: np.ndarray, C: int) -> np.ndarray:
    sums = _sums(K.astype(np.float64), labels, C)
    return sums / np.maximum(np.bincount(labels, minlength=C), 1)[:, None]


def nearest_centre(X: np.ndarray, centres: np.ndarray, chunk: int = 8192) -> np.ndarray:
    """For each row of X (n, d), the index of the nearest row of ``centres`` (C, d), in chunks of rows.
    Distances in float32: a near-tie may go either way, which only moves a key between two clusters."""
    c = centres.astype(np.float32)
    c2 = (c * c).sum(axis=1)
    out = np.empty(len(X), np.int64)
    for i in range(0, len(X), chunk):
        # ||x - c||^2 = ||x||^2 - 2 x.c + ||c||^2, and ||x||^2 does not change the argmin
        out[i: i + chunk] = np.argmin(c2 - 2.0 * X[i: i + chunk].astype(np.float32) @ c.T, axis=1)
    return out


def _sums(X: np.ndarray, labels: np.ndarray, C: int) -> np.ndarray:
    """Per-cluster sums of the rows of X (n, d), float64, shape (C, d)."""
    return np.stack([np.bincount(labels, weights=X[:, j], minlength=C) for j in range(X.shape[1])], axis=1)


def kmeans(X: np.ndarray, n_clusters: int, rng: np.random.Generator, n_iter: int = 10,
           per_cluster: int = 32) -> np.ndarray:
    """Lloyd's k-means on a random sample of at most ``per_cluster`` * C rows of X (n, d), started by k-means++
    seeding; an emptied cluster restarts at a random sample row. Returns the (C, d) float64 centres."""
    n = len(X)
    sample = X[rng.choice(n, min(n, per_cluster * n_clusters), replace=False)].astype(np.float64)
    centres = _kmeans_pp(sample, n_clusters, rng)
    for _ in range(n_iter):
        labels = nearest_centre(sample, centres)
        count = np.bincount(labels, minlength=n_clusters)
        sums = _sums(sample, labels, n_clusters)
        empty = count == 0
        centres[~empty] = sums[~empty] / count[~empty, None]
        centres[empty] = sample[rng.choice(len(sample), int(empty.sum()))]
    return centres


def _kmeans_pp(X: np.ndarray, C: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding: each next centre is a row drawn with probability proportional to its squared
    distance to the nearest centre so far (so far-off groups of keys get a centre of their own)."""
    centres = np.empty((C, X.shape[1]))
    centres[0] = X[rng.integers(len(X))]
    d2 = ((X - centres[0]) ** 2).sum(axis=1)
    for c in range(1, C):
        centres[c] = X[rng.choice(len(X), p=d2 / d2.sum())] if d2.sum() > 0 else X[rng.integers(len(X))]
        d2 = np.minimum(d2, ((X - centres[c]) ** 2).sum(axis=1))
    return centres


def build_index(K: np.ndarray, n_clusters: int, rng: np.random.Generator, n_iter: int = 10,
                outlier_factor: float = 2.0) -> HalfspaceIndex:
    """Cluster the (n, d) keys ``K`` with :func:`kmeans` (``n_iter`` Lloyd steps, seeded by ``rng``),
    split off outliers (distance > ``outlier_factor`` x the cluster's median member distance) as clusters of
    their own, and return the index. Key i keeps id i."""
    K = _check_keys(K)
    n = K.shape[0]
    if isinstance(n_clusters, bool) or not isinstance(n_clusters, (int, np.integer)) or not 1 <= n_clusters <= n:
        raise ValueError(f"n_clusters must be an integer in [1, n={n}], got {n_clusters!r}")
    if n_iter < 1:
        raise ValueError(f"n_iter must be >= 1, got {n_iter}")
    if not outlier_factor > 1:
        raise ValueError(f"outlier_factor must be > 1, got {outlier_factor}")
    centres = kmeans(K, int(n_clusters), rng, n_iter)
    labels = nearest_centre(K, centres)
    C = int(labels.max()) + 1
    dist = _member_distances(K, labels, centres)
    median = _cluster_medians(dist, labels, C)
    far = np.flatnonzero(dist > outlier_factor * median[labels])
    labels[far] = C + np.arange(far.size)
    return _index_from_labels(K, labels, outlier_factor)


def _cluster_medians(dist: np.ndarray, labels: np.ndarray, C: int) -> np.ndarray:
    order = np.lexsort((dist, labels))
    count = np.bincount(labels, minlength=C)
    first = np.cumsum(count) - count
    return np.where(count > 0, dist[order][first + np.maximum(count - 1, 0) // 2], 0.0)


def index_from_labels(K: np.ndarray, labels: np.ndarray, outlier_factor: float = 2.0) -> HalfspaceIndex:
    """The index for a given cluster assignment (labels (n,) in [0, C)). Any assignment gives exact answers;
    only pruning depends on it (used for the random-partition control)."""
    K = _check_keys(K)
    labels = np.asarray(labels)
    if not np.issubdtype(labels.dtype, np.integer):
        raise TypeError(f"labels must be integer cluster numbers, got dtype {labels.dtype} (no truncation)")
    labels = labels.astype(np.int64)
    if labels.shape != (len(K),) or labels.min() < 0:
        raise ValueError(f"labels must be (n,) non-negative integers, got shape {labels.shape}")
    return _index_from_labels(K, labels, outlier_factor)


def _index_from_labels(K: np.ndarray, labels: np.ndarray, outlier_factor: float) -> HalfspaceIndex:
    n, d = K.shape
    C = int(labels.max()) + 1
    c_cap = C + max(64, C // 2)
    centres = np.zeros((c_cap, d))
    centres[:C] = _means(K, labels, C)
    radius = np.zeros(c_cap)
    lo = np.full((c_cap, d), np.inf)
    hi = np.full((c_cap, d), -np.inf)
    _cluster_stats(K, labels, centres, radius, lo, hi)
    median = _cluster_medians(_member_distances(K, labels, centres[:C]), labels, C)
    reach = np.zeros(c_cap)
    # a singleton's median distance is 0: give it (and every later new cluster) the typical reach instead
    typical = outlier_factor * np.median(median[median > 0]) if np.any(median > 0) else 0.0
    reach[:C] = np.where(median > 0, outlier_factor * median, typical)
    reach[C:] = typical
    start, count, capacity, slots, ids, slots_end = _layout(K, labels, np.arange(n, dtype=np.int64), C, c_cap)
    keys = np.zeros((max(16, 2 * n), d), K.dtype)
    keys[:n] = K
    return HalfspaceIndex(keys, n, C, centres, radius, reach, lo, hi, start, count, capacity, slots, ids,
                          slots_end)


@njit(cache=True)
def _query_kernel(q, tau, mode, centres, radius, lo, hi, start, count, slots, ids, out_ids, out_scores):
    """Prune clusters by their upper bound, scan the rest exactly; returns (found, scanned, pruned)."""
    C, d = centres.shape
    qn = 0.0
    for j in range(d):
        qn += q[j] * q[j]
    qn = np.sqrt(qn)
    found = 0
    scanned = 0
    pruned = 0
    for c in range(C):
        if count[c] == 0:
            pruned += 1
            continue
        qmu = 0.0
        box = 0.0
        size = 0.0
        for j in range(d):
            qmu += q[j] * centres[c, j]
            # box bound: max of q_j k_j over lo_cj <= k_j <= hi_cj
            box += max(q[j] * lo[c, j], q[j] * hi[c, j])
            size += abs(q[j]) * max(abs(lo[c, j]), abs(hi[c, j]))
        # ball bound (Cauchy-Schwarz): q.k = q.mu + q.(k - mu) <= q.mu + ||q|| r
        ball = qmu + qn * radius[c]
        if mode == 0:
            ub = min(ball, box)
        elif mode == 1:
            ub = ball
        else:
            ub = box
        if ub + _SLACK * (1.0 + size + qn * radius[c]) < tau:
            pruned += 1
            continue
        for i in range(start[c], start[c] + count[c]):
            s = 0.0
            for j in range(d):
                s += q[j] * np.float64(slots[i, j])
            scanned += 1
            if s >= tau:
                out_ids[found] = ids[i]
                out_scores[found] = s
                found += 1
    return found, scanned, pruned


def _check_query(index: HalfspaceIndex, q, tau, bound: str) -> np.ndarray:
    q = np.asarray(q)
    if np.iscomplexobj(q) or not np.issubdtype(q.dtype, np.number):
        raise TypeError(f"q must be a real array, got dtype {q.dtype}")
    q = q.astype(np.float64)
    if q.shape != (index.d,):
        raise ValueError(f"q must have shape ({index.d},), got {q.shape}")
    if not np.all(np.isfinite(q)):
        raise ValueError("q must be finite")
    # tau = -inf asks for every key, +inf for none; NaN is refused
    if isinstance(tau, bool) or not isinstance(tau, (int, float, np.integer, np.floating)) or np.isnan(tau):
        raise ValueError(f"tau must be a number (+-inf allowed, NaN not), got {tau!r}")
    if bound not in _BOUND_CODE:
        raise ValueError(f"bound must be one of {BOUNDS}, got {bound!r}")
    return q


def query(index: HalfspaceIndex, q: np.ndarray, tau: float, bound: str = "ball+box") -> QueryResult:
    """Every key with q.k >= tau, by pruning clusters whose upper bound (``bound``) is below tau and scanning
    the rest exactly. ``q`` (d,); returns ids sorted ascending."""
    q = _check_query(index, q, tau, bound)
    C = index.n_clusters
    out_ids = np.empty(index.n, np.int64)
    out_scores = np.empty(index.n, np.float64)
    found, scanned, pruned = _query_kernel(q, float(tau), _BOUND_CODE[bound], index.centres[:C],
                                           index.radius[:C], index.lo[:C], index.hi[:C], index.start[:C],
                                           index.count[:C], index.slots, index.ids, out_ids, out_scores)
    order = np.argsort(out_ids[:found])
    return QueryResult(out_ids[:found][order], out_scores[:found][order], int(scanned), int(pruned))


def query_ref(index: HalfspaceIndex, q: np.ndarray, tau: float, bound: str = "ball+box") -> QueryResult:
    """Brute force: q.k for every live key (float64), keep those >= tau. Same signature as :func:`query`;
    ``bound`` is checked and ignored. Work: all n keys scanned, no cluster pruned.

    The score is defined by one arithmetic, the kernel's: float64 products ``q_j * k_j`` summed left to right over
    j = 0..d-1 (no BLAS reordering), so that a key scoring tau within rounding is in both answers or in neither."""
    q = _check_query(index, q, tau, bound)
    keys = index.keys[: index.n]
    scores = np.zeros(index.n)
    for j in range(index.d):
        scores += keys[:, j].astype(np.float64) * q[j]
    ids = np.flatnonzero(scores >= tau).astype(np.int64)
    return QueryResult(ids, scores[ids], index.n, 0)


@njit(cache=True)
def _nearest(k, centres):
    """(cluster with the nearest centre to k, its distance)."""
    C, d = centres.shape
    best = 0
    best_d2 = np.inf
    for c in range(C):
        d2 = 0.0
        for j in range(d):
            diff = np.float64(k[j]) - centres[c, j]
            d2 += diff * diff
        if d2 < best_d2:
            best_d2 = d2
            best = c
    return best, np.sqrt(best_d2)


@njit(cache=True)
def _cover(k, c, dist, radius, lo, hi):
    """Grow cluster c's ball and box to cover key k (at distance ``dist`` from its centre)."""
    if dist > radius[c]:
        radius[c] = dist
    for j in range(k.shape[0]):
        x = np.float64(k[j])
        if x < lo[c, j]:
            lo[c, j] = x
        if x > hi[c, j]:
            hi[c, j] = x


def insert(index: HalfspaceIndex, k: np.ndarray) -> int:
    """Append key ``k`` (d,) as the next KV-cache position and return its id. It joins the nearest cluster if
    within that cluster's reach (ball and box grow to cover it), else it opens a new cluster; queries stay exact."""
    k = np.asarray(k)
    if k.shape != (index.d,):
        raise ValueError(f"k must have shape ({index.d},), got {k.shape}")
    if np.iscomplexobj(k) or not np.issubdtype(k.dtype, np.number):
        raise TypeError(f"k must be a real array, got dtype {k.dtype}")
    # the index stores k in its own dtype: round first, so the ball and box are built around the stored value
    with np.errstate(over="ignore"):
        k = k.astype(index.keys.dtype)
    if not np.all(np.isfinite(k)):
        raise ValueError(f"k must be finite in the index's dtype {index.keys.dtype}")
    if index.n == len(index.keys):
        index.keys = np.concatenate([index.keys, np.zeros_like(index.keys)])
    kid = index.n
    index.keys[kid] = k
    index.n += 1
    C = index.n_clusters
    c, dist = _nearest(k, index.centres[:C])
    if dist > index.reach[c]:
        c, dist = _new_cluster(index, k), 0.0
    _cover(k, c, dist, index.radius, index.lo, index.hi)
    if index.count[c] == index.capacity[c]:
        _relayout(index)
    slot = index.start[c] + index.count[c]
    index.slots[slot] = k
    index.ids[slot] = kid
    index.count[c] += 1
    return kid


def _new_cluster(index: HalfspaceIndex, k: np.ndarray) -> int:
    """Open an empty cluster centred on k (room for it at the end of the slots) and return its number."""
    c = index.n_clusters
    if c == len(index.centres):
        _grow_clusters(index)
    if index.slots_end + _MIN_ROOM > len(index.slots):
        _relayout(index)
    index.centres[c] = k
    index.start[c], index.count[c], index.capacity[c] = index.slots_end, 0, _MIN_ROOM
    index.slots_end += _MIN_ROOM
    index.n_clusters += 1
    return c


def _grow_clusters(index: HalfspaceIndex) -> None:
    extra = len(index.centres)
    index.centres = np.concatenate([index.centres, np.zeros_like(index.centres)])
    index.lo = np.concatenate([index.lo, np.full_like(index.lo, np.inf)])
    index.hi = np.concatenate([index.hi, np.full_like(index.hi, -np.inf)])
    index.reach = np.concatenate([index.reach, np.full(extra, index.reach[-1])])
    for name in ("radius", "start", "count", "capacity"):
        a = getattr(index, name)
        setattr(index, name, np.concatenate([a, np.zeros_like(a)]))


def _relayout(index: HalfspaceIndex) -> None:
    """Lay the slots out again with fresh room (a cluster, or the free rows at the end, ran out)."""
    C = index.n_clusters
    used = np.concatenate([np.arange(s, s + m) for s, m in zip(index.start[:C], index.count[:C])])
    labels = np.repeat(np.arange(C), index.count[:C])
    (index.start, index.count, index.capacity, index.slots, index.ids,
     index.slots_end) = _layout(index.slots[used], labels, index.ids[used], C, len(index.centres))


# ----------------------------------------------------------------------------------------------------- registry

def _query_inputs(rng, size):
    K = rng.normal(size=(40, 6))
    return {"index": build_index(K, 4, np.random.default_rng(0)), "q": rng.normal(size=6), "tau": 0.5}


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    return [
        Kernel("halfspace_index.query", query, query_ref, _query_inputs,
               Contract(args=(Arg("q", ("float64",), 1),), empty="value", empty_value=None,
                        shapes="q: (d,) of the index; tau: a number, +-inf allowed"),
               tol={"float64": (0, 0)}, benchmark="halfspace_index.query + subset_attention",
               oracle="brute force over every key, same float64 left-to-right sum"),
    ]


KERNELS = _registry()

"""Deployment portfolio selection as weighted maximum coverage: coverage matrix, greedy, exact ILP.

An archive holds M models, each measured on F quantities (accuracy, and latency / memory / energy on every device,
laid side by side in one row ``values[m]`` of length F). A deployment profile p is a constraint bundle: a box
``lo[p] <= values[m] <= hi[p]`` (componentwise; +-inf where the profile does not constrain a quantity). Profile p is
*covered* by a portfolio S of models when one model of S lies in its whole box at once:

    C[p, m] = all_f (lo[p, f] <= values[m, f] <= hi[p, f]),    cov(S) = sum_p w_p max_{m in S} C[p, m].

cov is weighted maximum coverage: monotone and submodular in S, so the greedy portfolio of size K has
cov(greedy) >= (1 - (1 - 1/K)^K) OPT >= (1 - 1/e) OPT (Nemhauser, Wolsey & Fisher 1978).

* :func:`coverage_matrix` (Numba, early exit per model) / :func:`coverage_matrix_ref` (NumPy broadcast): C (P, M).
* :func:`greedy_max_coverage` (Numba, Minoux's lazy evaluation of marginal gains) / :func:`greedy_max_coverage_ref`
  (plain greedy, every gain recomputed every round): the K chosen model indices, ties to the lowest index.
* :func:`compress_rows`: identical rows of C merged, their weights summed, uncoverable rows dropped (a compact
  feasibility store; coverage values are unchanged).
* :func:`exact_max_coverage`: the optimum by mixed-integer programming (:func:`scipy.optimize.milp`, HiGHS):
  max sum_u w_u y_u  s.t.  y_u <= sum_m C[u, m] x_m,  sum_m x_m = K,  x binary, 0 <= y <= 1.
* :func:`coverage_value`: cov(S).

The Numba kernels are serial (chapters share the machine's cores).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit
from scipy.optimize import Bounds, LinearConstraint, milp


def _real(x, name: str, ndim: int, finite: bool) -> np.ndarray:
    x = np.asarray(x)
    if np.iscomplexobj(x) or not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"{name} must be a real float array, got dtype {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} axes, got shape {x.shape}")
    if np.isnan(x).any() or (finite and not np.isfinite(x).all()):
        raise ValueError(f"{name} must be {'finite' if finite else 'free of NaN'}")
    return x.astype(np.float64)


def _check_box(values, lo, hi):
    values = _real(values, "values", 2, True)
    lo, hi = _real(lo, "lo", 2, False), _real(hi, "hi", 2, False)
    if lo.shape != hi.shape or lo.shape[1] != values.shape[1]:
        raise ValueError(f"lo and hi must both be (P, F) with F = values.shape[1] = {values.shape[1]}, "
                         f"got {lo.shape} and {hi.shape}")
    if values.shape[0] < 1:
        raise ValueError("values must hold at least one model (row)")
    return values, lo, hi


@njit(cache=True)
def _coverage_kernel(values, lo, hi, out):
    P, F = lo.shape
    for p in range(P):
        for m in range(values.shape[0]):
            ok = True
            for f in range(F):
                v = values[m, f]
                if v < lo[p, f] or v > hi[p, f]:
                    ok = False
                    break
            out[p, m] = ok


def coverage_matrix(values, lo, hi) -> np.ndarray:
    """C[p, m] = every quantity of model m inside profile p's box; ``values`` (M, F), ``lo``/``hi`` (P, F) -> bool (P, M).

    ``lo``/``hi`` may hold -inf/+inf (no constraint); NaN anywhere is refused.
    """
    values, lo, hi = _check_box(values, lo, hi)
    out = np.empty((lo.shape[0], values.shape[0]), dtype=np.bool_)
    _coverage_kernel(values, lo, hi, out)
    return out


def coverage_matrix_ref(values, lo, hi) -> np.ndarray:
    """Reference for :func:`coverage_matrix`: one (P, M, F) broadcast comparison."""
    values, lo, hi = _check_box(values, lo, hi)
    return ((values[None] >= lo[:, None]) & (values[None] <= hi[:, None])).all(-1)


def _check_cover(C, w, K):
    C = np.asarray(C)
    if C.dtype != np.bool_:
        raise TypeError(f"C must be a bool array, got dtype {C.dtype}")
    if C.ndim != 2 or C.shape[1] < 1:
        raise ValueError(f"C must be (P, M) with M >= 1 models, got shape {C.shape}")
    w = _real(w, "w", 1, True)
    if w.shape[0] != C.shape[0]:
        raise ValueError(f"w must have one weight per profile (row of C), got {w.shape[0]} for {C.shape[0]}")
    if (w < 0).any():
        raise ValueError("w must be non-negative")
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or not 1 <= K <= C.shape[1]:
        raise ValueError(f"K must be an integer in [1, M={C.shape[1]}], got {K!r}")
    return C, w, int(K)


@njit(cache=True)
def _gain(CT, w, covered, m):
    g = 0.0
    for p in range(w.shape[0]):  # ascending p: a superset of terms never sums lower in floating point
        if CT[m, p] and not covered[p]:
            g += w[p]
    return g


@njit(cache=True)
def _lazy_greedy(CT, w, K, out):
    M, P = CT.shape
    covered = np.zeros(P, dtype=np.bool_)
    ub = np.full(M, np.inf)          # upper bounds on the marginal gains (submodularity: they only fall)
    fresh = np.zeros(M, dtype=np.bool_)
    taken = np.zeros(M, dtype=np.bool_)
    for k in range(K):
        fresh[:] = False
        while True:
            best = -1
            for m in range(M):  # largest bound, lowest index on ties
                if not taken[m] and (best < 0 or ub[m] > ub[best]):
                    best = m
            if fresh[best]:
                break
            ub[best] = _gain(CT, w, covered, best)
            fresh[best] = True
        out[k] = best
        taken[best] = True
        for p in range(P):
            if CT[best, p]:
                covered[p] = True


def greedy_max_coverage(C, w, K: int) -> np.ndarray:
    """Greedy portfolio of K models (Numba, lazy gains): int64 (K,), in the order chosen.

    ``C`` bool (P, M), ``w`` (P,) non-negative profile weights. Each round adds the model with the largest
    marginal gain sum_p w_p C[p, m] [p not yet covered], the lowest index on ties; a stale gain is only
    recomputed when it is the largest bound (exact: gains never grow as the portfolio grows).
    """
    C, w, K = _check_cover(C, w, K)
    out = np.empty(K, dtype=np.int64)
    _lazy_greedy(np.ascontiguousarray(C.T), w, K, out)
    return out


def greedy_max_coverage_ref(C, w, K: int) -> np.ndarray:
    """Reference for :func:`greedy_max_coverage`: plain greedy, all M marginal gains recomputed every round."""
    C, w, K = _check_cover(C, w, K)
    covered, taken, out = np.zeros(C.shape[0], dtype=bool), np.zeros(C.shape[1], dtype=bool), []
    for _ in range(K):
        gain = (w[:, None] * (C & ~covered[:, None])).sum(0)
        gain[taken] = -np.inf
        m = int(np.argmax(gain))  # first maximiser: lowest index on ties
        out.append(m)
        taken[m], covered = True, covered | C[:, m]
    return np.array(out, dtype=np.int64)


def coverage_value(C, w, S) -> float:
    """cov(S) = sum_p w_p [some m in S has C[p, m]]: ``C`` bool (P, M), ``w`` (P,), ``S`` model indices."""
    C, w, _ = _check_cover(C, w, 1)
    S = np.asarray(S, dtype=np.int64).ravel()
    if S.size and (S.min() < 0 or S.max() >= C.shape[1]):
        raise ValueError(f"S must hold model indices in [0, {C.shape[1]}), got {S}")
    return float(w[C[:, S].any(1)].sum()) if S.size else 0.0


def compress_rows(C, w) -> tuple[np.ndarray, np.ndarray]:
    """Merge identical rows of ``C`` (P, M) (weights summed) and drop rows no model covers: (C_u (U, M), w_u (U,)).

    For every portfolio S, coverage_value(C_u, w_u, S) equals coverage_value(C, w, S) up to summation order.
    """
    C, w, _ = _check_cover(C, w, 1)
    keep = C.any(1)
    rows, inv = np.unique(C[keep], axis=0, return_inverse=True)
    return rows.astype(bool), np.bincount(inv.ravel(), weights=w[keep], minlength=rows.shape[0])


def exact_max_coverage(C, w, K: int, time_limit: float = 60.0) -> tuple[np.ndarray, float]:
    """The optimal portfolio of K models by MILP (SciPy's HiGHS), on the compressed rows: (indices (K,), OPT).

    Raises RuntimeError when HiGHS does not prove optimality within ``time_limit`` seconds.
    """
    C, w, K = _check_cover(C, w, K)
    Cu, wu = compress_rows(C, w)
    M, U = C.shape[1], Cu.shape[0]
    if U == 0:
        return np.arange(K, dtype=np.int64), 0.0
    # variables [x (M), y (U)]; rows: y_u - sum_m C_um x_m <= 0, then sum_m x_m = K
    A = sp.vstack([sp.hstack([-sp.csr_matrix(Cu.astype(np.float64)), sp.identity(U, format="csr")]),
                   sp.csr_matrix(np.r_[np.ones(M), np.zeros(U)][None])], format="csr")
    lb, ub = np.r_[np.full(U, -np.inf), K], np.r_[np.zeros(U), K]
    res = milp(c=np.r_[np.zeros(M), -wu], constraints=LinearConstraint(A, lb, ub),
               integrality=np.r_[np.ones(M), np.zeros(U)], bounds=Bounds(0, 1),
               options={"time_limit": float(time_limit), "mip_rel_gap": 0.0})
    if res.status != 0:
        raise RuntimeError(f"milp did not prove optimality: {res.message}")
    S = np.sort(np.argsort(-res.x[:M], kind="stable")[:K]).astype(np.int64)
    return S, coverage_value(C, w, S)


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    def box_inputs(rng, size):
        values = rng.normal(size=(max(size, 1) * 3, 4))
        lo = rng.normal(-1.0, 0.5, size=(size, 4))
        return {"values": values, "lo": lo, "hi": lo + rng.uniform(0.5, 3.0, size=(size, 4))}

    def cover_inputs(rng, size):
        return {"C": rng.random((max(size, 1) * 4, 6)) < 0.3, "w": rng.random(max(size, 1) * 4) * (size > 0),
                "K": 3} if size else {"C": np.zeros((4, 0), dtype=bool), "w": rng.random(4), "K": 1}

    return [
        Kernel("portfolio_coverage.coverage_matrix", coverage_matrix, coverage_matrix_ref, box_inputs,
               Contract(args=(Arg("values", ndim=2, scale=True), Arg("lo", ndim=2, finite=False, scale=True),
                              Arg("hi", ndim=2, finite=False, scale=True)),
                        empty="value", empty_value=lambda kw: np.zeros((0, kw["values"].shape[0])),
                        shapes="values: (M, F), lo and hi: (P, F) -> bool (P, M)"),
               tol={"float64": (0, 0), "float32": (0, 0)}, benchmark="coverage_matrix (Numba, early exit)",
               oracle="NumPy broadcast comparison"),
        Kernel("portfolio_coverage.greedy_max_coverage", greedy_max_coverage, greedy_max_coverage_ref, cover_inputs,
               Contract(args=(Arg("C", ("bool",), ndim=2), Arg("w", ndim=1, low=0.0, scale=True)),
                        shapes="C: bool (P, M), w: (P,), K <= M -> int64 (K,)"),
               tol={"float64": (0, 0), "float32": (0, 0)}, benchmark="greedy_max_coverage (Numba, lazy)",
               oracle="scipy.optimize.milp optimum (greedy >= (1 - 1/e) OPT); itertools enumeration"),
    ]


KERNELS = _registry()

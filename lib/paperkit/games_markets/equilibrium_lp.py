"""Exact linear programs for correlated equilibrium sets of a discretised two-bidder first-price auction.

The game: two bidders, ``m`` values ``v_i = (i + 1/2) / m`` drawn independently from a prior ``p`` (a positive
vector of length ``m``), ``n`` bids ``b_k = k / n`` (k = 0..n-1), the higher bid wins and pays its bid, ties are split.
An outcome is a joint distribution ``sigma[v1, v2, b1, b2] = p[v1] p[v2] y[v1, v2, b1, b2]``; the LP's unknown is
``y >= 0``, the bid distribution given the value pair (flattened in C order, ``m*m*n*n`` entries), which keeps every
coefficient of order one even where the prior is tiny (HiGHS's feasibility tolerance is 1e-7).

Every family shares the equality rows

* value marginal: ``sum_{b1, b2} y[v1, v2, :, :] = 1``;
* type-agnostic play (``agnostic=True``): each bidder's bid distribution given both values does not depend on the
  other's value, ``sum_{b2} y[v1, v2, b1, :]`` is the same for every ``v2`` (and the mirror rule for bidder 2),
  written against the last value point. It holds for every outcome of decentralised play in which a bidder bids on
  its own value only, for instance the time average of any learner's product strategies.

and differ in the deviations (inequality rows ``A_ub y <= 0``: the expected gain of the deviation for each bidder,
conditional on each own value, i.e. weighted by the other's prior):

* ``"bcce"``: every constant bid ``d`` (coarse: the deviation ignores the recommended bid);
* ``"bscce"``: the ``"bcce"`` rows plus every clipped shift ``b -> min(max(b + k, 0), n - 1)``, k = +-1..+-(n-1),
  a map that moves all recommended bids by the same step (our reading of the deviations that projected-gradient
  dynamics can take);
* ``"bce"``: every swap ``a -> d`` of one recommended bid (the full correlated-equilibrium rows);
* ``"none"``: no deviation rows (every type-agnostic outcome; the no-incentive control).

A constant bid and a shift are sums of swap rows, and the ``"bscce"`` rows contain the ``"bcce"`` rows, so the
polytopes nest: BCE within BSCCE within BCCE.

:func:`build_lp` is the vectorised builder (SciPy sparse, COO then CSR); :func:`build_lp_ref` builds the same rows
with Python loops; :func:`constraint_arrays` and :func:`constraint_arrays_ref` give both as dense arrays (the
registered pair). :func:`lp_range` solves min and max of a linear objective with HiGHS.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

FAMILIES = ("bce", "bscce", "bcce", "none")


# ----------------------------------------------------------------------------------------------------- the game

def check_prior(prior) -> np.ndarray:
    """A prior over the value grid as a normalised float64 vector; raises naming ``prior``."""
    if isinstance(prior, np.ndarray) and prior.dtype.kind == "c":
        raise TypeError(f"prior must be real, got dtype {prior.dtype}")
    if not isinstance(prior, np.ndarray):
        prior = np.asarray(prior)
    if prior.dtype.kind not in "fiu":
        raise TypeError(f"prior must be a real array, got dtype {prior.dtype}")
    if prior.ndim != 1:
        raise ValueError(f"prior must be one-dimensional, got shape {prior.shape}")
    if prior.size == 0:
        raise ValueError("prior is empty: the value grid needs at least one point")
    p = prior.astype(np.float64)
    if not np.all(np.isfinite(p)):
        raise ValueError("prior has non-finite entries")
    if np.any(p <= 0):
        raise ValueError("prior must be positive on every value point")
    return p / p.sum()


def check_bids(n_bids) -> int:
    """The number of bid points as a positive int; raises naming ``n_bids``."""
    if isinstance(n_bids, bool) or not isinstance(n_bids, (int, np.integer)):
        raise TypeError(f"n_bids must be an int, got {type(n_bids).__name__}")
    if n_bids < 1:
        raise ValueError(f"n_bids must be >= 1, got {n_bids}")
    return int(n_bids)


def check_family(family) -> str:
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    return family


def value_grid(m: int) -> np.ndarray:
    """Midpoints ``(i + 1/2) / m`` of ``m`` equal cells of [0, 1]."""
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"m must be a positive int, got {m!r}")
    return (np.arange(m) + 0.5) / m


def bid_grid(n_bids: int) -> np.ndarray:
    """Bids ``k / n`` for k = 0..n-1."""
    return np.arange(check_bids(n_bids)) / n_bids


def power_prior(m: int, gamma: float) -> np.ndarray:
    """Discretised prior with density proportional to ``v**gamma`` on the value grid (gamma = 0: uniform)."""
    if not np.isfinite(gamma) or gamma < 0:
        raise ValueError(f"gamma must be finite and >= 0, got {gamma}")
    w = value_grid(m) ** gamma
    return w / w.sum()


def bne_bid(v, gamma: float):
    """Symmetric Bayes-Nash bid of the continuous two-bidder game with density proportional to ``v**gamma`` on
    [0, 1]: ``(gamma + 1) / (gamma + 2) * v`` (``v / 2`` for the uniform prior)."""
    return (gamma + 1.0) / (gamma + 2.0) * np.asarray(v, dtype=np.float64)


def bne_revenue(gamma: float) -> float:
    """Expected revenue of that equilibrium: ``(gamma+1)/(gamma+2) E[max(v1, v2)]`` with ``F(v) = v**(gamma+1)``,
    i.e. ``(gamma+1)/(gamma+2) * (2 gamma + 2)/(2 gamma + 3)`` (1/3 for the uniform prior)."""
    a = gamma + 1.0
    return a / (gamma + 2.0) * (2 * a) / (2 * a + 1)


def utility(m: int, n_bids: int) -> np.ndarray:
    """``U[v, b, c]``: a bidder's payoff with value index v, own bid index b, other's bid index c."""
    v, b = value_grid(m), bid_grid(n_bids)
    win = (b[:, None] > b[None, :]) + 0.5 * (b[:, None] == b[None, :])
    return (v[:, None, None] - b[None, :, None]) * win[None, :, :]


def joint(y, prior) -> np.ndarray:
    """The joint distribution ``sigma = p[v1] p[v2] y`` of an LP point ``y`` (flat), shape (m, m, n, n)."""
    p = check_prior(prior)
    m = p.size
    y = np.asarray(y, dtype=np.float64)
    n = int(round(np.sqrt(y.size / (m * m))))
    if m * m * n * n != y.size:
        raise ValueError(f"y has {y.size} entries, not m*m*n*n for m = {m}")
    return y.reshape(m, m, n, n) * np.outer(p, p)[:, :, None, None]


def conditional(sigma, prior) -> np.ndarray:
    """The LP point ``y = sigma / (p[v1] p[v2])`` (flat) of a joint distribution of shape (m, m, n, n)."""
    p = check_prior(prior)
    sigma = np.asarray(sigma, dtype=np.float64)
    if sigma.ndim != 4 or sigma.shape[:2] != (p.size, p.size):
        raise ValueError(f"sigma must have shape (m, m, n, n) with m = {p.size}, got {sigma.shape}")
    return (sigma / np.outer(p, p)[:, :, None, None]).ravel()


def revenue_objective(prior, n_bids: int) -> np.ndarray:
    """Expected revenue ``E max(b1, b2)`` as coefficients on ``y``."""
    p = check_prior(prior)
    m, b = p.size, bid_grid(n_bids)
    return (np.outer(p, p)[:, :, None, None] * np.maximum(b[:, None], b[None, :])[None, None]).ravel()


def bid_gap_objective(prior, n_bids: int, gamma: float) -> np.ndarray:
    """Bidder 1's expected distance from the continuous equilibrium bid, ``E |b1 - bne_bid(v1)|``, on ``y``."""
    p = check_prior(prior)
    m, v, b = p.size, value_grid(p.size), bid_grid(n_bids)
    g = np.abs(b[None, :] - bne_bid(v, gamma)[:, None])                       # (v1, b1)
    n = b.size
    return np.broadcast_to(np.outer(p, p)[:, :, None, None] * g[:, None, :, None], (m, m, n, n)).ravel().copy()


def deviation_maps(n_bids: int, family: str) -> np.ndarray:
    """Rows of maps ``phi[r, b]`` (bid index -> bid index) of the coarse deviations of a family (constant bids,
    plus the clipped shifts for ``"bscce"``); empty for ``"bce"``, whose swaps are built separately."""
    n = check_bids(n_bids)
    check_family(family)
    if family in ("bce", "none"):
        return np.zeros((0, n), dtype=np.int64)
    maps = [np.full(n, d, dtype=np.int64) for d in range(n)]
    if family == "bscce":
        for k in list(range(-(n - 1), 0)) + list(range(1, n)):
            maps.append(np.clip(np.arange(n) + k, 0, n - 1))
    return np.array(maps, dtype=np.int64).reshape(-1, n)


# ----------------------------------------------------------------------------------------------------- builders

def build_lp(prior, n_bids: int, family: str, agnostic: bool = True):
    """Vectorised constraint matrices ``(A_ub, b_ub, A_eq, b_eq)`` (CSR) of a family; see the module docstring."""
    p = check_prior(prior)
    n = check_bids(n_bids)
    check_family(family)
    m = p.size
    N = m * m * n * n
    U = utility(m, n)
    idx = np.arange(N).reshape(m, m, n, n)                       # idx[v1, v2, b1, b2]
    # bidder 2's view: own value, other value, own bid, other bid -> column
    views = (idx, idx.transpose(1, 0, 3, 2))
    rows_ub, cols_ub, vals_ub, r0 = [], [], [], 0
    for view in views:
        if family == "bce":
            # row (v, a, d), d != a: sum_{w, c} sigma[v, w, a, c] (U[v, d, c] - U[v, a, c])
            a_i, d_i = np.nonzero(~np.eye(n, dtype=bool))          # pairs, (n (n-1),)
            R = a_i.size
            gain = U[:, d_i, :] - U[:, a_i, :]                     # (v, R, c)
            col = view[:, :, a_i, :].transpose(0, 2, 1, 3)         # (v, R, w, c)
            val = gain[:, :, None, :] * p[None, None, :, None]
            row = r0 + np.arange(m)[:, None] * R + np.arange(R)[None, :]
            rows_ub.append(np.broadcast_to(row[:, :, None, None], col.shape).ravel())
        else:
            phi = deviation_maps(n, family)                        # (R, n)
            R = phi.shape[0]
            # row (v, r): sum_{w, b, c} sigma[v, w, b, c] (U[v, phi[r, b], c] - U[v, b, c])
            gain = U[:, phi, :] - U[:, None, :, :]                 # (v, R, b, c)
            col = np.broadcast_to(view[:, None, :, :, :], (m, R, m, n, n))   # (v, R, w, b, c)
            val = gain[:, :, None, :, :] * p[None, None, :, None, None]
            row = r0 + np.arange(m)[:, None] * R + np.arange(R)[None, :]
            rows_ub.append(np.broadcast_to(row[:, :, None, None, None], col.shape).ravel())
        cols_ub.append(col.ravel())
        vals_ub.append(val.ravel())
        r0 += m * R
    rr, cc, vv = np.concatenate(rows_ub), np.concatenate(cols_ub), np.concatenate(vals_ub)
    keep = vv != 0
    A_ub = sp.csr_matrix((vv[keep], (rr[keep], cc[keep])), shape=(r0, N))
    # equality rows: value marginal, then type-agnostic rows of bidder 1 and bidder 2
    rows_eq = [np.repeat(np.arange(m * m), n * n)]
    cols_eq = [np.arange(N)]
    vals_eq = [np.ones(N)]
    b_eq = [np.ones(m * m)]
    e0 = m * m
    if agnostic and m > 1:
        for view in views:
            # row (v, w < m-1, b): sum_c y[v, w, b, c] - sum_c y[v, m-1, b, c]
            row = e0 + (np.arange(m)[:, None, None] * (m - 1) + np.arange(m - 1)[None, :, None]) * n \
                + np.arange(n)[None, None, :]                                  # (v, w, b)
            row = np.broadcast_to(row[..., None], (m, m - 1, n, n))
            c_w = view[:, :-1, :, :]                                           # (v, w, b, c)
            c_r = np.broadcast_to(view[:, -1:, :, :], c_w.shape)
            rows_eq += [row.ravel(), row.ravel()]
            cols_eq += [c_w.ravel(), c_r.ravel()]
            vals_eq += [np.ones(c_w.size), np.full(c_r.size, -1.0)]
            b_eq.append(np.zeros(m * (m - 1) * n))
            e0 += m * (m - 1) * n
    A_eq = sp.csr_matrix((np.concatenate(vals_eq), (np.concatenate(rows_eq), np.concatenate(cols_eq))),
                         shape=(e0, N))
    return A_ub, np.zeros(r0), A_eq, np.concatenate(b_eq)


def build_lp_ref(prior, n_bids: int, family: str, agnostic: bool = True):
    """The same matrices as :func:`build_lp`, row by row with Python loops (slow; for small grids)."""
    p = check_prior(prior)
    n = check_bids(n_bids)
    check_family(family)
    m = p.size
    N = m * m * n * n
    U = utility(m, n)

    def col(v1, v2, b1, b2):
        return ((v1 * m + v2) * n + b1) * n + b2

    def own(i, v, w, b, c):            # column of (own value v, other w, own bid b, other bid c) for bidder i
        return col(v, w, b, c) if i == 0 else col(w, v, c, b)

    ub = []
    for i in (0, 1):
        if family == "bce":
            for v in range(m):
                for a in range(n):
                    for d in range(n):
                        if d == a:
                            continue
                        r = np.zeros(N)
                        for w in range(m):
                            for c in range(n):
                                r[own(i, v, w, a, c)] += p[w] * (U[v, d, c] - U[v, a, c])
                        ub.append(r)
        else:
            maps = [[d] * n for d in range(n)] if family != "none" else []
            if family == "bscce":
                for k in list(range(-(n - 1), 0)) + list(range(1, n)):
                    maps.append([min(max(b + k, 0), n - 1) for b in range(n)])
            for v in range(m):
                for phi in maps:
                    r = np.zeros(N)
                    for w in range(m):
                        for b in range(n):
                            for c in range(n):
                                r[own(i, v, w, b, c)] += p[w] * (U[v, phi[b], c] - U[v, b, c])
                    ub.append(r)
    eq, beq = [], []
    for v1 in range(m):
        for v2 in range(m):
            r = np.zeros(N)
            for b1 in range(n):
                for b2 in range(n):
                    r[col(v1, v2, b1, b2)] = 1.0
            eq.append(r)
            beq.append(1.0)
    if agnostic and m > 1:
        for i in (0, 1):
            for v in range(m):
                for w in range(m - 1):
                    for b in range(n):
                        r = np.zeros(N)
                        for c in range(n):
                            r[own(i, v, w, b, c)] += 1.0
                            r[own(i, v, m - 1, b, c)] -= 1.0
                        eq.append(r)
                        beq.append(0.0)
    A_ub = np.array(ub, dtype=np.float64).reshape(-1, N)
    return sp.csr_matrix(A_ub), np.zeros(A_ub.shape[0]), sp.csr_matrix(np.array(eq)), np.array(beq)


def constraint_arrays(prior, n_bids: int = 3, family: str = "bscce"):
    """Dense ``(A_ub, A_eq, b_eq)`` of :func:`build_lp` (small grids; the registered kernel)."""
    A_ub, _, A_eq, b_eq = build_lp(prior, n_bids, family)
    return A_ub.toarray(), A_eq.toarray(), b_eq


def constraint_arrays_ref(prior, n_bids: int = 3, family: str = "bscce"):
    """Dense ``(A_ub, A_eq, b_eq)`` of the loop-built :func:`build_lp_ref`."""
    A_ub, _, A_eq, b_eq = build_lp_ref(prior, n_bids, family)
    return A_ub.toarray(), A_eq.toarray(), b_eq


def lp_size(m: int, n_bids: int, family: str, agnostic: bool = True) -> dict:
    """Closed-form counts: variables, inequality rows and equality rows of a family's LP."""
    n = n_bids
    ub = {"bce": 2 * m * n * (n - 1), "bcce": 2 * m * n, "bscce": 2 * m * (n + 2 * (n - 1)), "none": 0}[check_family(family)]
    eq = m * m + (2 * m * (m - 1) * n if agnostic and m > 1 else 0)
    return {"variables": m * m * n * n, "ub_rows": ub, "eq_rows": eq}


# ----------------------------------------------------------------------------------------------------- solving

def lp_solve(c, lp, sense: str = "min", method: str = "highs"):
    """Optimise ``c @ y`` over the polytope ``lp = (A_ub, b_ub, A_eq, b_eq)`` (y >= 0): (value, y)."""
    if sense not in ("min", "max"):
        raise ValueError(f"sense must be 'min' or 'max', got {sense!r}")
    A_ub, b_ub, A_eq, b_eq = lp
    c = np.asarray(c, dtype=np.float64)
    sgn = 1.0 if sense == "min" else -1.0
    if A_ub is not None and A_ub.shape[0] == 0:
        A_ub, b_ub = None, None
    res = linprog(sgn * c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=(0, None), method=method)
    if res.status != 0:
        raise RuntimeError(f"linprog ({method}) failed: {res.message}")
    return float(c @ res.x), res.x


def lp_range(c, lp, method: str = "highs") -> tuple[float, float]:
    """``(min, max)`` of ``c @ y`` over the polytope: two HiGHS solves."""
    return lp_solve(c, lp, "min", method)[0], lp_solve(c, lp, "max", method)[0]


def max_violation(y, lp) -> dict:
    """How far an LP point ``y`` (see :func:`conditional`) is from the polytope: the largest deviation gain
    conditional on an own value (``max A_ub y``, positive part; in units of value) and the largest equality residual
    (``max |A_eq y - b_eq|``)."""
    A_ub, _, A_eq, b_eq = lp
    s = np.asarray(y, dtype=np.float64).ravel()
    if s.size != A_eq.shape[1]:
        raise ValueError(f"y has {s.size} entries, the LP has {A_eq.shape[1]} variables")
    gain = A_ub @ s
    return {"gain": float(max(gain.max(initial=0.0), 0.0)), "eq": float(np.abs(A_eq @ s - b_eq).max(initial=0.0))}


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    def inputs(rng, size):
        # size -> value points; bids fixed at 3 so the loop reference stays fast
        return {"prior": rng.uniform(0.2, 1.0, size=min(size, 3)) if size else np.zeros(0), "n_bids": 3,
                "family": ("bce", "bscce", "bcce")[int(rng.integers(3))]}

    return [Kernel("equilibrium_lp.constraint_arrays", constraint_arrays, constraint_arrays_ref, inputs,
                   Contract(args=(Arg("prior", ndim=1, low=0.0),), empty="error",
                            shapes="prior: (m,), n_bids = n -> A_ub (rows, m*m*n*n), A_eq, b_eq"),
                   tol={"float64": (1e-12, 1e-12), "float32": (1e-6, 1e-6)},
                   benchmark="build_lp (vectorised sparse)",
                   oracle="loop-built matrices; hand-checked 1x2 game; HiGHS simplex vs interior point")]


KERNELS = _registry()

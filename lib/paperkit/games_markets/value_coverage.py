"""Coverage of a demand cloud by the convex hull of a supply of value profiles, on the K-value simplex.

Profiles are rows of the simplex in R^K; the simplex is (K-1)-dimensional, so points are mapped to their first K-1
coordinates (an affine bijection of the simplex onto a full-dimensional set: volume ratios and hull membership are
unchanged by it).

``in_hull(P, V)`` tests each point of P (n, K) against the facets of conv(V) found by Qhull (vectorised); the
reference ``in_hull_ref`` solves one feasibility LP per point (P[i] = V^T lam, lam >= 0, sum lam = 1; HiGHS).
``hull_volume_ratio(S, D)`` = vol conv(S) / vol conv(D) in K-1 dimensions (Qhull volumes).
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import linprog
from scipy.spatial import ConvexHull, QhullError


def _check(name, x):
    if not isinstance(x, np.ndarray) or x.dtype not in (np.float32, np.float64):
        raise TypeError(f"{name} must be a float32 or float64 array, got {getattr(x, 'dtype', type(x))}")
    if x.ndim != 2 or x.shape[1] < 2:
        raise ValueError(f"{name} must have shape (rows, K) with K >= 2, got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} must be finite")
    if np.any(x < 0) or np.any(x > 1):
        raise ValueError(f"{name} must hold simplex rows (entries in [0, 1])")
    return x.astype(np.float64)


def _hull(V):
    if V.shape[0] < V.shape[1]:
        raise ValueError(f"V needs at least K = {V.shape[1]} points for a full-dimensional hull, got {V.shape[0]}")
    try:
        return ConvexHull(V[:, :-1])
    except QhullError as e:
        raise ValueError(f"V spans no full-dimensional hull ({e.__class__.__name__})") from None


def in_hull(P: np.ndarray, V: np.ndarray, tol: float = 1e-9) -> np.ndarray:
    """Boolean (n,): P[i] lies in conv(V) (V (m, K)), from Qhull's facet inequalities a . x + b <= tol."""
    P, V = _check("P", P), _check("V", V)
    if P.shape[1] != V.shape[1]:
        raise ValueError(f"P and V must have the same K, got {P.shape[1]} and {V.shape[1]}")
    eq = _hull(V).equations
    return np.all(P[:, :-1] @ eq[:, :-1].T + eq[:, -1] <= tol, axis=1)


def in_hull_ref(P: np.ndarray, V: np.ndarray, tol: float = 1e-9) -> np.ndarray:
    """Reference of :func:`in_hull`: one LP feasibility problem per point (scipy HiGHS), convex weights lam >= 0."""
    P, V = _check("P", P), _check("V", V)
    if P.shape[1] != V.shape[1]:
        raise ValueError(f"P and V must have the same K, got {P.shape[1]} and {V.shape[1]}")
    _hull(V)  # the same refusal of degenerate V as the fast kernel
    A = np.vstack([V[:, :-1].T, np.ones(V.shape[0])])
    out = np.empty(P.shape[0], bool)
    for i, p in enumerate(P):
        # minimise the total violation s+ + s- of A lam = (p, 1); the point is inside iff it can be made ~0
        n_c = A.shape[0]
        A_eq = np.hstack([A, np.eye(n_c), -np.eye(n_c)])
        c = np.r_[np.zeros(V.shape[0]), np.ones(2 * n_c)]
        res = linprog(c, A_eq=A_eq, b_eq=np.r_[p[:-1], 1.0], bounds=(0, None), method="highs")
        out[i] = res.status == 0 and res.fun <= tol * 10
    return out


def hull_volume_ratio(S: np.ndarray, D: np.ndarray) -> float:
    """vol conv(S) / vol conv(D), both (rows, K) simplex profiles, volumes in K-1 dimensions (Qhull)."""
    S, D = _check("S", S), _check("D", D)
    if S.shape[1] != D.shape[1]:
        raise ValueError(f"S and D must have the same K, got {S.shape[1]} and {D.shape[1]}")
    return float(_hull(S).volume / _hull(D).volume)


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    def inputs(rng, size):
        return {"P": rng.dirichlet(np.ones(4), size=size), "V": rng.dirichlet(np.ones(4), size=12)}

    return [Kernel("value_coverage.in_hull", in_hull, in_hull_ref, inputs,
                   Contract(args=(Arg("P", ndim=2, low=0.0, high=1.0), Arg("V", ndim=2, low=0.0, high=1.0)),
                            empty="value", empty_value=lambda kw: np.zeros(0, bool),
                            shapes="P (n, K), V (m, K), m >= K -> (n,) bool"),
                   tol={"float64": (0, 0), "float32": (0, 0)},
                   benchmark="value_coverage.in_hull",
                   oracle="scipy.optimize.linprog (HiGHS) feasibility; scipy.spatial.Delaunay.find_simplex")]


KERNELS = _registry()

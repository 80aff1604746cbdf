"""Regret of a menu of value profiles under linear utility, on the K-value simplex.

A user i has weights u_i in the simplex (K values: safety, helpfulness, honesty, autonomy, equity); a menu M is a set
of m value profiles m_j in the same simplex (deployed models' profiles, or vertices e_k). Under linear utility the
user's best possible profile is the vertex of their largest weight, so their regret against the menu is

    r_i(M) = max_k u_ik - max_j u_i . m_j        (>= 0; 0 when the menu holds the user's best vertex).

``menu_regret`` (one matrix product) and ``menu_regret_ref`` (a plain loop over users and menu items) have the same
signature: U (n, K), M (m, K), both float32/float64 with rows in the simplex -> r (n,) float64.
"""
from __future__ import annotations

import numpy as np


def _check(U, M):
    for name, x in (("U", U), ("M", M)):
        if not isinstance(x, np.ndarray) or x.dtype not in (np.float32, np.float64):
            raise TypeError(f"{name} must be a float32 or float64 array, got {getattr(x, 'dtype', type(x))}")
        if x.ndim != 2:
            raise ValueError(f"{name} must have shape (rows, K), got {x.shape}")
        if not np.all(np.isfinite(x)):
            raise ValueError(f"{name} must be finite")
        if np.any(x < 0) or np.any(x > 1):
            raise ValueError(f"{name} must hold simplex rows (entries in [0, 1])")
    if U.dtype != M.dtype:
        raise TypeError(f"U and M must share a dtype, got {U.dtype} and {M.dtype}")
    if M.shape[0] == 0 or M.shape[1] != U.shape[1] or U.shape[1] == 0:
        raise ValueError(f"M must be a non-empty (m, K) menu with U's K, got U {U.shape}, M {M.shape}")
    return U.astype(np.float64), M.astype(np.float64)


def menu_regret(U: np.ndarray, M: np.ndarray) -> np.ndarray:
    """r (n,) = max_k U[i, k] - max_j U[i] . M[j]: each user's regret against the menu M (m, K)."""
    U, M = _check(U, M)
    return U.max(axis=1) - (U @ M.T).max(axis=1, initial=-np.inf)


def menu_regret_ref(U: np.ndarray, M: np.ndarray) -> np.ndarray:
    """Reference of :func:`menu_regret`: an explicit loop over users and menu items."""
    U, M = _check(U, M)
    r = np.empty(U.shape[0])
    for i in range(U.shape[0]):
        best = -np.inf
        for j in range(M.shape[0]):
            best = max(best, float(sum(U[i, k] * M[j, k] for k in range(U.shape[1]))))
        r[i] = U[i].max() - best
    return r


def group_regret(r: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """Mean regret of each group g = 0..n_groups-1 (NaN for an empty group); ``groups`` (n,) ints."""
    r, groups = np.asarray(r, float), np.asarray(groups)
    if r.shape != groups.shape:
        raise ValueError(f"groups must have the shape of r {r.shape}, got {groups.shape}")
    cnt = np.bincount(groups, minlength=n_groups)
    tot = np.bincount(groups, weights=r, minlength=n_groups)
    return np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)


def shift_away(M: np.ndarray, v: int, delta: float, q: np.ndarray) -> np.ndarray:
    """Move each profile of M (m, K) away from vertex v: take min(delta, M[j, v]) of value v and give it out along
    q (m, K) (rows in the simplex with q[:, v] = 0). Rows stay in the simplex."""
    if np.any(q[:, v] != 0):
        raise ValueError("q must put no mass on the vertex v")
    t = np.minimum(delta, M[:, v])[:, None]
    out = M + t * q
    out[:, v] -= t[:, 0]
    return out


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    def inputs(rng, size):
        return {"U": rng.dirichlet(np.ones(5), size=size), "M": rng.dirichlet(np.ones(5), size=7)}

    return [Kernel("value_regret.menu_regret", menu_regret, menu_regret_ref, inputs,
                   Contract(args=(Arg("U", ndim=2, low=0.0, high=1.0), Arg("M", ndim=2, low=0.0, high=1.0,
                                                                           same_dtype_as="U")),
                            empty="value", empty_value=lambda kw: np.zeros(0),
                            shapes="U (n, K), M (m, K) -> r (n,)"),
                   tol={"float64": (1e-12, 1e-12), "float32": (1e-6, 1e-6)},
                   benchmark="value_regret.menu_regret",
                   oracle="closed form: the full vertex menu gives 0; itertools search over menus")]


KERNELS = _registry()


def monotonicity_search(rng: np.random.Generator, U: np.ndarray, v: int, n_menus: int, menu_size: int,
                        deltas) -> tuple[int, int, float]:
    """Search for a counterexample to welfare-floor monotonicity: on ``n_menus`` random menus (``menu_size``
    Dirichlet(1) profiles) shift every profile away from vertex v by each delta (mass given out along a random
    q with q_v = 0) and compare the regret of the users U (n, K) before and after. Returns (comparisons,
    violations: regret fell by more than 1e-12, largest fall). For users whose largest weight is u_v the theorem
    says there are none: u . (m' - m) = t (u . q - u_v) <= 0 for every profile."""
    K = U.shape[1]
    others = np.array([k for k in range(K) if k != v])
    n_cmp, n_bad, worst = 0, 0, 0.0
    for _ in range(n_menus):
        M = rng.dirichlet(np.ones(K), size=menu_size)
        r0 = menu_regret(U, M)
        for d in deltas:
            q = np.zeros((menu_size, K))
            q[:, others] = rng.dirichlet(np.ones(K - 1), size=menu_size)
            fall = r0 - menu_regret(U, shift_away(M, v, float(d), q))
            n_cmp += len(fall)
            n_bad += int(np.count_nonzero(fall > 1e-12))
            worst = max(worst, float(fall.max(initial=0.0)))
    return n_cmp, n_bad, worst

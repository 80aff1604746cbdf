"""Euclidean projection of each row of a matrix onto the probability simplex (the step of projected-gradient
learners over mixed strategies).

For a row ``x`` the projection is ``max(x - theta, 0)`` with the unique ``theta`` that makes it sum to one; the
sort-based rule (Held, Wolfe and Crowder 1974; Duchi et al. 2008) finds ``theta`` from the sorted row:
``rho = max{k : u_k - (sum_{j<=k} u_j - 1) / k > 0}`` for ``u`` sorted in decreasing order, and
``theta = (sum_{j<=rho} u_j - 1) / rho``.

:func:`project_simplex` is the batched Numba kernel (an insertion sort per row for rows up to 32 long, a library sort
beyond, and an early stop once the condition fails);
:func:`project_simplex_ref` is the NumPy reference (one sort of the whole matrix, cumulative sums, broadcasting).
"""
from __future__ import annotations

import numpy as np
from numba import njit


def _check(X, name: str = "X") -> np.ndarray:
    if not isinstance(X, np.ndarray):
        raise TypeError(f"{name} must be a NumPy array, got {type(X).__name__}")
    if X.dtype not in (np.float32, np.float64):
        raise TypeError(f"{name} must be float32 or float64, got {X.dtype}")
    if X.ndim != 2:
        raise ValueError(f"{name} must be two-dimensional (rows, n), got shape {X.shape}")
    if X.shape[1] == 0:
        raise ValueError(f"{name} has no columns: the simplex needs at least one coordinate")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} has non-finite entries")
    if X.size and float(np.abs(X).max()) > 1e150:
        raise ValueError(f"{name} has entries above 1e150 in magnitude: the row sums would lose every digit")
    return X


@njit(cache=True)
def _project_rows(X, out):
    B, n = X.shape
    u = np.empty(n, dtype=np.float64)
    for i in range(B):
        if n <= 32:                                  # insertion sort, descending: cheaper than a sort call
            for j in range(n):
                x = X[i, j]
                k = j
                while k > 0 and u[k - 1] < x:
                    u[k] = u[k - 1]
                    k -= 1
                u[k] = x
        else:
            for j in range(n):
                u[j] = -X[i, j]
            u.sort()
            for j in range(n):
                u[j] = -u[j]
        s, theta = 0.0, 0.0
        for k in range(n):                           # the condition holds on a prefix: stop at its end
            s += u[k]
            t = (s - 1.0) / (k + 1)
            if u[k] - t > 0.0:
                theta = t
            else:
                break
        for j in range(n):
            v = X[i, j] - theta
            out[i, j] = v if v > 0.0 else 0.0


def project_simplex(X: np.ndarray) -> np.ndarray:
    """Project every row of ``X`` (shape (B, n), float32 or float64) onto the simplex; same shape and dtype.

    Computed in float64 and cast back. Raises ``ValueError`` naming ``X`` on non-finite entries, on entries above
    1e150 in magnitude, and on a row of length zero; ``TypeError`` on other dtypes.
    """
    X = _check(X)
    out = np.empty(X.shape, dtype=np.float64)
    if X.shape[0]:
        _project_rows(X if X.dtype == np.float64 else X.astype(np.float64), out)
    return out if X.dtype == np.float64 else out.astype(X.dtype)


def project_simplex_ref(X: np.ndarray) -> np.ndarray:
    """The NumPy reference of :func:`project_simplex` (same contract): sort, cumulative sums, ``rho`` by masking."""
    X = _check(X)
    Z = X.astype(np.float64)
    n = Z.shape[1]
    U = -np.sort(-Z, axis=1)
    css = np.cumsum(U, axis=1) - 1.0
    k = np.arange(1, n + 1)
    cond = U - css / k > 0
    rho = n - np.argmax(cond[:, ::-1], axis=1)                     # last k where cond holds (always k=1 holds)
    theta = css[np.arange(Z.shape[0]), rho - 1] / rho
    return np.maximum(Z - theta[:, None], 0.0).astype(X.dtype, copy=False)


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    def inputs(rng, size):
        return {"X": rng.normal(0.0, 1.0, size=(size, 6)) * rng.choice([0.1, 1.0, 10.0])}

    return [Kernel("simplex_projection.project_simplex", project_simplex, project_simplex_ref, inputs,
                   Contract(args=(Arg("X", ndim=2, scale=True),), empty="value",
                            empty_value=lambda kw: np.zeros((0, 6)), shapes="X: (B, n) -> (B, n), rows on the simplex"),
                   tol={"float64": (1e-12, 1e-13), "float32": (1e-5, 1e-6)},
                   benchmark="project_simplex (Numba, batched)",
                   oracle="bisection on theta; KKT conditions of the projection QP")]


KERNELS = _registry()

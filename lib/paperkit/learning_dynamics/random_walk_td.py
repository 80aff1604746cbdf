"""Kernels for learning a Boolean k-junta from a lazy random walk with a temporal-difference (TD) loss.

Data. Points ``x`` of the hypercube ``{-1, +1}^d``; a *lazy random walk* keeps ``x`` with probability 1/2 and
otherwise flips one coordinate ``j`` drawn uniformly (:func:`lazy_walk_step`). The target is a k-junta
``f(x) = T[x_S]``: a truth table ``T`` (shape ``(2^k,)``, values in ``{-1, +1}``) read at the relevant coordinates
``S`` (:func:`junta_value`; the k-parity is ``T = prod``, :func:`parity_table`).

Model. A two-layer ReLU network ``net(x) = (1/m) sum_i a_i relu(w_i . x + b_i)`` with first layer ``W`` (m, d),
second layer ``a`` (m,) and biases ``b`` (m,).

TD loss on a consecutive pair ``(x, x')``: ``((net(x') - net(x)) - (f(x') - f(x)))^2``. The *stylised* first-layer
update of our reading linearises each neuron's increment across the step at the midpoint ``xbar = (x + x') / 2``::

    Dnet(x, x') ~= (1/m) sum_i a_i 1[w_i . xbar + b_i > 0] w_i . (x' - x),

so that the gradient of the squared TD error with respect to ``W`` is supported on the coordinates that changed
(:func:`td_linear_grad`). On a walk step only the flipped coordinate ``j`` moves, and when ``j`` is irrelevant
(``f(x') = f(x)``) the step can only pull the network's increment back to zero. The linearised increment equals the
exact one whenever no neuron changes its activation across the step.

Kernels (registered in ``KERNELS``): :func:`td_linear_grad` / :func:`td_linear_grad_ref` (loop over pairs and
neurons; also checked against Torch autograd), :func:`junta_value` / :func:`junta_value_ref` (loop over points).
Helpers: :func:`lazy_walk_step`, :func:`redraw_step` (the null generator), :func:`relu_features`,
:func:`ridge_readout`, :func:`loglog_slope`.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from paperkit.arrays import real_array


# ---------------------------------------------------------------------------------------------- validation


def _cube(x, name: str) -> np.ndarray:
    x = real_array(x, name, 2)
    if x.size and not np.all(np.abs(x) == 1.0):
        raise ValueError(f"{name} must hold hypercube points (entries -1 or +1)")
    return x


def _same_dtype(ref: np.ndarray, ref_name: str, **arrays) -> None:
    for name, x in arrays.items():
        if x.dtype != ref.dtype:
            raise TypeError(f"{name} must have the dtype of {ref_name}, got {x.dtype} and {ref.dtype}")


# ---------------------------------------------------------------------------------------------- data

def parity_table(k: int) -> np.ndarray:
    """Truth table (shape ``(2^k,)``) of the k-parity ``prod_{l in S} x_l``; entry ``idx`` is the value at the point
    whose bit ``l`` of ``idx`` says ``x_{S_l} = +1``."""
    minus = np.array([k - bin(i).count("1") for i in range(2 ** k)])       # coordinates at -1
    return np.where(minus % 2 == 0, 1.0, -1.0)


def random_junta_table(k: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random ``{-1, +1}`` truth table on ``k`` bits, redrawn until it depends on all ``k`` bits and is
    balanced within ``2^k / 4`` (so that accuracy 1/2 is the trivial level)."""
    n = 2 ** k
    idx = np.arange(n)
    while True:
        T = rng.choice([-1.0, 1.0], n)
        relevant = all(np.any(T != T[idx ^ (1 << l)]) for l in range(k))
        if relevant and abs(T.sum()) <= n / 4:
            return T


def junta_value(x, S, table) -> np.ndarray:
    """``f(x) = table[sum_l 1[x_{S_l} = +1] 2^l]`` for each row of ``x`` (n, d) in ``{-1, +1}``; ``S`` (k,) int64
    relevant coordinates, ``table`` (2^k,) in ``[-1, 1]``. Returns shape (n,).

    One compiled pass over the rows that checks every entry (-1 or +1) and looks the row up, with the checks of ``S``
    and ``table`` compiled too: the vectorised NumPy form (validate all of ``x`` in two passes, gather the columns,
    compare, weight, look up) was 0.18x NumPy's parity product over the same columns, which validates nothing."""
    x, S, table = np.asarray(x), np.asarray(S), np.asarray(table)
    for name, arr, ndim in (("x", x, 2), ("table", table, 1)):
        if arr.dtype.kind != "f":                      # real floating point (complex is kind "c")
            raise TypeError(f"{name} must be a real float array, got dtype {arr.dtype}")
        if arr.ndim != ndim:
            raise ValueError(f"{name} must have {ndim} axes, got shape {arr.shape}")
    if S.dtype != np.int64:
        raise TypeError(f"S must be an int64 array, got dtype {S.dtype}")
    if S.ndim != 1:
        raise ValueError(f"S must have 1 axis, got shape {S.shape}")
    if table.shape[0] != 2 ** S.shape[0]:
        raise ValueError(f"table must have 2^k = {2 ** S.shape[0]} entries, got {table.shape[0]}")
    out = np.empty(x.shape[0], dtype=table.dtype)
    status = _junta_lookup(np.ascontiguousarray(x), S, table, out)
    if status:
        raise ValueError(_JUNTA_ERRORS[status].format(d=x.shape[1], S=S))
    return out


_JUNTA_ERRORS = {1: "S must index the {d} coordinates of x, got {S}", 2: "S must not repeat a coordinate",
                 3: "table must be finite", 4: "table must take values in [-1, 1]",
                 5: "x must hold hypercube points (entries -1 or +1)"}


@njit(cache=True)
def _junta_lookup(x, S, table, out):
    """Checks ``S`` and ``table``, then fills ``out``; returns 0, or the code of the first failed check
    (:data:`_JUNTA_ERRORS`)."""
    k = S.shape[0]
    for l in range(k):
        if S[l] < 0 or S[l] >= x.shape[1]:
            return 1
        for m in range(l):
            if S[m] == S[l]:
                return 2
    for t in table:
        if not np.isfinite(t):
            return 3
        if abs(t) > 1.0:
            return 4
    flat = x.ravel()
    bad = 0
    for i in range(flat.shape[0]):                   # every entry: NaN, inf and values off the cube all fail;
        v = flat[i]                                  # one flat loop with an integer count vectorises
        bad += np.intp(v * v != 1.0)
    for n in range(x.shape[0]):
        idx = 0
        for l in range(k):
            idx |= np.intp(x[n, S[l]] > 0) << l
        out[n] = table[idx]
    return 5 if bad > 0 else 0


def junta_value_ref(x, S, table) -> np.ndarray:
    """Reference for :func:`junta_value`: one point and one relevant coordinate at a time."""
    x, S, table = _check_junta(x, S, table)
    out = np.zeros(x.shape[0], dtype=table.dtype)
    for n in range(x.shape[0]):
        idx = 0
        for l in range(S.shape[0]):
            if x[n, S[l]] > 0:
                idx += 2 ** l
        out[n] = table[idx]
    return out


def _check_junta(x, S, table):
    x = _cube(x, "x")
    S = np.asarray(S)
    if S.dtype != np.int64:
        raise TypeError(f"S must be an int64 array, got dtype {S.dtype}")
    if S.ndim != 1:
        raise ValueError(f"S must have 1 axis, got shape {S.shape}")
    if S.size and (S.min() < 0 or S.max() >= x.shape[1]):
        raise ValueError(f"S must index the {x.shape[1]} coordinates of x, got {S}")
    if len(set(S.tolist())) != S.size:
        raise ValueError("S must not repeat a coordinate")
    table = real_array(table, "table", 1)
    if table.shape[0] != 2 ** S.shape[0]:
        raise ValueError(f"table must have 2^k = {2 ** S.shape[0]} entries, got {table.shape[0]}")
    if table.size and np.abs(table).max() > 1.0:
        raise ValueError("table must take values in [-1, 1]")
    return x, S, table


def lazy_walk_step(x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One step of ``B`` independent lazy random walks on the hypercube (rows of ``x``, shape (B, d)): each stays
    with probability 1/2, otherwise flips one uniformly chosen coordinate. Returns ``(x_next, j)`` with ``j`` (B,)
    the flipped coordinate, or -1 where the walker stayed."""
    B, d = x.shape
    move = rng.random(B) < 0.5
    j = rng.integers(0, d, B)
    x2 = x.copy()
    rows = np.nonzero(move)[0]
    x2[rows, j[rows]] *= -1.0
    return x2, np.where(move, j, -1)


def redraw_step(x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, None]:
    """The null generator: the 'next' point is drawn uniformly, independently of ``x`` (every coordinate
    redrawn). Same shapes as :func:`lazy_walk_step`; no flipped index."""
    return rng.choice([-1.0, 1.0], size=x.shape).astype(x.dtype), None


# ---------------------------------------------------------------------------------------------- TD gradient

def _check_td(W, a, b, x, x2, fx, fx2):
    W = real_array(W, "W", 2)
    a = real_array(a, "a", 1)
    b = real_array(b, "b", 1)
    x, x2 = _cube(x, "x"), _cube(x2, "x2")
    fx, fx2 = real_array(fx, "fx", 1), real_array(fx2, "fx2", 1)
    _same_dtype(W, "W", a=a, b=b, x=x, x2=x2, fx=fx, fx2=fx2)
    m, d = W.shape
    if a.shape[0] != m or b.shape[0] != m:
        raise ValueError(f"a and b must have m = {m} entries, got {a.shape} and {b.shape}")
    if x.shape[0] == 0:
        raise ValueError("x must hold at least one pair (got 0 rows)")
    if x.shape[1] != d or x2.shape != x.shape:
        raise ValueError(f"x and x2 must both have shape (B, {d}), got {x.shape} and {x2.shape}")
    if fx.shape[0] != x.shape[0] or fx2.shape[0] != x.shape[0]:
        raise ValueError(f"fx and fx2 must have B = {x.shape[0]} entries, got {fx.shape} and {fx2.shape}")
    if m == 0:
        raise ValueError("W must have at least one row (neuron)")
    return W, a, b, x, x2, fx, fx2


def td_linear_grad(W, a, b, x, x2, fx, fx2) -> tuple[np.ndarray, np.ndarray]:
    """Gradient with respect to ``W`` of the mean linearised TD loss over ``B`` pairs.

    ``W`` (m, d), ``a`` (m,), ``b`` (m,); ``x``, ``x2`` (B, d) consecutive points in ``{-1, +1}``; ``fx``, ``fx2`` (B,)
    the targets ``f(x)``, ``f(x')``. With ``s_ni = 1[w_i . xbar_n + b_i > 0]`` and ``xbar = (x + x') / 2``, the
    linearised increment is ``Dnet_n = (1/m) sum_i a_i s_ni w_i . (x'_n - x_n)`` and the residual
    ``r_n = Dnet_n - (fx2_n - fx_n)``. Returns ``(G, r)``: ``G = (2/B) sum_n r_n (a s_n / m) (x'_n - x_n)^T``
    (m, d) and ``r`` (B,)."""
    W, a, b, x, x2, fx, fx2 = _check_td(W, a, b, x, x2, fx, fx2)
    m = W.shape[0]
    dx = x2 - x
    s = ((0.5 * (x + x2)) @ W.T + b > 0).astype(W.dtype)          # (B, m)
    dnet = ((s * a) * (dx @ W.T)).sum(1) / m
    r = dnet - (fx2 - fx)
    G = ((r[:, None] * s * a) / m).T @ dx * (2.0 / x.shape[0])
    return G, r


def td_linear_grad_ref(W, a, b, x, x2, fx, fx2) -> tuple[np.ndarray, np.ndarray]:
    """Reference for :func:`td_linear_grad`: one pair and one neuron at a time."""
    W, a, b, x, x2, fx, fx2 = _check_td(W, a, b, x, x2, fx, fx2)
    m, d = W.shape
    B = x.shape[0]
    G = np.zeros((m, d), dtype=W.dtype)
    r = np.zeros(B, dtype=W.dtype)
    for n in range(B):
        xbar = 0.5 * (x[n] + x2[n])
        dx = x2[n] - x[n]
        act = [float(W[i] @ xbar + b[i]) > 0 for i in range(m)]
        dnet = sum(a[i] * float(W[i] @ dx) for i in range(m) if act[i]) / m
        r[n] = dnet - (fx2[n] - fx[n])
        for i in range(m):
            if act[i]:
                G[i] += 2.0 * r[n] * a[i] / m * dx / B
    return G, r


def net_value(W, a, b, x) -> np.ndarray:
    """``net(x) = (1/m) sum_i a_i relu(w_i . x + b_i)`` for rows of ``x`` (n, d); shape (n,)."""
    return np.maximum(x @ W.T + b, 0.0) @ a / W.shape[0]


def mse_grad(W, a, b, x, fx) -> np.ndarray:
    """Gradient with respect to ``W`` (m, d) of the pointwise loss ``mean_n (net(x_n) - fx_n)^2`` over the rows of
    ``x`` (n, d); the competing (non-TD) first-layer update."""
    z = x @ W.T + b
    r = np.maximum(z, 0.0) @ a / W.shape[0] - fx
    return ((r[:, None] * (z > 0) * a) / W.shape[0]).T @ x * (2.0 / x.shape[0])


# ---------------------------------------------------------------------------------------------- readout

def relu_features(W, b, x, bias_scale: float) -> np.ndarray:
    """Second-phase features: ``relu(w_i . x / |w_i| + bias_scale * b_i)`` for each neuron (rows of ``W`` scaled to
    unit norm) and a constant column. ``x`` (n, d) -> (n, m + 1)."""
    nr = np.linalg.norm(W, axis=1, keepdims=True)
    Wh = W / np.maximum(nr, 1e-300)
    F = np.maximum(x @ Wh.T + bias_scale * b, 0.0)
    return np.hstack([F, np.ones((x.shape[0], 1), dtype=F.dtype)])


def ridge_readout(F, y, lam: float) -> np.ndarray:
    """Second layer by ridge regression: ``argmin_c |F c - y|^2 / n + lam |c|^2`` (the constant column included),
    ``F`` (n, p), ``y`` (n,); returns ``c`` (p,)."""
    n, p = F.shape
    return np.linalg.solve(F.T @ F + lam * n * np.eye(p), F.T @ y)


def loglog_slope(d, n) -> float:
    """Least-squares slope of ``log n`` against ``log d`` (the exponent of a power law ``n ~ d^slope``)."""
    d, n = np.asarray(d, dtype=float), np.asarray(n, dtype=float)
    if d.shape != n.shape or d.size < 2 or np.any(d <= 0) or np.any(n <= 0) or not np.all(np.isfinite(n)):
        raise ValueError("d and n must be matching positive finite arrays with at least two entries")
    return float(np.polyfit(np.log(d), np.log(n), 1)[0])


# ---------------------------------------------------------------------------------------------- registry

def _td_inputs(rng: np.random.Generator, size: int) -> dict:
    m, d = 6, 5
    S = np.array([0, 3], dtype=np.int64)
    x = rng.choice([-1.0, 1.0], size=(size, d))
    x2, _ = lazy_walk_step(x, rng)
    T = parity_table(2)
    fx = junta_value(x, S, T) if size else np.zeros(0)
    fx2 = junta_value(x2, S, T) if size else np.zeros(0)
    return {"W": rng.normal(size=(m, d)), "a": rng.choice([-1.0, 1.0], m), "b": rng.uniform(-1, 1, m),
            "x": x, "x2": x2, "fx": fx, "fx2": fx2}


def _junta_inputs(rng: np.random.Generator, size: int) -> dict:
    d = 6
    return {"x": rng.choice([-1.0, 1.0], size=(size, d)), "S": np.array([4, 1, 2], dtype=np.int64),
            "table": rng.choice([-1.0, 1.0], 8)}


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    cube = dict(low=-1.0, high=1.0)
    return [
        Kernel("random_walk_td.td_linear_grad", td_linear_grad, td_linear_grad_ref, _td_inputs,
               Contract(args=(Arg("W", ndim=2), Arg("a", ndim=1, same_dtype_as="W"),
                              Arg("b", ndim=1, same_dtype_as="W"), Arg("x", ndim=2, same_dtype_as="W", **cube),
                              Arg("x2", ndim=2, same_dtype_as="W", **cube), Arg("fx", ndim=1, same_dtype_as="W"),
                              Arg("fx2", ndim=1, same_dtype_as="W")), empty="error",
                        shapes="W: (m, d); a, b: (m,); x, x2: (B, d) in {-1, +1}; fx, fx2: (B,)"),
               tol={"float64": (1e-10, 1e-12), "float32": (1e-4, 1e-5)}, benchmark="random_walk_td.td_linear_grad",
               oracle="torch.autograd of the linearised TD loss"),
        Kernel("random_walk_td.junta_value", junta_value, junta_value_ref, _junta_inputs,
               Contract(args=(Arg("x", ndim=2, **cube), Arg("S", ("int64",), 1, low=0),
                              Arg("table", ndim=1, **cube)), empty="value",
                        empty_value=lambda kw: np.zeros(0),
                        shapes="x: (n, d) in {-1, +1}; S: (k,) distinct indices below d; table: (2^k,)"),
               tol={"float64": (0.0, 0.0), "float32": (0.0, 0.0)}, benchmark="random_walk_td.junta_value",
               oracle="the parity prod_{l in S} x_l in closed form"),
    ]


KERNELS = _registry()

"""Signed permutations of a residual basis, correlation matching and the sign ceiling (NumPy/SciPy kernels).

A signed permutation :math:`T \\in B_d = S_d \\ltimes \\{\\pm 1\\}^d` is stored as ``(perm, signs)``, both of shape
(d,): ``T[i, perm[i]] = signs[i]``, so ``(T x)_i = signs[i] * x[perm[i]]``. Two charts of one residual stream are
related by ``b = T a``: coordinate i of chart B is coordinate ``perm[i]`` of chart A, up to the sign ``signs[i]``.

Matching (the paper's sign-marginalized Hungarian matching, our implementation): with ``C[i, j] = corr(b_i, a_j)``
(shape (d, d)), raw signed matching maximises :math:`\\sum_i C_{i\\sigma(i)}` over permutations :math:`\\sigma`;
sign-marginalized matching maximises :math:`\\sum_i |C_{i\\sigma(i)}|` and reads each sign off
:math:`\\operatorname{sign} C_{i\\sigma(i)}`. Both call :func:`scipy.optimize.linear_sum_assignment`.
Each kernel has a plain reference of the same signature (``*_ref``): an explicit matrix product, a per-pair loop,
and a brute force over all d! permutations.
"""
from __future__ import annotations

import itertools

import numpy as np
from scipy.optimize import linear_sum_assignment

from paperkit.arrays import real_array


def _perm_signs(perm, signs, d: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    perm, signs = np.asarray(perm), np.asarray(signs)
    if perm.dtype.kind not in "iu":
        raise TypeError(f"perm must be an integer array, got dtype {perm.dtype}")
    if perm.ndim != 1:
        raise ValueError(f"perm must have 1 axis, got shape {perm.shape}")
    signs = real_array(signs, "signs", 1)
    if signs.shape != perm.shape:
        raise ValueError(f"signs must have the shape of perm {perm.shape}, got {signs.shape}")
    if d is not None and perm.size != d:
        raise ValueError(f"perm must have length {d}, got {perm.size}")
    if not np.array_equal(np.sort(perm), np.arange(perm.size)):
        raise ValueError("perm must be a permutation of 0..d-1")
    if not np.all(np.abs(signs) == 1):
        raise ValueError("signs must hold only +1 and -1")
    return perm.astype(np.int64), signs


def random_signed_perm(rng: np.random.Generator, d: int, p_pos: float) -> tuple[np.ndarray, np.ndarray]:
    """A uniform permutation and ``round(p_pos * d)`` signs +1 at random places (the rest -1); (perm, signs), (d,)."""
    if d < 1 or not 0.0 <= p_pos <= 1.0:
        raise ValueError(f"need d >= 1 and p_pos in [0, 1], got d={d}, p_pos={p_pos}")
    signs = -np.ones(d)
    signs[rng.permutation(d)[: int(round(p_pos * d))]] = 1.0
    return rng.permutation(d).astype(np.int64), signs


def signed_perm_invert(perm, signs) -> tuple[np.ndarray, np.ndarray]:
    """The inverse :math:`T^{-1} = T^\\top` as (perm, signs): ``inv_perm[perm[i]] = i``, ``inv_signs[perm[i]] =
    signs[i]``."""
    perm, signs = _perm_signs(perm, signs)
    inv_p, inv_s = np.empty_like(perm), np.empty_like(signs)
    inv_p[perm], inv_s[perm] = np.arange(perm.size), signs
    return inv_p, inv_s


def signed_perm_matrix(perm, signs) -> np.ndarray:
    """The dense (d, d) matrix T with ``T[i, perm[i]] = signs[i]``."""
    perm, signs = _perm_signs(perm, signs)
    T = np.zeros((perm.size, perm.size), dtype=signs.dtype)
    T[np.arange(perm.size), perm] = signs
    return T


def signed_perm_apply(X, perm, signs, axis: int = -1) -> np.ndarray:
    """``T`` applied along ``axis`` of ``X``: ``Y[..., i, ...] = signs[i] * X[..., perm[i], ...]`` (fancy indexing).

    ``X``: any shape with ``X.shape[axis] == d``; a row of activations a becomes ``T a``; a read-in weight W
    (k, d) becomes ``W T^T`` (axis 1), a write-out weight (d, k) becomes ``T W`` (axis 0).
    """
    X = real_array(X, "X")
    if X.ndim == 0:
        raise ValueError("X must have at least 1 axis")
    perm, signs = _perm_signs(perm, signs, X.shape[axis])
    if signs.dtype != X.dtype:
        signs = signs.astype(X.dtype)
    shape = [1] * X.ndim
    shape[axis] = -1
    return np.take(X, perm, axis=axis) * signs.reshape(shape)


def signed_perm_apply_ref(X, perm, signs, axis: int = -1) -> np.ndarray:
    """Reference of :func:`signed_perm_apply`: the dense matrix T contracted with ``X`` along ``axis``."""
    X = real_array(X, "X")
    if X.ndim == 0:
        raise ValueError("X must have at least 1 axis")
    perm, signs = _perm_signs(perm, signs, X.shape[axis])
    T = signed_perm_matrix(perm, signs).astype(X.dtype)
    return np.moveaxis(np.tensordot(T, np.moveaxis(X, axis, 0), axes=(1, 0)), 0, axis)


def _two_samples(X, Y) -> tuple[np.ndarray, np.ndarray]:
    X, Y = real_array(X, "X", 2), real_array(Y, "Y", 2)
    if X.dtype != Y.dtype:
        raise TypeError(f"X and Y must share a dtype, got {X.dtype} and {Y.dtype}")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X and Y must have the same number of rows, got {X.shape[0]} and {Y.shape[0]}")
    if X.shape[0] < 2:
        raise ValueError(f"X and Y need at least 2 rows (samples), got {X.shape[0]}")
    return X, Y


def corr_matrix(X, Y) -> np.ndarray:
    """Pearson correlations ``C[i, j] = corr(X[:, i], Y[:, j])``; X (n, dx), Y (n, dy) -> (dx, dy).

    Columns are first divided by their largest magnitude (so huge values cannot overflow); a constant column has
    correlation 0 with everything. One centred matrix product.
    """
    X, Y = _two_samples(X, Y)

    def standardise(Z):
        Z = Z / np.maximum(np.abs(Z).max(0), np.finfo(Z.dtype).tiny)
        Z = Z - Z.mean(0)
        norm = np.sqrt((Z * Z).sum(0))
        return np.divide(Z, norm, out=np.zeros_like(Z), where=norm > 0)

    return np.clip(standardise(X).T @ standardise(Y), -1.0, 1.0)


def corr_matrix_ref(X, Y) -> np.ndarray:
    """Reference of :func:`corr_matrix`: one pair of columns at a time, with the same scaling and the same 0 for
    constant columns."""
    X, Y = _two_samples(X, Y)
    C = np.zeros((X.shape[1], Y.shape[1]), dtype=X.dtype)
    for i in range(X.shape[1]):
        x = X[:, i] / max(np.abs(X[:, i]).max(), np.finfo(X.dtype).tiny)
        x = x - x.mean()
        for j in range(Y.shape[1]):
            y = Y[:, j] / max(np.abs(Y[:, j]).max(), np.finfo(Y.dtype).tiny)
            y = y - y.mean()
            den = np.sqrt((x * x).sum()) * np.sqrt((y * y).sum())
            C[i, j] = 0.0 if den == 0 else min(1.0, max(-1.0, (x * y).sum() / den))
    return C


def _square(C) -> np.ndarray:
    C = real_array(C, "C", 2)
    if C.shape[0] != C.shape[1] or C.shape[0] == 0:
        raise ValueError(f"C must be a non-empty square (d, d) matrix, got shape {C.shape}")
    return C


def _read_signs(C: np.ndarray, perm: np.ndarray) -> np.ndarray:
    return np.where(C[np.arange(C.shape[0]), perm] < 0, -1.0, 1.0)


def hungarian_match(C, sign_marginalize: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The signed permutation read from a cross-correlation matrix ``C`` (d, d), rows = chart B, columns = chart A.

    ``sign_marginalize=True``: maximise :math:`\\sum_i |C_{i\\sigma(i)}|` (the B_d gauge); ``False``: maximise
    :math:`\\sum_i C_{i\\sigma(i)}` (raw signed matching, the S_d practice). Returns ``(perm, signs)``, (d,) each,
    ``perm[i] = sigma(i)`` and ``signs[i] = sign C[i, perm[i]]`` (+1 at 0); via
    :func:`scipy.optimize.linear_sum_assignment`.
    """
    C = _square(C)
    _, perm = linear_sum_assignment(np.abs(C) if sign_marginalize else C, maximize=True)
    perm = perm.astype(np.int64)
    return perm, _read_signs(C, perm)


def hungarian_match_ref(C, sign_marginalize: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Reference of :func:`hungarian_match`: brute force over all d! permutations (d <= 9)."""
    C = _square(C)
    d = C.shape[0]
    if d > 9:
        raise ValueError(f"C: the brute-force reference handles d <= 9, got {d}")
    W = np.abs(C) if sign_marginalize else C
    P = np.array(list(itertools.permutations(range(d))), dtype=np.int64)
    perm = P[int(np.argmax(W[np.arange(d), P].sum(1)))]
    return perm, _read_signs(C, perm)


def match_accuracy(perm_hat, signs_hat, perm, signs) -> tuple[float, float]:
    """(share of coordinates i with ``perm_hat[i] == perm[i]``, share with the right coordinate *and* sign)."""
    perm_hat, signs_hat = _perm_signs(perm_hat, signs_hat)
    perm, signs = _perm_signs(perm, signs, perm_hat.size)
    right = perm_hat == perm
    return float(right.mean()), float((right & (signs_hat == signs)).mean())


def ceiling_data(rng: np.random.Generator, n: int, perm, signs, noise: float, df: float = 5.0):
    """Two noisy charts of decorrelated sources: S (n, d) i.i.d. Student-t(df) standardised to unit variance,
    ``A = S + noise * E1`` and ``B = S T^T + noise * E2`` (rows ``b = T s + noise e``); returns (A, B)."""
    perm, signs = _perm_signs(perm, signs)
    if n < 2 or noise < 0 or df <= 2:
        raise ValueError(f"need n >= 2, noise >= 0 and df > 2, got n={n}, noise={noise}, df={df}")
    d = perm.size
    S = rng.standard_t(df, size=(n, d)) / np.sqrt(df / (df - 2))
    A = S + noise * rng.normal(size=(n, d))
    B = signed_perm_apply(S, perm, signs, axis=1) + noise * rng.normal(size=(n, d))
    return A, B


def rmsnorm(x, g, eps: float = 1e-6) -> np.ndarray:
    """RMSNorm over the last axis: :math:`g \\odot x / \\sqrt{\\overline{x^2} + \\epsilon}`; x (..., d), g (d,)."""
    x = np.asarray(x, dtype=float)
    return np.asarray(g) * x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)


def layernorm(x, g, b, eps: float = 1e-6) -> np.ndarray:
    """LayerNorm over the last axis: :math:`g \\odot (x - \\bar x) / \\sqrt{\\operatorname{var} x + \\epsilon} + b`."""
    x = np.asarray(x, dtype=float)
    c = x - x.mean(-1, keepdims=True)
    return np.asarray(g) * c / np.sqrt((c * c).mean(-1, keepdims=True) + eps) + np.asarray(b)


# ----------------------------------------------------------------------------------------- contract registry

def _apply_inputs(rng, size):
    perm, signs = random_signed_perm(rng, 5, 0.5)
    return {"X": rng.normal(size=(size, 5)), "perm": perm, "signs": signs}


def _corr_inputs(rng, size):
    return {"X": rng.normal(size=(size, 4)), "Y": rng.normal(size=(size, 3))}


def _match_inputs(marginalize):
    def make(rng, size):
        return {"C": rng.uniform(-1, 1, size=(size, size)), "sign_marginalize": marginalize}
    return make


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    perm_args = (Arg("X", ("float64", "float32"), None, scale=True), Arg("perm", ("int64",), 1, low=0),
                 Arg("signs", ("float64", "float32"), 1, low=-1.0, high=1.0))
    match = Contract(args=(Arg("C", ("float64", "float32"), 2, scale=True),), empty="error",
                     shapes="C: (d, d), rows chart B, columns chart A -> perm, signs: (d,)")
    return [
        Kernel("residual_gauge.signed_perm_apply", signed_perm_apply, signed_perm_apply_ref, _apply_inputs,
               Contract(args=perm_args, empty="value", empty_value=None,
                        shapes="X: (..., d, ...) with d on `axis`; perm, signs: (d,)"),
               tol={"float64": (0, 0), "float32": (0, 0)}, benchmark="residual_gauge.signed_perm_apply",
               oracle="the dense matrix T = signed_perm_matrix(perm, signs) contracted with X"),
        Kernel("residual_gauge.corr_matrix", corr_matrix, corr_matrix_ref, _corr_inputs,
               Contract(args=(Arg("X", ("float64", "float32"), 2, scale=True),
                              Arg("Y", ("float64", "float32"), 2, same_dtype_as="X", scale=True)),
                        empty="error", size_one=False, shapes="X: (n, dx), Y: (n, dy) -> (dx, dy); n >= 2"),
               tol={"float64": (1e-12, 1e-12), "float32": (1e-4, 1e-5)}, benchmark="residual_gauge.corr_matrix",
               oracle="numpy.corrcoef"),
        Kernel("residual_gauge.hungarian_match", hungarian_match, hungarian_match_ref, _match_inputs(True), match,
               tol={"float64": (0, 0), "float32": (0, 0)}, benchmark="residual_gauge.hungarian_match",
               oracle="brute force over all d! permutations"),
        Kernel("residual_gauge.hungarian_match_raw", hungarian_match, hungarian_match_ref, _match_inputs(False),
               match, tol={"float64": (0, 0), "float32": (0, 0)},
               oracle="brute force over all d! permutations (raw signed objective)"),
    ]


KERNELS = _registry()

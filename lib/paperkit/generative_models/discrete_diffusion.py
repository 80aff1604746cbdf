"""Exact forward marginals and reverse rates of uniform and absorbing (masking) discrete diffusion on a small
language, for the chapter 'Discrete diffusion learns which sequences are valid before how often they occur'.

Sequences ``x`` are ``L`` tokens over ``{0..N-1}``; the states are enumerated in lexicographic order (state index
``sum_i x_i N^(L-1-i)``). The data law ``p0`` (shape ``(N**L,)``) puts mass only on the *support* ``S`` (the valid
strings). Each position is noised independently by a continuous-time Markov chain with per-token generator

* uniform:   ``Q = (1/N) 1 1^T - I`` (jump at rate 1 to a uniformly drawn token),
  ``K_t = e^{-t} I + (1 - e^{-t}) (1/N) 1 1^T``;
* absorbing: tokens ``{0..N-1, M}`` with ``M = N`` the mask; ``Q[a, M] = 1``, ``Q[a, a] = -1`` for ``a < N``,
  ``K_t[a, a] = e^{-t}``, ``K_t[a, M] = 1 - e^{-t}``, ``K_t[M, M] = 1``.

The marginal is ``q_t = p0 K_t^{(x) L}`` (row vector; the sequence kernel is the Kronecker product of the per-token
ones, i.e. ``expm(t G)`` with ``G`` the Kronecker sum of ``L`` copies of ``Q``). The reverse (time-reversed) rate of
a single-token edit ``x -> y`` is ``R_t(x, y) = Q(y_i, x_i) q_t(y) / q_t(x)`` (the forward rate back from ``y`` to
``x`` times the marginal ratio). The paper's claim (our reading of the abstract): for uniform diffusion and small
``t``, ``R_t(x, y) ~ c(x, y) t^{d(y,S) - d(x,S)}`` with ``d`` the Hamming distance to ``S`` (exponent -1, 0, +1:
validity-improving, -preserving, -worsening edits), and the coefficient of the validity-preserving edits inside
``S`` is ``p0(y) / p0(x)``; for absorbing diffusion every unmasking edit that keeps a valid completion has rate
``~ t^{-1}`` and every edit that leaves the support has rate exactly zero.

Kernels (registered in ``KERNELS``): :func:`forward_marginals` (per-position tensor contractions with the per-token
``K_t``) / :func:`forward_marginals_ref` (``scipy.linalg.expm`` of the full ``N^L x N^L`` generator);
:func:`edit_rates` (vectorised over all single-token edits) / :func:`edit_rates_ref` (one edit at a time).
"""
from __future__ import annotations

import itertools
import math

import numpy as np
from scipy import linalg

from paperkit.arrays import real_array

KINDS = ("uniform", "absorbing")


# ---------------------------------------------------------------------------------------------- the language

def all_strings(L: int, N: int) -> np.ndarray:
    """Every string of length ``L`` over ``{0..N-1}`` in state order: int64 array of shape ``(N**L, L)``."""
    _check_LN(L, N)
    return np.array(list(itertools.product(range(N), repeat=L)), dtype=np.int64).reshape(N ** L, L)


def forbidden_pattern_support(L: int, N: int, forbidden: str) -> np.ndarray:
    """Support mask (bool, ``(N**L,)``) of the regular language 'no occurrence of the substring ``forbidden``'
    (a string of digits ``< N``, e.g. ``"11"``: binary strings without two adjacent ones)."""
    X = all_strings(L, N)
    pat = np.array([int(c) for c in forbidden])
    if (pat >= N).any() or len(pat) == 0:
        raise ValueError(f"forbidden must be a non-empty string of digits below N = {N}, got {forbidden!r}")
    ok = np.ones(len(X), bool)
    for s in range(L - len(pat) + 1):
        ok &= ~(X[:, s:s + len(pat)] == pat).all(1)
    return ok


def hamming_to_support(strings: np.ndarray, support: np.ndarray) -> np.ndarray:
    """``d(x, S)``: Hamming distance from each string (rows of ``strings``, ``(n, L)``) to the nearest string of
    ``strings[support]``; int64 ``(n,)``."""
    S = strings[support]
    return (strings[:, None, :] != S[None, :, :]).sum(2).min(1)


def has_valid_completion(L: int, N: int, support: np.ndarray) -> np.ndarray:
    """For every partly masked string (the absorbing states: ``(N+1)**L`` strings over ``{0..N}``, ``N`` the mask,
    in state order) whether some valid string agrees with it on every unmasked position: bool ``((N+1)**L,)``.
    Found by matching against the strings of the support, independently of any marginal."""
    Y = all_strings(L, N + 1)
    valid = all_strings(L, N)[np.asarray(support, bool)]
    return ((Y[:, None, :] == N) | (Y[:, None, :] == valid[None, :, :])).all(2).any(1)


def zipf_law(support: np.ndarray, a: float, rng: np.random.Generator) -> np.ndarray:
    """``p0`` on the support: Zipf weights ``rank^(-a)`` over a random ranking of the valid strings (drawn from
    ``rng``), zero elsewhere; float64 ``(len(support),)`` summing to one."""
    idx = np.flatnonzero(support)
    w = np.arange(1, len(idx) + 1, dtype=float) ** (-float(a))
    p0 = np.zeros(len(support))
    p0[idx[rng.permutation(len(idx))]] = w / w.sum()
    return p0


# ---------------------------------------------------------------------------------------------- kernels

def _check_LN(L, N):
    for name, v, lo in (("L", L, 1), ("N", N, 2)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")


def _check_kind(kind):
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def token_generator(N: int, kind: str) -> np.ndarray:
    """The per-token generator ``Q`` (rows sum to zero): ``(N, N)`` for uniform, ``(N+1, N+1)`` for absorbing
    (last state the mask)."""
    _check_kind(kind)
    if kind == "uniform":
        return np.full((N, N), 1.0 / N) - np.eye(N)
    Q = np.zeros((N + 1, N + 1))
    Q[:N, N] = 1.0
    Q[np.arange(N), np.arange(N)] = -1.0
    return Q


def _check_p0_t(p0, t, L, N):
    _check_LN(L, N)
    p0 = real_array(p0, "p0", 1)
    t = real_array(t, "t", 1)
    if p0.shape[0] != N ** L:
        raise ValueError(f"p0 must have N**L = {N ** L} entries, got {p0.shape[0]}")
    if (p0 < 0).any():
        raise ValueError("p0 must be non-negative")
    if (t < 0).any():
        raise ValueError("t must be non-negative")
    if p0.dtype != t.dtype:
        raise TypeError(f"t must have the dtype of p0, got {t.dtype} and {p0.dtype}")
    return p0, t


def _embed(p0, L, N, kind):
    """``p0`` over ``N^L`` strings as a tensor over the kernel's token set (mask channel zero for absorbing)."""
    if kind == "uniform":
        return p0.reshape((N,) * L)
    P = np.zeros((N + 1,) * L, dtype=p0.dtype)
    P[(slice(0, N),) * L] = p0.reshape((N,) * L)
    return P


def forward_marginals(p0, t, L: int, N: int, kind: str) -> np.ndarray:
    """``q_t = p0 K_t^{(x) L}`` for each time in ``t``: shape ``(len(t), V**L)`` with ``V = N`` (uniform) or
    ``N + 1`` (absorbing, mask last). ``p0``: ``(N**L,)`` non-negative; ``t``: ``(T,)`` non-negative. The
    per-token ``K_t = expm(t Q)`` is applied along each of the ``L`` axes in turn (``O(T L V^(L+1))``); all
    entries are sums of non-negative products, so tiny marginals (``~ t^8`` at ``t = 1e-8``) keep their relative
    precision."""
    _check_kind(kind)
    p0, t = _check_p0_t(p0, t, L, N)
    Q = token_generator(N, kind)
    P0 = _embed(p0, L, N, kind)
    out = np.empty((len(t), Q.shape[0] ** L), dtype=p0.dtype)
    for j, tj in enumerate(t):
        K = _token_kernel(Q, float(tj)).astype(p0.dtype)
        P = P0
        for ax in range(L):
            P = np.moveaxis(np.tensordot(P, K, axes=([ax], [0])), -1, ax)
        out[j] = P.reshape(-1)
    return out


def _token_kernel(Q, t):
    """``expm(t Q)`` for the per-token generator, written out (the uniform and absorbing chains have closed forms;
    ``expm1`` keeps ``1 - e^{-t}`` exact at tiny ``t``)."""
    n = Q.shape[0]
    stay, move = math.exp(-t), -math.expm1(-t)
    if Q[-1, -1] == 0.0:                       # absorbing: the last state is the mask
        K = np.eye(n) * stay
        K[:, -1] = move
        K[-1, -1] = 1.0
        return K
    return np.eye(n) * stay + move / n


def forward_marginals_ref(p0, t, L: int, N: int, kind: str) -> np.ndarray:
    """Reference for :func:`forward_marginals`: ``p0 expm(t G)`` with ``G`` the full generator on all ``V**L``
    sequences (the Kronecker sum of ``L`` per-token generators), ``scipy.linalg.expm``. Agrees with the fast kernel
    to rounding relative to the largest entry; tiny entries lose relative precision to cancellation inside
    ``expm``, which is why the exponent fits use the fast kernel."""
    _check_kind(kind)
    p0, t = _check_p0_t(p0, t, L, N)
    Q = token_generator(N, kind)
    V = Q.shape[0]
    G = np.zeros((V ** L, V ** L))
    for i in range(L):
        G += np.kron(np.kron(np.eye(V ** i), Q), np.eye(V ** (L - 1 - i)))
    P0 = _embed(p0, L, N, kind).reshape(-1).astype(np.float64)
    out = np.empty((len(t), V ** L), dtype=p0.dtype)
    for j, tj in enumerate(t):
        out[j] = P0 @ linalg.expm(float(tj) * G)
    return out


# ---------------------------------------------------------------------------------------------- reverse rates

def single_edits(L: int, N: int, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every single-token edit of the reverse process as ``(src, dst, pos)`` state indices (int64, one entry per
    edit). Uniform: every string to every string differing at one position (``N^L L (N-1)`` edits). Absorbing:
    every partly masked string to the one that unmasks one masked position to one of the ``N`` tokens."""
    _check_kind(kind)
    V = N if kind == "uniform" else N + 1
    X = all_strings(L, V)
    idx = lambda Y: Y @ (V ** np.arange(L - 1, -1, -1))  # noqa: E731
    src, dst, pos = [], [], []
    for i in range(L):
        for v in range(N):
            ok = X[:, i] != v if kind == "uniform" else X[:, i] == N
            Y = X[ok].copy()
            Y[:, i] = v
            src.append(np.flatnonzero(ok))
            dst.append(idx(Y))
            pos.append(np.full(ok.sum(), i))
    return np.concatenate(src), np.concatenate(dst), np.concatenate(pos)


def _check_rates(q, src, dst, N, kind):
    _check_kind(kind)
    q = real_array(q, "q", 2)
    for name, a in (("src", src), ("dst", dst)):
        a = np.asarray(a)
        if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
            raise TypeError(f"{name} must be a 1-D integer array, got {a.dtype} with shape {a.shape}")
        if len(a) and (a.min() < 0 or a.max() >= q.shape[1]):
            raise ValueError(f"{name} must index the columns of q (0..{q.shape[1] - 1})")
    if len(src) != len(dst):
        raise ValueError(f"src and dst must have the same length, got {len(src)} and {len(dst)}")
    if (q < 0).any():
        raise ValueError("q must be non-negative")
    return q, np.asarray(src), np.asarray(dst)


def edit_rates(q, src, dst, N: int, kind: str) -> np.ndarray:
    """Reverse rates ``R_t(x, y) = Q(y_i, x_i) q_t(y) / q_t(x)`` of the edits ``src -> dst`` at every time:
    ``q`` ``(T, V**L)`` marginals from :func:`forward_marginals`, ``src``/``dst`` ``(E,)`` from
    :func:`single_edits`; returns ``(T, E)``. ``Q(y_i, x_i)`` is ``1/N`` (uniform) or ``1`` (absorbing: the rate
    of masking ``y_i``). A source with ``q_t(x) = 0`` gets rate 0."""
    q, src, dst = _check_rates(q, src, dst, N, kind)
    back = 1.0 / N if kind == "uniform" else 1.0
    qs = q[:, src]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(qs > 0, back * q[:, dst] / np.where(qs > 0, qs, 1.0), 0.0)


def edit_rates_ref(q, src, dst, N: int, kind: str) -> np.ndarray:
    """Reference for :func:`edit_rates`: one time and one edit at a time."""
    q, src, dst = _check_rates(q, src, dst, N, kind)
    back = 1.0 / N if kind == "uniform" else 1.0
    out = np.zeros((q.shape[0], len(src)))
    for j in range(q.shape[0]):
        for e in range(len(src)):
            if q[j, src[e]] > 0:
                out[j, e] = back * q[j, dst[e]] / q[j, src[e]]
    return out.astype(q.dtype)


def loglog_slopes(t: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """Least-squares slope of ``log rate`` against ``log t`` for each column of ``rates`` ``(T, E)`` (all
    entries positive); shape ``(E,)``."""
    x = np.log(np.asarray(t, float))
    x = x - x.mean()
    y = np.log(rates)
    return (x @ (y - y.mean(0))) / (x @ x)


def leading_coefficients(p0: np.ndarray, strings: np.ndarray, support: np.ndarray) -> np.ndarray:
    """``c(x) = sum of p0(z)`` over the valid strings ``z`` nearest to ``x`` (at Hamming distance ``d(x, S)``):
    the coefficient of the leading term ``q_t(x) ~ c(x) (t / N)^{d(x, S)}`` of the uniform marginal. Shape
    ``(len(strings),)``."""
    D = (strings[:, None, :] != strings[support][None, :, :]).sum(2)
    near = D == D.min(1, keepdims=True)
    return (near * p0[support][None, :]).sum(1)


def uniform_leading_rates(t: float, c: np.ndarray, d: np.ndarray, src, dst, N: int) -> np.ndarray:
    """The theorem's leading term of the uniform reverse rate of each edit: ``(1/N) (t/N)^{d(y,S) - d(x,S)}
    c(y) / c(x)`` with ``c`` from :func:`leading_coefficients` and ``d`` the distances to the support."""
    return (1.0 / N) * (t / N) ** (d[dst] - d[src]).astype(float) * c[dst] / c[src]


# ---------------------------------------------------------------------------------------------- registry

def _marg_inputs(rng, size):
    L, N = 3, 2
    p0 = rng.random(N ** L)
    return {"p0": p0 / p0.sum(), "t": rng.uniform(0.01, 2.0, size), "L": L, "N": N, "kind": "uniform"}


def _marg_inputs_abs(rng, size):
    kw = _marg_inputs(rng, size)
    kw["kind"] = "absorbing"
    return kw


def _rate_inputs(rng, size):
    L, N = 3, 2
    src, dst, _ = single_edits(L, N, "uniform")
    q = rng.random((size, N ** L)) + 0.01
    return {"q": q, "src": src, "dst": dst, "N": N, "kind": "uniform"}


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    marg_contract = Contract(args=(Arg("p0", ("float64",), 1, low=0.0), Arg("t", ("float64",), 1, low=0.0)),
                             empty="value", empty_value=None,
                             shapes="p0: (N**L,); t: (T,); out: (T, V**L), V = N or N + 1")
    return [
        Kernel("discrete_diffusion.forward_marginals", forward_marginals, forward_marginals_ref, _marg_inputs,
               marg_contract, tol={"float64": (1e-9, 1e-12)}, benchmark="discrete_diffusion.forward_marginals",
               oracle="scipy.linalg.expm of the full generator (the reference itself)"),
        Kernel("discrete_diffusion.forward_marginals_absorbing", forward_marginals, forward_marginals_ref,
               _marg_inputs_abs, marg_contract, tol={"float64": (1e-9, 1e-12)},
               oracle="scipy.linalg.expm of the full generator; closed-form masking probabilities"),
        Kernel("discrete_diffusion.edit_rates", edit_rates, edit_rates_ref, _rate_inputs,
               Contract(args=(Arg("q", ("float64",), 2, low=0.0),), empty="value", empty_value=None,
                        shapes="q: (T, V**L); src, dst: (E,) state indices; out: (T, E)"),
               tol={"float64": (1e-12, 1e-300)}, benchmark="discrete_diffusion.edit_rates",
               oracle="closed form q_t(y)/q_t(x) of the exact marginals"),
    ]


KERNELS = _registry()

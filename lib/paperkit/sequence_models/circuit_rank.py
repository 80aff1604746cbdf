"""Exact rank checks for probabilistic circuits (PCs) versus logit-space heads.

Three enumerable objects:

- ``separation_rank(P, split)``: the separation rank of a joint table P over n binary variables across the
  partition (A = split, B = the rest), i.e. the matrix rank of P reshaped to (2^|A|, 2^|B|).
- ``pc_joint_table(tree, n_vars, k, rng)``: the full joint table of a small structured-decomposable PC over a
  vtree (nested tuples of variable ids); each internal vtree node has k sum units over k products
  (CP-style: sum unit o = sum_i W[o, i] * L_i(x_A) * R_i(x_B)), so its separation rank across any vtree node's
  split is at most k. ``pc_joint_table_ref`` is the same circuit evaluated state by state.
- ``mixture_head`` / ``softmax_head``: next-token matrices P[c, v] for a probability-space head
  (P = Pi Phi, rows of Pi and Phi on simplices, K components) and a logit-space head (P = softmax(H W)).
- ``circle_logit_head(sigma, beta)``: a rank-2 logit head for the permutation task "context c -> token sigma(c)":
  logits beta cos(theta_c - theta_{sigma^-1(v)}), theta_c = 2 pi c / V.
- ``fit_mixture_em(targets, V, K, rng)``: the best K-component probability-space head found by EM for the task
  "context c -> token targets[c]" (maximum likelihood of P = Pi Phi).
"""
from __future__ import annotations

import itertools

import numpy as np


def _check_split(n_vars: int, split) -> tuple[int, ...]:
    a = tuple(int(i) for i in split)
    if len(set(a)) != len(a) or any(i < 0 or i >= n_vars for i in a):
        raise ValueError(f"split must hold distinct variable ids in [0, {n_vars}), got {split}")
    return a


def separation_rank(P: np.ndarray, split, tol: float | None = None) -> int:
    """Rank of the (2^|A|, 2^|B|) matricisation of P, shape (2,)*n (or flat 2^n, variable 0 most significant)."""
    P = np.asarray(P, dtype=np.float64)
    n = int(round(np.log2(P.size)))
    if P.size < 2 or 2 ** n != P.size:
        raise ValueError(f"P must have 2^n entries, got {P.size}")
    a = _check_split(n, split)
    b = tuple(i for i in range(n) if i not in a)
    # rank_A(P) = rank of P[x_A, x_B] (the Schmidt/separation rank of the table across A|B)
    M = P.reshape((2,) * n).transpose(a + b).reshape(2 ** len(a), 2 ** len(b))
    return int(np.linalg.matrix_rank(M, tol=tol))


def separation_rank_ref(P: np.ndarray, split, tol: float | None = None) -> int:
    """Plain reference for ``separation_rank``: fills the matrix one joint state at a time."""
    P = np.asarray(P, dtype=np.float64).ravel()
    n = int(round(np.log2(P.size)))
    if P.size < 2 or 2 ** n != P.size:
        raise ValueError(f"P must have 2^n entries, got {P.size}")
    a = _check_split(n, split)
    b = [i for i in range(n) if i not in a]
    M = np.zeros((2 ** len(a), 2 ** len(b)))
    for idx, x in enumerate(itertools.product((0, 1), repeat=n)):
        r = int("".join(str(x[i]) for i in a) or "0", 2)
        c = int("".join(str(x[i]) for i in b) or "0", 2)
        M[r, c] = P[idx]
    return int(np.linalg.matrix_rank(M, tol=tol))


def balanced_vtree(vars_) -> tuple | int:
    """Balanced vtree over the given variable order (leaf = int, node = (left, right))."""
    vars_ = list(vars_)
    if len(vars_) == 0:
        raise ValueError("vars_ must be non-empty")
    if len(vars_) == 1:
        return vars_[0]
    h = len(vars_) // 2
    return (balanced_vtree(vars_[:h]), balanced_vtree(vars_[h:]))


def vtree_splits(tree) -> list[tuple[int, ...]]:
    """Variable sets of every non-root vtree node: the partitions a structured PC is 'aligned' with."""
    out = []

    def walk(t, root):
        if isinstance(t, tuple):
            vs = walk(t[0], False) + walk(t[1], False)
        else:
            vs = (int(t),)
        if not root:
            out.append(vs)
        return vs

    walk(tree, True)
    return out


def _vars(t) -> tuple[int, ...]:
    return _vars(t[0]) + _vars(t[1]) if isinstance(t, tuple) else (int(t),)


def _params(tree, k: int, rng: np.random.Generator) -> dict:
    """Random positive circuit weights, drawn in a fixed walk order so both evaluators share them."""
    prm = {}

    def walk(t, path):
        if isinstance(t, tuple):
            walk(t[0], path + "L")
            walk(t[1], path + "R")
            prm[path] = rng.dirichlet(np.ones(k), size=k)  # W[o, i], rows on the simplex
        else:
            prm[path] = rng.dirichlet(np.ones(2), size=k)  # leaf unit i: Bernoulli table over x_v

    walk(tree, "")
    return prm


def _check_pc(tree, n_vars: int, k: int) -> None:
    if n_vars < 1:
        raise ValueError(f"n_vars must be >= 1, got {n_vars}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if sorted(_vars(tree)) != list(range(n_vars)):
        raise ValueError(f"tree must hold each of 0..{n_vars - 1} exactly once")


def pc_joint_table(tree, n_vars: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Joint table, shape (2,)*n_vars, of a width-k CP-style structured-decomposable PC over ``tree``."""
    _check_pc(tree, n_vars, k)
    prm = _params(tree, k, rng)

    def ev(t, path):  # returns (units (k, 2^m) over the node's variables, variable order)
        if not isinstance(t, tuple):
            return prm[path], (int(t),)
        L, va = ev(t[0], path + "L")
        R, vb = ev(t[1], path + "R")
        # node_o(x_A, x_B) = sum_i W[o, i] L_i(x_A) R_i(x_B)
        T = np.einsum("oi,ia,ib->oab", prm[path], L, R).reshape(k, -1)
        return T, va + vb

    T, order = ev(tree, "")
    root = T.mean(axis=0)  # uniform mixture of the root's k units
    return root.reshape((2,) * n_vars).transpose(np.argsort(order))


def pc_joint_table_ref(tree, n_vars: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Plain reference for ``pc_joint_table``: evaluates the circuit bottom-up for each joint state."""
    _check_pc(tree, n_vars, k)
    prm = _params(tree, k, rng)

    def unit(t, path, x, o):
        if not isinstance(t, tuple):
            return prm[path][o, x[int(t)]]
        return sum(prm[path][o, i] * unit(t[0], path + "L", x, i) * unit(t[1], path + "R", x, i) for i in range(k))

    out = np.zeros((2,) * n_vars)
    for x in itertools.product((0, 1), repeat=n_vars):
        out[x] = sum(unit(tree, "", x, o) for o in range(k)) / k
    return out


def mixture_head(Pi: np.ndarray, Phi: np.ndarray) -> np.ndarray:
    """Probability-space head: P[c, v] = sum_k Pi[c, k] Phi[k, v] (Pi: (C, K), Phi: (K, V), rows on simplices)."""
    if Pi.ndim != 2 or Phi.ndim != 2 or Pi.shape[1] != Phi.shape[0]:
        raise ValueError(f"Pi (C, K) and Phi (K, V) must agree, got {Pi.shape}, {Phi.shape}")
    return Pi @ Phi


def softmax_head(H: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Logit-space head: P[c, :] = softmax(H[c] @ W) (H: (C, r), W: (r, V)); logits have rank <= r."""
    if H.ndim != 2 or W.ndim != 2 or H.shape[1] != W.shape[0]:
        raise ValueError(f"H (C, r) and W (r, V) must agree, got {H.shape}, {W.shape}")
    Z = H @ W
    Z = Z - Z.max(axis=1, keepdims=True)
    E = np.exp(Z)
    return E / E.sum(axis=1, keepdims=True)


def circle_logit_head(sigma, beta: float) -> np.ndarray:
    """Next-token matrix (V, V) of the rank-2 logit head H W, H[c] = beta (cos theta_c, sin theta_c),
    W[:, v] = (cos theta_u, sin theta_u) with u = sigma^-1(v): row c peaks at token sigma(c), and the logit margin
    over its neighbours is beta (1 - cos(2 pi / V)), so sharpness needs beta of order V^2."""
    sigma = np.asarray(sigma)
    V = sigma.size
    if V < 2 or sorted(sigma.tolist()) != list(range(V)):
        raise ValueError(f"sigma must be a permutation of 0..V-1 with V >= 2, got {sigma}")
    if not (np.isfinite(beta) and beta > 0):
        raise ValueError(f"beta must be a positive finite number, got {beta}")
    theta = 2 * np.pi * np.arange(V) / V
    inv = np.argsort(sigma)
    H = beta * np.stack([np.cos(theta), np.sin(theta)], 1)
    W = np.stack([np.cos(theta[inv]), np.sin(theta[inv])], 0)
    return softmax_head(H, W)


def fit_mixture_em(targets, V: int, K: int, rng: np.random.Generator, iters: int = 300):
    """EM for a K-component probability-space head P = Pi Phi on the task "context c -> token targets[c]":
    maximises sum_c log P[c, targets[c]]; returns (Pi (C, K), Phi (K, V)). E-step r[c, k] ~ Pi[c, k] Phi[k, y_c];
    M-step Pi[c] = r[c], Phi[k, v] ~ sum_{c: y_c = v} r[c, k]."""
    y = np.asarray(targets)
    if y.ndim != 1 or y.size == 0 or y.min() < 0 or y.max() >= V:
        raise ValueError(f"targets must be a non-empty 1-d array of tokens in [0, {V}), got {targets}")
    if K < 1 or iters < 1:
        raise ValueError(f"K and iters must be >= 1, got K={K}, iters={iters}")
    Pi, Phi = rng.dirichlet(np.ones(K), y.size), rng.dirichlet(np.ones(V), K)
    onehot = np.eye(V)[y]
    for _ in range(iters):
        r = Pi * Phi[:, y].T
        r /= r.sum(1, keepdims=True)
        Pi = r
        Phi = r.T @ onehot + 1e-300
        Phi /= Phi.sum(1, keepdims=True)
    return Pi, Phi


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Contract, Kernel

    def inputs(rng, size):
        return {"P": rng.random(16), "split": (0, 1)}

    return [Kernel("circuit_rank.separation_rank", separation_rank, separation_rank_ref, inputs,
                   Contract(empty="value", shapes="P: 2^n entries; split: a subset of the n variables"),
                   tol={"float64": (0, 0)}, benchmark="separation_rank", oracle="numpy.linalg.matrix_rank")]


KERNELS = _registry()

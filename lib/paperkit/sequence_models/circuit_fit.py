"""Fitting a fixed-vtree probabilistic circuit and a tiny autoregressive transformer to an enumerable target.

Both models are fitted to the exact target table P over n binary variables (shape (2,)*n, n <= 12) by minimising
the exact cross-entropy -sum_x P(x) log Q(x) with Adam (no sampling), and scored by KL(P || Q) in nats per sample.

- ``pc_table_torch(tree, n_vars, prm)``: the joint table Q of the width-k CP-style structured-decomposable circuit
  of :mod:`paperkit.sequence_models.circuit_rank` from its parameters (dict path -> tensor: leaf tables (k, 2),
  sum weights W (k, k), rows on simplices), differentiable. ``circuit_rank.pc_joint_table`` is its NumPy reference.
- ``fit_pc``: the same circuit with softmax-parameterised weights, fitted to P.
- ``fit_transformer``: a :class:`~paperkit.nn.tiny_transformer.TinyTransformer` reading [BOS, x_0..x_{n-2}] and
  predicting x_0..x_{n-1} (token ids 0, 1; BOS = 2), fitted to P; its joint table is the product of its conditionals.
- ``pair_target``: P(x) = prod over pairs (i, j) of [a if x_i == x_j else 1 - a] / 2 (uniform marginals; each
  pair carries mutual information log 2 - H(a)).
- ``pc_joint_table_torch``: ``pc_table_torch`` on the weights ``circuit_rank.pc_joint_table`` draws from a
  generator (same signature and result; the registered kernel, with that function as its reference).
- ``kl`` and ``mutual_information`` (across a split A | B) of tables.
"""
from __future__ import annotations

import itertools

import numpy as np
import torch

from paperkit.nn.tiny_transformer import TinyConfig, TinyTransformer
from paperkit.sequence_models.circuit_rank import _check_pc, _check_split, _params, pc_joint_table


def _table(P, name="P") -> np.ndarray:
    P = np.asarray(P, dtype=np.float64)
    n = int(round(np.log2(max(P.size, 1))))
    if P.size < 2 or 2 ** n != P.size:
        raise ValueError(f"{name} must have 2^n entries, got {P.size}")
    if not np.all(np.isfinite(P)) or P.min() < 0 or abs(P.sum() - 1) > 1e-8:
        raise ValueError(f"{name} must be a finite, non-negative table summing to 1")
    return P.reshape((2,) * n)


def kl(P, Q) -> float:
    """KL(P || Q) in nats for two tables of the same size (0 log 0 = 0; inf where Q = 0 < P)."""
    P, Q = _table(P).ravel(), _table(Q, "Q").ravel()
    if P.size != Q.size:
        raise ValueError(f"P and Q must have the same size, got {P.size}, {Q.size}")
    m = P > 0
    with np.errstate(divide="ignore"):
        return float(np.sum(P[m] * (np.log(P[m]) - np.log(Q[m]))))


def mutual_information(P, split) -> float:
    """I(x_A; x_B) in nats, A = split, B = the rest."""
    P = _table(P)
    n = P.ndim
    a = _check_split(n, split)
    b = tuple(i for i in range(n) if i not in a)
    M = P.transpose(a + b).reshape(2 ** len(a), 2 ** len(b))
    outer = M.sum(1, keepdims=True) * M.sum(0, keepdims=True)
    m = M > 0
    return float(np.sum(M[m] * (np.log(M[m]) - np.log(outer[m]))))


def pair_target(n_vars: int, pairs, agree: float) -> np.ndarray:
    """Table (2,)*n_vars: independent pairs (i, j) with P(x_i == x_j) = agree, uniform marginals; unpaired
    variables uniform."""
    if not 0 < agree < 1:
        raise ValueError(f"agree must be in (0, 1), got {agree}")
    pairs = [tuple(int(v) for v in p) for p in pairs]
    flat = [v for p in pairs for v in p]
    if any(len(p) != 2 for p in pairs) or len(set(flat)) != len(flat):
        raise ValueError(f"pairs must be disjoint pairs of variables, got {pairs}")
    _check_split(n_vars, flat)
    P = np.full((2,) * n_vars, 1.0)
    for x in itertools.product((0, 1), repeat=n_vars):
        P[x] = np.prod([agree if x[i] == x[j] else 1 - agree for i, j in pairs])
    return P / P.sum()


def _states(n: int) -> torch.Tensor:
    """All 2^n joint states, (2^n, n) int64, variable 0 most significant (the table's C order)."""
    return torch.tensor(list(itertools.product((0, 1), repeat=n)), dtype=torch.int64)


def pc_table_torch(tree, n_vars: int, prm: dict) -> torch.Tensor:
    """Joint table (2,)*n_vars of the CP-style circuit: node unit o = sum_i W[o, i] L_i(x_A) R_i(x_B), root = mean
    of its k units (as ``circuit_rank.pc_joint_table``); ``prm`` maps each node's path ('' root, 'L'/'R' below) to
    its leaf table (k, 2) or weights (k, k). With a leading batch axis on every parameter, (R, k, .), the result is
    (R,) + (2,)*n_vars: R independent circuits evaluated at once."""
    batched = prm[""].ndim == 3

    def ev(t, path):
        if not isinstance(t, tuple):
            return prm[path], (int(t),)
        L, va = ev(t[0], path + "L")
        R, vb = ev(t[1], path + "R")
        T = torch.einsum("...oi,...ia,...ib->...oab", prm[path], L, R)
        return T.reshape(*T.shape[:-2], -1), va + vb

    T, order = ev(tree, "")
    root = T.mean(-2)
    perm = np.argsort(order).tolist()
    if batched:
        return root.reshape((-1,) + (2,) * n_vars).permute(0, *[p + 1 for p in perm])
    return root.reshape((2,) * n_vars).permute(*perm)


def pc_joint_table_torch(tree, n_vars: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """``pc_table_torch`` on the random weights ``circuit_rank.pc_joint_table`` draws from ``rng`` (same signature
    and result as that NumPy reference; float64)."""
    _check_pc(tree, n_vars, k)
    prm = {p: torch.as_tensor(v) for p, v in _params(tree, k, rng).items()}
    return pc_table_torch(tree, n_vars, prm).numpy()


def _logits(tree, k: int, restarts: int, gen: torch.Generator) -> dict:
    out = {}

    def walk(t, path):
        if isinstance(t, tuple):
            walk(t[0], path + "L")
            walk(t[1], path + "R")
        out[path] = torch.randn(restarts, k, k if isinstance(t, tuple) else 2, generator=gen, dtype=torch.float64)

    walk(tree, "")
    return {p: v.requires_grad_() for p, v in out.items()}


def fit_pc(P, tree, k: int, gen: torch.Generator, steps: int = 300, lr: float = 0.1,
           restarts: int = 1) -> tuple[np.ndarray, float]:
    """Fit the width-k circuit over ``tree`` to the table P (exact cross-entropy, Adam), from ``restarts``
    independent random initialisations trained side by side; returns (Q, KL(P||Q)) of the restart with the lowest
    final cross-entropy (the training objective, so the choice never looks at anything else)."""
    P = _table(P)
    _check_pc(tree, P.ndim, k)
    if steps < 1 or restarts < 1:
        raise ValueError(f"steps and restarts must be >= 1, got steps={steps}, restarts={restarts}")
    logits = _logits(tree, k, restarts, gen)
    target = torch.as_tensor(P)
    opt = torch.optim.Adam(logits.values(), lr=lr)
    dims = tuple(range(1, P.ndim + 1))
    for _ in range(steps):
        Q = pc_table_torch(tree, P.ndim, {p: v.softmax(-1) for p, v in logits.items()})
        loss = -(target * torch.log(Q.clamp_min(1e-300))).sum(dims)  # (restarts,), independent: Adam is per entry
        opt.zero_grad()
        loss.sum().backward()
        opt.step()
    with torch.no_grad():
        Q = pc_table_torch(tree, P.ndim, {p: v.softmax(-1) for p, v in logits.items()})
        best = int(torch.argmin(-(target * torch.log(Q.clamp_min(1e-300))).sum(dims)))
        Q = Q[best].numpy()
    return Q, kl(P, Q)


def transformer_table(model: TinyTransformer, n: int) -> torch.Tensor:
    """Joint table (2,)*n of an autoregressive TinyTransformer over binary tokens (BOS = 2)."""
    X = _states(n)
    inp = torch.cat([torch.full((X.shape[0], 1), 2, dtype=torch.int64), X[:, :-1]], 1)
    lp = torch.log_softmax(model(inp)[..., :2], -1).gather(-1, X[..., None])[..., 0].sum(1)
    return lp.exp().reshape((2,) * n)


def fit_transformer(P, gen: torch.Generator, steps: int = 300, lr: float = 3e-3, d_model: int = 32,
                    n_layers: int = 2) -> tuple[np.ndarray, float]:
    """Fit a TinyTransformer (causal, learned positions) to the table P by exact cross-entropy over all 2^n
    states; returns (Q, KL(P||Q))."""
    P = _table(P)
    n = P.ndim
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    model = TinyTransformer.seeded(TinyConfig(vocab=3, d_model=d_model, n_heads=2, n_layers=n_layers, max_len=n), gen)
    X = _states(n)
    inp = torch.cat([torch.full((X.shape[0], 1), 2, dtype=torch.int64), X[:, :-1]], 1)
    w = torch.as_tensor(P.ravel(), dtype=torch.float32)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        lp = torch.log_softmax(model(inp)[..., :2], -1).gather(-1, X[..., None])[..., 0].sum(1)
        loss = -(w * lp).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        Q = transformer_table(model, n).double().numpy()
    Q = Q / Q.sum()
    return Q, kl(P, Q)


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Contract, Kernel
    from paperkit.sequence_models.circuit_rank import balanced_vtree

    def inputs(rng, size):
        seed = int(rng.integers(2**32))
        return {"tree": balanced_vtree(range(size)) if size else 0, "n_vars": size, "k": 2,
                "rng": np.random.default_rng(seed)}

    return [Kernel("circuit_fit.pc_joint_table_torch", pc_joint_table_torch, pc_joint_table, inputs,
                   Contract(empty="error", shapes="tree over 0..n_vars-1; output (2,)*n_vars"),
                   tol={"float64": (1e-12, 1e-15)}, oracle="per-state evaluation (circuit_rank.pc_joint_table_ref)")]


KERNELS = _registry()

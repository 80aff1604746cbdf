"""Fixed tag-driven branch weights (SpecDrop), learned routers and the equal-weight baseline, as one small network.

A multi-branch block has ``K`` branches ``b_1, ..., b_K`` that read the same features ``z`` (B, h) and return
``b_k(z)`` (B, h). Every sample carries one coarse category tag ``t`` in ``{0, ..., K-1}``. The block's output is
``sum_k w_k(t) b_k(z)`` with

* **SpecDrop** (fixed, parameter-free): ``w_k(t) = p_a / D`` for ``k = t`` and ``p_i / D`` otherwise, with the
  fixed, category-independent denominator ``D = p_a + (K - 1) p_i`` (:func:`specdrop_weights`); the weights of every
  sample sum to one, so ``K`` identical branches merge to exactly one branch's output (the calibration of the merged
  magnitude to single-branch scale);
* **hard routing**: ``p_i = 0`` (the tag's branch only; SpecDrop without its leakage);
* **No-Routing**: ``w_k = 1 / K`` (equal weights, the tag is not used by the block);
* **learned routers**: ``w = softmax(z G)`` from a learned gate ``G`` (h, K), either soft (all branches) or top-1
  (Switch style: only the arg-max branch, scaled by its probability), trained with the Switch load-balancing loss
  ``K sum_k f_k P_k`` (:func:`load_balancing_loss`);
* **dense**: one branch ``K`` times as wide (the same number of parameters).

:class:`BranchNet` is ``x -> z = relu(x W_s + E[t] + c) -> block -> relu(. + shared bias) -> logits``: a stem, a
learned embedding ``E`` (K, h) of the tag added to it (so that every model, dense included, receives the tag: the
same supervision), the block, a head. Each branch is ``relu(z A_k + a_k) B_k`` (A_k: (h, w), B_k: (w, h), no bias
on B_k; one bias shared after the merge), so the dense model of width ``K w`` has exactly the parameters of ``K``
branches of width ``w``. A learned router adds its gate, ``h K`` parameters (:func:`count_parameters` reports both).

Kernels (registered in ``KERNELS``): :func:`specdrop_weights` / :func:`specdrop_weights_ref` (one sample at a time),
:func:`merge` / :func:`merge_ref` (loop over samples and branches), :func:`load_balancing_loss` /
:func:`load_balancing_loss_ref`, :func:`prune_sensitivity` (all branches in one batched pass) /
:func:`prune_sensitivity_ref` (one branch and one category at a time).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

MODES = ("dense", "norouting", "specdrop", "hard", "soft_gate", "top1_gate")
FIXED = ("norouting", "specdrop", "hard")
GATED = ("soft_gate", "top1_gate")


def _check_tags(tags, K: int) -> torch.Tensor:
    if not isinstance(tags, torch.Tensor):
        raise TypeError(f"tags must be a torch.Tensor, got {type(tags).__name__}")
    if tags.dtype != torch.int64:
        raise TypeError(f"tags must be int64, got {tags.dtype}")
    if tags.ndim != 1:
        raise ValueError(f"tags must be 1-D (batch,), got shape {tuple(tags.shape)}")
    if tags.numel() and (int(tags.min()) < 0 or int(tags.max()) >= K):
        raise ValueError(f"tags must lie in 0..{K - 1}")
    return tags


def _check_p(K, p_a, p_i):
    if isinstance(K, bool) or not isinstance(K, int) or K < 1:
        raise ValueError(f"K must be a positive integer, got {K!r}")
    for name, v in (("p_a", p_a), ("p_i", p_i)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not np.isfinite(v) or v < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    if p_a + (K - 1) * p_i <= 0:
        raise ValueError(f"p_a + (K - 1) p_i must be positive, got p_a={p_a}, p_i={p_i}, K={K}")


def specdrop_weights(tags: torch.Tensor, K: int, p_a: float, p_i: float) -> torch.Tensor:
    """SpecDrop branch weights (B, K) of tags ``t`` (B,) int64: ``p_a / D`` on the tag's branch, ``p_i / D`` on the
    others, ``D = p_a + (K - 1) p_i`` (fixed, the same for every category). Float64; rows sum to one."""
    _check_p(K, p_a, p_i)
    tags = _check_tags(tags, K)
    D = p_a + (K - 1) * p_i
    w = torch.full((tags.shape[0], K), p_i / D, dtype=torch.float64)
    w[torch.arange(tags.shape[0]), tags] = p_a / D
    return w


def specdrop_weights_ref(tags: torch.Tensor, K: int, p_a: float, p_i: float) -> np.ndarray:
    """Reference for :func:`specdrop_weights`: one sample and one branch at a time."""
    _check_p(K, p_a, p_i)
    tags = _check_tags(tags, K)
    out = np.zeros((tags.shape[0], K))
    for b, t in enumerate(tags.tolist()):
        for k in range(K):
            out[b, k] = (p_a if k == t else p_i) / (p_a + (K - 1) * p_i)
    return out


def _check_merge(outs, w):
    for name, x, nd in (("outs", outs, 3), ("w", w, 2)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"{name} must be float32 or float64, got {x.dtype}")
        if x.ndim != nd:
            raise ValueError(f"{name} must be {nd}-D, got shape {tuple(x.shape)}")
        if x.numel() and not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name} must be finite")
    if w.dtype != outs.dtype:
        raise TypeError(f"w must have the dtype of outs ({outs.dtype}), got {w.dtype}")
    if outs.shape[:2] != w.shape:
        raise ValueError(f"outs (B, K, h) and w (B, K) disagree: {tuple(outs.shape)} and {tuple(w.shape)}")


def merge(outs: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Merged block output ``sum_k w[b, k] outs[b, k, :]``: ``outs`` (B, K, h) branch outputs, ``w`` (B, K) branch
    weights (from :func:`specdrop_weights`, equal, or a gate). Returns (B, h). Differentiable."""
    _check_merge(outs, w)
    return torch.bmm(w.unsqueeze(1), outs).squeeze(1)


def merge_ref(outs: torch.Tensor, w: torch.Tensor) -> np.ndarray:
    """Reference for :func:`merge`: explicit loops over samples and branches, float64 NumPy."""
    _check_merge(outs, w)
    o, ww = outs.detach().double().numpy(), w.detach().double().numpy()
    res = np.zeros((o.shape[0], o.shape[2]))
    for b in range(o.shape[0]):
        for k in range(o.shape[1]):
            res[b] += ww[b, k] * o[b, k]
    return res


def _check_probs(probs):
    if not isinstance(probs, torch.Tensor):
        raise TypeError(f"probs must be a torch.Tensor, got {type(probs).__name__}")
    if probs.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"probs must be float32 or float64, got {probs.dtype}")
    if probs.ndim != 2 or probs.shape[0] < 1 or probs.shape[1] < 1:
        raise ValueError(f"probs must be 2-D (batch >= 1, K >= 1), got shape {tuple(probs.shape)}")
    if not bool(torch.isfinite(probs).all()):
        raise ValueError("probs must be finite")
    if float(probs.min()) < 0 or float(probs.max()) > 1:
        raise ValueError("probs must lie in [0, 1]")


def load_balancing_loss(probs: torch.Tensor) -> torch.Tensor:
    """Switch-Transformer load-balancing loss of router probabilities ``probs`` (B, K) (rows: softmax outputs):
    ``K sum_k f_k P_k``, ``f_k`` the share of samples whose arg-max is ``k``, ``P_k`` the mean probability of
    ``k``. Equals 1 for a uniform router; differentiable in ``P`` only (``f`` is a count). 0-d tensor."""
    _check_probs(probs)
    K = probs.shape[1]
    f = F.one_hot(probs.argmax(1), K).to(probs.dtype).mean(0)
    return K * (f * probs.mean(0)).sum()


def load_balancing_loss_ref(probs: torch.Tensor) -> float:
    """Reference for :func:`load_balancing_loss`: counts and means by loops."""
    _check_probs(probs)
    p = probs.detach().double().numpy()
    B, K = p.shape
    total = 0.0
    for k in range(K):
        f = sum(1 for b in range(B) if int(np.argmax(p[b])) == k) / B
        total += f * sum(p[b, k] for b in range(B)) / B
    return K * total


class BranchNet(torch.nn.Module):
    """Stem, tag embedding, a ``K``-branch block (or one dense branch of width ``K w``) and a linear head.

    ``mode`` in :data:`MODES`; ``p_a``, ``p_i`` are SpecDrop's weights (``hard`` uses ``p_a = 1, p_i = 0``).
    ``forward(x (B, d), tags (B,)) -> (logits (B, C), router probabilities (B, K) or None)``. ``prune`` (a branch
    index or None) zeroes that branch's output with the weights of the others unchanged (the fixed denominator)."""

    def __init__(self, d_in: int, n_classes: int, K: int, h: int, w: int, mode: str, generator: torch.Generator,
                 p_a: float = 0.7, p_i: float = 0.1):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        _check_p(K, p_a, p_i)
        self.K, self.mode, self.p_a, self.p_i = K, mode, p_a, p_i
        nb, wb = (1, K * w) if mode == "dense" else (K, w)

        def init(*shape, fan_in):
            return torch.nn.Parameter((torch.rand(*shape, generator=generator) * 2 - 1) / np.sqrt(fan_in))

        self.W_s, self.c_s = init(d_in, h, fan_in=d_in), init(h, fan_in=d_in)
        self.E = init(K, h, fan_in=d_in)
        self.A, self.a = init(nb, h, wb, fan_in=h), init(nb, 1, wb, fan_in=h)
        self.Bm, self.c_m = init(nb, wb, h, fan_in=wb), init(h, fan_in=wb)
        self.W_o, self.c_o = init(h, n_classes, fan_in=h), init(n_classes, fan_in=h)
        self.G = init(h, K, fan_in=h) if mode in GATED else None

    def weights(self, z, tags):
        """Branch weights (B, K) and router probabilities (or None)."""
        B, K = z.shape[0], self.K
        if self.mode == "specdrop":
            D = self.p_a + (K - 1) * self.p_i
            w = torch.full((B, K), self.p_i / D, dtype=z.dtype)
            return w.scatter(1, tags[:, None], self.p_a / D), None
        if self.mode == "hard":
            return F.one_hot(tags, K).to(z.dtype), None
        if self.mode == "norouting":
            return torch.full((B, K), 1.0 / K, dtype=z.dtype), None
        probs = torch.softmax(z @ self.G, 1)
        if self.mode == "soft_gate":
            return probs, probs
        return probs * F.one_hot(probs.argmax(1), K).to(z.dtype), probs

    def forward(self, x, tags, prune: int | None = None, weights: torch.Tensor | None = None):
        z = torch.relu(x @ self.W_s + self.E[tags] + self.c_s)
        outs = torch.bmm(torch.relu(torch.matmul(z, self.A) + self.a), self.Bm)       # (K, B, h)
        if self.mode == "dense":
            m, probs = outs[0], None
        else:
            w, probs = self.weights(z, tags) if weights is None else (weights, None)
            if prune is not None:
                w = w.clone()
                w[:, prune] = 0
            m = (w.t().unsqueeze(2) * outs).sum(0)                # merge(outs.transpose(0, 1), w), unchecked
        return torch.relu(m + self.c_m) @ self.W_o + self.c_o, probs


def count_parameters(net: BranchNet) -> dict:
    """``{"total": all parameters, "router": the gate's (0 without one), "rest": total - router}``."""
    total = sum(p.numel() for p in net.parameters())
    router = 0 if net.G is None else net.G.numel()
    return {"total": total, "router": router, "rest": total - router}


def train(net: BranchNet, X: torch.Tensor, y: torch.Tensor, tags: torch.Tensor, steps: int, batch: int,
          generator: torch.Generator, lr: float = 3e-3, lb_coef: float = 0.01) -> list[float]:
    """Adam on cross-entropy (plus ``lb_coef`` times :func:`load_balancing_loss` for learned routers), minibatches
    of ``batch`` drawn without replacement from a fresh permutation each epoch (from ``generator``). Returns the
    loss of every 25th step."""
    opt = torch.optim.Adam(net.parameters(), lr=lr, fused=True)
    n, hist = X.shape[0], []
    perm, pos = torch.randperm(n, generator=generator), 0
    for step in range(steps):
        if pos + batch > n:
            perm, pos = torch.randperm(n, generator=generator), 0
        idx = perm[pos:pos + batch]
        pos += batch
        logits, probs = net(X[idx], tags[idx])
        loss = F.cross_entropy(logits, y[idx])
        if probs is not None:
            f = F.one_hot(probs.argmax(1), net.K).to(probs.dtype).mean(0)
            loss = loss + lb_coef * net.K * (f * probs.mean(0)).sum()      # load_balancing_loss, unchecked
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 25 == 0:
            hist.append(float(loss.detach()))
    return hist


@torch.no_grad()
def accuracy(net: BranchNet, X, y, tags, prune: int | None = None, weights=None) -> float:
    """Share of ``X`` labelled correctly (optionally with branch ``prune`` zeroed, or with given branch weights)."""
    return float((net(X, tags, prune, weights)[0].argmax(1) == y).double().mean())


def _check_prune(net, X, y, tags, cats, weights):
    if not isinstance(net, BranchNet) or net.mode == "dense":
        raise ValueError("net must be a multi-branch BranchNet (not dense)")
    if not isinstance(X, torch.Tensor) or X.ndim != 2 or X.dtype not in (torch.float32, torch.float64):
        raise TypeError("X must be a 2-D float32 or float64 tensor")
    if not isinstance(weights, torch.Tensor) or weights.dtype != X.dtype or weights.ndim != 2:
        raise TypeError("weights must be a 2-D tensor of the dtype of X")
    for name, v in (("y", y), ("tags", tags), ("cats", cats)):
        if not isinstance(v, torch.Tensor) or v.dtype != torch.int64 or v.ndim != 1:
            raise TypeError(f"{name} must be a 1-D int64 tensor")
    N = X.shape[0]
    if N < 1 or any(v.shape[0] != N for v in (y, tags, cats)) or weights.shape != (N, net.K):
        raise ValueError("X, y, tags, cats and weights must describe the same non-empty set of samples")
    for name, v in (("X", X), ("weights", weights)):
        if not bool(torch.isfinite(v).all()):
            raise ValueError(f"{name} must be finite")
    for name, v in (("tags", tags), ("cats", cats)):
        if int(v.min()) < 0 or int(v.max()) >= net.K:
            raise ValueError(f"{name} must lie in 0..{net.K - 1}")


@torch.no_grad()
def prune_sensitivity(net: BranchNet, X: torch.Tensor, y: torch.Tensor, tags: torch.Tensor, cats: torch.Tensor,
                      weights: torch.Tensor) -> np.ndarray:
    """Per-branch pruning sensitivity ``S`` (K, K): ``S[k, c]`` = accuracy on the samples of category ``c`` with
    every branch present minus the accuracy with branch ``k`` zeroed, the other weights unchanged (the fixed
    denominator). ``X`` (N, d), ``y`` (N,) labels, ``tags`` (N,) the tags the stem receives, ``cats`` (N,) the true
    categories, ``weights`` (N, K) the branch weights to evaluate with (SpecDrop's of the tags, or equal weights).
    All ``K + 1`` evaluations in one batched pass."""
    _check_prune(net, X, y, tags, cats, weights)
    K, N = net.K, X.shape[0]
    w = weights.repeat(K + 1, 1)
    for k in range(K):
        w[(k + 1) * N:(k + 2) * N, k] = 0
    logits = net(X.repeat(K + 1, 1), tags.repeat(K + 1), weights=w)[0]
    ok = (logits.argmax(1) == y.repeat(K + 1)).double().reshape(K + 1, N)
    one = F.one_hot(cats, K).double()
    acc = (ok @ one) / one.sum(0).clamp(min=1)
    return (acc[:1] - acc[1:]).numpy()


@torch.no_grad()
def prune_sensitivity_ref(net: BranchNet, X: torch.Tensor, y: torch.Tensor, tags: torch.Tensor, cats: torch.Tensor,
                          weights: torch.Tensor) -> np.ndarray:
    """Reference for :func:`prune_sensitivity`: one branch and one category at a time through
    :func:`accuracy` with ``prune``."""
    _check_prune(net, X, y, tags, cats, weights)
    S = np.zeros((net.K, net.K))
    for c in range(net.K):
        m = cats == c
        if not bool(m.any()):
            continue
        full = accuracy(net, X[m], y[m], tags[m], weights=weights[m])
        for k in range(net.K):
            S[k, c] = full - accuracy(net, X[m], y[m], tags[m], prune=k, weights=weights[m])
    return S


# ----------------------------------------------------------------------------------------------------- registry

def _weight_inputs(rng, size):
    return {"tags": torch.tensor(rng.integers(0, 4, size), dtype=torch.int64), "K": 4, "p_a": 0.7, "p_i": 0.1}


def _merge_inputs(rng, size):
    return {"outs": torch.tensor(rng.normal(size=(size, 4, 5))), "w": torch.tensor(rng.random((size, 4)))}


def _probs_inputs(rng, size):
    return {"probs": torch.softmax(torch.tensor(rng.normal(size=(size, 4))), 1)}


def _prune_inputs(rng, size):
    g = torch.Generator().manual_seed(int(rng.integers(1 << 30)))
    net = BranchNet(6, 3, 4, 5, 2, "specdrop", g).double()
    cats = torch.tensor(rng.integers(0, 4, size), dtype=torch.int64)
    return {"net": net, "X": torch.tensor(rng.random((size, 6))), "y": torch.tensor(rng.integers(0, 3, size)),
            "tags": cats, "cats": cats, "weights": specdrop_weights(cats, 4, 0.7, 0.1)}


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    return [
        Kernel("tag_routing.specdrop_weights", specdrop_weights, specdrop_weights_ref, _weight_inputs,
               Contract(args=(Arg("tags", ("int64",), ndim=1, low=0, high=3),), empty="value",
                        empty_value=lambda kw: np.zeros((0, 4)), shapes="tags: (B,); returns (B, K), rows sum to 1"),
               tol={"float64": (0.0, 1e-15)}, benchmark="tag_routing.specdrop_weights",
               oracle="one-hot at p_i = 0 (hard routing), 1/K at p_a = p_i (No-Routing)"),
        Kernel("tag_routing.merge", merge, merge_ref, _merge_inputs,
               Contract(args=(Arg("outs", ndim=3, scale=True), Arg("w", ndim=2, same_dtype_as="outs")),
                        empty="value", empty_value=lambda kw: np.zeros((0, 5)),
                        shapes="outs: (B, K, h), w: (B, K); returns (B, h)"),
               tol={"float64": (1e-12, 1e-12), "float32": (1e-5, 1e-5)}, benchmark="tag_routing.merge",
               oracle="identical branches merge to one branch (the fixed denominator)"),
        Kernel("tag_routing.load_balancing_loss", load_balancing_loss, load_balancing_loss_ref, _probs_inputs,
               Contract(args=(Arg("probs", ndim=2, low=0.0, high=1.0),), empty="error",
                        shapes="probs: (B, K) router probabilities; returns a 0-d tensor"),
               tol={"float64": (1e-12, 1e-12), "float32": (1e-5, 1e-6)},
               oracle="1 for a uniform router, K for a collapsed one"),
        Kernel("tag_routing.prune_sensitivity", prune_sensitivity, prune_sensitivity_ref, _prune_inputs,
               Contract(args=(Arg("X", ndim=2), Arg("weights", ndim=2, same_dtype_as="X")), empty="error",
                        shapes="X: (N, d), y, tags, cats: (N,), weights: (N, K); returns (K, K)"),
               tol={"float64": (0.0, 1e-12)}, benchmark="tag_routing.prune_sensitivity"),
    ]


KERNELS = _registry()

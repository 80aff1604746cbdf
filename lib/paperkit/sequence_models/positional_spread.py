"""Positional spread of an additive positional encoding, the exact lower bound for separating encodings, and a
one-layer mean-pooled encoder to measure what spread does to extrapolation and positional expressivity.

An encoding is a matrix E of shape (L, d): row i (e_i) is added to the token at position i. Its *spread* is the
squared Frobenius norm of the row-centred matrix, ||E~||_F^2 with E~ = E - 1 mean(E, 0). The variance identity
::

    sum_i ||e_i - mean||^2 = (1 / 2L) sum_{i,j} ||e_i - e_j||^2

gives, for any E whose rows are pairwise at least delta apart, spread >= (L - 1) delta^2 / 2, with equality for a
regular simplex (all pairwise distances equal delta).

Kernels and their plain references share one signature:

- ``positional_spread(E)`` (vectorised centring) vs ``positional_spread_ref(E)`` (pairwise double loop, the identity);
- ``min_separation(E)`` (Numba, O(L^2 d)) vs ``min_separation_ref(E)`` (all pairwise distances in NumPy);
- ``MeanPoolEncoder.forward`` (the shared transformer block) vs ``meanpool_encoder_ref`` (every step written out);
- ``train_encoders`` (all PE scales trained at once with ``torch.func.vmap``) vs ``train_encoders_ref`` (one
  ``train_encoder`` per scale).
"""
from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import torch
import torch.nn as nn
from numba import njit

from paperkit.nn.tiny_transformer import Block, TinyConfig, sinusoidal_pe


def _check_E(E) -> np.ndarray:
    E = np.asarray(E)
    if E.ndim != 2 or E.shape[0] < 1 or E.shape[1] < 1:
        raise ValueError(f"E must be a non-empty (L, d) matrix, got shape {E.shape}")
    if np.iscomplexobj(E) or not np.issubdtype(E.dtype, np.number):
        raise TypeError(f"E must be a real array, got dtype {E.dtype}")
    if not np.issubdtype(E.dtype, np.floating):
        E = E.astype(np.float64)
    if not np.all(np.isfinite(E)):
        raise ValueError("E must be finite")
    return E


def positional_spread(E) -> float:
    """Spread ||E~||_F^2 of E (L, d), computed by centring the rows (float64 accumulation)."""
    E = _check_E(E).astype(np.float64)
    # E~ = E - 1 mean(E, 0); spread = sum of squares of E~
    Et = E - E.mean(axis=0, keepdims=True)
    return float(np.sum(Et * Et))


def positional_spread_ref(E) -> float:
    """Spread of E (L, d) by the pairwise side of the identity: (1 / 2L) sum_{i,j} ||e_i - e_j||^2."""
    E = _check_E(E).astype(np.float64)
    L = E.shape[0]
    total = 0.0
    for i in range(L):
        for j in range(L):
            diff = E[i] - E[j]
            total += float(diff @ diff)
    return total / (2 * L)


@njit(cache=True)
def _min_sep_sq(E):
    L, d = E.shape
    best = np.inf
    for i in range(L):
        for j in range(i + 1, L):
            s = 0.0
            for k in range(d):
                t = E[i, k] - E[j, k]
                s += t * t
                if s >= best:  # early exit: this pair cannot beat the running minimum
                    break
            if s < best:
                best = s
    return best


def min_separation(E) -> float:
    """delta(E) = min_{i<j} ||e_i - e_j||_2 over rows of E (L, d); inf when L == 1. Numba kernel."""
    E = np.ascontiguousarray(_check_E(E), dtype=np.float64)
    return float(np.sqrt(_min_sep_sq(E)))


def min_separation_ref(E) -> float:
    """delta(E) from the full (L, L) matrix of pairwise distances (NumPy), same contract as min_separation."""
    E = _check_E(E).astype(np.float64)
    L = E.shape[0]
    if L == 1:
        return float("inf")
    D2 = np.sum((E[:, None, :] - E[None, :, :]) ** 2, axis=-1)
    return float(np.sqrt(D2[np.triu_indices(L, k=1)].min()))


def spread_lower_bound(L: int, delta: float) -> float:
    """(L - 1) delta^2 / 2: the least spread of any L-row encoding whose rows are pairwise >= delta apart."""
    if L < 1:
        raise ValueError(f"L must be >= 1, got {L}")
    if not delta >= 0:
        raise ValueError(f"delta must be >= 0, got {delta}")
    return (L - 1) * delta**2 / 2


def simplex_pe(L: int, delta: float) -> np.ndarray:
    """A regular simplex of L rows, all pairwise distances exactly delta: (delta / sqrt 2) I_L, shape (L, L)."""
    if L < 1:
        raise ValueError(f"L must be >= 1, got {L}")
    return np.eye(L) * (delta / np.sqrt(2.0))


def two_cluster_pe(L: int, gap: float, d: int, rng: np.random.Generator) -> np.ndarray:
    """Non-separating control (L, d): the first half of the rows equals a, the rest a + gap * u (u a unit vector).

    Its min separation is 0, so the theorem's premise fails for delta = gap even though most pairs are gap apart.
    """
    if L < 2 or d < 1:
        raise ValueError(f"L must be >= 2 and d >= 1, got L={L}, d={d}")
    a = rng.normal(size=d)
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    E = np.tile(a, (L, 1))
    E[L // 2:] += gap * u
    return E


# ---------------------------------------------------------------------------------------------------------------
# Trained part: a one-layer mean-pooled encoder (the theorem's setting) on order-free and absolute-position tasks.
# ---------------------------------------------------------------------------------------------------------------

TASKS = ("mean_threshold", "token_at")


def task_batch(task: str, batch: int, L: int, vocab: int, gen: torch.Generator, pos: int = 3):
    """Random tokens (batch, L) int64 uniform over ``vocab`` and their labels (batch,) int64.

    ``task``:

    - ``"mean_threshold"``: 1 if the mean token value exceeds (vocab - 1) / 2, else 0; a weighted majority vote,
      invariant under any permutation of the positions (near-permutation-invariant target, paper's task class A).
    - ``"token_at"``: the token at position ``pos``; depends on absolute position only (task class B).
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if batch < 1 or L < 1 or vocab < 2:
        raise ValueError(f"batch, L must be >= 1 and vocab >= 2, got batch={batch}, L={L}, vocab={vocab}")
    if task == "token_at" and not 0 <= pos < L:
        raise ValueError(f"pos must lie in [0, L), got pos={pos}, L={L}")
    x = torch.randint(0, vocab, (batch, L), generator=gen)
    if task == "mean_threshold":
        # y = [ sum_i x_i > L (vocab - 1) / 2 ], compared as 2 sum > L (vocab - 1) to stay in integers
        return x, (2 * x.sum(1) > L * (vocab - 1)).long()
    return x, x[:, pos].clone()


def n_classes(task: str, vocab: int) -> int:
    """Number of labels of ``task``: 2 for the threshold task, ``vocab`` for the token-at-position task."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    return 2 if task == "mean_threshold" else vocab


def perm_invariant_ceiling(x: torch.Tensor, vocab: int) -> float:
    """Best expected accuracy on ``token_at`` of any predictor that sees only the multiset of tokens.

    Given the multiset, the token at a fixed position is c with probability n_c / L, so the best guess is the most
    frequent token and its expected accuracy is mean over sequences of max_c n_c / L. x: (batch, L) int64.
    """
    counts = torch.nn.functional.one_hot(x, vocab).sum(1)  # (batch, vocab): n_c
    return float((counts.max(1).values.double() / x.shape[1]).mean())


class MeanPoolEncoder(nn.Module):
    """Token embedding + s * sinusoidal PE, one bidirectional pre-LN :class:`~paperkit.nn.tiny_transformer.Block`,
    mean pooling over positions, LayerNorm and a linear head: tokens (batch, L) -> class logits (batch, n_out).

    The block is the shared one (``TinyConfig(causal=False, n_layers=1, pos="sinusoidal", pe_scale=s)``), so the
    attention is exactly the book's. ``pe`` in :meth:`forward` replaces the scaled sinusoidal rows by any encoding
    E (L, d): the upper-bound experiment perturbs the encoding directly. All weights are drawn from ``gen``.
    """

    def __init__(self, vocab: int, n_out: int, d_model: int, n_heads: int, max_len: int, pe_scale: float,
                 gen: torch.Generator):
        super().__init__()
        if n_out < 2:
            raise ValueError(f"n_out must be >= 2, got {n_out}")
        if not pe_scale >= 0:
            raise ValueError(f"pe_scale must be >= 0, got {pe_scale}")
        self.cfg = TinyConfig(vocab=vocab, d_model=d_model, n_heads=n_heads, n_layers=1, max_len=max_len,
                              pos="sinusoidal", pe_scale=float(pe_scale), causal=False)
        self.embed = nn.Embedding(vocab, d_model)
        self.register_buffer("pe", sinusoidal_pe(max_len, d_model), persistent=False)
        self.block = Block(self.cfg)
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, n_out)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "ln" in name:  # LayerNorm: weight 1, bias 0 (Torch's default, no randomness)
                    continue
                if name == "embed.weight":
                    p.copy_(torch.randn(p.shape, generator=gen))
                elif p.ndim == 2:  # Linear weight: uniform +-1/sqrt(fan_in), Torch's default range
                    p.copy_((torch.rand(p.shape, generator=gen) * 2 - 1) / math.sqrt(p.shape[1]))
                else:
                    p.zero_()

    def encoding(self, L: int) -> torch.Tensor:
        """The additive encoding s * PE[:L], shape (L, d)."""
        if L > self.cfg.max_len:
            raise ValueError(f"sequence length {L} exceeds max_len {self.cfg.max_len}")
        return self.cfg.pe_scale * self.pe[:L]

    def forward(self, tokens: torch.Tensor, pe: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (batch, n_out) = head(LN(mean_i h_i)), h = Block(embed(tokens) + E), E = ``pe`` or s * PE[:L]."""
        L = tokens.shape[1]
        E = self.encoding(L) if pe is None else pe
        if E.shape != (L, self.cfg.d_model):
            raise ValueError(f"pe must have shape ({L}, {self.cfg.d_model}), got {tuple(E.shape)}")
        h, _ = self.block(self.embed(tokens) + E)
        return self.head(self.ln_f(h.mean(1)))


def meanpool_encoder_ref(model: MeanPoolEncoder, tokens: torch.Tensor, pe: torch.Tensor | None = None):
    """Plain reference of :meth:`MeanPoolEncoder.forward`: the same weights, every step written out per sequence.

    LayerNorm, the per-head softmax attention softmax(q k^T / sqrt(dh)) v, the 4x GELU MLP, the mean over positions
    and the head, with explicit loops over sequences and heads; (batch, L) -> (batch, n_out).
    """
    L, d = tokens.shape[1], model.cfg.d_model
    E = model.encoding(L) if pe is None else pe
    blk, H = model.block, model.cfg.n_heads
    dh = d // H

    def ln(x, m):
        # LN(x) = (x - mean) / sqrt(var + eps) * w + b, biased variance over the last axis
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + m.eps) * m.weight + m.bias

    out = []
    for b in range(tokens.shape[0]):
        x = model.embed.weight[tokens[b]] + E  # (L, d)
        q, k, v = (ln(x, blk.ln1) @ blk.attn.qkv.weight.T + blk.attn.qkv.bias).split(d, dim=-1)
        heads = []
        for h in range(H):
            sl = slice(h * dh, (h + 1) * dh)
            p = torch.softmax(q[:, sl] @ k[:, sl].T / math.sqrt(dh), dim=-1)
            heads.append(p @ v[:, sl])
        x = x + torch.cat(heads, -1) @ blk.attn.out.weight.T + blk.attn.out.bias
        m1, _, m2 = blk.mlp
        # x + W2 GELU(W1 LN(x) + b1) + b2
        x = x + torch.nn.functional.gelu(ln(x, blk.ln2) @ m1.weight.T + m1.bias) @ m2.weight.T + m2.bias
        out.append(ln(x.mean(0), model.ln_f) @ model.head.weight.T + model.head.bias)
    return torch.stack(out)


def train_encoder(task: str, pe_scale: float, *, L: int, vocab: int, steps: int, batch: int, lr: float,
                  gen: torch.Generator, d_model: int = 32, n_heads: int = 2, max_len: int = 64,
                  device: str = "cpu") -> MeanPoolEncoder:
    """Train a :class:`MeanPoolEncoder` on fresh ``task`` batches at length ``L`` (Adam, cross-entropy).

    Weights and every batch are drawn from ``gen`` (a CPU generator; batches are moved to ``device``).
    """
    if steps < 0 or batch < 1 or not lr > 0:
        raise ValueError(f"steps must be >= 0, batch >= 1 and lr > 0, got steps={steps}, batch={batch}, lr={lr}")
    model = MeanPoolEncoder(vocab, n_classes(task, vocab), d_model, n_heads, max_len, pe_scale, gen).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        x, y = task_batch(task, batch, L, vocab, gen)
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@torch.no_grad()
def accuracy(model: MeanPoolEncoder, x: torch.Tensor, y: torch.Tensor, chunk: int = 512) -> float:
    """Fraction of sequences x (n, L) whose arg-max logit equals y (n,).

    Chunks of 512 sequences keep the (chunk, L, 4d) activations in cache: on the CPU they take about half the time
    of 4096-sequence chunks for the same result (each sequence's logits do not depend on the others in its chunk).
    """
    dev = next(model.parameters()).device
    hits = sum(int((model(x[i:i + chunk].to(dev)).argmax(1).cpu() == y[i:i + chunk]).sum())
               for i in range(0, len(x), chunk))
    return hits / len(x)


def train_encoders(task: str, scales, *, L: int, vocab: int, steps: int, batch: int, lr: float,
                   gen: torch.Generator, d_model: int = 32, n_heads: int = 2, max_len: int = 64,
                   device: str = "cpu", pe_table: torch.Tensor | None = None) -> list[MeanPoolEncoder]:
    """One :class:`MeanPoolEncoder` per PE scale s in ``scales``, trained side by side with ``torch.func.vmap``.

    Every model starts from the same weights and sees the same batches (common random numbers: the models differ
    only in s), so the result equals :func:`train_encoders_ref` (one :func:`train_encoder` per scale, each with a
    generator in the same state) up to rounding; one vectorised step replaces ``len(scales)`` small ones.
    """
    scales = [float(s) for s in scales]
    if not scales:
        raise ValueError("scales must be a non-empty list of PE scales")
    if steps < 0 or batch < 1 or not lr > 0:
        raise ValueError(f"steps must be >= 0, batch >= 1 and lr > 0, got steps={steps}, batch={batch}, lr={lr}")
    base = MeanPoolEncoder(vocab, n_classes(task, vocab), d_model, n_heads, max_len, scales[0], gen).to(device)
    if pe_table is not None:  # another encoding family in place of the sinusoidal rows, (>= max_len, d)
        if pe_table.ndim != 2 or pe_table.shape[0] < max_len or pe_table.shape[1] != d_model:
            raise ValueError(f"pe_table must be (>= {max_len}, {d_model}), got {tuple(pe_table.shape)}")
        base.pe = pe_table[:max_len].to(device=device, dtype=base.pe.dtype)
    models = [base]
    for s in scales[1:]:  # same initial weights, another PE scale
        m = copy.deepcopy(base)
        m.cfg = dataclasses.replace(base.cfg, pe_scale=s)
        models.append(m)
    names = [n for n, _ in base.named_parameters()]
    stacked = {n: torch.stack([dict(m.named_parameters())[n].detach() for m in models]).requires_grad_()
               for n in names}
    # E_k = s_k * PE[:L], one encoding per model, (K, L, d)
    E = torch.stack([m.encoding(L) for m in models])

    def loss_one(params, Ek, x, y):
        logits = torch.func.functional_call(base, params, (x,), {"pe": Ek})
        return nn.functional.cross_entropy(logits, y)

    # sum over models of each model's own mean loss: gradients per model equal separate training
    batched = torch.func.vmap(loss_one, in_dims=(0, 0, None, None))
    opt = torch.optim.Adam(stacked.values(), lr=lr)
    for _ in range(steps):
        x, y = task_batch(task, batch, L, vocab, gen)
        loss = batched(stacked, E, x.to(device), y.to(device)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        for k, m in enumerate(models):
            for n, p in m.named_parameters():
                p.copy_(stacked[n][k])
    return [m.eval() for m in models]


def train_encoders_ref(task: str, scales, *, L: int, vocab: int, steps: int, batch: int, lr: float,
                       gen: torch.Generator, d_model: int = 32, n_heads: int = 2, max_len: int = 64,
                       device: str = "cpu") -> list[MeanPoolEncoder]:
    """Plain reference of :func:`train_encoders`: :func:`train_encoder` once per scale, from the same generator
    state each time (so the same initial weights and batches), leaving ``gen`` where the last run left it."""
    start = gen.get_state()
    out = []
    for s in scales:
        gen.set_state(start)
        out.append(train_encoder(task, s, L=L, vocab=vocab, steps=steps, batch=batch, lr=lr, gen=gen,
                                 d_model=d_model, n_heads=n_heads, max_len=max_len, device=device))
    return out


@torch.no_grad()
def order_breaking_gap(model: MeanPoolEncoder, x: torch.Tensor, y: torch.Tensor, E: torch.Tensor,
                       symmetrise: bool = True) -> float:
    """Risk added by the encoding's spread: R(E) - R(1 ebar^T), R the mean cross-entropy of ``model`` on (x, y).

    x (n, L) int64, y (n,) int64, E (L, d) any additive encoding; 1 ebar^T repeats E's mean row, so it has spread 0
    and the model is exactly permutation invariant under it. With ``symmetrise`` every sequence is replaced by all L
    of its cyclic shifts (with the same label; the target must be permutation invariant), which makes the sample
    exchangeable as the theorem's data distribution is; then the first-order term sum_i g . e~_i cancels
    (all g_i equal, sum_i e~_i = 0) and the gap is O(||E~||_F^2). Without it a first-order term ~ ||E~||_F remains.
    Computed in the model's dtype; returns a Python float.
    """
    L = x.shape[1]
    if E.shape != (L, model.cfg.d_model):
        raise ValueError(f"E must have shape ({L}, {model.cfg.d_model}), got {tuple(E.shape)}")
    if symmetrise:
        x = torch.cat([torch.roll(x, k, dims=1) for k in range(L)])
        y = y.repeat(L)
    dev = next(model.parameters()).device
    x, y, E = x.to(dev), y.to(dev), E.to(dev)
    Ebar = E.mean(0, keepdim=True).expand_as(E)
    risk = [nn.functional.cross_entropy(model(x, pe=P), y, reduction="sum") / len(y) for P in (E, Ebar)]
    return float(risk[0] - risk[1])


def spread_sweep(task: str, scales, test_lens, *, replicates: int, L: int, vocab: int, steps: int, batch: int,
                 lr: float, n_test: int, gen: torch.Generator, d_model: int = 32, device: str = "cpu",
                 pe_table: torch.Tensor | None = None, tests: dict | None = None):
    """Train ``replicates`` x len(scales) encoders on ``task`` at length ``L`` and test them at every length.

    Each replicate is one :func:`train_encoders` call (fresh initial weights and batches from ``gen``, shared by the
    scales within it); the test sets (``n_test`` sequences per length) are drawn once from ``gen`` and shared by
    all models. Returns (acc, models, tests): acc of shape (replicates, len(scales), len(test_lens)), the list of
    model lists per replicate, and the dict length -> (x, y). ``pe_table`` (max_len, d) replaces the sinusoidal
    encoding (scaled by each s as before); ``tests`` reuses test sets from an earlier sweep.
    """
    if replicates < 1 or n_test < 1:
        raise ValueError(f"replicates and n_test must be >= 1, got {replicates}, {n_test}")
    max_len = max(max(test_lens), L)
    models = [train_encoders(task, scales, L=L, vocab=vocab, steps=steps, batch=batch, lr=lr, gen=gen,
                             d_model=d_model, max_len=max_len, device=device, pe_table=pe_table)
              for _ in range(replicates)]
    if tests is None:
        tests = {T: task_batch(task, n_test, T, vocab, gen) for T in test_lens}
    acc = np.array([[[accuracy(m, *tests[T]) for T in test_lens] for m in rep] for rep in models])
    return acc, models, tests


def gap_vs_spread(model: MeanPoolEncoder, x: torch.Tensor, y: torch.Tensor, eps, n_dirs: int,
                  gen: torch.Generator):
    """Order-breaking gaps along ``n_dirs`` random directions, each at every size in ``eps``.

    Direction k is G_k (L, d), standard normal from ``gen``; the encoding is E = eps_j G_k. Holding the direction
    fixed while the size shrinks separates the trend (gap / spread against spread) from the spread-free variation
    of the quadratic form between directions. Returns arrays of shape (n_dirs, len(eps)): spread, abs(gap)
    symmetrised, abs(gap) on the raw sample. Computed in float64 on a copy of ``model`` (gaps down to ~1e-12 resolve).
    """
    if n_dirs < 1:
        raise ValueError(f"n_dirs must be >= 1, got {n_dirs}")
    m = copy.deepcopy(model).double()
    L, d = x.shape[1], model.cfg.d_model
    out = np.zeros((3, n_dirs, len(eps)))
    for k in range(n_dirs):
        G = torch.randn(L, d, generator=gen, dtype=torch.float64)
        for j, e in enumerate(eps):
            E = float(e) * G
            out[:, k, j] = (positional_spread(E.numpy()), abs(order_breaking_gap(m, x, y, E)),
                            abs(order_breaking_gap(m, x, y, E, symmetrise=False)))
    return out[0], out[1], out[2]


def within_slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of log y on log x pooled within rows (one intercept per row); x, y (rows, points) > 0.

    For gap / spread against spread along fixed directions: about 0 when the gap is O(spread), -1/2 when a
    first-order term ~ spread^(1/2) dominates, +1/2 when the quadratic form vanishes and the cubic term leads.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 2 or x.shape[1] < 2:
        raise ValueError(f"x and y must share a (rows, points >= 2) shape, got {x.shape} and {y.shape}")
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("x and y must be positive (log-log slope)")
    lx, ly = np.log(x), np.log(y)
    lx, ly = lx - lx.mean(1, keepdims=True), ly - ly.mean(1, keepdims=True)
    return float(np.sum(lx * ly) / np.sum(lx * lx))


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    def inputs(rng, size):
        return {"E": rng.normal(size=(size, 3))}

    c = Contract(args=(Arg("E", ndim=2),), empty="error", shapes="E: (L, d), L, d >= 1")
    return [Kernel("positional_spread.positional_spread", positional_spread, positional_spread_ref, inputs, c,
                   tol={"float64": (1e-10, 1e-12)}, oracle="sum of squared pairwise distances / L"),
            Kernel("positional_spread.min_separation", min_separation, min_separation_ref, inputs, c,
                   tol={"float64": (1e-12, 1e-12)}, benchmark="positional_spread.min_separation",
                   oracle="scipy.spatial.distance.pdist")]


KERNELS = _registry()


class FirstTokenEncoder(MeanPoolEncoder):
    """Control for the upper bound: a :class:`MeanPoolEncoder` read out from position 0 instead of the mean.

    Smooth like the original but not permutation invariant at zero spread (position 0 is singled out), so the
    theorem's premise (mean pooling) fails. Built from a trained encoder by :meth:`from_encoder`, same weights.
    """

    @classmethod
    def from_encoder(cls, model: MeanPoolEncoder) -> "FirstTokenEncoder":
        m = copy.deepcopy(model)
        m.__class__ = cls
        return m

    def forward(self, tokens: torch.Tensor, pe: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (batch, n_out) = head(LN(h_0)), h = Block(embed(tokens) + E)."""
        L = tokens.shape[1]
        E = self.encoding(L) if pe is None else pe
        if E.shape != (L, self.cfg.d_model):
            raise ValueError(f"pe must have shape ({L}, {self.cfg.d_model}), got {tuple(E.shape)}")
        h, _ = self.block(self.embed(tokens) + E)
        return self.head(self.ln_f(h[:, 0]))


def matched_random_pe(max_len: int, d: int, L: int, gen: torch.Generator) -> torch.Tensor:
    """A fixed Gaussian encoding table (max_len, d), rescaled so that its first L rows have exactly the spread of
    the sinusoidal rows PE[:L]: at every scale s the two families then have the same spread at the training length."""
    if not 1 <= L <= max_len:
        raise ValueError(f"L must lie in [1, max_len], got L={L}, max_len={max_len}")
    R = torch.randn(max_len, d, generator=gen)
    target = positional_spread(sinusoidal_pe(L, d).double().numpy())
    return R * math.sqrt(target / positional_spread(R[:L].double().numpy()))

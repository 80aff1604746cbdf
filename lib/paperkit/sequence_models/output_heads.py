"""Probability-space versus logit-space output heads on one transformer body, trained on a sharp task.

A probabilistic circuit used as an autoregressive model predicts the next token as a convex mixture of K component
distributions: P(v | ctx) = sum_k pi_k(ctx) phi_k(v) (``space="prob"``). The logit-space alternative mixes K logit
vectors and applies one softmax: P(v | ctx) = softmax(sum_k pi_k(ctx) l_k)_v (``space="logit"``). Both heads have the
same parameters: a (d, K) gate giving pi(ctx) on the simplex from the body's hidden state h (d,) and a (K, V) table.

The task (``offset_copy_batch``): tokens x_1..x_L uniform on V symbols; at every position t > offset the target is
x_{t-offset}. Each context has one correct token and the targets are uniform, so for ANY probability-space head
with K components (any encoder, any training) the mean target probability is at most K/V and the mean negative
log-likelihood at least log(V/K) (``prob_head_floor``): grouping contexts by target v,
mean_c P[c, y_c] <= (1/V) sum_v max_k phi_k(v) <= K/V, and by Jensen mean NLL >= -(1/V) sum_v log m_v with
sum_v m_v <= K, minimised at m_v = K/V. A logit-space head has no such floor.

Shapes: tokens (batch, L) int64; hidden states (batch, L, d); log-probabilities (batch, L, V).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from paperkit.nn.tiny_transformer import TinyConfig, TinyTransformer

SPACES = ("prob", "logit", "linear")


def prob_head_floor(vocab: int, K: int) -> float:
    """log(V/K): the smallest mean NLL any K-component probability-space head can reach on a task whose contexts
    each have one correct token and whose targets are uniform over the V tokens (module docstring)."""
    if K < 1 or vocab < 1:
        raise ValueError(f"vocab and K must be >= 1, got vocab={vocab}, K={K}")
    return math.log(vocab / K) if K < vocab else 0.0


class MixtureHead(nn.Module):
    """K-component output head on hidden states h (..., d) -> log-probabilities (..., V).

    ``space="prob"``: log P = logsumexp_k(log pi_k + log phi_k), phi_k = softmax of row k of the table.
    ``space="logit"``: log P = log_softmax(pi @ table). pi = softmax(h @ gate) in both.
    """

    def __init__(self, d: int, K: int, vocab: int, space: str, gen: torch.Generator):
        super().__init__()
        if space not in ("prob", "logit"):
            raise ValueError(f"space must be 'prob' or 'logit', got {space!r}")
        if min(d, K, vocab) < 1:
            raise ValueError(f"d, K and vocab must be >= 1, got {d}, {K}, {vocab}")
        self.space = space
        self.gate = nn.Parameter(torch.randn(d, K, generator=gen) / math.sqrt(d))
        self.table = nn.Parameter(torch.randn(K, vocab, generator=gen))
        # logit space only: a learned log-scale s, logits = e^s (pi @ table); a sharp convex mix needs large logits
        self.log_scale = nn.Parameter(torch.zeros(())) if space == "logit" else None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        log_pi = torch.log_softmax(h @ self.gate, dim=-1)
        if self.space == "prob":
            return torch.logsumexp(log_pi[..., :, None] + torch.log_softmax(self.table, dim=-1), dim=-2)
        return torch.log_softmax(self.log_scale.exp() * (log_pi.exp() @ self.table), dim=-1)


def offset_copy_batch(gen: torch.Generator, batch: int, length: int, vocab: int, offset: int):
    """Tokens (batch, length) uniform on ``vocab``; targets (batch, length - offset): target at position t (0-based,
    t >= offset) is the token at t - offset, predicted from the hidden state at position t."""
    if not 1 <= offset < length:
        raise ValueError(f"offset must be in [1, length), got offset={offset}, length={length}")
    if batch < 1 or vocab < 2:
        raise ValueError(f"batch must be >= 1 and vocab >= 2, got batch={batch}, vocab={vocab}")
    x = torch.randint(vocab, (batch, length), generator=gen)
    return x, x[:, :-offset]


@dataclass(frozen=True)
class HeadResult:
    """Held-out mean NLL (nats/token) and mean probability of the correct token, and the final training loss."""

    nll: float
    p_target: float
    train_loss: float


def train_head(space: str, *, vocab: int, K: int, gen: torch.Generator, steps: int = 300, batch: int = 64,
               length: int = 8, offset: int = 2, d_model: int = 32, lr: float = 3e-3,
               n_eval: int = 512) -> HeadResult:
    """Train a TinyTransformer body with one output head on ``offset_copy_batch`` (Adam, ``steps`` steps) and
    evaluate it on ``n_eval`` fresh sequences.

    ``space``: ``"prob"`` / ``"logit"`` (a K-component :class:`MixtureHead` on the body's final normalised state)
    or ``"linear"`` (the transformer's own linear softmax head; K unused).
    """
    if space not in SPACES:
        raise ValueError(f"space must be one of {SPACES}, got {space!r}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    body = TinyTransformer.seeded(TinyConfig(vocab=vocab, d_model=d_model, n_heads=2, n_layers=2, max_len=length),
                                  gen)
    head = None if space == "linear" else MixtureHead(d_model, K, vocab, space, gen)

    def log_probs(x):
        if head is None:
            return torch.log_softmax(body(x), dim=-1)
        _, states = body(x, return_states=True)
        return head(body.ln_f(states[-1]))

    params = list(body.parameters()) + ([] if head is None else list(head.parameters()))
    opt = torch.optim.Adam(params, lr=lr)
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        x, y = offset_copy_batch(gen, batch, length, vocab, offset)
        lp = log_probs(x)[:, offset:]
        loss = F.nll_loss(lp.reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        x, y = offset_copy_batch(gen, n_eval, length, vocab, offset)
        lp = log_probs(x)[:, offset:].gather(-1, y[..., None])[..., 0]
    return HeadResult(float(-lp.mean()), float(lp.exp().mean()), float(loss.detach()))

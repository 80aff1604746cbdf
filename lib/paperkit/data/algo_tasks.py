"""Algorithmic sequence tasks with exact answers (NumPy generators; randomness from the ``rng`` passed in).

Each returns ``tokens`` (n, L) int64, ``targets`` (n, L) int64 and ``mask`` (n, L) bool marking the positions
that are scored. Token ids are small integers; each task documents its vocabulary.
"""
from __future__ import annotations

import numpy as np


def _positive(**kw) -> None:
    for k, v in kw.items():
        if v < 1:
            raise ValueError(f"{k} must be >= 1, got {v}")


def copy_task(rng: np.random.Generator, n: int, length: int, n_symbols: int = 8):
    """``x_1..x_m SEP x_1..x_m``: after the separator the model must repeat the prefix.

    Vocabulary: symbols 0..n_symbols-1, SEP = n_symbols (vocab size n_symbols + 1). Sequence length 2m + 1; the
    target at position t is the token at t + 1 (next-token prediction), scored on the m copied tokens.
    """
    _positive(n=n, length=length, n_symbols=n_symbols)
    x = rng.integers(0, n_symbols, size=(n, length))
    tokens = np.concatenate([x, np.full((n, 1), n_symbols), x], axis=1)
    targets = np.zeros_like(tokens)
    targets[:, :-1] = tokens[:, 1:]
    mask = np.zeros(tokens.shape, dtype=bool)
    mask[:, length:2 * length] = True
    return tokens.astype(np.int64), targets.astype(np.int64), mask


def dyck1_labels(tokens: np.ndarray) -> np.ndarray:
    """Label per position: 1 if the prefix up to it is balanced (depth 0, never negative), else 0. '(' = 0, ')' = 1."""
    step = np.where(tokens == 0, 1, -1)
    depth = np.cumsum(step, axis=1)
    never_negative = np.minimum.accumulate(depth, axis=1) >= 0
    return ((depth == 0) & never_negative).astype(np.int64)


def dyck1_task(rng: np.random.Generator, n: int, length: int, p_open: float = 0.5):
    """Random strings over '(' (0) and ')' (1); every position is scored with :func:`dyck1_labels`.

    Strings are random walks that open with probability ``p_open``, except at depth 0 where a ')' (which makes
    every later prefix invalid) is drawn only with probability (1 - p_open) / 2, so that balanced and unbalanced
    prefixes both occur at every length.
    """
    _positive(n=n, length=length)
    tokens = np.empty((n, length), dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    for t in range(length):
        open_ = rng.random(n) < np.where(depth == 0, 0.5 + 0.5 * p_open, p_open)
        tokens[:, t] = np.where(open_, 0, 1)
        depth += np.where(open_, 1, -1)
    return tokens, dyck1_labels(tokens), np.ones(tokens.shape, dtype=bool)


def binary_add_task(rng: np.random.Generator, n: int, n_bits: int):
    """``a + b = s`` in binary, least significant bit first: ``a_bits PLUS b_bits EQ s_bits``.

    Vocabulary: 0, 1, PLUS = 2, EQ = 3 (size 4). ``s`` has n_bits + 1 bits; next-token targets scored on them.
    """
    _positive(n=n, n_bits=n_bits)
    a = rng.integers(0, 2, size=(n, n_bits))
    b = rng.integers(0, 2, size=(n, n_bits))
    weights = 2 ** np.arange(n_bits + 1)
    s_val = (a * weights[:n_bits]).sum(1) + (b * weights[:n_bits]).sum(1)
    s = (s_val[:, None] // weights) % 2
    tokens = np.concatenate([a, np.full((n, 1), 2), b, np.full((n, 1), 3), s], axis=1)
    targets = np.zeros_like(tokens)
    targets[:, :-1] = tokens[:, 1:]
    mask = np.zeros(tokens.shape, dtype=bool)
    start = 2 * n_bits + 1  # position of EQ: it predicts the first sum bit
    mask[:, start:start + n_bits + 1] = True
    return tokens.astype(np.int64), targets.astype(np.int64), mask

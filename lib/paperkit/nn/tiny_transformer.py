"""One tiny pre-LN transformer, shared by the sequence-model chapters (do not write another).

Options the chapters need: causal or bidirectional attention; positional encodings ``learned``, ``sinusoidal``,
``rope`` or ``none`` (additive ones scaled by ``pe_scale``); looping the whole block stack ``n_loops`` times, with a
per-sample loop count for halting experiments and optional re-injection of the input embedding at every loop;
the hidden state after every loop (for readouts or halting heads at each depth); and every layer's attention
probabilities returned on request.

Shapes: tokens (batch, L) int64 -> logits (batch, L, vocab); attention probabilities (batch, heads, L, L).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

POS_KINDS = ("learned", "sinusoidal", "rope", "none")


@dataclass(frozen=True)
class TinyConfig:
    """Hyper-parameters of :class:`TinyTransformer`; every field is validated on construction."""

    vocab: int
    d_model: int = 32
    n_heads: int = 2
    n_layers: int = 2
    max_len: int = 128
    pos: str = "learned"
    pe_scale: float = 1.0
    causal: bool = True
    n_loops: int = 1
    reinject: bool = False

    def __post_init__(self):
        for name in ("vocab", "d_model", "n_heads", "n_layers", "max_len", "n_loops"):
            if getattr(self, name) < 1:
                raise ValueError(f"TinyConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"TinyConfig.d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if not (isinstance(self.pe_scale, (int, float)) and math.isfinite(self.pe_scale)):
            raise ValueError(f"TinyConfig.pe_scale must be a finite number, got {self.pe_scale!r}")
        if self.pos not in POS_KINDS:
            raise ValueError(f"TinyConfig.pos must be one of {POS_KINDS}, got {self.pos!r}")
        if self.pos == "rope" and (self.d_model // self.n_heads) % 2:
            raise ValueError("TinyConfig: rope needs an even head dimension")


def sinusoidal_pe(max_len: int, d: int) -> torch.Tensor:
    """PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d)); shape (max_len, d)."""
    p = torch.arange(max_len, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, d, 2, dtype=torch.float32) / d)
    pe = torch.zeros(max_len, d)
    pe[:, 0::2] = torch.sin(p * freq)
    pe[:, 1::2] = torch.cos(p * freq[: d // 2])
    return pe


def rope(x: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of (batch, heads, L, dh): pairs (x_2i, x_2i+1) rotated by angle p * 10000^(-2i/dh)."""
    L, dh = x.shape[-2], x.shape[-1]
    theta = torch.exp(-math.log(10000.0) * torch.arange(0, dh, 2, dtype=x.dtype, device=x.device) / dh)
    ang = torch.arange(L, dtype=x.dtype, device=x.device)[:, None] * theta  # (L, dh/2)
    cos, sin = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


def attention_probs(q: torch.Tensor, k: torch.Tensor, causal: bool,
                    allowed: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(dh)) with an optional mask; (batch, heads, Lq, Lk).

    ``allowed`` (Lq, Lk) bool, True where a query may attend, replaces the causal mask when given (every row must
    allow at least one key; a row allowing none is refused, as softmax over no key is NaN); otherwise ``causal``
    masks the future. The causal mask is bottom-right aligned: query i (of Lq) sees keys j <= i + (Lk - Lq), i.e. the
    queries are the LAST Lq positions of the keys (a KV cache). ``F.scaled_dot_product_attention(is_causal=True)``
    is top-left aligned (j <= i); the two agree only when Lq == Lk.
    """
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    Lq, Lk = scores.shape[-2:]
    if allowed is not None:
        if allowed.shape != (Lq, Lk) or allowed.dtype != torch.bool:
            raise ValueError(f"allowed must be a ({Lq}, {Lk}) bool mask, got {allowed.dtype} {tuple(allowed.shape)}")
        if not bool(allowed.any(dim=-1).all()):
            raise ValueError("allowed: every query row must allow at least one key (an all-False row gives NaN)")
        mask = allowed
    elif causal:
        mask = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device).tril(Lk - Lq)
    else:
        return scores.softmax(dim=-1)
    return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        b, L, d = x.shape
        h = self.cfg.n_heads
        q, k, v = (t.view(b, L, h, d // h).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        if self.cfg.pos == "rope":
            q, k = rope(q), rope(k)
        p = attention_probs(q, k, self.cfg.causal, allowed)
        return self.out((p @ v).transpose(1, 2).reshape(b, L, d)), p


class Block(nn.Module):
    """Pre-LN block: x + Attn(LN(x)), then x + MLP(LN(x)) with a 4x GELU MLP.

    ``forward(x, allowed=None)``: ``allowed`` (L, L) bool replaces the causal mask (see :func:`attention_probs`).
    """

    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x: torch.Tensor, allowed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        a, p = self.attn(self.ln1(x), allowed)
        x = x + a
        return x + self.mlp(self.ln2(x)), p


class TinyTransformer(nn.Module):
    """Embedding, positional encoding, ``n_layers`` blocks (looped ``n_loops`` times), final LN and a linear head.

    With ``reinject`` the embedded input e is added back before every loop after the first (looped transformers
    with input injection): h_0 = e, h_{i+1} = blocks(h_i + e) for i >= 1, h_1 = blocks(e).
    """

    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        if cfg.pos == "learned":
            self.pe = nn.Parameter(0.02 * torch.randn(cfg.max_len, cfg.d_model))
        elif cfg.pos == "sinusoidal":
            self.register_buffer("pe", sinusoidal_pe(cfg.max_len, cfg.d_model), persistent=False)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab)

    @classmethod
    def seeded(cls, cfg: TinyConfig, gen: torch.Generator) -> "TinyTransformer":
        """A model with PyTorch's default initialisation, drawn from a seed taken from ``gen``.

        The global generator's state is left as it was, so building a model never shifts another's randomness.
        """
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(2**62, (1,), generator=gen)))
            return cls(cfg)

    def readout(self, h: torch.Tensor) -> torch.Tensor:
        """Logits from a hidden state: head(LN(h)); (batch, L, d) -> (batch, L, vocab)."""
        return self.head(self.ln_f(h))

    def forward(self, tokens: torch.Tensor, n_loops: int | torch.Tensor | None = None, return_attn: bool = False,
                return_states: bool = False):
        """Logits (batch, L, vocab), followed by what was asked for, in this order.

        ``n_loops`` overrides the config: an int, or a (batch,) tensor of per-sample loop counts (a sample whose
        count is reached keeps its hidden state while the others go on looping).
        ``return_attn``: also the list of every applied layer's attention probabilities.
        ``return_states``: also the list of hidden states after each loop, (batch, L, d) each, one per loop
        (``readout`` turns one into logits: the model stopped after that many loops).
        """
        b, L = tokens.shape
        if L > self.cfg.max_len:
            raise ValueError(f"sequence length {L} exceeds max_len {self.cfg.max_len}")
        e = self.embed(tokens)
        if self.cfg.pos in ("learned", "sinusoidal"):
            e = e + self.cfg.pe_scale * self.pe[:L]
        loops = self.cfg.n_loops if n_loops is None else n_loops
        per_sample = torch.is_tensor(loops)
        if per_sample and (loops.shape != (b,) or int(loops.min()) < 0):
            raise ValueError(f"per-sample n_loops must be a ({b},) tensor of counts >= 0")
        if not per_sample and (isinstance(loops, bool) or not isinstance(loops, int) or loops < 0):
            raise ValueError(f"n_loops must be an int >= 0 or a per-sample tensor, got {loops!r}")
        x, attn, states = e, [], []
        for i in range(int(loops.max()) if per_sample else loops):
            x_new = x + e if (self.cfg.reinject and i > 0) else x
            for blk in self.blocks:
                x_new, p = blk(x_new)
                attn.append(p)
            x = torch.where((i < loops)[:, None, None], x_new, x) if per_sample else x_new
            states.append(x)
        out = (self.readout(x),) + ((attn,) if return_attn else ()) + ((states,) if return_states else ())
        return out if len(out) > 1 else out[0]

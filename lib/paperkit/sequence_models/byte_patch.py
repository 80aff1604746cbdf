"""Byte-patch language models, patch lag, and entropy-triggered scratchpads (miniature of Scratchpad Patching).

A patch model reads a byte sequence x of length N in fixed patches of P bytes (K = N / P patches). Our reading of
the method, in the book's symbols:

* **local encoder** (:func:`patch_pool`): the summary of the first j + 1 bytes of patch k is
  ``s[k, j] = sum_{i <= j} E_i[x[kP + i]]`` with one embedding table ``E_i`` per offset i (the concatenation of
  the byte embeddings projected linearly, with unseen bytes set to zero);
* **global model**: causal transformer blocks over the patch tokens ``s[k, P-1] + pos[k] + len[P-1]``; its output
  g_k is the patch-level state after patch k (the only entries kept in the KV cache: N / P per layer);
* **local decoder**: one causal transformer block *inside* each patch; the byte at offset j of patch k sees the
  previous byte's embedding, its offset, and a context vector c[k, j]; without scratchpads c[k, j] = g_{k-1}
  (the stale state of the previous patch: *patch lag*);
* **scratchpad** after byte j of patch k: one transient global step on [patch tokens < k, partial token
  ``s[k, j] + pos[k] + len[j]``]; its output replaces the context for the offsets after j and is *not* appended to
  the KV cache;
* **entropy trigger** (:func:`entropy_trigger`): a scratchpad fires after byte j when the entropy (bits) of the
  stale-context prediction of byte j + 1 exceeds tau. Because that entropy does not depend on earlier firings, the
  set of fired scratchpads shrinks as tau grows (exactly).

Training with scratchpads is teacher-forced and batched: all K * (P - 1) scratchpad tokens go through the global
blocks in one pass with a block mask (:func:`scratch_mask`); the per-offset loop :func:`score_ref` is the plain
reference (it runs the shared :class:`~paperkit.nn.tiny_transformer.Block` causally, one query at a time) and counts
global steps, local steps and KV entries directly.

Shapes: bytes (batch, N) int64; logits (batch, N, 256); fired (batch, K, P - 1) bool.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from paperkit.nn.tiny_transformer import Block, TinyConfig, TinyTransformer

VOCAB = 256
BOS = 256  # the "previous byte" of the very first byte


@dataclass(frozen=True)
class PatchConfig:
    """Hyper-parameters of :class:`PatchLM`: patch size P, width, heads, global and local depth, bytes per window."""

    patch: int = 8
    d_model: int = 64
    n_heads: int = 2
    n_global: int = 2
    n_local: int = 1
    max_len: int = 256

    def __post_init__(self):
        for name in ("patch", "d_model", "n_heads", "n_global", "n_local", "max_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"PatchConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.patch < 2:
            raise ValueError(f"PatchConfig.patch must be >= 2, got {self.patch}")
        if self.max_len % self.patch:
            raise ValueError(f"PatchConfig.max_len ({self.max_len}) must be a multiple of patch ({self.patch})")
        if self.d_model % self.n_heads:
            raise ValueError(f"PatchConfig.d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")

    def block_config(self) -> TinyConfig:
        """The shared block's configuration (positions are added by the patch model, so ``pos='none'``)."""
        return TinyConfig(vocab=VOCAB, d_model=self.d_model, n_heads=self.n_heads, max_len=self.max_len, pos="none")


def _check_bytes(x: torch.Tensor, patch: int, name: str = "x") -> None:
    if x.dim() != 2 or x.dtype != torch.int64:
        raise ValueError(f"{name} must be a (batch, N) int64 tensor, got shape {tuple(x.shape)} and {x.dtype}")
    if x.shape[1] % patch:
        raise ValueError(f"{name}: length {x.shape[1]} must be a multiple of the patch size {patch}")
    if x.numel() and (int(x.min()) < 0 or int(x.max()) >= VOCAB):
        raise ValueError(f"{name} must hold byte values in [0, 255]")


def patch_pool(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Summaries of every prefix of every patch: ``s[b, k, j] = sum_{i <= j} table[i, x[b, kP + i]]``.

    ``x`` (batch, N) int64 bytes, ``table`` (P, 256, d) one embedding table per offset; returns (batch, K, P, d).
    ``s[:, :, P-1]`` is the full patch's token, ``s[:, :, j]`` the partial token a scratchpad after byte j uses.
    """
    if table.dim() != 3 or table.shape[1] != VOCAB:
        raise ValueError(f"table must have shape (P, 256, d), got {tuple(table.shape)}")
    P = table.shape[0]
    _check_bytes(x, P)
    b, n = x.shape
    xk = x.view(b, n // P, P)
    offs = torch.arange(P, device=x.device)
    # e[b, k, i] = E_i[x[kP + i]], then the running sum over offsets i <= j
    e = table[offs, xk]
    return e.cumsum(dim=2)


def patch_pool_ref(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Reference for :func:`patch_pool`: explicit loops over patches and offsets."""
    P = table.shape[0]
    _check_bytes(x, P)
    b, n = x.shape
    out = torch.zeros(b, n // P, P, table.shape[2], dtype=table.dtype, device=table.device)
    for k in range(n // P):
        acc = torch.zeros(b, table.shape[2], dtype=table.dtype, device=table.device)
        for j in range(P):
            acc = acc + table[j, x[:, k * P + j]]
            out[:, k, j] = acc
    return out


def entropy_bits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy in bits of the categorical distribution softmax(logits) over the last axis: -sum p log2 p."""
    logp = logits.float().log_softmax(-1)
    # H = -sum_v p_v log p_v / ln 2; p log p = 0 where p underflows to 0
    return -(logp.exp() * logp).nan_to_num(0.0).sum(-1) / math.log(2)


def entropy_trigger(h_stale: torch.Tensor, tau: float) -> torch.Tensor:
    """Which scratchpads fire: ``fired[b, k, j] = H[b, k, j + 1] > tau`` for j = 0 .. P-2.

    ``h_stale`` (batch, K, P): entropy (bits) of each byte's prediction under the stale context. A scratchpad
    after byte j refreshes the context before byte j + 1 is predicted, so it is decided by byte j + 1's entropy.
    ``tau = inf`` fires none, ``tau < 0`` fires all.
    """
    if h_stale.dim() != 3 or h_stale.shape[-1] < 2:
        raise ValueError(f"h_stale must have shape (batch, K, P) with P >= 2, got {tuple(h_stale.shape)}")
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or math.isnan(tau):
        raise ValueError(f"tau must be a number (bits), got {tau!r}")
    return h_stale[..., 1:] > tau


def context_source(fired: torch.Tensor) -> torch.Tensor:
    """For each offset j of each patch, the scratchpad whose output it reads: max{j' < j : fired[j']}, else -1.

    ``fired`` (batch, K, P-1) bool -> (batch, K, P) int64; -1 means the stale state of the previous patch.
    """
    b, K, pm1 = fired.shape
    idx = torch.arange(pm1, device=fired.device).expand(b, K, pm1)
    # src[j + 1] = max_{j' <= j, fired} j' (running maximum), src[0] = -1
    last = torch.where(fired, idx, torch.full_like(idx, -1)).cummax(dim=-1).values
    return torch.cat([torch.full((b, K, 1), -1, dtype=torch.int64, device=fired.device), last], dim=-1)


def scratch_mask(K: int, P: int, device=None) -> torch.Tensor:
    """Attention mask (True = may attend) for K patch tokens followed by K * (P-1) scratchpad tokens.

    Patch token k sees patch tokens <= k; scratchpad (k, j) (row K + k(P-1) + j) sees patch tokens < k and itself,
    never another scratchpad (they are transient: not in the KV cache).
    """
    S = K * (P - 1)
    m = torch.zeros(K + S, K + S, dtype=torch.bool, device=device)
    m[:K, :K] = torch.ones(K, K, dtype=torch.bool, device=device).tril()
    k_of = torch.arange(K, device=device).repeat_interleave(P - 1)
    m[K:, :K] = torch.arange(K, device=device)[None, :] < k_of[:, None]
    m[K:, K:] = torch.eye(S, dtype=torch.bool, device=device)
    return m


class PatchLM(nn.Module):
    """Fixed-size patch byte LM with a global model over patches, a local decoder and optional scratchpads.

    ``forward(x, fired=None)``: logits (batch, N, 256) for every byte of x; ``fired=None`` is the plain patch model
    (every byte reads the previous patch's state), a (batch, K, P-1) bool tensor fires those scratchpads.
    """

    def __init__(self, cfg: PatchConfig, generator: torch.Generator):
        super().__init__()
        self.cfg = cfg
        P, d, K = cfg.patch, cfg.d_model, cfg.max_len // cfg.patch
        bc = cfg.block_config()
        self.enc = nn.Parameter(0.02 * torch.randn(P, VOCAB, d, generator=generator))
        self.len_emb = nn.Parameter(0.02 * torch.randn(P, d, generator=generator))
        self.gpos = nn.Parameter(0.02 * torch.randn(K, d, generator=generator))
        self.gblocks = nn.ModuleList(Block(bc) for _ in range(cfg.n_global))
        self.g_ln = nn.LayerNorm(d)
        self.start = nn.Parameter(0.02 * torch.randn(d, generator=generator))
        self.to_ctx = nn.Linear(d, d)
        self.byte_emb = nn.Embedding(VOCAB + 1, d)
        self.lpos = nn.Parameter(0.02 * torch.randn(P, d, generator=generator))
        self.lblocks = nn.ModuleList(Block(bc) for _ in range(cfg.n_local))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB)
        _init_from(self, generator)

    # --- global side -------------------------------------------------------------------------------------------
    def tokens(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Global input tokens: full patches (batch, K, d) and partial ones (batch, K, P-1, d)."""
        P = self.cfg.patch
        s = patch_pool(x, self.enc)
        K = s.shape[1]
        full = s[:, :, P - 1] + self.len_emb[P - 1] + self.gpos[:K]
        part = s[:, :, : P - 1] + self.len_emb[: P - 1] + self.gpos[:K, None]
        return full, part

    def global_states(self, x: torch.Tensor, scratch: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Context vectors after every patch, g (batch, K, d), and after every scratchpad (batch, K, P-1, d)."""
        full, part = self.tokens(x)
        b, K, d = full.shape
        if not scratch:
            h = full
            for blk in self.gblocks:
                h = blk(h)[0]
            return self.to_ctx(self.g_ln(h)), None
        P = self.cfg.patch
        h = torch.cat([full, part.reshape(b, K * (P - 1), d)], dim=1)
        allowed = scratch_mask(K, P, device=x.device)
        for blk in self.gblocks:
            h = blk(h, allowed)[0]
        c = self.to_ctx(self.g_ln(h))
        return c[:, :K], c[:, K:].reshape(b, K, P - 1, d)

    # --- local side --------------------------------------------------------------------------------------------
    def contexts(self, g: torch.Tensor, sp: torch.Tensor | None, fired: torch.Tensor | None) -> torch.Tensor:
        """Context c[k, j] for every byte (batch, K, P, d): stale g_{k-1} (``start`` for k = 0) or a scratchpad."""
        b, K, d = g.shape
        P = self.cfg.patch
        prev = torch.cat([self.start.expand(b, 1, d), g[:, :-1]], dim=1)
        if fired is None:
            return prev[:, :, None].expand(b, K, P, d)
        if sp is None or fired.shape != (b, K, P - 1) or fired.dtype != torch.bool:
            raise ValueError(f"fired must be a ({b}, {K}, {P - 1}) bool tensor with scratchpad states computed")
        table = torch.cat([prev[:, :, None], sp], dim=2)  # index 0: stale, 1 + j: scratchpad after byte j
        src = context_source(fired) + 1
        return table.gather(2, src[..., None].expand(b, K, P, d))

    def decode(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        """Local decoder: logits (batch, N, 256) from the previous bytes and the contexts (batch, K, P, d)."""
        b, n = x.shape
        P, d = self.cfg.patch, self.cfg.d_model
        prev = torch.cat([torch.full((b, 1), BOS, dtype=x.dtype, device=x.device), x[:, :-1]], dim=1)
        h = (self.byte_emb(prev).view(b, n // P, P, d) + self.lpos + ctx).reshape(b * (n // P), P, d)
        for blk in self.lblocks:
            h = blk(h)[0]
        return self.head(self.ln_f(h)).view(b, n, VOCAB)

    def forward(self, x: torch.Tensor, fired: torch.Tensor | None = None) -> torch.Tensor:
        _check_bytes(x, self.cfg.patch)
        if x.shape[1] > self.cfg.max_len:
            raise ValueError(f"sequence length {x.shape[1]} exceeds max_len {self.cfg.max_len}")
        g, sp = self.global_states(x, scratch=fired is not None)
        return self.decode(x, self.contexts(g, sp, fired))


def _init_from(model: nn.Module, generator: torch.Generator) -> None:
    """Re-draw every Linear / Embedding weight from ``generator`` (N(0, 0.02), zero biases): seeded init."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            with torch.no_grad():
                m.weight.copy_(0.02 * torch.randn(m.weight.shape, generator=generator))
                if getattr(m, "bias", None) is not None:
                    m.bias.zero_()


class ByteLM(nn.Module):
    """The byte-level baseline: the shared causal :class:`~paperkit.nn.tiny_transformer.TinyTransformer` on bytes.

    Position n reads the bytes before it (the input is shifted right by one, with a BOS token in front), so its
    logits (batch, N, 256) predict x[n] exactly as :class:`PatchLM`'s do. Every byte is one global step and one
    KV-cache entry per layer.
    """

    def __init__(self, d_model: int, n_heads: int, n_layers: int, max_len: int, generator: torch.Generator):
        super().__init__()
        self.net = TinyTransformer(TinyConfig(vocab=VOCAB + 1, d_model=d_model, n_heads=n_heads, n_layers=n_layers,
                                              max_len=max_len, pos="learned"))
        _init_from(self, generator)
        with torch.no_grad():
            self.net.pe.copy_(0.02 * torch.randn(self.net.pe.shape, generator=generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_bytes(x, 1)
        prev = torch.cat([torch.full((x.shape[0], 1), BOS, dtype=x.dtype, device=x.device), x[:, :-1]], dim=1)
        return self.net(prev)[..., :VOCAB]


# --- inference with the entropy trigger --------------------------------------------------------------------------
@torch.no_grad()
def prepare(model: PatchLM, x: torch.Tensor) -> dict:
    """What every threshold shares: the patch states g, all scratchpad states, the stale logits and their entropies.

    Returns ``g`` (batch, K, d), ``sp`` (batch, K, P-1, d), ``stale`` (batch, N, 256), ``h_stale`` (batch, K, P).
    """
    _check_bytes(x, model.cfg.patch)
    b, n = x.shape
    g, sp = model.global_states(x, scratch=True)
    stale = model.decode(x, model.contexts(g, None, None))
    return {"g": g, "sp": sp, "stale": stale, "h_stale": entropy_bits(stale).view(b, n // model.cfg.patch, -1)}


@torch.no_grad()
def score(model: PatchLM, x: torch.Tensor, tau: float, prep: dict | None = None,
          fired: torch.Tensor | None = None) -> dict:
    """Teacher-forced scoring with entropy-triggered scratchpads, batched (the counts are exact).

    Returns ``logits`` (batch, N, 256), ``fired`` (batch, K, P-1), ``h_stale`` (batch, K, P) and the counts of
    :func:`counts`: ``global_steps`` (patch steps N/P per sequence plus fired scratchpads), ``local_steps`` (one
    stale-context local step per byte plus a refreshed one for every byte after the patch's first scratchpad) and
    ``kv_global`` (entries kept per global layer, summed over the batch: N/P per sequence). ``prep`` (from
    :func:`prepare` on the same x) saves the shared work across thresholds; ``fired`` overrides the trigger (for
    controls), in which case ``tau`` is ignored.
    """
    b, n = x.shape
    P = model.cfg.patch
    prep = prepare(model, x) if prep is None else prep
    fired = entropy_trigger(prep["h_stale"], tau) if fired is None else fired
    if bool(fired.any()):
        logits = model.decode(x, model.contexts(prep["g"], prep["sp"], fired))
    else:
        logits = prep["stale"]
    return {"logits": logits, "fired": fired, "h_stale": prep["h_stale"], **counts(fired, P, b * n)}


def counts(fired: torch.Tensor, P: int, n_bytes: int) -> dict:
    """Exact inference counts from the fired scratchpads (batch, K, P-1) for ``n_bytes`` bytes in patches of P.

    ``global_steps = n_bytes / P + #fired``; ``local_steps = n_bytes + #(bytes at or after a patch's first
    refreshed offset)``; ``kv_global = n_bytes / P`` entries per global layer; ``kv_bytelevel = n_bytes``.
    """
    if n_bytes % P:
        raise ValueError(f"n_bytes ({n_bytes}) must be a multiple of P ({P})")
    refreshed = int((context_source(fired) >= 0).sum())
    return {"global_steps": n_bytes // P + int(fired.sum()), "local_steps": n_bytes + refreshed,
            "kv_global": n_bytes // P, "kv_bytelevel": n_bytes}


@torch.no_grad()
def score_ref(model: PatchLM, x: torch.Tensor, tau: float | None = None,
              fired: torch.Tensor | None = None) -> dict:
    """Reference for :func:`score` and for ``model(x, fired)``: one sequence, one byte at a time.

    The global side runs the shared causal blocks on [cached patch tokens, one new token] and takes the last
    output, so nothing is masked; patch tokens are appended to a cache (counted), scratchpad tokens never are.
    The local decoder re-runs its causal block on the current patch's prefix. Give ``tau`` (entropy trigger) or a
    fixed ``fired`` (batch, K, P-1) mask; the counts are taken by incrementing counters, not from formulas.
    """
    if (tau is None) == (fired is None):
        raise ValueError("give exactly one of tau and fired")
    b, n = x.shape
    P, d = model.cfg.patch, model.cfg.d_model
    K = n // P
    full, part = model.tokens(x)

    def global_step(seq: list[torch.Tensor]) -> torch.Tensor:
        h = torch.stack(seq, dim=0)[None]
        for blk in model.gblocks:
            h = blk(h)[0]
        return model.to_ctx(model.g_ln(h))[0, -1]

    def local_logits(bi: int, k: int, ctxs: list[torch.Tensor]) -> torch.Tensor:
        j = len(ctxs) - 1
        pos = torch.arange(k * P, k * P + j + 1)
        prev = torch.where(pos > 0, x[bi, (pos - 1).clamp(min=0)], torch.full_like(pos, BOS))
        h = (model.byte_emb(prev) + model.lpos[: j + 1] + torch.stack(ctxs))[None]
        for blk in model.lblocks:
            h = blk(h)[0]
        return model.head(model.ln_f(h))[0, -1]

    logits = torch.zeros(b, n, VOCAB, dtype=full.dtype)
    fired_out = torch.zeros(b, K, P - 1, dtype=torch.bool)
    steps = {"global_steps": 0, "local_steps": 0, "kv_global": 0, "kv_bytelevel": 0}
    for bi in range(b):
        cache: list[torch.Tensor] = []
        ctx_patch = model.start
        for k in range(K):
            stale_ctxs, ctxs, refreshed = [], [], False
            ctx = ctx_patch
            for j in range(P):
                stale_ctxs.append(ctx_patch)
                ctxs.append(ctx)
                stale = local_logits(bi, k, stale_ctxs)
                steps["local_steps"] += 1
                if refreshed:
                    logits[bi, k * P + j] = local_logits(bi, k, ctxs)
                    steps["local_steps"] += 1
                else:
                    logits[bi, k * P + j] = stale
                steps["kv_bytelevel"] += 1
                if j == P - 1:
                    break
                # after byte j is seen: fire a scratchpad if the next byte's stale prediction is uncertain
                if tau is not None:
                    nxt = local_logits(bi, k, stale_ctxs + [ctx_patch])  # look-ahead: reused as the next stale step
                    fire = bool(entropy_bits(nxt) > tau)
                else:
                    fire = bool(fired[bi, k, j])
                if fire:
                    ctx = global_step(cache + [part[bi, k, j]])  # transient: not appended to the cache
                    steps["global_steps"] += 1
                    fired_out[bi, k, j] = True
                    refreshed = True
            cache.append(full[bi, k])
            steps["kv_global"] += 1
            ctx_patch = global_step(cache)
            steps["global_steps"] += 1
    return {"logits": logits, "fired": fired_out, **steps}


# --- training and evaluation ------------------------------------------------------------------------------------
def batches(data: np.ndarray, n_steps: int, batch: int, length: int, rng: np.random.Generator):
    """``n_steps`` random windows of ``length`` bytes each, ``batch`` per step, as (batch, length) int64 tensors."""
    if len(data) <= length:
        raise ValueError(f"data ({len(data)} bytes) must be longer than length ({length})")
    for _ in range(n_steps):
        starts = rng.integers(0, len(data) - length, size=batch)
        yield torch.from_numpy(np.stack([data[s:s + length] for s in starts]).astype(np.int64))


def train(model: nn.Module, data: np.ndarray, steps: int, batch: int, length: int, lr: float,
          rng: np.random.Generator, p_fire: float | str | None = None, device="cpu") -> list[float]:
    """Adam with linear warm-up (10% of steps) and cosine decay; returns the training loss (bits/byte) per step.

    ``p_fire``: for a :class:`PatchLM`, train with scratchpads fired at random (teacher-forced, batched), each
    independently with this probability, or with ``"uniform"`` a probability drawn from U(0, 1) per patch, so that
    the decoder sees every pattern an entropy trigger can produce, from none (tau = inf, 1/P of the patches) to
    all (tau < 0). ``None`` trains the plain model (patch model or byte model).
    """
    if p_fire is not None and p_fire != "uniform" and (isinstance(p_fire, str) or not 0 <= p_fire <= 1):
        raise ValueError(f"p_fire must be None, 'uniform' or in [0, 1], got {p_fire!r}")
    # foreach: one multi-tensor update per step instead of a loop over parameters; the same arithmetic, faster
    opt = torch.optim.Adam(model.parameters(), lr=lr, foreach=True)
    warm = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: min(1.0, (t + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, t / steps))))
    gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
    curve = []
    model.train()
    for xb in batches(data, steps, batch, length, rng):
        xb = xb.to(device)
        if p_fire is None:
            logits = model(xb)
        else:
            P = model.cfg.patch
            shape = (xb.shape[0], xb.shape[1] // P, 1)
            p = torch.rand(shape, generator=gen) if p_fire == "uniform" else torch.full(shape, float(p_fire))
            fired = torch.rand(xb.shape[0], xb.shape[1] // P, P - 1, generator=gen) < p
            logits = model(xb, fired.to(device))
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), xb.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        curve.append(loss.item() / math.log(2))
    model.eval()
    return curve


def eval_windows(data: np.ndarray, length: int, n_windows: int) -> torch.Tensor:
    """``n_windows`` consecutive non-overlapping windows of held-out bytes, (n_windows, length) int64."""
    need = length * n_windows
    if len(data) < need:
        raise ValueError(f"held-out data has {len(data)} bytes, {need} needed for {n_windows} windows")
    return torch.from_numpy(data[:need].astype(np.int64).reshape(n_windows, length))


def bits_per_byte(logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Per-byte loss in bits, -log2 p(x_n | context), shape of x."""
    # -log2 p = cross-entropy in nats / ln 2
    nats = F.cross_entropy(logits.reshape(-1, VOCAB).float(), x.reshape(-1), reduction="none")
    return nats.view(x.shape) / math.log(2)


def linear_flops(d: int, n_layers: int, vocab: int = VOCAB) -> int:
    """Matmul FLOPs of one token through ``n_layers`` shared blocks of width d plus a read-out head (excluding
    attention over the context): 2 * (3d^2 + d^2 + 8d^2) per block and 2 * d * vocab for the head (0 if vocab=0)."""
    return n_layers * 24 * d * d + 2 * d * vocab


def block_flops(d: int, L: int) -> int:
    """FLOPs of the shared :class:`~paperkit.nn.tiny_transformer.Block` on L tokens (dense attention, as computed):
    ``L * 24 d^2`` for the linear maps plus ``4 L^2 d`` for q k^T and p v."""
    return L * 24 * d * d + 4 * L * L * d


def patch_flops_per_byte(cfg: PatchConfig, global_steps: int, local_steps: int, n_bytes: int) -> dict:
    """Matmul FLOPs per byte of :class:`PatchLM` inference from the exact step counts (attention over the context
    excluded): ``global`` = global_steps * (n_global * 24 d^2 + 2 d^2) / N (blocks and the context projection),
    ``local`` = local_steps * (n_local * 24 d^2 + 2 * 256 d) / N (blocks and the byte head)."""
    d = cfg.d_model
    g = global_steps * (linear_flops(d, cfg.n_global, 0) + 2 * d * d) / n_bytes
    loc = local_steps * linear_flops(d, cfg.n_local) / n_bytes
    return {"global": g, "local": loc, "total": g + loc}


def tau_for_budget(h_stale: torch.Tensor, steps_per_byte: float) -> float:
    """The trigger threshold that spends at most ``steps_per_byte`` global steps per byte on ``h_stale``.

    ``h_stale`` (batch, K, P) calibration entropies. A budget s allows m = floor((s - 1/P) * N) scratchpads; tau is
    the (m+1)-th largest candidate entropy, so that at most m entropies lie strictly above it.
    """
    b, K, P = h_stale.shape
    if not 1.0 / P <= steps_per_byte <= 1.0:
        raise ValueError(f"steps_per_byte must be in [1/P, 1] = [{1 / P:.4g}, 1], got {steps_per_byte}")
    cand = h_stale[..., 1:].reshape(-1).sort(descending=True).values
    m = int(math.floor((steps_per_byte - 1.0 / P) * b * K * P + 1e-9))
    return float("-inf") if m >= cand.numel() else float(cand[m])


def random_trigger(like: torch.Tensor, n_fire: int, generator: torch.Generator) -> torch.Tensor:
    """Control for the entropy trigger: exactly ``n_fire`` scratchpads at uniformly random places, shape of ``like``
    (batch, K, P-1)."""
    if not 0 <= n_fire <= like.numel():
        raise ValueError(f"n_fire must be in [0, {like.numel()}], got {n_fire}")
    fired = torch.zeros(like.numel(), dtype=torch.bool)
    fired[torch.randperm(like.numel(), generator=generator)[:n_fire]] = True
    return fired.view(like.shape).to(like.device)


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Contract, Kernel

    def inputs(rng, size):
        P = 4
        return {"x": torch.from_numpy(rng.integers(0, 256, size=(2, 2 * P))),
                "table": torch.from_numpy(rng.normal(size=(P, 256, 3)))}

    return [Kernel("byte_patch.patch_pool", patch_pool, patch_pool_ref, inputs,
                   Contract(empty="value", shapes="x: (batch, N) int64 bytes, N a multiple of P; table: (P, 256, d)"),
                   tol={"float64": (1e-12, 1e-12)}, oracle="per-prefix embedding sums")]


KERNELS = _registry()


# --- one training seed's scores (the chapter's seed loop) --------------------------------------------------------
@torch.no_grad()
def seed_metrics(net_c: PatchLM, net_b: PatchLM, x_test: torch.Tensor, x_cal: torch.Tensor, budget: float,
                 generator: torch.Generator) -> dict:
    """Held-out scores of one scratchpad-trained model ``net_c`` and one plain patch model ``net_b``.

    ``x_cal`` (training windows) calibrates tau for ``budget`` global steps per byte (:func:`tau_for_budget`);
    ``generator`` places the random-trigger control. Returns bits per byte ``stale`` (tau = inf), ``fresh`` (a
    scratchpad after every byte), ``sp`` (tau*), ``rand`` (as many scratchpads at random places), ``b`` (the plain
    model), the per-offset gap stale - fresh ``gap`` (P,), its fitted ``slope``, ``tau``, and the counts
    ``global_steps`` / ``local_steps`` at tau* with ``n_bytes``.
    """
    P = net_c.cfg.patch
    prep = prepare(net_c, x_test)
    tau = tau_for_budget(score(net_c, x_cal, math.inf)["h_stale"], budget)
    runs = {"stale": score(net_c, x_test, math.inf, prep), "fresh": score(net_c, x_test, -math.inf, prep),
            "sp": score(net_c, x_test, tau, prep)}
    runs["rand"] = score(net_c, x_test, 0.0, prep,
                         fired=random_trigger(runs["sp"]["fired"], int(runs["sp"]["fired"].sum()), generator))
    loss = {k: bits_per_byte(r["logits"], x_test) for k, r in runs.items()}
    by_offset = lambda v: v.view(v.shape[0], -1, P).mean((0, 1)).cpu().numpy()
    gap = by_offset(loss["stale"]) - by_offset(loss["fresh"])
    out = {k: v.mean().item() for k, v in loss.items()}
    out.update(b=bits_per_byte(net_b(x_test), x_test).mean().item(), gap=gap,
               slope=float(np.polyfit(np.arange(P), gap, 1)[0]), tau=tau, n_bytes=x_test.numel(),
               global_steps=runs["sp"]["global_steps"], local_steps=runs["sp"]["local_steps"])
    return out

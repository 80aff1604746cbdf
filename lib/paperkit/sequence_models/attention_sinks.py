"""Attention sinks as on/off switches: sink-augmented attention, smoothing energy, and the minimal scale of a switch.

Three kernels, each beside a plain reference of the same signature:

* :func:`sink_attention_probs` / :func:`sink_attention_probs_ref`: softmax attention with an optional extra key
  ``k_s`` (the sink) prepended at position 0 and visible to every query, built on
  :func:`paperkit.nn.tiny_transformer.attention_probs`.
* :func:`smoothing_energy` / :func:`smoothing_energy_ref`: mu(X) = ||X - 1 xbar^T||_F, the distance of the token
  matrix from its mean token (zero means every token was averaged into the same vector: oversmoothing).
* :func:`min_scale_bisect` / :func:`min_scale_ref`: the least logit scale beta >= 0 at which softmax(beta S) puts
  mass >= p on a target key in every row (the cost of a hard switch, or of a self-only "diagonal" pattern).

For the trained head (claim iv in miniature): the recall-or-bigram task (:func:`bigram_table`,
:func:`recall_or_bigram_batch`), a one-layer one-head model and its training (:func:`make_recall_model`,
:func:`train_recall_model`), its queries, keys and values (:func:`head_qkv`), and where its mass goes
(:func:`mass_split` / :func:`mass_split_ref`, :func:`sink_report`).
"""
from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit

from paperkit.nn.tiny_transformer import TinyConfig, TinyTransformer, attention_probs
from paperkit.training import AdamCosine


def _check_qk(q: torch.Tensor, k: torch.Tensor, sink_key: torch.Tensor | None) -> None:
    if q.ndim != 4:
        raise ValueError(f"q must be (batch, heads, Lq, dh), got shape {tuple(q.shape)}")
    if k.ndim != 4 or k.shape[:2] != q.shape[:2] or k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k must be (batch, heads, Lk, dh) matching q {tuple(q.shape)}, got {tuple(k.shape)}")
    if sink_key is not None and sink_key.shape != (q.shape[-1],):
        raise ValueError(f"sink_key must have shape ({q.shape[-1]},), got {tuple(sink_key.shape)}")


def sink_attention_probs(q: torch.Tensor, k: torch.Tensor, causal: bool,
                         sink_key: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q [k_s; k]^T / sqrt(dh)); q (B, H, Lq, dh), k (B, H, Lk, dh), sink_key (dh,) or None.

    Returns (B, H, Lq, Lk + 1) with column 0 the sink's mass when ``sink_key`` is given, else (B, H, Lq, Lk).
    The sink sits before every key, so under a causal mask every query still sees it.
    """
    _check_qk(q, k, sink_key)
    if sink_key is None:
        return attention_probs(q, k, causal)
    ks = sink_key.to(k.dtype).expand(*k.shape[:2], 1, k.shape[-1])
    # attention_probs' causal mask is tril(Lk' - Lq): with Lk' = Lk + 1 query i sees the sink and keys 0..i
    return attention_probs(q, torch.cat([ks, k], dim=-2), causal)


def sink_attention_probs_ref(q: torch.Tensor, k: torch.Tensor, causal: bool,
                             sink_key: torch.Tensor | None = None) -> torch.Tensor:
    """Same as :func:`sink_attention_probs`, one query row at a time with explicit exponentials."""
    _check_qk(q, k, sink_key)
    B, H, Lq, dh = q.shape
    Lk = k.shape[-2]
    off = 1 if sink_key is not None else 0
    out = torch.zeros(B, H, Lq, Lk + off, dtype=q.dtype)
    for b in range(B):
        for h in range(H):
            for i in range(Lq):
                n_vis = (i + Lk - Lq + 1) if causal else Lk
                keys = k[b, h, :n_vis]
                if sink_key is not None:
                    keys = torch.cat([sink_key.to(k.dtype)[None], keys])
                # a_j = q_i . k_j / sqrt(dh); p_j = exp(a_j - max a) / sum exp(a - max a)
                a = keys @ q[b, h, i] / math.sqrt(dh)
                e = torch.exp(a - a.max())
                out[b, h, i, : e.shape[0]] = e / e.sum()
    return out


def smoothing_energy(X: np.ndarray) -> float:
    """mu(X) = ||X - 1 xbar^T||_F for X (n_tokens, d), xbar the mean token."""
    X = np.asarray(X, dtype=float)
    if X.ndim != 2:
        raise ValueError(f"X must be (n_tokens, d), got shape {X.shape}")
    # centre first: the shortcut ||X||^2 - n||xbar||^2 cancels catastrophically once the tokens have nearly merged
    return float(np.linalg.norm(X - X.mean(0, keepdims=True)))


def smoothing_energy_ref(X: np.ndarray) -> float:
    """Same as :func:`smoothing_energy`, one token at a time: sqrt(sum_i ||x_i - xbar||^2)."""
    X = np.asarray(X, dtype=float)
    if X.ndim != 2:
        raise ValueError(f"X must be (n_tokens, d), got shape {X.shape}")
    xbar = X.sum(0) / X.shape[0]
    return float(math.sqrt(sum(float(np.dot(x - xbar, x - xbar)) for x in X)))


def _check_scale_args(S: np.ndarray, target: np.ndarray, p: float) -> tuple[np.ndarray, np.ndarray]:
    S = np.asarray(S, dtype=np.float64)
    target = np.asarray(target)
    if S.ndim != 2 or S.shape[1] < 2:
        raise ValueError(f"S must be (n_queries, n_keys >= 2), got shape {S.shape}")
    if target.shape != (S.shape[0],) or not np.issubdtype(target.dtype, np.integer):
        raise ValueError(f"target must be integer (n_queries,) = ({S.shape[0]},), got {target.dtype} {target.shape}")
    if np.any((target < 0) | (target >= S.shape[1])):
        raise ValueError("target entries must index a key in [0, n_keys)")
    if not 0.5 < p < 1.0:
        raise ValueError(f"p must lie in (0.5, 1), got {p}")
    return S, target.astype(np.int64)


@njit(cache=True)
def _log_rival_mass(S, i, t, beta):
    # log sum_{j != t} exp(beta (S_ij - S_it)): falls with beta when every rival logit is below the target's
    s = 0.0
    for j in range(S.shape[1]):
        if j != t:
            s += math.exp(beta * (S[i, j] - S[i, t]))
    return math.log(s)


@njit(cache=True)
def _max_row_scale(S, target, p, iters):
    n, m = S.shape
    log_odds = math.log((1.0 - p) / p)
    gap = np.empty(n)
    for i in range(n):
        g = np.inf
        for j in range(m):
            if j != target[i]:
                g = min(g, S[i, target[i]] - S[i, j])
        gap[i] = g
    if gap.min() <= 0.0:
        return np.inf
    best = 0.0
    # rows with the smallest gap usually need the largest scale: visit them first, so that most later rows
    # already meet mass p at the running maximum and cost one evaluation instead of a bisection
    for i in np.argsort(gap):
        t = target[i]
        if _log_rival_mass(S, i, t, best) <= log_odds:
            continue
        lo, hi = best, max(2.0 * best, 1.0)
        while _log_rival_mass(S, i, t, hi) > log_odds:
            lo, hi = hi, 2.0 * hi
        for _ in range(iters):
            mid = 0.5 * (lo + hi)
            if _log_rival_mass(S, i, t, mid) <= log_odds:
                hi = mid
            else:
                lo = mid
        best = hi
    return best


def min_scale_bisect(S: np.ndarray, target: np.ndarray, p: float, iters: int = 60) -> float:
    """Least beta >= 0 with softmax(beta S)[i, target_i] >= p for every row i; inf when no beta works.

    S (n_queries, n_keys) are the unscaled logits q_i . k_j; p in (0.5, 1). A row can reach mass p > 1/2 only if its
    target logit strictly beats every other logit (the alignment condition); then its mass rises with beta, so the
    answer is the largest per-row threshold, each found by bisection (``iters`` halvings) in the log domain; rows
    already satisfied at the running maximum are skipped after one evaluation.
    """
    S, target = _check_scale_args(S, target, p)
    return float(_max_row_scale(S, target, float(p), int(iters)))


def min_scale_ref(S: np.ndarray, target: np.ndarray, p: float, iters: int = 60) -> float:
    """Same as :func:`min_scale_bisect`: one bisection on the whole matrix with scipy's exact softmax."""
    from scipy.special import softmax

    S, target = _check_scale_args(S, target, p)
    rows = np.arange(S.shape[0])
    gaps = np.where(np.arange(S.shape[1])[None] == target[:, None], -np.inf, S - S[rows, target][:, None])
    if np.any(gaps.max(1) >= 0):
        return float("inf")

    def ok(beta: float) -> bool:
        return bool(np.all(softmax(beta * S, axis=1)[rows, target] >= p))

    lo, hi = 0.0, 1.0
    while not ok(hi):
        lo, hi = hi, 2.0 * hi
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def switch_scale_closed_form(n_keys: int, p: float, cos_theta: np.ndarray) -> np.ndarray:
    """beta*(theta) = log((n_keys - 1) p / (1 - p)) / cos(theta) for a unit query at angle theta to a unit sink key
    whose n_keys - 1 rivals are orthogonal to the query (logit 0); inf where cos(theta) <= 0 (no alignment)."""
    cos_theta = np.asarray(cos_theta, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(cos_theta > 0, math.log((n_keys - 1) * p / (1 - p)) / np.where(cos_theta > 0, cos_theta, 1.0),
                        np.inf)


# ---------------------------------------------------------------------------------------------------------------
# A trained head that sometimes has nothing to mix (claim iv in miniature)
# ---------------------------------------------------------------------------------------------------------------

def bigram_table(rng: np.random.Generator, n_content: int, concentration: float = 0.3) -> np.ndarray:
    """A random bigram table (n_content, n_content), each row drawn from Dirichlet(concentration)."""
    if n_content < 2 or concentration <= 0:
        raise ValueError(f"n_content must be >= 2 and concentration > 0, got {n_content}, {concentration}")
    return rng.dirichlet(np.full(n_content, concentration), size=n_content)


def recall_or_bigram_batch(rng: np.random.Generator, bigram: np.ndarray, batch: int, length: int,
                           p_trigger: float, bos: bool = True, recall: str = "uniform") -> torch.Tensor:
    """Token sequences (batch, length + bos) of the recall-or-bigram task; ids: content 0..V-1, trigger V, BOS V+1.

    x_1 is a uniform content token. After a content token x_t the next token is the trigger with probability
    ``p_trigger`` (only from t >= 2 on, so that a context exists), else a draw from ``bigram[x_t]``. After a trigger
    the next token is a uniformly chosen earlier token x_s, s < t (content or trigger): predicting it needs the
    whole context, so the head must mix; after a content token the context is useless, so the head should not.
    With ``bos`` the sequences start with the BOS token, which never recurs. ``recall="previous"`` makes the token
    after a trigger a copy of the token just before the trigger (x_{t-1}): the active pattern is then positional
    ("look one back") instead of content-based (the bigram-backcopy variant).
    """
    if recall not in ("uniform", "previous"):
        raise ValueError(f"recall must be 'uniform' or 'previous', got {recall!r}")
    V = bigram.shape[0]
    if bigram.ndim != 2 or bigram.shape != (V, V) or not np.allclose(bigram.sum(1), 1.0):
        raise ValueError(f"bigram must be a row-stochastic square table, got shape {bigram.shape}")
    if batch < 1 or length < 3:
        raise ValueError(f"batch must be >= 1 and length >= 3, got {batch}, {length}")
    if not 0.0 < p_trigger < 1.0:
        raise ValueError(f"p_trigger must lie in (0, 1), got {p_trigger}")
    trig, rows = V, np.arange(batch)
    cum = np.cumsum(bigram, 1)
    x = np.empty((batch, length), dtype=np.int64)
    x[:, 0] = rng.integers(0, V, size=batch)
    for t in range(1, length):
        prev = x[:, t - 1]
        # inverse-CDF draw from bigram[prev] (a trigger's row is never used: its successor is a recall)
        nxt = np.minimum((cum[np.minimum(prev, V - 1)] < rng.random(batch)[:, None]).sum(1), V - 1)
        if t >= 2:
            src = rng.integers(0, t - 1, size=batch) if recall == "uniform" else np.full(batch, t - 2)
            recalled = x[rows, src]  # uniform over x_0 .. x_{t-2}, or x_{t-2} (the token before the trigger)
            nxt = np.where(prev == trig, recalled, nxt)
            nxt = np.where((prev != trig) & (rng.random(batch) < p_trigger), trig, nxt)
        x[:, t] = nxt
    out = torch.from_numpy(x)
    return torch.cat([torch.full((batch, 1), V + 1), out], 1) if bos else out


def head_qkv(model, tokens: torch.Tensor, layer: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries, keys and values of one layer of a :class:`~paperkit.nn.tiny_transformer.TinyTransformer`.

    Each is (batch, heads, L, dh), before rotary embedding; read from the layer's ``qkv`` projection by a forward
    hook during one forward pass without gradients.
    """
    blocks = model.blocks
    if not 0 <= layer < len(blocks):
        raise ValueError(f"layer must be in [0, {len(blocks)}), got {layer}")
    got = []
    hook = blocks[layer].attn.qkv.register_forward_hook(lambda mod, inp, out: got.append(out))
    try:
        with torch.no_grad():
            model(tokens)
    finally:
        hook.remove()
    b, L, _ = got[0].shape
    h = model.cfg.n_heads
    return tuple(t.view(b, L, h, -1).transpose(1, 2) for t in got[0].chunk(3, dim=-1))


def _check_split(P: torch.Tensor, query_mask: torch.Tensor, sink_col: int | None) -> None:
    if P.ndim != 3 or P.shape[1] != P.shape[2]:
        raise ValueError(f"P must be (batch, L, L) causal attention, got shape {tuple(P.shape)}")
    if query_mask.shape != P.shape[:2] or query_mask.dtype != torch.bool:
        raise ValueError(f"query_mask must be bool {tuple(P.shape[:2])}, got {query_mask.dtype} "
                         f"{tuple(query_mask.shape)}")
    if sink_col is not None and not 0 <= sink_col < P.shape[2]:
        raise ValueError(f"sink_col must index a key in [0, {P.shape[2]}), got {sink_col}")


def mass_split(P: torch.Tensor, query_mask: torch.Tensor, sink_col: int | None = 0) -> dict[str, float]:
    """Where a causal head's mass goes, averaged over the selected queries (query_mask True).

    P (batch, L, L) holds one head's probabilities ``p[b, i, j]`` (row i a query, causal: j <= i). Returns the
    means over selected queries of ``sink`` = ``p[b, i, sink_col]`` (0 when ``sink_col`` is None), ``diag`` =
    ``p[b, i, i]`` (self) and ``uniform`` = ``1 / (i + 1)`` (the mass one key gets from a head that spreads evenly),
    and ``n``, the number of queries. Queries at the sink's own position are excluded (there, sink and diagonal
    coincide).
    """
    _check_split(P, query_mask, sink_col)
    L = P.shape[1]
    pos = torch.arange(L)
    sel = query_mask & (pos != (-1 if sink_col is None else sink_col))[None]
    sink = P[:, :, sink_col] if sink_col is not None else torch.zeros(P.shape[:2], dtype=P.dtype)
    diag = P.diagonal(dim1=1, dim2=2)
    uni = (1.0 / (pos + 1).to(P.dtype))[None].expand_as(diag)
    return {"sink": sink[sel].mean().item(), "diag": diag[sel].mean().item(), "uniform": uni[sel].mean().item(),
            "n": int(sel.sum())}


def mass_split_ref(P: torch.Tensor, query_mask: torch.Tensor, sink_col: int | None = 0) -> dict[str, float]:
    """Same as :func:`mass_split`, one query at a time."""
    _check_split(P, query_mask, sink_col)
    s = d = u = 0.0
    n = 0
    for b in range(P.shape[0]):
        for i in range(P.shape[1]):
            if not query_mask[b, i] or i == sink_col:
                continue
            s += float(P[b, i, sink_col]) if sink_col is not None else 0.0
            d += float(P[b, i, i])
            u += 1.0 / (i + 1)
            n += 1
    return {"sink": s / n, "diag": d / n, "uniform": u / n, "n": n}


def train_recall_model(model, bigram: np.ndarray, steps: int, batch: int, length: int, p_trigger: float, lr: float,
                       rng: np.random.Generator, bos: bool = True, recall: str = "uniform") -> np.ndarray:
    """Next-token training on :func:`recall_or_bigram_batch` (fresh batches from ``rng``); loss per step (steps,).

    :class:`~paperkit.training.AdamCosine` at learning rate ``lr``; cross-entropy on every next token.
    """
    if steps < 1 or batch < 1 or lr <= 0:
        raise ValueError(f"steps, batch and lr must be positive, got {steps}, {batch}, {lr}")
    dev = next(model.parameters()).device
    opt = AdamCosine(model.parameters(), lr, steps)
    losses = np.empty(steps)
    for step in range(steps):
        x = recall_or_bigram_batch(rng, bigram, batch, length, p_trigger, bos, recall).to(dev)
        logits = model(x[:, :-1])
        losses[step] = opt.step(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                                  x[:, 1:].reshape(-1)))
    return losses


def make_recall_model(n_content: int, d_model: int, seq_len: int, gen: torch.Generator,
                      device: str | torch.device = "cpu"):
    """A one-layer, one-head causal :class:`~paperkit.nn.tiny_transformer.TinyTransformer` (learned positions) for
    :func:`recall_or_bigram_batch`: vocabulary n_content + 2 (trigger, BOS), room for seq_len + 1 tokens.

    Its initial weights come from :meth:`~paperkit.nn.tiny_transformer.TinyTransformer.seeded`.
    """
    cfg = TinyConfig(vocab=n_content + 2, d_model=d_model, n_heads=1, n_layers=1, max_len=seq_len + 1, pos="learned")
    return TinyTransformer.seeded(cfg, gen).to(device)


def sink_report(model, tokens: torch.Tensor, n_content: int, bos: bool) -> dict:
    """Where the head of a :func:`make_recall_model` puts its mass, and the sink's geometry, on ``tokens``.

    Queries are split into *idle* ones (a content token after the first token: the next token is a bigram draw,
    nothing in the context helps) and *active* ones (a trigger: the next token recalls the context). Key 0 (BOS, or
    the first token when there is none) is the candidate sink. Returns a dict with

    - ``sink``, ``diag``, ``uniform``: :func:`mass_split` over idle queries;
    - ``sink_active``: the sink mass of active queries;
    - ``value_ratio``: ``norm(v_0) / mean_{j >= 1} norm(v_j)``, the sink's value norm against the other tokens';
    - ``cos_sink``: ``cos(k_0, qbar)``, qbar the mean idle query (the alignment of a sink with its queries);
    - ``cos_others``: the mean of ``cos(k_j, qbar)`` over content keys j >= 1;
    - ``mean_attn``: (L, L), the head's probabilities averaged over the batch.
    """
    with torch.no_grad():
        _, attn = model(tokens, return_attn=True)
    P = attn[0][:, 0].cpu()
    q, k, v = (t[:, 0].cpu() for t in head_qkv(model, tokens))
    tokens = tokens.cpu()
    first = 1 if bos else 0
    idle = tokens < n_content
    idle[:, : first + 1] = False
    idle_split = mass_split(P, idle, 0)
    active_split = mass_split(P, tokens == n_content, 0)
    vn = v.norm(dim=-1)
    qbar = q[idle].mean(0)
    cos = torch.nn.functional.cosine_similarity
    content_keys = k[:, 1:][tokens[:, 1:] < n_content]
    return {"sink": idle_split["sink"], "diag": idle_split["diag"], "uniform": idle_split["uniform"],
            "sink_active": active_split["sink"], "value_ratio": (vn[:, 0].mean() / vn[:, 1:].mean()).item(),
            "cos_sink": cos(k[:, 0], qbar[None]).mean().item(),
            "cos_others": cos(content_keys, qbar[None]).mean().item(), "mean_attn": P.mean(0).numpy()}


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Contract, Kernel

    def inputs(rng, size):
        return {"X": rng.normal(size=(max(size, 1), 4))}

    return [Kernel("attention_sinks.smoothing_energy", smoothing_energy, smoothing_energy_ref, inputs,
                   Contract(empty="value", shapes="X: (n_tokens, d)"), tol={"float64": (1e-9, 1e-12)},
                   oracle="Frobenius norm of the centred tokens")]


KERNELS = _registry()


# ---------------------------------------------------------------------------------------------------------------
# Does an idle head act token-wise (like an MLP)?
# ---------------------------------------------------------------------------------------------------------------

def head_output(model, tokens: torch.Tensor, layer: int = 0) -> torch.Tensor:
    """The mixed values sum_j p_ij v_j of every head of one layer (before the output projection): (B, H, L, dh)."""
    with torch.no_grad():
        _, attn = model(tokens, return_attn=True)
    _, _, v = head_qkv(model, tokens, layer)
    return attn[layer] @ v


def context_sensitivity(model, tokens: torch.Tensor, fresh: torch.Tensor, n_content: int, bos: bool,
                        pos: int) -> dict[str, float]:
    """How much a causal head's output at position ``pos`` depends on the context rather than on its own token.

    ``fresh`` (same shape as ``tokens``) supplies a new context: positions before ``pos`` (after BOS) come from it,
    the token at ``pos`` and BOS stay. With o and o' the head outputs at ``pos`` (first head, see
    :func:`head_output`), returns for the sequences whose token at ``pos`` is a content token (``idle``) and those
    where it is the trigger (``active``) the relative change mean ||o - o'|| / mean ||o||: 0 when the output is a
    function of the query's own token alone (token-wise, like an MLP; a constant output counts), of order 1 when the
    head mixes the context.
    """
    if tokens.shape != fresh.shape or not 0 < pos < tokens.shape[1]:
        raise ValueError(f"tokens and fresh must share a shape and 0 < pos < L, got {tuple(tokens.shape)}, "
                         f"{tuple(fresh.shape)}, pos={pos}")
    first = 1 if bos else 0
    if pos <= first:
        raise ValueError(f"pos must leave a context after BOS, got pos={pos}")
    mixed = fresh.clone()
    mixed[:, pos:] = tokens[:, pos:]
    if bos:
        mixed[:, 0] = tokens[:, 0]
    o = head_output(model, tokens)[:, 0, pos].cpu()
    o2 = head_output(model, mixed)[:, 0, pos].cpu()
    tok = tokens[:, pos].cpu()
    out = {}
    for name, sel in (("idle", tok < n_content), ("active", tok == n_content)):
        if int(sel.sum()) < 2:
            out[name] = float("nan")
            continue
        a, b = o[sel], o2[sel]
        out[name] = ((a - b).norm(dim=1).mean() / a.norm(dim=1).mean()).item()
    return out

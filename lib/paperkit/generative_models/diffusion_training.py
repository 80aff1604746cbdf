"""Trained masked and uniform denoisers on a small language, and what they learn first: support or frequencies.

A denoiser is an MLP (one per seed, all seeds trained side by side as one batched model) that reads a noisy string
(one-hot over ``N + 1`` tokens, the last the mask, flattened, plus the noise level) and predicts every position's
clean token (logits ``(L, N)``). Our reading of the two training objectives of the abstract:

* masked (absorbing, MDLM-style): draw ``x0 ~ p0``, a mask ratio ``r ~ U(0, 1)``, mask each position with
  probability ``r``; loss = cross-entropy of ``x0`` at the masked positions, averaged over all ``B L`` positions;
* uniform: draw ``x0 ~ p0``, a keep level ``alpha ~ U(0, 1)``; each position keeps its token with probability
  ``alpha`` and is otherwise redrawn uniformly; loss = cross-entropy of ``x0`` at every position (the
  ``x0``-prediction loss of D3PM).

The model's law over strings is computed exactly, without sampling noise, over all ``N^L`` strings:
:func:`masked_model_law` (one-position-at-a-time unmasking, averaged over a few random orders) and
:func:`uniform_model_law` (``K`` factorised reverse steps of the D3PM posterior, propagated as a ``N^L x N^L``
Markov matrix from the uniform law). :func:`law_metrics` splits ``KL(p0 || p_model) = -log s + KL(p0 || p_model|S)``
exactly into a *support* term (``s`` = the model's mass on valid strings, the share of valid samples) and a
*frequency* term (the within-support KL), and adds the Spearman rank correlation between ``p_model|S`` and ``p0``.
:func:`first_crossing`, :func:`order_lags` and :func:`cross_readout` read the order of the two terms (a crossing
not reached within the run is censored, never replaced by a made-up step); :func:`trivial_learners` gives the
competitors read out the same way (support only, token frequencies only, no hierarchy).

Kernels (registered in ``KERNELS``): :func:`uniform_step_matrix` (one reverse step's ``N^L x N^L`` matrix as an
einsum over positions) / :func:`uniform_step_matrix_ref` (one entry at a time).
"""
from __future__ import annotations

import math

import numpy as np
import torch
from scipy import stats

from paperkit.arrays import real_array
from paperkit.generative_models import discrete_diffusion as dd


# ---------------------------------------------------------------------------------------------- the model

class BatchedMLP(torch.nn.Module):
    """``n_models`` independent 3-layer MLPs ``(L (N + 1) + 1) -> H -> H -> L N`` evaluated with batched matmuls.
    Input ``(n_models, B, L (N + 1) + 1)``; output logits ``(n_models, B, L, N)``. Each model's weights are drawn
    from its own ``torch.Generator`` (PyTorch's default Linear initialisation, U(-1/sqrt(fan_in), 1/sqrt(fan_in)))."""

    def __init__(self, L: int, N: int, hidden: int, gens: list[torch.Generator]):
        super().__init__()
        self.L, self.N = L, N
        sizes = [L * (N + 1) + 1, hidden, hidden, L * N]
        self.W = torch.nn.ParameterList()
        self.b = torch.nn.ParameterList()
        for a, b in zip(sizes[:-1], sizes[1:]):
            k = 1.0 / math.sqrt(a)
            self.W.append(torch.nn.Parameter(torch.stack([(torch.rand(a, b, generator=g) * 2 - 1) * k
                                                          for g in gens])))
            self.b.append(torch.nn.Parameter(torch.stack([(torch.rand(1, b, generator=g) * 2 - 1) * k
                                                          for g in gens])))

    def forward(self, x):
        for j, (W, b) in enumerate(zip(self.W, self.b)):
            x = torch.baddbmm(b, x, W)
            if j < len(self.W) - 1:
                x = torch.nn.functional.silu(x)
        return x.reshape(x.shape[0], x.shape[1], self.L, self.N)


def encode(tokens: torch.Tensor, level: torch.Tensor, N: int) -> torch.Tensor:
    """Model input: one-hot of ``tokens`` (``(..., L)`` in ``{0..N}``, ``N`` = mask) flattened, with the noise
    ``level`` (``(...,)``) appended: ``(..., L (N + 1) + 1)`` float32."""
    oh = torch.nn.functional.one_hot(tokens, N + 1).float().flatten(-2)
    return torch.cat([oh, level[..., None].float()], -1)


def corrupt(x0: torch.Tensor, kind: str, N: int, gen: torch.Generator):
    """One noisy training batch from clean strings ``x0`` ``(n_models, B, L)``: returns ``(noisy, level,
    weight)``, with ``level`` the mask ratio ``r`` (masked) or the keep level ``alpha`` (uniform), and ``weight``
    ``(n_models, B, L)`` the positions that enter the loss."""
    shape = x0.shape[:2]
    u = torch.rand(shape, generator=gen)
    coin = torch.rand(x0.shape, generator=gen)
    if kind == "absorbing":
        hit = coin < u[..., None]
        return torch.where(hit, torch.full_like(x0, N), x0), u, hit.float()
    redraw = torch.randint(0, N, x0.shape, generator=gen)
    return torch.where(coin < u[..., None], x0, redraw), u, torch.ones(x0.shape)


def _per_model(p0, n_models: int) -> torch.Tensor:
    """``p0`` as one law per model, ``(n_models, N**L)`` float64 (a single law ``(N**L,)`` is shared)."""
    p = torch.as_tensor(np.asarray(p0, dtype=np.float64))
    if p.ndim == 1:
        p = p.expand(n_models, -1)
    if p.shape[0] != n_models:
        raise ValueError(f"p0 must be (N**L,) or (n_models, N**L) with n_models = {n_models}, got {tuple(p.shape)}")
    return p


def train_denoisers(kind: str, p0: np.ndarray, L: int, N: int, seeds: list[int], steps: int, checkpoints,
                    law_fn, batch: int = 256, hidden: int = 128, lr: float = 3e-3):
    """Train one denoiser per seed (``kind`` ``"absorbing"`` or ``"uniform"``) with Adam at a constant ``lr``;
    fresh batches of ``batch`` strings from ``p0`` (one law ``(N**L,)`` for all, or one per model
    ``(n_models, N**L)``) every step, drawn with a generator per seed. At each step in
    ``checkpoints`` (0 = the untrained model) call ``law_fn(model) -> (n_models, N**L)`` laws and keep them.
    Returns ``(model, laws)`` with ``laws`` of shape ``(len(checkpoints), n_models, N**L)``."""
    dd._check_kind(kind)
    gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
    model = BatchedMLP(L, N, hidden, gens)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    X = torch.as_tensor(dd.all_strings(L, N))
    p = _per_model(p0, len(seeds))
    marks, laws = set(int(c) for c in checkpoints), {}
    for step in range(steps + 1):
        if step in marks:
            with torch.no_grad():
                laws[step] = law_fn(model)
        if step == steps:
            break
        x0 = torch.stack([X[torch.multinomial(p[m], batch, replacement=True, generator=g)]
                          for m, g in enumerate(gens)])
        noisy, level, w = (torch.stack(v) for v in zip(*(corrupt(x0[m:m + 1], kind, N, g)
                                                          for m, g in enumerate(gens))))
        noisy, level, w = noisy[:, 0], level[:, 0], w[:, 0]
        logits = model(encode(noisy, level, N))
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, N), x0.reshape(-1), reduction="none")
        loss = (ce * w.reshape(-1)).sum() / (batch * L)   # summed over models: each gets its own gradient
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, np.stack([laws[int(c)] for c in checkpoints])


def train_softmax(p0: np.ndarray, seeds: list[int], steps: int, checkpoints, batch: int = 256, lr: float = 3e-3):
    """The competing learner: a plain ``N^L``-way softmax (one logit per string, zero at the start) fitted by
    maximum likelihood on the same fresh batches with the same Adam. Returns laws ``(len(checkpoints),
    n_models, N**L)``."""
    gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
    p = _per_model(p0, len(seeds))
    z = torch.nn.Parameter(torch.zeros(len(seeds), p.shape[1], dtype=torch.float64))
    opt = torch.optim.Adam([z], lr=lr)
    marks, laws = set(int(c) for c in checkpoints), {}
    for step in range(steps + 1):
        if step in marks:
            laws[step] = torch.softmax(z.detach(), -1).numpy()
        if step == steps:
            break
        idx = torch.stack([torch.multinomial(p[m], batch, replacement=True, generator=g) for m, g in enumerate(gens)])
        loss = -torch.log_softmax(z, -1).gather(1, idx).sum() / batch
        opt.zero_grad()
        loss.backward()
        opt.step()
    return np.stack([laws[int(c)] for c in checkpoints])


def train_learners(p0: np.ndarray, L: int, N: int, seeds: list[int], steps: int, checkpoints, orders: np.ndarray,
                   sampler_steps: int, hidden: int = 64, lr: float = 3e-3) -> dict:
    """The chapter's three learners on ``p0`` (one law, or one per seed ``(len(seeds), N**L)``):
    ``{"absorbing", "uniform", "softmax"} -> laws`` of shape
    ``(len(checkpoints), len(seeds), N**L)`` (masked law over ``orders``; uniform law with ``sampler_steps``
    reverse steps)."""
    law_fns = {"absorbing": lambda m: masked_model_law(m, L, N, orders),
               "uniform": lambda m: uniform_model_law(model_x0_fn(m, N), L, N, sampler_steps)}
    laws = {kind: train_denoisers(kind, p0, L, N, seeds, steps, checkpoints, fn, hidden=hidden, lr=lr)[1]
            for kind, fn in law_fns.items()}
    laws["softmax"] = train_softmax(p0, seeds, steps, checkpoints, lr=lr)
    return laws


def order_lags(steps, metrics: dict, levels, censor: float) -> np.ndarray:
    """``log10(T_frequency / T_support)`` at each matched level (nats) of ``levels``: the steps at which the
    frequency term and the support term of :func:`law_metrics` reach the level for good
    (:func:`first_crossing`; a crossing at step 0 counts as step 0.5, as in its log-step interpolation). Positive:
    support first. NaN where *either* term does not reach the level within the run (its crossing is censored:
    no order is observed, and the censoring value is never used as a step). Shape ``(len(levels), n_models)``."""
    out = []
    for g in levels:
        ts = first_crossing(steps, metrics["support_nats"], g, False, censor)
        tf = first_crossing(steps, metrics["freq_nats"], g, False, censor)
        out.append(observed_lag(ts, tf, float(np.max(steps))))
    return np.array(out)


def observed_lag(t_first, t_second, run_length: float) -> np.ndarray:
    """``log10(t_second / t_first)`` where both crossing steps lie within the run (``<= run_length``), NaN where
    either is censored; steps below 0.5 (a crossing at step 0) count as 0.5."""
    a, b = np.asarray(t_first, float), np.asarray(t_second, float)
    ok = (a <= run_length) & (b <= run_length)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ok, np.log10(np.maximum(b, 0.5) / np.maximum(a, 0.5)), np.nan)


def cross_readout(steps, metrics: dict, level: float, censor: float) -> dict:
    """The state of one term at the moment the other reaches ``level`` (nats) for good:
    ``freq_at_support`` = frequency term at the step where the support term reaches the level, and
    ``support_at_freq`` = support term at the step where the frequency term reaches it; both read by linear
    interpolation in ``log(step)`` between checkpoints (step 0 as 0.5), NaN where that crossing is censored. This
    is the order in the space of the two terms, free of how fast either learner moves. Each ``(n_models,)``."""
    steps = np.asarray(steps, float)
    x = np.log(np.maximum(steps, 0.5))
    T = {k: first_crossing(steps, metrics[k], level, False, censor) for k in ("support_nats", "freq_nats")}
    out = {}
    for name, at, read in (("freq_at_support", "support_nats", "freq_nats"),
                           ("support_at_freq", "freq_nats", "support_nats")):
        v = np.asarray(metrics[read], float).reshape(len(steps), -1)
        t = np.asarray(T[at], float).reshape(-1)
        out[name] = np.array([np.interp(math.log(max(tc, 0.5)), x, v[:, c]) if tc <= steps[-1] else np.nan
                              for c, tc in enumerate(t)])
    return out


def state_order_margin(readout: dict, level: float, cap: float = 3.0) -> np.ndarray:
    """``min(log10(F@S / level), log10(level / S@F))`` from :func:`cross_readout`: positive only if the
    frequency term is still above ``level`` when the support term reaches it *and* the support term is already
    below ``level`` when the frequency term reaches it (support first, both reached within the run). 0 where either
    crossing is censored (no order observed: counts as a failure of a ``> 0`` check); clipped to ``[-cap, cap]``."""
    fs, sf = np.asarray(readout["freq_at_support"], float), np.asarray(readout["support_at_freq"], float)
    with np.errstate(divide="ignore", invalid="ignore"):
        m = np.minimum(np.log10(fs / level), np.log10(level / sf))
    return np.where(np.isnan(fs) | np.isnan(sf), 0.0, np.clip(m, -cap, cap))


# ---------------------------------------------------------------------------------------------- trivial learners

def support_only_law(support: np.ndarray) -> np.ndarray:
    """The learner that knows the support and none of the frequencies: uniform over the valid strings,
    ``(N**L,)``."""
    s = np.asarray(support, bool)
    return s / s.sum()


def token_marginal_law(p0: np.ndarray, L: int, N: int) -> np.ndarray:
    """The learner that knows every token's frequency at every position and nothing of the support: the product
    of the per-position marginals of ``p0`` (``(..., N**L)``, one law per leading index), same shape."""
    X = dd.all_strings(L, N)
    p0 = np.asarray(p0, float)
    onehot = np.eye(N)[X]                                           # (n, L, N)
    marg = np.einsum("...x,xia->...ia", p0, onehot)                 # (..., L, N): p0(x_i = a)
    return np.exp(np.einsum("...ia,xia->...x", np.log(np.maximum(marg, 1e-300)), onehot))


def mixture_path(p0: np.ndarray, checkpoints) -> np.ndarray:
    """The learner with no hierarchy: ``(1 - w) U + w p0`` with ``U`` uniform over all strings and
    ``w = step / last step`` at each checkpoint, so support and frequencies are learned together. ``p0``
    ``(n_models, N**L)``; returns ``(len(checkpoints), n_models, N**L)``. Any monotone schedule of ``w`` gives the
    same order of the two terms and the same :func:`cross_readout`."""
    p0 = np.asarray(p0, float)
    w = np.asarray(checkpoints, float) / float(np.max(checkpoints))
    return (1 - w)[:, None, None] / p0.shape[-1] + w[:, None, None] * p0[None]


def trivial_learners(p0: np.ndarray, support: np.ndarray, L: int, N: int, checkpoints) -> dict:
    """Laws ``(len(checkpoints), n_models, N**L)`` of the three trivial competitors of the trained denoisers, on
    the data laws ``p0`` ``(n_models, N**L)``: ``"support_only"`` (:func:`support_only_law`, constant),
    ``"token_freq"`` (:func:`token_marginal_law`, constant) and ``"mixture"`` (:func:`mixture_path`)."""
    p0 = np.asarray(p0, float)
    n = len(checkpoints)
    return {"support_only": np.broadcast_to(support_only_law(support), (n,) + p0.shape).copy(),
            "token_freq": np.broadcast_to(token_marginal_law(p0, L, N), (n,) + p0.shape).copy(),
            "mixture": mixture_path(p0, checkpoints)}


# ---------------------------------------------------------------------------------------------- exact model laws

def masked_model_law(model, L: int, N: int, orders: np.ndarray) -> np.ndarray:
    """Exact law ``(n_models, N**L)`` of one-position-at-a-time unmasking in each order of ``orders``
    (``(n_orders, L)`` permutations), averaged over the orders: ``p(x) = mean_pi prod_j p(x_pi_j | x_pi_<j)``
    with the model read at mask ratio ``(L - j) / L``."""
    X = torch.as_tensor(dd.all_strings(L, N))
    n_models = model.W[0].shape[0]
    law = torch.zeros(n_models, len(X), dtype=torch.float64)
    for order in orders:
        logp = torch.zeros(n_models, len(X), dtype=torch.float64)
        revealed = torch.zeros(L, dtype=torch.bool)
        for j, i in enumerate(order):
            tok = torch.where(revealed, X, torch.full_like(X, N))
            inp = encode(tok, torch.full((len(X),), (L - j) / L), N).expand(n_models, -1, -1)
            lp = torch.log_softmax(model(inp).double(), -1)[:, :, i, :]          # (n_models, n, N)
            logp += lp.gather(2, X[None, :, i, None].expand(n_models, -1, 1))[..., 0]
            revealed[i] = True
        law += torch.exp(logp) / len(orders)
    return law.detach().numpy()


def uniform_schedule(K: int) -> np.ndarray:
    """Keep levels ``alpha_k = 1 - (k / K)^2``, ``k = 0..K`` (``alpha_0 = 1`` clean, ``alpha_K = 0`` pure noise):
    the steps shrink towards the clean end, where the last edits are made."""
    return 1.0 - (np.arange(K + 1) / K) ** 2


def _check_step(x0_probs, states, a_t, a_s, N):
    x0_probs = real_array(x0_probs, "x0_probs", 3)
    if x0_probs.shape[2] != N or x0_probs.shape[0] != N ** x0_probs.shape[1]:
        raise ValueError(f"x0_probs must be (N**L, L, N) with N = {N}, got {x0_probs.shape}")
    if (x0_probs < 0).any():
        raise ValueError("x0_probs must be non-negative")
    if not 0.0 <= a_t < a_s <= 1.0:
        raise ValueError(f"a_t and a_s must satisfy 0 <= a_t < a_s <= 1, got a_t={a_t}, a_s={a_s}")
    return x0_probs, np.asarray(states)


def _posterior_table(a_t, a_s, N):
    """``T[c, a, b] = q(x_s = b | x_t = c, x0 = a)`` for the uniform chain (keep levels ``a_s > a_t``)."""
    a_ts = a_t / a_s
    fwd = a_ts * np.eye(N) + (1 - a_ts) / N            # q(x_t = c | x_s = b): [b, c]
    marg = a_s * np.eye(N) + (1 - a_s) / N             # q(x_s = b | x0 = a): [a, b]
    num = fwd.T[:, None, :] * marg[None, :, :]          # [c, a, b]
    return num / num.sum(2, keepdims=True)


def uniform_step_matrix(x0_probs, states, a_t: float, a_s: float, N: int) -> np.ndarray:
    """One factorised reverse step of uniform diffusion from keep level ``a_t`` to ``a_s > a_t``:
    ``P[x, y] = prod_i sum_a p(x0_i = a | x) q(y_i | x_i, x0_i = a)`` over all strings. ``x0_probs``:
    ``(N**L, L, N)`` the denoiser's clean-token probabilities at each string ``x``; ``states``: ``(N**L, L)``
    from :func:`~paperkit.generative_models.discrete_diffusion.all_strings`. Returns ``(N**L, N**L)``, rows
    summing to one."""
    x0_probs, states = _check_step(x0_probs, states, a_t, a_s, N)
    T = _posterior_table(a_t, a_s, N)
    per = np.einsum("xia,xiab->xib", x0_probs, T[states])          # (n, L, N): p(y_i = b | x)
    logper = np.log(np.maximum(per, 1e-300))
    onehot = np.eye(N)[states]                                     # (n, L, N)
    return np.exp(np.einsum("xib,yib->xy", logper, onehot))


def uniform_step_matrix_ref(x0_probs, states, a_t: float, a_s: float, N: int) -> np.ndarray:
    """Reference for :func:`uniform_step_matrix`: every entry as an explicit product over positions."""
    x0_probs, states = _check_step(x0_probs, states, a_t, a_s, N)
    T = _posterior_table(a_t, a_s, N)
    n, L = states.shape
    P = np.ones((n, n))
    for x in range(n):
        for y in range(n):
            for i in range(L):
                P[x, y] *= sum(x0_probs[x, i, a] * T[states[x, i], a, states[y, i]] for a in range(N))
    return P


def uniform_model_law(x0_fn, L: int, N: int, K: int) -> np.ndarray:
    """Exact law ``(n_models, N**L)`` of ``K`` factorised reverse steps (:func:`uniform_schedule`) from the
    uniform law, the denoiser given as ``x0_fn(tokens (n, L) int64, alpha float) -> (n_models, n, L, N)``
    clean-token probabilities."""
    X = dd.all_strings(L, N)
    a = uniform_schedule(K)
    law = None
    for k in range(K, 0, -1):
        probs = x0_fn(X, float(a[k]))
        if law is None:
            law = np.full((probs.shape[0], len(X)), 1.0 / len(X))
        law = np.stack([law[m] @ uniform_step_matrix(probs[m], X, a[k], a[k - 1], N) for m in range(len(law))])
    return law


def model_x0_fn(model, N: int):
    """``x0_fn`` of a trained :class:`BatchedMLP` for :func:`uniform_model_law` (softmax of its logits)."""
    def f(tokens, alpha):
        t = torch.as_tensor(tokens)
        inp = encode(t, torch.full((len(t),), alpha), N).expand(model.W[0].shape[0], -1, -1)
        with torch.no_grad():
            return torch.softmax(model(inp).double(), -1).numpy()
    return f


def exact_x0_fn(p0: np.ndarray, L: int, N: int):
    """The exact uniform-diffusion denoiser ``p(x0_i = a | x_t)`` of the data law ``p0`` (Bayes over all strings),
    as an ``x0_fn`` with one model: the oracle the sampler is checked with."""
    X = dd.all_strings(L, N)

    def f(tokens, alpha):
        lik = np.where(tokens[:, None, :] == X[None, :, :], alpha + (1 - alpha) / N, (1 - alpha) / N).prod(2)
        post = lik * p0[None, :]
        post /= post.sum(1, keepdims=True)                          # (n, N**L): p(x0 = z | x_t)
        return np.einsum("nz,zia->nia", post, np.eye(N)[X])[None]
    return f


def exact_masked_law(p0: np.ndarray, L: int, N: int, orders: np.ndarray) -> np.ndarray:
    """The law of :func:`masked_model_law` with the exact conditionals of ``p0`` (it must return ``p0``)."""
    X = dd.all_strings(L, N)
    law = np.zeros(len(X))
    for order in orders:
        logp = np.zeros(len(X))
        for j, i in enumerate(order):
            keys = [tuple(r) for r in X[:, list(order[:j + 1])]]
            prefix = [tuple(r) for r in X[:, list(order[:j])]]
            num, den = {}, {}
            for k, pk, w in zip(keys, prefix, p0):
                num[k] = num.get(k, 0.0) + w
                den[pk] = den.get(pk, 0.0) + w
            with np.errstate(divide="ignore"):
                logp += np.log([num[k] / den[pk] if den[pk] > 0 else 0.0 for k, pk in zip(keys, prefix)])
        law += np.exp(logp) / len(orders)
    return law


# ---------------------------------------------------------------------------------------------- metrics

def law_metrics(laws: np.ndarray, p0: np.ndarray, support: np.ndarray) -> dict:
    """For model laws ``(..., N**L)`` against ``p0`` (``(N**L,)``, or any shape that broadcasts against the
    laws, e.g. one law per model ``(n_models, N**L)``): ``s`` (mass on the support, the share of valid samples), ``support_nats``
    (``-log s``), ``freq_nats`` (``KL(p0 || law|S)``), ``kl`` (their sum, ``KL(p0 || law)``) and ``spearman``
    (rank correlation of ``law|S`` with ``p0`` over the support, 0 for a constant law); each of shape ``laws.shape[:-1]``."""
    s = laws[..., support].sum(-1)
    cond = laws[..., support] / s[..., None]
    p = np.broadcast_to(p0[..., support], cond.shape)
    freq = (p * (np.log(p) - np.log(np.maximum(cond, 1e-300)))).sum(-1)
    flat, pf = cond.reshape(-1, cond.shape[-1]), p.reshape(-1, cond.shape[-1])
    rho = np.array([0.0 if np.ptp(c) == 0 else stats.spearmanr(c, q).statistic
                    for c, q in zip(flat, pf)]).reshape(s.shape)
    return {"s": s, "support_nats": -np.log(s), "freq_nats": freq, "kl": freq - np.log(s), "spearman": rho}


def first_crossing(steps, values, level: float, above: bool, censor: float) -> np.ndarray:
    """Step at which ``values`` (first axis along ``steps``, the checkpoints) reaches ``level`` (``>=`` if
    ``above``, else ``<=``) for good: the first checkpoint after which every later one passes, moved back by
    linear interpolation in ``log(step)`` to where the curve crosses ``level`` from the last failing checkpoint.
    ``censor`` (e.g. twice the run's length) where it never settles; already passing at the first checkpoint gives
    that step. Column-wise for ``values`` ``(len(steps), ...)``; returns ``values.shape[1:]``."""
    v = np.asarray(values, float)
    steps = np.asarray(steps, float)
    ok = v >= level if above else v <= level
    settled = np.flip(np.cumprod(np.flip(ok, 0), 0), 0).astype(bool)      # passes from here to the end
    j = np.argmax(settled, 0)
    flat_v, flat_j, flat_ok = v.reshape(len(v), -1), j.reshape(-1), settled.reshape(len(v), -1)
    out = np.empty(flat_j.shape)
    logs = np.log(np.maximum(steps, 0.5))
    for c, jc in enumerate(flat_j):
        if not flat_ok[jc, c]:
            out[c] = censor
        elif jc == 0:
            out[c] = steps[0]
        else:
            v0, v1 = flat_v[jc - 1, c], flat_v[jc, c]
            w = (level - v0) / (v1 - v0) if v1 != v0 else 1.0
            out[c] = math.exp(logs[jc - 1] + min(max(w, 0.0), 1.0) * (logs[jc] - logs[jc - 1]))
    return out.reshape(j.shape)


# ---------------------------------------------------------------------------------------------- registry

def _step_inputs(rng, size):
    L, N = max(1, min(size, 3)), 2
    pr = rng.random((N ** L if size else 0, L, N)) + 0.05
    return {"x0_probs": pr / pr.sum(2, keepdims=True), "states": dd.all_strings(L, N), "a_t": 0.3, "a_s": 0.7,
            "N": N}


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    return [
        Kernel("diffusion_training.uniform_step_matrix", uniform_step_matrix, uniform_step_matrix_ref,
               _step_inputs, Contract(args=(Arg("x0_probs", ("float64",), 3, low=0.0),), empty="error",
                                      shapes="x0_probs: (N**L, L, N); states: (N**L, L); out: (N**L, N**L)"),
               tol={"float64": (1e-10, 1e-14)}, benchmark="diffusion_training.uniform_step_matrix",
               oracle="rows sum to one; the exact denoiser's chain reproduces p0 as K grows"),
    ]


KERNELS = _registry()

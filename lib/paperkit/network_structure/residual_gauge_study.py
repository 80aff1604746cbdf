"""The residual-gauge chapter's models and experiments (Torch): an RMSNorm or LayerNorm tiny transformer, its
re-parameterisation by a matrix acting on the residual basis, a latent-class sequence task, and the coordinate
tools moved between two charts (linear probe, steering vector, sparse autoencoder, AdamW state).

The model is the book's :class:`~paperkit.nn.tiny_transformer.TinyTransformer` (pre-norm, causal, learned
positions) with its three LayerNorms swapped for :class:`torch.nn.RMSNorm` when ``norm="rms"``; the shared class
is not changed. A gauge T (d, d) acts on every residual axis: read-in weights W (k, d) -> W T^T, write-out weights
and biases (d, k), (d,) -> T W, T b, embeddings and positions row-wise, and norm gains g -> g[perm] (a gain is a
diagonal: it can follow a permutation, never a rotation or a sign). With ``b = T a`` for every residual state,
the gauged model computes the same logits when T is in the norm's gauge group.
"""
from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from paperkit.network_structure import residual_gauge as rg
from paperkit.network_structure.residual_gauge import signed_perm_matrix
from paperkit.nn.tiny_transformer import TinyConfig, TinyTransformer

# parameter name suffix -> (residual axis or None, is a norm gain)
_RULES = (("embed.weight", 1, False), ("pe", 1, False), ("qkv.weight", 1, False), ("qkv.bias", None, False),
          ("attn.out.weight", 0, False), ("attn.out.bias", 0, False), ("mlp.0.weight", 1, False),
          ("mlp.0.bias", None, False), ("mlp.2.weight", 0, False), ("mlp.2.bias", 0, False),
          ("head.weight", 1, False), ("head.bias", None, False))


def residual_axis(name: str) -> tuple[int | None, bool]:
    """(the axis of parameter ``name`` that indexes the residual basis or None, whether it is a norm gain);
    norm biases (LayerNorm) transform like vectors, gains by permutation only."""
    parts = name.split(".")
    if len(parts) >= 2 and parts[-2].startswith("ln"):
        return 0, name.endswith("weight")
    for suffix, axis, gain in _RULES:
        if name.endswith(suffix):
            return axis, gain
    raise ValueError(f"name: no gauge rule for parameter {name!r}")


def make_model(norm: str, vocab: int, d_model: int, n_layers: int, n_heads: int, max_len: int,
               gen: torch.Generator) -> TinyTransformer:
    """A causal TinyTransformer with learned positions; ``norm`` 'ln' keeps its LayerNorms, 'rms' swaps all three
    kinds for RMSNorm with a per-channel gain (eps 1e-6). Weights drawn from a seed taken from ``gen``."""
    if norm not in ("rms", "ln"):
        raise ValueError(f"norm must be 'rms' or 'ln', got {norm!r}")
    model = TinyTransformer.seeded(TinyConfig(vocab=vocab, d_model=d_model, n_heads=n_heads, n_layers=n_layers,
                                              max_len=max_len, pos="learned"), gen)
    if norm == "rms":
        for blk in model.blocks:
            blk.ln1, blk.ln2 = nn.RMSNorm(d_model, eps=1e-6), nn.RMSNorm(d_model, eps=1e-6)
        model.ln_f = nn.RMSNorm(d_model, eps=1e-6)
    return model


def _along(x: torch.Tensor, T: torch.Tensor, axis: int) -> torch.Tensor:
    y = T.to(x.dtype) @ x.movedim(axis, 0).reshape(x.shape[axis], -1)
    return y.reshape(x.movedim(axis, 0).shape).movedim(0, axis)


def gauge_tensors(tensors: dict, T: torch.Tensor, gain_perm: np.ndarray | None, square: bool = False) -> dict:
    """Every tensor of ``tensors`` (parameter name -> tensor; parameters or optimizer moments of the same shape)
    moved to the chart ``b = T a``: T (d, d) along each residual axis; gains indexed by ``gain_perm`` (left as they
    are when None). ``square``: the tensors are second moments (Adam's v): |T| is applied instead of T."""
    Tm = T.abs() if square else T
    out = {}
    for name, x in tensors.items():
        axis, gain = residual_axis(name)
        if gain:
            out[name] = x.clone() if gain_perm is None else x[torch.as_tensor(gain_perm)].clone()
        elif axis is None:
            out[name] = x.clone()
        else:
            out[name] = _along(x.detach(), Tm, axis)
    return out


def gauge_model(model: nn.Module, T: torch.Tensor, gain_perm: np.ndarray | None) -> nn.Module:
    """A copy of ``model`` whose residual basis is ``b = T a`` (see :func:`gauge_tensors`)."""
    new = copy.deepcopy(model)
    with torch.no_grad():
        moved = gauge_tensors(dict(model.named_parameters()), T, gain_perm)
        for name, p in new.named_parameters():
            p.copy_(moved[name])
    return new


def signed_perm_tensor(perm, signs, dtype=torch.float32) -> torch.Tensor:
    """The dense signed permutation matrix T (d, d) as a tensor."""
    return torch.as_tensor(signed_perm_matrix(perm, signs), dtype=dtype)


def latent_class_batch(rng: np.random.Generator, bigram: np.ndarray, batch: int, length: int, p_class: float):
    """Sequences of a latent binary class c: each next token is, with probability ``p_class``, uniform over the
    class's half of the vocabulary (tokens < V/2 for c = 0, >= V/2 for c = 1) and otherwise a draw from
    ``bigram[previous token]``. Returns (tokens (batch, length) int64, c (batch,) int64)."""
    V = bigram.shape[0]
    c = rng.integers(0, 2, batch)
    x = np.empty((batch, length), dtype=np.int64)
    x[:, 0] = rng.integers(0, V, batch)
    cum = np.cumsum(bigram, 1)
    for t in range(1, length):
        u = rng.random(batch)
        from_bigram = np.minimum((cum[x[:, t - 1]] < u[:, None]).sum(1), V - 1)
        from_class = c * (V // 2) + rng.integers(0, V // 2, batch)
        x[:, t] = np.where(rng.random(batch) < p_class, from_class, from_bigram)
    return torch.from_numpy(x), torch.from_numpy(c)


def lm_loss(model, x: torch.Tensor) -> torch.Tensor:
    logits = model(x[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))


def train(model, opt, batches) -> np.ndarray:
    """One optimizer step per batch of tokens on the next-token loss; the losses (steps,)."""
    out = []
    for x in batches:
        opt.zero_grad()
        loss = lm_loss(model, x)
        loss.backward()
        opt.step()
        out.append(loss.item())
    return np.array(out)


def residual_states(model, x: torch.Tensor, steer: torch.Tensor | None = None, layer: int = 1):
    """The residual stream after the embedding and after each block, (n_layers + 1, batch, L, d), and the logits;
    ``steer`` (d,) is added to the residual entering block ``layer`` at every position (a steering vector)."""
    L = x.shape[1]
    h = model.embed(x) + model.cfg.pe_scale * model.pe[:L]
    states = [h]
    for k, blk in enumerate(model.blocks):
        if steer is not None and k == layer:
            h = h + steer
        h = blk(h)[0]
        states.append(h)
    return torch.stack(states), model.readout(h)


def class_logodds(logits: torch.Tensor) -> torch.Tensor:
    """log P(next token in the upper half) - log P(lower half), per position; logits (..., V) -> (...)."""
    V = logits.shape[-1]
    lp = logits.log_softmax(-1)
    return torch.logsumexp(lp[..., V // 2:], -1) - torch.logsumexp(lp[..., : V // 2], -1)


def steering_effect(model, x: torch.Tensor, v: torch.Tensor, layer: int = 1, skip: int = 4) -> float:
    """Mean change of :func:`class_logodds` over positions >= ``skip`` when ``v`` is added at block ``layer``."""
    with torch.no_grad():
        base = class_logodds(residual_states(model, x)[1])[:, skip:]
        moved = class_logodds(residual_states(model, x, v, layer)[1])[:, skip:]
    return float((moved - base).mean())


class SparseAutoencoder(nn.Module):
    """x_hat = W_d relu(W_e (x - b_d) + b_e) + b_d, with ``width`` latents; trained on MSE + l1 * |z|_1."""

    def __init__(self, d: int, width: int, gen: torch.Generator):
        super().__init__()
        self.enc = nn.Parameter(torch.randn(width, d, generator=gen) / d ** 0.5)
        self.dec = nn.Parameter(self.enc.detach().T.clone())
        self.b_e, self.b_d = nn.Parameter(torch.zeros(width)), nn.Parameter(torch.zeros(d))

    def forward(self, x):
        z = F.relu((x - self.b_d) @ self.enc.T + self.b_e)
        return z @ self.dec.T + self.b_d, z


def train_sae(X: torch.Tensor, width: int, steps: int, l1: float, gen: torch.Generator, lr: float = 3e-3):
    """A :class:`SparseAutoencoder` fitted to rows of X (n, d) by full-batch Adam."""
    sae = SparseAutoencoder(X.shape[1], width, gen)
    opt = torch.optim.Adam(sae.parameters(), lr=lr)
    for _ in range(steps):
        xh, z = sae(X)
        loss = ((xh - X) ** 2).sum(1).mean() + l1 * z.abs().sum(1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return sae


def nmse(X: torch.Tensor, X_hat: torch.Tensor) -> float:
    """sum |x - x_hat|^2 / sum |x - mean x|^2 over rows of X (n, d)."""
    return float(((X - X_hat) ** 2).sum() / ((X - X.mean(0)) ** 2).sum())


def adam_state(opt: torch.optim.Optimizer, model: nn.Module) -> dict:
    """{'exp_avg': {name: m}, 'exp_avg_sq': {name: v}, 'step': {name: t}} of a torch Adam/AdamW over ``model``."""
    out = {"exp_avg": {}, "exp_avg_sq": {}, "step": {}}
    for name, p in model.named_parameters():
        st = opt.state[p]
        for k in out:
            out[k][name] = st[k].clone()
    return out


def load_adam_state(opt: torch.optim.Optimizer, model: nn.Module, state: dict) -> None:
    """Write :func:`adam_state`'s dict into ``opt`` (built over ``model``'s parameters)."""
    for name, p in model.named_parameters():
        opt.state[p] = {k: state[k][name].clone() for k in state}


def transport_adam_state(state: dict, T: torch.Tensor, gain_perm: np.ndarray) -> dict:
    """Adam moments moved by the gauge: m like the parameters (T), v by |T| (it is a square), steps unchanged.
    Pass T = |T| (signs dropped) for permutation-only transport."""
    return {"exp_avg": gauge_tensors(state["exp_avg"], T, gain_perm),
            "exp_avg_sq": gauge_tensors(state["exp_avg_sq"], T, gain_perm, square=True),
            "step": {k: v.clone() for k, v in state["step"].items()}}


def param_distance(a: nn.Module, b: nn.Module) -> float:
    """Euclidean distance between two models' parameter vectors."""
    with torch.no_grad():
        return float(torch.sqrt(sum(((p - q) ** 2).sum() for p, q in zip(a.parameters(), b.parameters()))))


def ceiling_sweep(rng: np.random.Generator, dims, p_grid, n: int, noise: float, n_trials: int) -> dict:
    """Raw signed and sign-marginalized matching on :func:`~paperkit.network_structure.residual_gauge.ceiling_data`
    for every d in ``dims`` and share of + signs in ``p_grid``; ``n_trials`` fresh gauges each.

    Returns arrays of shape (len(dims), len(p_grid), n_trials): ``p_true`` (the realised share of + signs),
    ``raw`` and ``abs`` (permutation accuracy), ``abs_sign`` (coordinate and sign right).
    """
    shape = (len(dims), len(p_grid), n_trials)
    out = {k: np.zeros(shape) for k in ("p_true", "raw", "abs", "abs_sign")}
    for a, d in enumerate(dims):
        for b, p in enumerate(p_grid):
            for t in range(n_trials):
                perm, signs = rg.random_signed_perm(rng, d, p)
                A, B = rg.ceiling_data(rng, n, perm, signs, noise)
                C = rg.corr_matrix(B, A)
                out["p_true"][a, b, t] = float((signs > 0).mean())
                out["raw"][a, b, t] = rg.match_accuracy(*rg.hungarian_match(C, False), perm, signs)[0]
                out["abs"][a, b, t], out["abs_sign"][a, b, t] = rg.match_accuracy(*rg.hungarian_match(C, True),
                                                                                  perm, signs)
    return out


def model_deviation(model: nn.Module, other: nn.Module, x: torch.Tensor) -> float:
    """max |logits(model) - logits(other)| / max |logits(model)| on tokens x."""
    with torch.no_grad():
        a, b = model(x), other(x)
    return float((a - b).abs().max() / a.abs().max())


def flat_states(model: nn.Module, x: torch.Tensor) -> np.ndarray:
    """Every residual state (all layers, all positions) of ``model`` on ``x`` as rows, (samples, d), float64."""
    with torch.no_grad():
        S = residual_states(model, x)[0]
    return S.reshape(-1, S.shape[-1]).double().numpy()


def recover_gauges(model_a: nn.Module, model_b: nn.Module, x: torch.Tensor) -> dict:
    """Both matchings of chart B against chart A from their residual states on the same tokens: {'Bd': (perm,
    signs) sign-marginalized, 'Sd': (perm, ones) raw signed matching with the signs dropped (permutation-only
    alignment)} and 'C' the (d, d) cross-correlations."""
    C = rg.corr_matrix(flat_states(model_b, x), flat_states(model_a, x))
    bd = rg.hungarian_match(C, True)
    sd = rg.hungarian_match(C, False)
    return {"Bd": bd, "Sd": (sd[0], np.ones_like(sd[1])), "Sd_signs": sd[1], "C": C}


def source_tools(model: nn.Module, x: torch.Tensor, c: torch.Tensor, layer: int, steer_scale: float,
                 sae_steps: int, gen: torch.Generator, skip: int = 4) -> dict:
    """The coordinate tools of chart A, fitted on tokens x with classes c: the steering vector ``v`` =
    ``steer_scale`` times the class-mean difference of the residual entering block ``layer``; a logistic probe
    (``w``, ``b``) on that residual at the last position (scikit-learn); a 4x sparse autoencoder on it."""
    from sklearn.linear_model import LogisticRegression

    with torch.no_grad():
        H = residual_states(model, x)[0][layer]
    d = H.shape[-1]
    v = steer_scale * (H[c == 1, skip:].reshape(-1, d).mean(0) - H[c == 0, skip:].reshape(-1, d).mean(0))
    probe = LogisticRegression(max_iter=2000).fit(H[:, -1].double().numpy(), c.numpy())
    sae = train_sae(H[:, skip:].reshape(-1, d), 4 * d, sae_steps, 1e-3, gen)
    return {"v": v, "w": probe.coef_[0], "b": float(probe.intercept_[0]), "sae": sae, "layer": layer,
            "skip": skip}


def transfer_scores(model: nn.Module, tools: dict, T: torch.Tensor, x: torch.Tensor, c: torch.Tensor) -> dict:
    """The tools of chart A moved into ``model``'s chart by T (d, d) and used there on tokens x with classes c
    (steering measured on the class-0 sequences): ``steer`` (effect of T v), ``probe_acc`` (accuracy of the probe
    w -> T w), ``probe_scores`` (its scores), ``sae_nmse`` (NMSE of x -> T SAE(T^T x))."""
    layer, skip = tools["layer"], tools["skip"]
    with torch.no_grad():
        H = residual_states(model, x)[0][layer]
        X = H[:, skip:].reshape(-1, H.shape[-1])
        rec = tools["sae"](X @ T)[0] @ T.T
    scores = H[:, -1].double().numpy() @ (T.double().numpy() @ tools["w"]) + tools["b"]
    return {"steer": steering_effect(model, x[c == 0], T @ tools["v"], layer, skip),
            "probe_acc": float(((scores > 0) == c.numpy().astype(bool)).mean()), "probe_scores": scores,
            "sae_nmse": nmse(X, rec)}


def adam_transport(model: nn.Module, perm, signs, warm_batches, batches, lr: float, weight_decay: float) -> dict:
    """Resume AdamW training in a gauged chart, three ways, in float64.

    A copy of ``model`` trains on ``warm_batches`` (to fill AdamW's moments), is gauged by T = (perm, signs), and
    every variant then trains on ``batches``: the original chart (the reference trajectory), and the gauged copy
    with its moments moved ``signed`` (m by T, v by |T|), ``perm`` (m and v by |T|: signs dropped), ``rounded``
    (signed, then every moment rounded to float32 and back: a state error of about 6e-8 relative, the control for
    "any state error drifts this far") or ``reset`` (fresh AdamW). Returns, per variant, ``dist`` (steps,): the distance of its parameters, mapped back by T^T, to
    the reference's at each step, over the distance the reference has moved by the last step; ``start``: the
    relative logit deviation of the gauged copy from the original before resuming (0: functionally identical).
    """
    A = copy.deepcopy(model).double()
    opt_a = torch.optim.AdamW(A.parameters(), lr=lr, weight_decay=weight_decay)
    train(A, opt_a, warm_batches)
    T = signed_perm_tensor(perm, signs, torch.float64)
    inv_p, inv_s = rg.signed_perm_invert(perm, signs)
    T_inv = signed_perm_tensor(inv_p, inv_s, torch.float64)
    state, A0 = adam_state(opt_a, A), copy.deepcopy(A)
    runs = {}
    for mode in ("signed", "perm", "rounded", "reset"):
        B = gauge_model(A0, T, perm)
        opt = torch.optim.AdamW(B.parameters(), lr=lr, weight_decay=weight_decay)
        if mode != "reset":
            moved = transport_adam_state(state, T.abs() if mode == "perm" else T, perm)
            if mode == "rounded":
                moved = {k: {n: t.float().double() if k != "step" else t for n, t in v.items()}
                         for k, v in moved.items()}
            load_adam_state(opt, B, moved)
        runs[mode] = (B, opt)
    start = model_deviation(A0, runs["perm"][0], warm_batches[0])
    ref = []
    for x in batches:
        train(A, opt_a, [x])
        ref.append(copy.deepcopy(A))
    moved = param_distance(A, A0)
    out = {"start": start}
    for mode, (B, opt) in runs.items():
        dist = []
        for x, r in zip(batches, ref):
            train(B, opt, [x])
            dist.append(param_distance(gauge_model(B, T_inv, inv_p), r) / moved)
        out[mode] = np.array(dist)
    return out

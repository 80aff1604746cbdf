"""Mixture-of-experts selective SSMs in two designs: experts mixed in parameter space (one scan) or run apart (E scans).

Every expert e produces its own selective-SSM stream from the input: step sizes Delta_e > 0, input matrix B_e and
read-out C_e; a router gives convex weights w_e,t (softmax, sum_e w_e,t = 1). The transition A (negative real part)
is shared by the experts, or given per expert.

* MoE-parameterised SSM (Swimba's design, our reading): mix the parameters, then run ONE recurrence

      Delta_t = sum_e w_e,t Delta_e,t    B_t = sum_e w_e,t B_e,t    C_t = sum_e w_e,t C_e,t    A_t = sum_e w_e,t A_e
      h_t = exp(Delta_t A_t) h_{t-1} + Delta_t B_t u_t,    y_t = <C_t, h_t> + D u_t

* MoE over separated SSMs: E recurrences, each fed the router-gated input w_e,t u_t, outputs summed

      h^e_t = exp(Delta_e,t A_e) h^e_{t-1} + Delta_e,t B_e,t (w_e,t u_t),    y_t = sum_e <C_e,t, h^e_t> + D u_t

With Delta, A and C shared the two are equal for any routing (the scan is linear in its input term); they part
through Delta-mixing inside exp and through C-mixing (cross terms C_e h^f).

Shapes (the layout of :mod:`paperkit.nn.selective_scan`, an expert axis E after the batch): ``u`` (batch, D, L);
``delta_e`` (batch, E, D, L), positive; ``A`` (D, N) shared or (E, D, N) per expert; ``B_e``, ``C_e``
(batch, E, N, L); ``w`` (batch, E, L); ``D`` (D,) or None. Both designs call a selective scan with the signature of
:func:`paperkit.nn.selective_scan.selective_scan_ref` (``scan=``, :func:`~paperkit.nn.selective_scan.selective_scan_torch`
by default; wrap it in :class:`~paperkit.nn.selective_scan.ScanCounter` to count calls and state updates). :func:`moe_param_ssm_ref` and
:func:`moe_separated_ssm_ref` are per-timestep loops with the same signatures that never call a scan.

The rest of the module is the chapter's miniature: a regime-switching filter task, a one-layer model in the three
designs (dense, parameter-mixed, separated), FLOPs per token, training and the router's mutual information.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import mutual_info_score
from torch import nn

from paperkit.nn.selective_scan import ScanCounter, selective_scan_fused, selective_scan_numba, selective_scan_torch
from paperkit.timing import speed_ratio

DESIGNS = ("dense", "param", "separated")


def scan_numba_torch(u, delta, A, B, C, D=None, delta_softplus=False, return_last_state=False):
    """:func:`~paperkit.nn.selective_scan.selective_scan_numba` on CPU Torch tensors (forward only, for timing)."""
    arr = lambda t: None if t is None else t.detach().numpy()  # noqa: E731
    out = selective_scan_numba(arr(u), arr(delta), arr(A), arr(B), arr(C), arr(D), delta_softplus, return_last_state)
    return tuple(map(torch.from_numpy, out)) if return_last_state else torch.from_numpy(out)


def _check(u, delta_e, A, B_e, C_e, w, D) -> tuple[int, int, int, int, int]:
    """Validate shapes; return (batch, E, D, L, N)."""
    if u.ndim != 3:
        raise ValueError(f"u must be (batch, D, L), got shape {tuple(u.shape)}")
    b, d, L = u.shape
    if w.ndim != 3 or w.shape[0] != b or w.shape[2] != L or w.shape[1] < 1:
        raise ValueError(f"w must be (batch={b}, E, L={L}), got {tuple(w.shape)}")
    e = w.shape[1]
    if tuple(delta_e.shape) != (b, e, d, L):
        raise ValueError(f"delta_e must be (batch, E, D, L) = {(b, e, d, L)}, got {tuple(delta_e.shape)}")
    if A.ndim not in (2, 3) or A.shape[-2] != d or (A.ndim == 3 and A.shape[0] != e):
        raise ValueError(f"A must be (D={d}, N) or (E={e}, D={d}, N), got {tuple(A.shape)}")
    n = A.shape[-1]
    for name, M in (("B_e", B_e), ("C_e", C_e)):
        if tuple(M.shape) != (b, e, n, L):
            raise ValueError(f"{name} must be (batch, E, N, L) = {(b, e, n, L)}, got {tuple(M.shape)}")
    if D is not None and tuple(D.shape) != (d,):
        raise ValueError(f"D must be (D,) = ({d},), got {tuple(D.shape)}")
    return b, e, d, L, n


def moe_param_mix(w, p_e):
    """Router-weighted mixture of expert parameters: p_t = sum_e w_e,t p_e,t. ``w`` (batch, E, L), ``p_e``
    (batch, E, K, L) -> (batch, K, L); convex when ``w`` is (softmax weights)."""
    if w.ndim != 3 or p_e.ndim != 4 or p_e.shape[:2] != w.shape[:2] or p_e.shape[3] != w.shape[2]:
        raise ValueError(f"p_e must be (batch, E, K, L) matching w {tuple(w.shape)}, got {tuple(p_e.shape)}")
    # sum_e w_e,t p_e,t as a broadcast product: einsum's batched matmul path is ~10x slower at these shapes
    return (w[:, :, None] * p_e).sum(1)


def mixed_log_transition(delta_e, A, w):
    """The exponent of the single trajectory's transition, Delta_t A_t with Delta_t = sum_e w_e,t Delta_e,t and
    A_t = sum_e w_e,t A_e (or the shared A): (batch, D, N, L). Negative for convex w, positive Delta_e, negative A."""
    dbar = moe_param_mix(w, delta_e)  # (b, D, L)
    A_t = A[None, :, :, None] if A.ndim == 2 else torch.einsum("bel,edn->bdnl", w, A)
    return dbar[:, :, None] * A_t


def mixed_discretisation(u, delta_e, A, B_e, w):
    """The single trajectory's transition and input term, (batch, D, N, L) each:
    abar_t = exp(Delta_t A_t) and bbar_t = Delta_t B_t u_t with the router-mixed Delta_t, A_t, B_t."""
    _check(u, delta_e, A, B_e, B_e, w, None)
    dbar = moe_param_mix(w, delta_e)
    bbar = moe_param_mix(w, B_e)  # (b, N, L)
    return torch.exp(mixed_log_transition(delta_e, A, w)), dbar[:, :, None] * bbar[:, None] * u[:, :, None]


def diagonal_scan(abar, bbar, scan=selective_scan_torch):
    """States of h_t = abar_t h_{t-1} + bbar_t, h_{-1} = 0, element-wise over (batch, D, N): (batch, D, N, L).

    One call of ``scan`` over D*N channels with one state each: delta' = -log abar (> 0 when 0 < abar < 1),
    A' = -1 so that exp(delta' A') = abar, input u' = bbar / delta' with B' = 1 so that delta' B' u' = bbar, C' = 1.
    """
    if abar.ndim != 4 or abar.shape != bbar.shape:
        raise ValueError(f"abar and bbar must both be (batch, D, N, L), got {tuple(abar.shape)}, {tuple(bbar.shape)}")
    b, d, n, L = abar.shape
    step = -torch.log(abar).reshape(b, d * n, L)
    ones = abar.new_ones(b, 1, L)
    h = scan(bbar.reshape(b, d * n, L) / step, step, -abar.new_ones(d * n, 1), ones, ones)
    return h.reshape(b, d, n, L)


def moe_param_ssm(u, delta_e, A, B_e, C_e, w, D=None, scan=selective_scan_torch):
    """MoE-parameterised SSM: mix (Delta_e, B_e, C_e[, A_e]) with the router's weights, run ONE selective scan.
    Returns y (batch, D, L). Shapes in the module docstring."""
    _check(u, delta_e, A, B_e, C_e, w, D)
    cbar = moe_param_mix(w, C_e)
    if A.ndim == 2:
        return scan(u, moe_param_mix(w, delta_e), A, moe_param_mix(w, B_e), cbar, D)
    # per-expert A makes A_t token-dependent: one scan over D*N one-state channels
    h = diagonal_scan(*mixed_discretisation(u, delta_e, A, B_e, w), scan=scan)
    y = torch.einsum("bdnl,bnl->bdl", h, cbar)
    return y if D is None else y + D[:, None] * u


def moe_separated_ssm(u, delta_e, A, B_e, C_e, w, D=None, scan=selective_scan_torch):
    """MoE over separated SSMs: expert e scans the gated input w_e,t u_t with its own (Delta_e, A_e, B_e, C_e);
    the E outputs are summed. E selective scans. Returns y (batch, D, L)."""
    _, e, _, _, _ = _check(u, delta_e, A, B_e, C_e, w, D)
    y = sum(scan(w[:, k, None] * u, delta_e[:, k], A if A.ndim == 2 else A[k], B_e[:, k], C_e[:, k])
            for k in range(e))
    return y if D is None else y + D[:, None] * u


def moe_param_ssm_ref(u, delta_e, A, B_e, C_e, w, D=None, scan=None):
    """Reference for :func:`moe_param_ssm`: the mixed recurrence one timestep at a time (``scan`` unused)."""
    b, e, d, L, n = _check(u, delta_e, A, B_e, C_e, w, D)
    h = u.new_zeros(b, d, n)
    ys = []
    for t in range(L):
        wt = w[:, :, t]  # (b, E)
        dt = torch.einsum("be,bed->bd", wt, delta_e[:, :, :, t])[:, :, None]
        At = A[None] if A.ndim == 2 else torch.einsum("be,edn->bdn", wt, A)
        Bt, Ct = torch.einsum("be,ben->bn", wt, B_e[:, :, :, t]), torch.einsum("be,ben->bn", wt, C_e[:, :, :, t])
        # h_t = exp(Delta_t A_t) h_{t-1} + Delta_t B_t u_t
        h = torch.exp(dt * At) * h + dt * Bt[:, None] * u[:, :, t, None]
        ys.append(torch.einsum("bdn,bn->bd", h, Ct))
    y = torch.stack(ys, -1)
    return y if D is None else y + D[:, None] * u


def moe_separated_ssm_ref(u, delta_e, A, B_e, C_e, w, D=None, scan=None):
    """Reference for :func:`moe_separated_ssm`: E trajectories stepped together one timestep at a time."""
    b, e, d, L, n = _check(u, delta_e, A, B_e, C_e, w, D)
    Ae = A[None].expand(e, d, n) if A.ndim == 2 else A
    h = u.new_zeros(b, e, d, n)
    ys = []
    for t in range(L):
        dt = delta_e[:, :, :, t, None]  # (b, E, D, 1)
        gated = w[:, :, None, t] * u[:, None, :, t]  # w_e,t u_t: (b, E, D)
        # h^e_t = exp(Delta_e,t A_e) h^e_{t-1} + Delta_e,t B_e,t (w_e,t u_t)
        h = torch.exp(dt * Ae) * h + dt * B_e[:, :, None, :, t] * gated[..., None]
        ys.append(torch.einsum("bedn,ben->bd", h, C_e[:, :, :, t]))
    y = torch.stack(ys, -1)
    return y if D is None else y + D[:, None] * u


def transition_range(delta_e, A):
    """Bounds (lo, hi), each (batch, D, N, L), on the mixed transition for ANY convex router weights:
    Delta_t in [min_e Delta_e,t, max_e Delta_e,t] and A_t in [min_e A_e, max_e A_e] < 0, so
    exp(max Delta * min A) <= exp(Delta_t A_t) <= exp(min Delta * max A) < 1 (for a shared A: the experts' own
    transitions bracket the mixed one)."""
    A_lo, A_hi = (A, A) if A.ndim == 2 else (A.amin(0), A.amax(0))
    d_lo, d_hi = delta_e.amin(1)[:, :, None], delta_e.amax(1)[:, :, None]  # (b, D, 1, L)
    return torch.exp(d_hi * A_lo[None, :, :, None]), torch.exp(d_lo * A_hi[None, :, :, None])


def state_bound(abar, bbar):
    """Per (batch, D, N): the bound sup_t |h_t| <= max_t |bbar_t| / (1 - max_t abar_t), valid when max abar < 1."""
    return bbar.abs().amax(-1) / (1 - abar.amax(-1))


def random_moe_inputs(gen, batch, n_experts, d, n, length, delta_spread=0.0, shared_C=True, routing="token",
                      per_expert_A=False, dtype=torch.float64):
    """Random streams for the two designs: (u, delta_e, A, B_e, C_e, w).

    Delta_e,t = Delta_t exp(delta_spread z_e,t) with Delta_t log-uniform in [1e-2, 1] and z ~ N(0, 1), so the
    experts' step sizes spread by a factor exp(delta_spread) around a shared one; A in [-2, -0.1] (Re A < 0);
    ``routing``: "token" (softmax of N(0, 2^2) logits per token), "onehot" (expert 0 everywhere) or "affine"
    (weights summing to one with negative entries: outside the theorem, a control).
    """
    for k, v in dict(batch=batch, n_experts=n_experts, d=d, n=n, length=length).items():
        if v < 1:
            raise ValueError(f"{k} must be >= 1, got {v}")
    r = lambda *s: torch.randn(*s, generator=gen, dtype=dtype)  # noqa: E731
    u, B_e = r(batch, d, length), r(batch, n_experts, n, length)
    C_e = r(batch, 1, n, length).expand(-1, n_experts, -1, -1) if shared_C else r(batch, n_experts, n, length)
    base = 10 ** (2 * torch.rand(batch, 1, d, length, generator=gen, dtype=dtype) - 2)
    delta_e = base * torch.exp(delta_spread * r(batch, n_experts, d, length))
    a_shape = (n_experts, d, n) if per_expert_A else (d, n)
    A = -(0.1 + 1.9 * torch.rand(*a_shape, generator=gen, dtype=dtype))
    if routing == "token":
        w = torch.softmax(2 * r(batch, n_experts, length), dim=1)
    elif routing == "onehot":
        w = torch.zeros(batch, n_experts, length, dtype=dtype)
        w[:, 0] = 1
    elif routing == "affine":
        raw = 3 * r(batch, n_experts, length)
        w = raw - raw.mean(1, keepdim=True) + 1 / n_experts
    else:
        raise ValueError(f"routing must be 'token', 'onehot' or 'affine', got {routing!r}")
    return u, delta_e, A, B_e, C_e.contiguous(), w


def mixer_costs(n_experts_list, batch: int, d: int, n: int, length: int, gen: torch.Generator, repeats: int = 7):
    """Per E: counted scans and state updates of both designs, and time ratios from interleaved repeats
    (:func:`paperkit.timing.speed_ratio`) of the token mixers with the Numba scan, float32, forward only, each over
    one plain selective scan of the same D, N (the dense recurrence): ``sep_over_scan`` = t(separated) / t(scan),
    ``param_over_scan`` = t(param) / t(scan). Expert streams are drawn once per E and not timed."""
    rows = []
    for E in n_experts_list:
        args = random_moe_inputs(gen, batch, E, d, n, length, delta_spread=0.5, dtype=torch.float32)
        cp, cs = ScanCounter(scan_numba_torch), ScanCounter(scan_numba_torch)
        moe_param_ssm(*args, scan=cp)
        moe_separated_ssm(*args, scan=cs)
        u, delta_e, A, B_e, C_e, _ = args
        param = lambda: moe_param_ssm(*args, scan=scan_numba_torch)  # noqa: E731
        sep = lambda: moe_separated_ssm(*args, scan=scan_numba_torch)  # noqa: E731
        plain = lambda: scan_numba_torch(u, delta_e[:, 0], A, B_e[:, 0], C_e[:, 0])  # noqa: E731
        r_sep, r_param = speed_ratio(plain, sep, repeats), speed_ratio(plain, param, repeats)
        rows.append(dict(E=E, scans_param=cp.calls, scans_sep=cs.calls, updates_param=cp.state_updates,
                         updates_sep=cs.state_updates, sep_over_scan=r_sep.ratio, param_over_scan=r_param.ratio,
                         t_param_s=r_param.t_baseline_s, t_sep_s=r_sep.t_baseline_s, t_scan_s=r_param.t_candidate_s))
    return rows


# ---------------------------------------------------------------- the miniature: task, model, FLOPs, training

TAUS = (2.0, 4.0, 8.0, 16.0)  # the four regimes' EMA time constants (tokens)


def regime_filter_task(rng: np.random.Generator, n: int, length: int, n_signal: int = 6, cue_noise: float = 0.5,
                       seg_min: int = 8, seg_max: int = 32, flip=(1, 2)):
    """Sequences whose filter switches regime: x (n, L, n_signal + 2), y (n, L, n_signal) float32, regime (n, L).

    Segments of random length in [seg_min, seg_max] each carry a regime r in {0..3}. The last two input channels
    are a noisy code of r (bits of r as +-1, plus N(0, cue_noise^2)); the others are white noise s_t. The target is
    an EMA with the regime's time constant tau_r, h_t = (1 - a_r) h_{t-1} + a_r s_t with a_r = 1 - exp(-1/tau_r),
    read out with the sign of channels 0 and 1 flipped in the regimes listed in ``flip`` (default 1 and 2: the XOR
    of the cue's bits, which no linear function of the cue gives).
    """
    for k, v in dict(n=n, length=length, n_signal=n_signal, seg_min=seg_min).items():
        if v < 1:
            raise ValueError(f"{k} must be >= 1, got {v}")
    if seg_max < seg_min or cue_noise < 0:
        raise ValueError(f"need seg_max >= seg_min and cue_noise >= 0, got {seg_max}, {seg_min}, {cue_noise}")
    regime = np.empty((n, length), dtype=np.int64)
    for i in range(n):
        t = 0
        while t < length:
            seg = rng.integers(seg_min, seg_max + 1)
            regime[i, t:t + seg] = rng.integers(0, len(TAUS))
            t += seg
    s = rng.standard_normal((n, length, n_signal))
    bits = np.stack([regime & 1, regime >> 1], -1) * 2.0 - 1
    x = np.concatenate([s, bits + cue_noise * rng.standard_normal(bits.shape)], -1)
    a = 1 - np.exp(-1 / np.array(TAUS))[regime]  # (n, L)
    h = np.zeros((n, n_signal))
    y = np.empty_like(s)
    for t in range(length):
        # h_t = (1 - a_r) h_{t-1} + a_r s_t
        h = (1 - a[:, t, None]) * h + a[:, t, None] * s[:, t]
        y[:, t] = h
    y[:, :, :2] *= np.where(np.isin(regime, flip), -1.0, 1.0)[..., None]
    return x.astype(np.float32), y.astype(np.float32), regime


def _linear(fan_in: int, fan_out: int, gen: torch.Generator, bias: bool = True) -> nn.Linear:
    """nn.Linear with weights drawn from ``gen`` (uniform +-1/sqrt(fan_in), Torch's default range)."""
    lin = nn.Linear(fan_in, fan_out, bias=bias)
    bound = 1 / math.sqrt(fan_in)
    with torch.no_grad():
        lin.weight.copy_((torch.rand(fan_out, fan_in, generator=gen) * 2 - 1) * bound)
        if bias:
            lin.bias.copy_((torch.rand(fan_out, generator=gen) * 2 - 1) * bound)
    return lin


class MoESSM(nn.Module):
    """One selective-SSM layer with a linear read-out, in one of three designs.

    x (batch, L, d_in) -> u = W_in x (D channels) -> per expert e: Delta_e = softplus(W_Delta^e u + b^e),
    B_e = W_B^e u, C_e = W_C^e u -> router w = softmax(W_r u) -> token mixer -> y = W_out (mixer output).
    ``design``: "dense" (one expert, no router), "param" (:func:`moe_param_ssm`), "separated"
    (:func:`moe_separated_ssm`). A = -exp(A_log) (D, N), shared by the experts, S4D-real init A_n = -(n + 1);
    Delta biases give initial step sizes log-uniform in [1e-2, 0.5], as Mamba's dt init.
    """

    def __init__(self, d_in: int, d_out: int, d_model: int, d_state: int, n_experts: int, design: str,
                 gen: torch.Generator):
        super().__init__()
        if design not in DESIGNS:
            raise ValueError(f"design must be one of {DESIGNS}, got {design!r}")
        if design == "dense" and n_experts != 1:
            raise ValueError(f"n_experts must be 1 for the dense design, got {n_experts}")
        for k, v in dict(d_in=d_in, d_out=d_out, d_model=d_model, d_state=d_state, n_experts=n_experts).items():
            if v < 1:
                raise ValueError(f"{k} must be >= 1, got {v}")
        self.design, self.E, self.d_model, self.N = design, n_experts, d_model, d_state
        self.in_proj = _linear(d_in, d_model, gen)
        self.delta_proj = _linear(d_model, n_experts * d_model, gen)
        dt = torch.exp(torch.rand(n_experts * d_model, generator=gen) * math.log(50) + math.log(1e-2))
        with torch.no_grad():
            self.delta_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus^{-1}(dt)
        self.bc_proj = _linear(d_model, n_experts * 2 * d_state, gen, bias=False)
        self.router = _linear(d_model, n_experts, gen) if design != "dense" else None
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1, dtype=torch.float32)).repeat(d_model, 1))
        self.D = nn.Parameter(torch.ones(d_model))
        self.out_proj = _linear(d_model, d_out, gen)

    def forward(self, x, scan=selective_scan_torch, return_router=False):
        b, L, _ = x.shape
        ut = self.in_proj(x)  # (b, L, D)
        u = ut.transpose(1, 2)
        delta_e = F.softplus(self.delta_proj(ut)).view(b, L, self.E, self.d_model).permute(0, 2, 3, 1)
        bc = self.bc_proj(ut).view(b, L, self.E, 2, self.N).permute(0, 2, 3, 4, 1)  # (b, E, 2, N, L)
        A = -torch.exp(self.A_log)
        if self.design == "dense":
            w = None
            y = scan(u, delta_e[:, 0], A, bc[:, 0, 0], bc[:, 0, 1], self.D)
        else:
            w = torch.softmax(self.router(ut), dim=-1).transpose(1, 2)  # (b, E, L)
            mixer = moe_param_ssm if self.design == "param" else moe_separated_ssm
            y = mixer(u, delta_e, A, bc[:, :, 0], bc[:, :, 1], w, self.D, scan=scan)
        out = self.out_proj(y.transpose(1, 2))
        return (out, w) if return_router else out


SCAN_FLOPS = 7  # per state update: Delta*A, exp, *h, Delta*u*B, +, and the read-out's multiply-add


def flops_per_token(d_in: int, d_out: int, d_model: int, d_state: int, n_experts: int, design: str) -> int:
    """Forward FLOPs per token of :class:`MoESSM` (a multiply-add counts 2; elementwise ops 1; exp 1)."""
    D, N, E = d_model, d_state, n_experts
    proj = 2 * d_in * D + E * (2 * D * D + 2 * D * 2 * N) + 2 * D * d_out + 2 * D  # in, Delta, B, C, out, skip
    if design == "dense":
        return proj + D + SCAN_FLOPS * D * N  # + softplus
    router = 2 * D * E + 3 * E + E * D  # logits, softmax, softplus of every expert's Delta
    if design == "param":
        return proj + router + 2 * E * (D + 2 * N) + SCAN_FLOPS * D * N  # mix Delta, B, C; one scan
    return proj + router + E * D + E * SCAN_FLOPS * D * N + (E - 1) * D  # gate, E scans, sum


def matched_dense_width(d_in: int, d_out: int, d_model: int, d_state: int, n_experts: int) -> int:
    """Channel count D_a of the dense model whose FLOPs per token are closest to the parameter-mixed model's."""
    target = flops_per_token(d_in, d_out, d_model, d_state, n_experts, "param")
    return min(range(1, 64 * d_model), key=lambda D: abs(flops_per_token(d_in, d_out, D, d_state, 1, "dense") - target))


def _training_scan(x):
    """The differentiable scan for data on ``x``'s device: :func:`selective_scan_fused` (compiled forward and reverse
    scan) on the CPU, the chunked :func:`selective_scan_torch` elsewhere."""
    return selective_scan_fused if x.device.type == "cpu" else selective_scan_torch


def train_model(model: MoESSM, x, y, steps: int, batch: int, lr: float, gen: torch.Generator,
                scan=None):
    """Adam (one-cycle schedule peaking at ``lr``, gradient norm clipped at 1) on the mean squared error for ``steps``
    minibatches of ``batch`` sequences drawn with ``gen``; scans with ``scan`` (default :func:`_training_scan`).
    Returns the loss per step (numpy)."""
    scan = scan or _training_scan(x)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    losses = np.empty(steps)
    for i in range(steps):
        idx = torch.randint(0, x.shape[0], (batch,), generator=gen)
        loss = F.mse_loss(model(x[idx], scan=scan), y[idx])
        opt.zero_grad()
        loss.backward()
        # a rare large step at the peak rate would otherwise throw a run off; clipping keeps all designs stable
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses[i] = loss.item()
    return losses


@torch.no_grad()
def evaluate(model: MoESSM, x, y, batch: int = 256, scan=None):
    """Test MSE and, for routed designs, the router weights (n, E, L) (None for dense); ``scan`` as in
    :func:`train_model`."""
    scan = scan or _training_scan(x)
    sq, ws = 0.0, []
    for s in range(0, x.shape[0], batch):
        out, w = model(x[s:s + batch], scan=scan, return_router=True)
        sq += F.mse_loss(out, y[s:s + batch], reduction="sum").item()
        ws.append(w)
    return sq / y.numel(), (None if ws[0] is None else torch.cat(ws))


def mutual_information_bits(a, b) -> float:
    """Mutual information between two discrete label arrays, in bits (scikit-learn's estimate in nats / ln 2)."""
    return mutual_info_score(np.ravel(a), np.ravel(b)) / math.log(2)


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Contract, Kernel

    def inputs(rng, size):
        b, E, d, L, n = 2, 3, 2, 5, 4
        t = lambda *s: torch.from_numpy(rng.normal(size=s))  # noqa: E731
        w = torch.softmax(t(b, E, L), dim=1)
        return {"u": t(b, d, L), "delta_e": torch.from_numpy(rng.uniform(0.05, 0.5, (b, E, d, L))),
                "A": -torch.from_numpy(rng.uniform(0.5, 2, (d, n))), "B_e": t(b, E, n, L), "C_e": t(b, E, n, L),
                "w": w}

    return [Kernel("moe_ssm.moe_param_ssm", moe_param_ssm, moe_param_ssm_ref, inputs,
                   Contract(empty="value", shapes="u: (batch, D, L); delta_e: (batch, E, D, L); w: (batch, E, L)"),
                   tol={"float64": (1e-9, 1e-12)}, benchmark="moe_param_ssm (selective_scan_torch)",
                   oracle="per-timestep loop")]


KERNELS = _registry()


@torch.no_grad()
def forward_time_ratios(models: dict, baseline: str, batch: int, length: int, gen: torch.Generator,
                        repeats: int = 9, d_in: int = 8, d_out: int = 6, d_state: int = 8) -> dict:
    """Whole forward pass (projections, router, token mixer; Numba scan) of each :class:`MoESSM` in ``models``
    (``name -> (design, d_model, n_experts)``) over that of ``models[baseline]``, from interleaved repeats
    (:func:`paperkit.timing.speed_ratio`) on one random batch ``(batch, length, d_in)``; fresh weights from ``gen``.
    Returns ``name -> t(name) / t(baseline)`` for every other name."""
    if baseline not in models:
        raise ValueError(f"baseline {baseline!r} is not one of {list(models)}")
    if batch < 1 or length < 1 or repeats < 1:
        raise ValueError(f"batch, length and repeats must be >= 1, got {batch}, {length}, {repeats}")
    nets = {k: MoESSM(d_in, d_out, d, d_state, e, des, gen) for k, (des, d, e) in models.items()}
    x = torch.randn(batch, length, d_in, generator=gen)
    run = {k: (lambda n=n: n(x, scan=scan_numba_torch)) for k, n in nets.items()}
    return {k: speed_ratio(run[baseline], f, repeats).ratio for k, f in run.items() if k != baseline}

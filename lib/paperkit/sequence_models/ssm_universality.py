"""Constructive universality of a clocked diagonal selective scan with a linear-in-state readout.

Set-up (our reading of the paper). Inputs are sequences x = (x_1, ..., x_T) in [0, 1]^T; a causal target is a family
f_t(x_1, ..., x_t), t = 1..T. The scan has K = m^T state coordinates, one per multi-index k = (c_1, ..., c_T) in
{0..m-1}^T, starts at h_0 = 1 and multiplies by an input- and time-dependent ("clocked") gate:

    h_t[k] = a(x_t, t)[k] * h_{t-1}[k],     a(x_t, t)[k] = (1 - eps) * max(phi_{c_t}(x_t), eta)  in (0, 1)

where phi_0..phi_{m-1} are hat functions on the nodes c / (m - 1) (a partition of unity of [0, 1]). So h_t[k] is
(1 - eps)^t times a product of per-step soft indicators: a tensor-product partition feature of the prefix. The
readout is linear in the state and indexed by time, with weights that are samples of the target at the nodes:

    y_t = sum_k W_t[k] h_t[k],    W_t[k] = f_t(node_{c_1}, ..., node_{c_t}) / (m^{T-t} (1 - eps)^t)

(the later indices c_{t+1..T} sum out, hence the m^{T-t}). With eta = 0 the readout is exactly the multilinear
interpolant of f_t on the node grid, so for a Lipschitz target the sup error falls like 1 / m.

Non-selective baselines: a diagonal scan whose gates do not depend on the input, h_t = lambda_t * h_{t-1} + b_t u_t,
with u_t = x_t (or any fixed per-token encoding e(x_t)) and any time-indexed linear readout, outputs a linear
combination of {1, x_s : s <= t} (of {1, e(x_s) : s <= t}). Its best mean-squared error on a sample is therefore a
least-squares problem on those features: :func:`ls_floor` computes that floor exactly.

Kernels (each with a plain reference of the same signature):

* :func:`clocked_scan_readout` (Numba, fused scan and readout, never stores the (batch, K, T) states) and
  :func:`clocked_scan_readout_ref`, which runs the same construction through the shared Mamba-form oracle
  :func:`paperkit.nn.selective_scan.selective_scan_ref` (one channel per state coordinate, A = -1, Delta_t = -log a_t).
* :func:`lti_scan_states` (a Numba multiply-add loop, input-independent decays: no exp) and :func:`lti_scan_states_ref`.

Training: :class:`ClockedScanEnsemble` trains several small selective and non-selective scans at once on
:func:`paperkit.nn.selective_scan.selective_scan_torch`.
"""
from __future__ import annotations

import math

import numba
import numpy as np
import scipy.linalg
import torch

from paperkit.nn.selective_scan import selective_scan_numba, selective_scan_ref, selective_scan_torch
from paperkit.training import AdamCosine

# Relative pivot size below which least squares treats a feature direction as rounding noise (see ls_readout_fit).
_LS_COND = 1e-10
# Largest state count m^T the construction will build (65536 states x 20k sequences x 4 steps is ~10 s here).
MAX_STATES = 1 << 16


def _check_x(x, name: str = "x") -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] < 1:
        raise ValueError(f"{name} must be (batch, T) with T >= 1, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contains NaN or inf")
    return x


def _check_int(v, name: str, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    return int(v)


# ---------------------------------------------------------------------------------------------------------------
# Causal targets: (batch, T) -> (batch, T), column t depends on x_1..x_t only


def target_sinmax(x) -> np.ndarray:
    """y_t = sin(3 x_t) x_{t-1} + max_{s<=t} x_s (x_0 = 0): Lipschitz, with kinks where two inputs tie."""
    x = _check_x(x)
    prev = np.concatenate([np.zeros((len(x), 1)), x[:, :-1]], axis=1)
    return np.sin(3 * x) * prev + np.maximum.accumulate(x, axis=1)


def target_sinprod(x) -> np.ndarray:
    """y_t = prod_{s<=t} sin(pi x_s): smooth, a product over the whole prefix (nonlinear already at t = 1)."""
    x = _check_x(x)
    return np.cumprod(np.sin(np.pi * x), axis=1)


def target_cprod(x) -> np.ndarray:
    """y_t = prod_{s<=t} (2 x_s - 1): a pure interaction. For independent uniform x_s it is orthogonal to every
    function of fewer than t inputs, so from t = 2 on no sum of per-step functions explains any of it."""
    x = _check_x(x)
    return np.cumprod(2 * x - 1, axis=1)


def target_linear(x) -> np.ndarray:
    """y_t = x_t - x_{t-1} / 2 (x_0 = 0): linear in the history, so a non-selective scan represents it exactly."""
    x = _check_x(x)
    prev = np.concatenate([np.zeros((len(x), 1)), x[:, :-1]], axis=1)
    return x - 0.5 * prev


TARGETS = {"sinmax": target_sinmax, "sinprod": target_sinprod, "cprod": target_cprod, "linear": target_linear}


# ---------------------------------------------------------------------------------------------------------------
# The construction


def hat_features(x, m: int) -> np.ndarray:
    """phi_c(x) for the m hat functions on nodes c / (m - 1): (..., m), non-negative, summing to 1 on [0, 1]."""
    m = _check_int(m, "m", 2)
    x = np.asarray(x, dtype=np.float64)
    nodes = np.linspace(0.0, 1.0, m)
    # phi_c(x) = max(0, 1 - |x - node_c| (m - 1))
    return np.maximum(0.0, 1.0 - np.abs(x[..., None] - nodes) * (m - 1))


def hat_gates(x, m: int, eps: float, eta: float) -> np.ndarray:
    """The clocked selective gates per cell: (batch, T, m), a_t[c] = (1 - eps) max(phi_c(x_t), eta), all in (0, 1).

    Gate of state coordinate k = (c_1..c_T) at step t is ``gates[:, t, c_t]``: the clock picks which digit of k
    the step reads.
    """
    x = _check_x(x)
    if not (0.0 < eps < 1.0):
        raise ValueError(f"eps must be in (0, 1), got {eps!r}")
    if not (0.0 < eta < 1.0):
        raise ValueError(f"eta must be in (0, 1), got {eta!r}")
    # a_t[c] = (1 - eps) * max(phi_c(x_t), eta)
    return (1.0 - eps) * np.maximum(hat_features(x, m), eta)


def construction_weights(target, m: int, horizon: int, eps: float) -> np.ndarray:
    """Readout W (T, m^T): W_t[k] = f_t(nodes of c_1..c_t) / (m^{T-t} (1 - eps)^t), k = (c_1..c_T) in C order.

    ``target`` maps (batch, T) to (batch, T) causally; it is evaluated once on every node tuple (the "sampled target
    values" of the construction).
    """
    m, horizon = _check_int(m, "m", 2), _check_int(horizon, "horizon", 1)
    if m**horizon > MAX_STATES:
        raise ValueError(f"m**horizon = {m**horizon} states exceeds MAX_STATES = {MAX_STATES}")
    nodes = np.linspace(0.0, 1.0, m)
    grid = np.stack(np.meshgrid(*[nodes] * horizon, indexing="ij"), axis=-1).reshape(-1, horizon)
    f = np.asarray(target(grid), dtype=np.float64)  # (m^T, T)
    t = np.arange(1, horizon + 1)
    # W_t[k] = f_t(...) / (m^{T-t} (1-eps)^t)
    return (f / (float(m) ** (horizon - t) * (1.0 - eps) ** t)).T.copy()


def _check_readout(gates, W) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    gates = np.ascontiguousarray(gates, dtype=np.float64)
    W = np.ascontiguousarray(W, dtype=np.float64)
    if gates.ndim != 3 or min(gates.shape) < 1:
        raise ValueError(f"gates must be (batch, T, m) with positive sizes, got shape {gates.shape}")
    bsz, T, m = gates.shape
    if W.shape != (T, m**T):
        raise ValueError(f"W must be (T, m^T) = {(T, m**T)}, got {W.shape}")
    return gates, W, bsz, T, m


@numba.njit(parallel=True, fastmath=False, cache=True)
def _clocked_scan_numba(gates, W, y):
    bsz, T, m = gates.shape
    K = W.shape[1]
    for b in numba.prange(bsz):
        h = np.ones(K)
        stride = K
        for t in range(T):
            # digit c_t of k = (k // m^{T-1-t}) % m is constant on blocks of `stride` consecutive coordinates
            stride //= m
            acc = 0.0
            for blk in range(K // stride):
                g = gates[b, t, blk % m]
                for k in range(blk * stride, (blk + 1) * stride):
                    h[k] *= g
                    acc += W[t, k] * h[k]
            y[b, t] = acc


def clocked_scan_readout(gates, W) -> np.ndarray:
    """Fast kernel: run the clocked diagonal scan over all m^T coordinates and apply the time-indexed readout.

    ``gates`` (batch, T, m) from :func:`hat_gates`, ``W`` (T, m^T) from :func:`construction_weights`; returns
    y (batch, T) in float64. Work: batch * T * m^T state updates.
    """
    gates, W, bsz, T, m = _check_readout(gates, W)
    y = np.empty((bsz, T))
    _clocked_scan_numba(gates, W, y)
    return y


def readout_via_selective_scan(gates, W, scan=selective_scan_ref) -> np.ndarray:
    """The construction written as a Mamba-form selective scan x_t = exp(Delta_t A) x_{t-1} + Delta_t B_t u_t.

    One channel per state coordinate k (N = 1), A = -1, and a start step (u = Delta = B = 1) that sets x_0 = 1;
    at step t, Delta_t[k] = -log a_t[c_t(k)] so exp(Delta_t A) is the gate, and B_t = 0. C = 1 exposes the states,
    the readout is sum_k W_t[k] x_t[k]. ``scan`` is :func:`~paperkit.nn.selective_scan.selective_scan_ref` (Torch) or
    :func:`~paperkit.nn.selective_scan.selective_scan_numba` (NumPy). Memory: batch * m^T * (T + 1) floats.
    """
    gates, W, bsz, T, m = _check_readout(gates, W)
    K = m**T
    digits = np.stack([(np.arange(K) // m ** (T - 1 - t)) % m for t in range(T)])  # (T, K): c_t(k)
    delta = np.ones((bsz, K, T + 1))
    # Delta_t = -log a_t, so that exp(Delta_t * A) = a_t with A = -1
    a = np.take_along_axis(gates, np.broadcast_to(digits[None], (bsz, T, K)), 2)  # (batch, T, K): a_t[c_t(k)]
    delta[:, :, 1:] = -np.log(a).transpose(0, 2, 1)
    u = np.zeros((bsz, K, T + 1))
    u[:, :, 0] = 1.0
    A = -np.ones((K, 1))
    B = np.zeros((bsz, 1, T + 1))
    B[:, :, 0] = 1.0
    C = np.ones((bsz, 1, T + 1))
    if scan is selective_scan_numba:
        states = scan(u, delta, A, B, C)
    else:
        states = scan(*(torch.from_numpy(a) for a in (u, delta, A, B, C))).numpy()
    # y_t = sum_k W_t[k] h_t[k]
    return np.einsum("bkt,tk->bt", states[:, :, 1:], W)


def clocked_scan_readout_ref(gates, W) -> np.ndarray:
    """Reference for :func:`clocked_scan_readout`: the same construction run by the shared Torch oracle
    :func:`~paperkit.nn.selective_scan.selective_scan_ref` (per-timestep loop, all states stored)."""
    return readout_via_selective_scan(gates, W, selective_scan_ref)


def construct(target, x, m: int, eps: float, eta: float) -> np.ndarray:
    """Predictions (batch, T) of the construction with partition size m on sequences x (batch, T)."""
    x = _check_x(x)
    W = construction_weights(target, m, x.shape[1], eps)
    return clocked_scan_readout(hat_gates(x, m, eps, eta), W)


def midpoint_probes(m: int, horizon: int, max_probes: int = 4096) -> np.ndarray:
    """Deterministic probe sequences (n, T): cell midpoints (c + 1/2) / (m - 1) on every axis, every s-th cell
    so that n <= max_probes. Interpolation error of a kinked target peaks at such midpoints."""
    m, horizon = _check_int(m, "m", 2), _check_int(horizon, "horizon", 1)
    side = int(np.floor(_check_int(max_probes, "max_probes", 1) ** (1.0 / horizon) + 1e-9))
    step = max(1, math.ceil((m - 1) / max(side, 1)))
    mids = (np.arange(0, m - 1, step) + 0.5) / (m - 1)
    return np.stack(np.meshgrid(*[mids] * horizon, indexing="ij"), axis=-1).reshape(-1, horizon)


# ---------------------------------------------------------------------------------------------------------------
# Non-selective floors


def linear_history_features(x, t: int) -> np.ndarray:
    """[x_1, ..., x_t] (batch, t): what any input-independent diagonal scan fed u_s = x_s can hold at step t."""
    return _check_x(x)[:, :t]


def additive_hat_features(m: int):
    """Feature map for an input-independent scan fed a per-token encoding e(x_s) = (phi_0(x_s)..phi_{m-1}(x_s)):
    returns ``f(x, t) -> (batch, t m)``, the span of everything such a scan can hold at step t."""
    def features(x, t):
        return hat_features(_check_x(x)[:, :t], m).reshape(len(x), -1)
    return features


def _design(x, t: int, features) -> np.ndarray:
    """[1, features(x, t)]: (batch, 1 + p)."""
    return np.concatenate([np.ones((len(x), 1)), features(x, t)], axis=1)


def ls_readout_fit(x, y, features=linear_history_features) -> list[np.ndarray]:
    """Least-squares readout per step: w_t = argmin_w sum_b (y_t - w . [1, features(x, t)])^2, t = 1..T.

    Solved by LAPACK's gelsy (pivoted QR), which handles exactly collinear features (hat features sum to 1; the
    states of a big LTI scan span only t dimensions). The SVD drivers fail on such matrices once Torch's
    flush-denormal mode is on, as every chapter's set-up turns it on. Directions whose pivot is below ``_LS_COND``
    times the largest are rounding noise of collinear columns and are dropped (kept, they get huge weights that
    spoil the residual).
    """
    x, y = _check_x(x), _check_x(y, "y")
    if y.shape != x.shape:
        raise ValueError(f"y must have x's shape {x.shape}, got {y.shape}")
    return [scipy.linalg.lstsq(_design(x, t, features), y[:, t - 1], cond=_LS_COND, lapack_driver="gelsy")[0]
            for t in range(1, x.shape[1] + 1)]


def ls_readout_predict(x, weights, features=linear_history_features) -> np.ndarray:
    """Predictions (batch, T) of the per-step readouts ``weights`` from :func:`ls_readout_fit`."""
    x = _check_x(x)
    if len(weights) != x.shape[1]:
        raise ValueError(f"weights must hold one vector per step (T = {x.shape[1]}), got {len(weights)}")
    return np.stack([_design(x, t, features) @ w for t, w in enumerate(weights, start=1)], axis=1)


def ls_floor(x, y, features=linear_history_features) -> np.ndarray:
    """Exact least-squares floor per step: (T,) with floor_t = min_w mean_b (y_t - w . [1, features(x, t)])^2.

    No readout of those features (hence no non-selective scan whose state they span) has lower mean-squared error
    on this sample.
    """
    pred = ls_readout_predict(x, ls_readout_fit(x, y, features), features)
    return np.mean((pred - _check_x(y, "y")) ** 2, axis=0)


def _check_decays(x, decays) -> tuple[np.ndarray, np.ndarray]:
    x = _check_x(x)
    decays = np.asarray(decays, dtype=np.float64)
    if decays.ndim != 1 or len(decays) < 1 or not np.all((decays > 0) & (decays < 1)):
        raise ValueError(f"decays must be a non-empty 1-D array in (0, 1), got {decays!r}")
    return x, decays


@numba.njit(cache=True)
def _lti_scan_kernel(x, decays, out):
    bsz, T = x.shape
    N = decays.shape[0]
    for b in range(bsz):
        for k in range(N):
            out[b, 0, k] = x[b, 0]
        for t in range(1, T):
            xt = x[b, t]
            for k in range(N):
                out[b, t, k] = decays[k] * out[b, t - 1, k] + xt


def lti_scan_states(x, decays) -> np.ndarray:
    """States (batch, T, N) of the LTI diagonal scan h_t = lambda * h_{t-1} + x_t, lambda = ``decays`` (N,).

    The shared :func:`~paperkit.nn.selective_scan.selective_scan_numba` with Delta = 1, A = log lambda, B = C = 1
    (one channel per state) computes the same states, but pays an exp per update where an LTI scan needs none (and
    was slower than the NumPy loop :func:`lti_scan_states_ref`); this serial Numba loop does the multiply-add only,
    in the reference's order (bit-identical to it)."""
    x, decays = _check_decays(x, decays)
    out = np.empty((x.shape[0], x.shape[1], len(decays)))
    _lti_scan_kernel(np.ascontiguousarray(x), np.ascontiguousarray(decays), out)
    return out


def lti_scan_states_ref(x, decays) -> np.ndarray:
    """Reference for :func:`lti_scan_states`: the recurrence h_t = lambda h_{t-1} + x_t, one step at a time."""
    x, decays = _check_decays(x, decays)
    h = np.zeros((len(x), len(decays)))
    out = []
    for t in range(x.shape[1]):
        # h_t = lambda * h_{t-1} + x_t
        h = decays * h + x[:, t, None]
        out.append(h)
    return np.stack(out, axis=1)


def lti_states_features(decays):
    """Feature map ``f(x, t) -> (batch, N)``: the N states of an actual LTI scan at step t (for :func:`ls_floor`)."""
    def features(x, t):
        return lti_scan_states(x[:, :t], decays)[:, t - 1]
    return features


# ---------------------------------------------------------------------------------------------------------------
# Trained scans


class ClockedScanEnsemble(torch.nn.Module):
    """E independent small scans trained at once (member e sees only its own parameters and data).

    Each member: d channels of n states, the shared Mamba-form scan with fixed A_n = -(n + 1) / 2 and, at step t,
    token features z_t = [x_t, onehot(t)] (selective members) or z_t = [onehot(t)] (non-selective members: the
    x_t column is masked to zero, nothing else changes):

        Delta_t = softplus(z_t W_Delta)  (d,),   B_t = z_t W_B  (n,),   u_t = [x_t, onehot(t)] W_u  (d,)
        y_t = sum_d w_out[d] <C_t, h_t[d]> + b_t,   C_t = onehot(t) W_C  (n,)

    The readout is linear in the state and indexed by time for both kinds; a non-selective member's output is
    affine in (x_1..x_t), so :func:`ls_floor` with linear features bounds its error from below.
    ``selective`` (E,) bool; ``scan`` is :func:`~paperkit.nn.selective_scan.selective_scan_torch` or the oracle.
    """

    def __init__(self, selective, d: int, n: int, horizon: int, generator: torch.Generator, scan=selective_scan_torch):
        super().__init__()
        for name, v, lo in (("d", d, 1), ("n", n, 1), ("horizon", horizon, 1)):
            _check_int(v, name, lo)
        self.register_buffer("sel", torch.as_tensor(selective, dtype=torch.float32).reshape(-1))
        E, z = len(self.sel), 1 + horizon
        self.d, self.n, self.T, self.scan = d, n, horizon, scan

        def p(*shape, scale):
            return torch.nn.Parameter(torch.randn(E, *shape, generator=generator) * scale)
        self.W_delta, self.W_B = p(z, d, scale=0.5), p(z, n, scale=0.5)
        self.W_u, self.W_C = p(z, d, scale=1.0), p(horizon, n, scale=0.5)
        self.w_out, self.b_out = p(d, scale=d**-0.5), torch.nn.Parameter(torch.zeros(E, horizon))
        self.register_buffer("A", -(torch.arange(n, dtype=torch.float32) + 1).div(2).repeat(d, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (E, batch, T) -> predictions (E, batch, T)."""
        E, b, T = x.shape
        if E != len(self.sel) or T != self.T:
            raise ValueError(f"x must be (E={len(self.sel)}, batch, T={self.T}), got {tuple(x.shape)}")
        clock = torch.eye(T, device=x.device).expand(E, b, T, T)
        z = torch.cat([x[..., None], clock], -1)  # (E, b, T, 1 + T)
        z_gate = torch.cat([x[..., None] * self.sel[:, None, None, None], clock], -1)
        delta = torch.einsum("ebtz,ezd->ebdt", z_gate, self.W_delta).reshape(E * b, self.d, T)
        B = torch.einsum("ebtz,ezn->ebnt", z_gate, self.W_B).reshape(E * b, self.n, T)
        u = torch.einsum("ebtz,ezd->ebdt", z, self.W_u).reshape(E * b, self.d, T)
        C = self.W_C.transpose(1, 2)[:, None].expand(E, b, self.n, T).reshape(E * b, self.n, T)
        y = self.scan(u, delta, self.A, B, C, delta_softplus=True).reshape(E, b, self.d, T)
        # y_t = sum_d w_out[d] <C_t, h_t[d]> + b_t
        return torch.einsum("ebdt,ed->ebt", y, self.w_out) + self.b_out[:, None, :]


def train_ensemble(model: ClockedScanEnsemble, x_train: torch.Tensor, y_train: torch.Tensor, steps: int, lr: float,
                   batch: int, generator: torch.Generator, x_eval=None, y_eval=None, eval_every: int = 50,
                   num_threads: int | None = 1):
    """Adam with a cosine schedule on the summed per-member MSE (members stay independent: each gradient only
    touches its own parameters). x_train, y_train (E, n, T). Returns the eval MSE curve [(step, (E,) array)] when
    an eval set (batch, T) is given, else an empty list.

    ``num_threads``: Torch intra-op threads while training, restored afterwards (None: leave as set). The tensors
    are a few hundred thousand elements, so on CPU extra threads only add synchronisation: on a loaded 2-core
    machine two threads cost ten times the CPU time of one.
    """
    _check_int(steps, "steps", 1)
    _check_int(batch, "batch", 1)
    if x_train.ndim != 3 or x_train.shape != y_train.shape or x_train.shape[0] != len(model.sel):
        raise ValueError(f"x_train, y_train must both be (E={len(model.sel)}, n, T), got {tuple(x_train.shape)}, "
                         f"{tuple(y_train.shape)}")
    E, n, T = x_train.shape
    threads = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(_check_int(num_threads, "num_threads", 1))
    try:
        return _train(model, x_train, y_train, steps, lr, batch, generator, x_eval, y_eval, eval_every)
    finally:
        torch.set_num_threads(threads)


def _train(model, x_train, y_train, steps, lr, batch, generator, x_eval, y_eval, eval_every):
    E, n, T = x_train.shape
    opt = AdamCosine(model.parameters(), lr, steps, clip=None)
    curve = []
    for step in range(steps):
        idx = torch.randint(0, n, (E, batch, 1), generator=generator).to(x_train.device).expand(E, batch, T)
        xb, yb = torch.gather(x_train, 1, idx), torch.gather(y_train, 1, idx)
        opt.step(((model(xb) - yb) ** 2).mean((1, 2)).sum())
        if x_eval is not None and (step + 1) % eval_every == 0:
            curve.append((step + 1, ensemble_mse(model, x_eval, y_eval)))
    return curve


@torch.no_grad()
def ensemble_mse(model: ClockedScanEnsemble, x, y, chunk: int = 2000) -> np.ndarray:
    """Per-member MSE (E,) on one shared evaluation set x, y (batch, T), ``chunk`` sequences at a time (the scan
    holds E * chunk * d * T * n floats per intermediate)."""
    _check_int(chunk, "chunk", 1)
    if x.ndim != 2 or x.shape != y.shape:
        raise ValueError(f"x, y must both be (batch, T), got {tuple(x.shape)}, {tuple(y.shape)}")
    E = len(model.sel)
    sq = torch.zeros(E, dtype=torch.float64, device=x.device)
    for s in range(0, len(x), chunk):
        xb, yb = x[s:s + chunk], y[s:s + chunk]
        sq += ((model(xb.expand(E, *xb.shape)) - yb) ** 2).sum((1, 2)).double()
    return (sq / y.numel()).cpu().numpy()


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Contract, Kernel

    def inputs(rng, size):
        return {"x": rng.normal(size=(2, max(size, 2))), "decays": rng.uniform(0.2, 0.9, size=3)}

    return [Kernel("ssm_universality.lti_scan_states", lti_scan_states, lti_scan_states_ref, inputs,
                   Contract(empty="value", shapes="x: (batch, T); decays: (N,) in (0, 1)"),
                   tol={"float64": (1e-10, 1e-12)}, benchmark="lti_scan_states (numba, no exp)",
                   oracle="closed form h_t = sum_s lambda^(t-s) x_s")]


KERNELS = _registry()


def ensemble_state_features(model: ClockedScanEnsemble, member: int):
    """Feature map ``f(x, t) -> (batch, d n)`` for :func:`ls_readout_fit`: member ``member``'s whole state h_t
    (every channel and state index) on x (batch, T) under the model's current parameters, read off the shared scan
    with C = e_j for each state index j. A readout linear in the state sees exactly these coordinates, so a
    least-squares readout of them is the best that member's gates allow without changing them."""
    _check_int(member, "member", 0)
    if member >= len(model.sel):
        raise ValueError(f"member must be < {len(model.sel)}, got {member}")

    @torch.no_grad()
    def features(x, t):
        x = torch.as_tensor(_check_x(x), dtype=torch.float32, device=model.A.device)
        b, T = x.shape
        if T != model.T or not 1 <= t <= T:
            raise ValueError(f"x must be (batch, T={model.T}) and 1 <= t <= T, got {tuple(x.shape)}, t={t}")
        clock = torch.eye(T, device=x.device).expand(b, T, T)
        z = torch.cat([x[..., None], clock], -1)  # (b, T, 1 + T)
        z_gate = torch.cat([x[..., None] * model.sel[member], clock], -1)
        delta = torch.einsum("btz,zd->bdt", z_gate, model.W_delta[member])
        B = torch.einsum("btz,zn->bnt", z_gate, model.W_B[member])
        u = torch.einsum("btz,zd->bdt", z, model.W_u[member])
        h = []
        for j in range(model.n):  # y = <e_j, h_t[d]> = h_t[d, j]
            C = torch.zeros(b, model.n, T, device=x.device)
            C[:, j] = 1.0
            h.append(model.scan(u, delta, model.A, B, C, delta_softplus=True)[:, :, t - 1])
        return torch.stack(h, -1).reshape(b, -1).double().cpu().numpy()  # (b, d n)
    return features

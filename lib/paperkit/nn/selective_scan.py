"""The selective scan (the recurrence inside Mamba-style selective SSMs), in three forms with one signature.

For each batch row b and channel d, with state x in R^N and input-dependent step size Delta_t:

    x_t = exp(Delta_t * A) * x_{t-1} + Delta_t * B_t * u_t        (diagonal A: element-wise over the N states)
    y_t = <C_t, x_t> + D * u_t

Shapes (the argument order and layout of mamba-ssm's ``selective_scan_ref``, without its gating ``z``):
``u``, ``delta``: (batch, D, L); ``A``: (D, N); ``B``, ``C``: (batch, N, L) (shared across channels);
``D``: (D,) or None. Returns ``y`` (batch, D, L), and the last state ``x_L`` (batch, D, N) when asked.

* :func:`selective_scan_ref`: the oracle, a per-timestep loop in Torch (vectorised over batch, channels and states,
  as mamba-ssm's reference), differentiable by autograd.
* :func:`selective_scan_numba`: the fast forward kernel, a compiled loop over (batch, channel) pairs in parallel,
  timesteps and states inside; NumPy in, NumPy out.
* :func:`selective_scan_torch`: differentiable and fast enough to train with: a chunked parallel (Hillis-Steele)
  scan, log2(chunk) vectorised steps per chunk, the state carried between chunks.
* :func:`selective_scan_fused`: differentiable and cheaper to train with on CPU: a compiled sequential forward that
  keeps the states, and a compiled reverse (adjoint) scan for the gradients, wrapped in a ``torch.autograd.Function``.

:class:`ScanCounter` wraps any of the three to count calls and state updates (the counted work that timing
claims assert).
"""
from __future__ import annotations

import math

import numba
import numpy as np
import torch
import torch.nn.functional as F


def _check(u, delta, A, B, C, D) -> tuple[int, int, int, int]:
    """Validate shapes; return (batch, D, L, N)."""
    if u.ndim != 3:
        raise ValueError(f"u must be (batch, D, L), got shape {tuple(u.shape)}")
    b, d, L = u.shape
    if tuple(delta.shape) != (b, d, L):
        raise ValueError(f"delta must have u's shape {(b, d, L)}, got {tuple(delta.shape)}")
    if A.ndim != 2 or A.shape[0] != d:
        raise ValueError(f"A must be (D={d}, N), got {tuple(A.shape)}")
    n = A.shape[1]
    for name, M in (("B", B), ("C", C)):
        if tuple(M.shape) != (b, n, L):
            raise ValueError(f"{name} must be (batch, N, L) = {(b, n, L)}, got {tuple(M.shape)}")
    if D is not None and tuple(D.shape) != (d,):
        raise ValueError(f"D must be (D,) = ({d},), got {tuple(D.shape)}")
    if L < 1 or n < 1:
        raise ValueError(f"u needs L >= 1 timesteps and A N >= 1 states, got L = {L} (u {tuple(u.shape)}), N = {n}")
    return b, d, L, n


def _dtype_name(x) -> str:
    return str(x.dtype).replace("torch.", "")


def _finite(x) -> bool:
    return bool(torch.isfinite(x).all()) if isinstance(x, torch.Tensor) else bool(np.all(np.isfinite(x)))


def _check_values(u, delta, A, B, C, D, delta_softplus: bool) -> None:
    """One float dtype for every argument (no silent cast); finite values; delta >= 0 unless it goes through
    softplus. O(size) once per call, outside the recurrence."""
    named = [("u", u), ("delta", delta), ("A", A), ("B", B), ("C", C)] + ([("D", D)] if D is not None else [])
    for name, x in named:
        if _dtype_name(x) not in ("float32", "float64"):
            raise TypeError(f"{name} must be float32 or float64, got {_dtype_name(x)}")
        if _dtype_name(x) != _dtype_name(u):
            raise TypeError(f"{name} has dtype {_dtype_name(x)} but u has {_dtype_name(u)}: pass one dtype "
                            f"(no silent cast)")
        if not _finite(x):
            raise ValueError(f"{name} contains NaN or inf")
    if not delta_softplus and bool((delta < 0).any()):
        raise ValueError("delta must be >= 0 (a step size), or pass delta_softplus=True")


def selective_scan_ref(u, delta, A, B, C, D=None, delta_softplus=False, return_last_state=False):
    """Oracle: the recurrence one timestep at a time (Torch tensors; differentiable). See the module docstring."""
    bsz, d, L, n = _check(u, delta, A, B, C, D)
    _check_values(u, delta, A, B, C, D, delta_softplus)
    if delta_softplus:
        delta = F.softplus(delta)
    x = u.new_zeros(bsz, d, n)
    ys = []
    for t in range(L):
        dt = delta[:, :, t, None]  # (b, d, 1)
        # x_t = exp(Delta_t A) x_{t-1} + Delta_t B_t u_t
        x = torch.exp(dt * A) * x + dt * B[:, None, :, t] * u[:, :, t, None]
        # y_t = <C_t, x_t>
        ys.append(torch.einsum("bdn,bn->bd", x, C[:, :, t]))
    y = torch.stack(ys, dim=-1)
    if D is not None:
        y = y + D[:, None] * u
    return (y, x) if return_last_state else y


@numba.njit(fastmath=True, cache=True)
def _expf_block(arg, out, bits, m):
    """out[:m] = exp(arg[:m]) in float32, SIMD-friendly (no libm call): Cody-Waite reduction x = f ln2 + r,
    |r| <= ln2/2, Cephes' degree-6 polynomial for e^r (about 1e-7 relative error, a few float32 ulp), then 2^f
    assembled in the exponent bits. Arguments are clamped to [-87, 88] (so e^x below ~1.6e-38 comes out as that
    instead of a denormal or zero)."""
    for i in range(m):
        v = min(max(arg[i], np.float32(-87.0)), np.float32(88.0))
        f = np.floor(v * np.float32(1.44269504088896341) + np.float32(0.5))
        r = v - f * np.float32(0.693359375) + f * np.float32(2.12194440e-4)
        p = np.float32(1.9875691500e-4)
        p = p * r + np.float32(1.3981999507e-3)
        p = p * r + np.float32(8.3334519073e-3)
        p = p * r + np.float32(4.1665795894e-2)
        p = p * r + np.float32(1.6666665459e-1)
        p = p * r + np.float32(5.0000001201e-1)
        out[i] = p * (r * r) + r + np.float32(1.0)
        bits[i] = (np.int32(f) + np.int32(127)) << 23
    scale = bits.view(np.float32)
    for i in range(m):
        out[i] *= scale[i]


_SCAN_CHUNK = 64  # timesteps whose decays exp(Delta_t A) are evaluated in one vectorised block


@numba.njit(parallel=True, fastmath=True, cache=True)
def _scan_numba(u, delta, A, Bt, Ct, Dv, has_D, poly_exp, y, x_last):
    """Bt, Ct: B and C transposed to (batch, L, N), so one timestep's N states are contiguous. Per (batch,
    channel): the decays of a chunk of timesteps in one vectorised exp (``poly_exp``: :func:`_expf_block`, float32
    only; else libm ``math.exp``), then the multiply-add recurrence and the readout over the N states."""
    bsz, d, L = u.shape
    n = A.shape[1]
    tc_max = min(_SCAN_CHUNK, L)
    for p in numba.prange(bsz * d):
        b, c = p // d, p % d
        x = np.zeros(n, dtype=u.dtype)
        arg = np.empty(tc_max * n, dtype=u.dtype)
        dA = np.empty(tc_max * n, dtype=u.dtype)
        bits = np.empty(tc_max * n, dtype=np.int32)
        for t0 in range(0, L, tc_max):
            tc = min(tc_max, L - t0)
            for t in range(tc):
                dt = delta[b, c, t0 + t]
                for k in range(n):
                    arg[t * n + k] = dt * A[c, k]
            if poly_exp:
                _expf_block(arg, dA, bits, tc * n)
            else:
                for i in range(tc * n):
                    dA[i] = math.exp(arg[i])
            for t in range(tc):
                tt = t0 + t
                du = delta[b, c, tt] * u[b, c, tt]
                acc = x[0] * 0
                for k in range(n):
                    xk = dA[t * n + k] * x[k] + du * Bt[b, tt, k]
                    x[k] = xk
                    acc += Ct[b, tt, k] * xk
                y[b, c, tt] = acc + (Dv[c] * u[b, c, tt] if has_D else 0.0)
        x_last[b, c, :] = x


def selective_scan_numba(u, delta, A, B, C, D=None, delta_softplus=False, return_last_state=False):
    """Fast forward kernel (NumPy arrays, all float32 or all float64: a mixed dtype is refused, not cast)."""
    u, delta, A, B, C = (np.asarray(a) for a in (u, delta, A, B, C))
    D = None if D is None else np.asarray(D)
    bsz, d, L, n = _check(u, delta, A, B, C, D)
    _check_values(u, delta, A, B, C, D, delta_softplus)
    cast = lambda a: np.ascontiguousarray(a, dtype=u.dtype)  # noqa: E731
    u, delta, A, B, C = cast(u), cast(delta), cast(A), cast(B), cast(C)
    if delta_softplus:
        # softplus(x) = log(1 + e^x), computed stably
        delta = np.logaddexp(0.0, delta).astype(u.dtype)
    Dv = cast(D) if D is not None else np.zeros(d, dtype=u.dtype)
    y = np.empty_like(u)
    x_last = np.empty((bsz, d, n), dtype=u.dtype)
    Bt, Ct = np.ascontiguousarray(B.transpose(0, 2, 1)), np.ascontiguousarray(C.transpose(0, 2, 1))
    _scan_numba(u, delta, A, Bt, Ct, Dv, D is not None, u.dtype == np.float32, y, x_last)
    return (y, x_last) if return_last_state else y


def _parallel_scan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Inclusive scan of h_t = a_t h_{t-1} + b_t along dim 2 (h_{-1} = 0) by Hillis-Steele doubling.

    After the step with offset s, (a_t, b_t) holds the composition of the affine maps over (t-2s, t]; log2(T) steps.
    Out of place, so autograd differentiates it.
    """
    T = a.shape[2]
    s = 1
    while s < T:
        b = torch.cat([b[:, :, :s], a[:, :, s:] * b[:, :, :-s] + b[:, :, s:]], dim=2)
        a = torch.cat([a[:, :, :s], a[:, :, s:] * a[:, :, :-s]], dim=2)
        s *= 2
    return a, b


def selective_scan_torch(u, delta, A, B, C, D=None, delta_softplus=False, return_last_state=False, chunk=64):
    """Differentiable chunked parallel scan; same result as :func:`selective_scan_ref` up to rounding.

    Within a chunk of ``chunk`` timesteps the affine maps x -> exp(Delta A) x + Delta B u are composed by a parallel
    scan; the state entering the chunk is carried by the cumulative decay. Memory O(batch D chunk N) per chunk.
    """
    bsz, d, L, n = _check(u, delta, A, B, C, D)
    _check_values(u, delta, A, B, C, D, delta_softplus)
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    if delta_softplus:
        delta = F.softplus(delta)
    x = u.new_zeros(bsz, d, n)
    ys = []
    for s in range(0, L, chunk):
        dt = delta[:, :, s:s + chunk, None]  # (b, d, T, 1)
        a = torch.exp(dt * A[:, None, :])  # (b, d, T, n): exp(Delta_t A)
        bu = dt * B[:, None, :, s:s + chunk].transpose(-1, -2) * u[:, :, s:s + chunk, None]  # Delta_t B_t u_t
        a_cum, h = _parallel_scan(a, bu)
        # x_t = (prod_{r<=t} a_r) x_in + h_t
        xs = a_cum * x[:, :, None, :] + h
        ys.append(torch.einsum("bdtn,bnt->bdt", xs, C[:, :, s:s + chunk]))
        x = xs[:, :, -1]
    y = torch.cat(ys, dim=-1)
    if D is not None:
        y = y + D[:, None] * u
    return (y, x) if return_last_state else y


@numba.njit(fastmath=True, cache=True)
def _scan_fwd_states(u, delta, A, Bt, Ct, xs, y):
    """Sequential forward per (batch, channel) keeping every state: xs (batch, D, L, N), y (batch, D, L).
    Bt, Ct: B and C transposed to (batch, L, N). x_t = exp(Delta_t A) x_{t-1} + Delta_t B_t u_t, y_t = <C_t, x_t>."""
    bsz, d, L = u.shape
    n = A.shape[1]
    for b in range(bsz):
        for c in range(d):
            for t in range(L):
                dt = delta[b, c, t]
                du = dt * u[b, c, t]
                acc = u[b, c, t] * 0
                for k in range(n):
                    prev = xs[b, c, t - 1, k] if t > 0 else 0.0
                    xk = math.exp(dt * A[c, k]) * prev + du * Bt[b, t, k]
                    xs[b, c, t, k] = xk
                    acc += Ct[b, t, k] * xk
                y[b, c, t] = acc


@numba.njit(fastmath=True, cache=True)
def _scan_bwd(u, delta, A, Bt, Ct, xs, gy, du, ddelta, dA, dB, dC):
    """Reverse (adjoint) scan. lambda_t = dLoss/dx_t = C_t g_t + exp(Delta_{t+1} A) lambda_{t+1}; then
    dDelta_t = sum_n [lambda_t x_{t-1} a_t A + lambda_t B_t u_t], du_t = Delta_t sum_n lambda_t B_t,
    dA += lambda_t x_{t-1} a_t Delta_t, dB_t = lambda_t Delta_t u_t, dC_t = g_t x_t (a_t = exp(Delta_t A)).
    dA (batch, D, N), dB and dC (batch, D, L, N) per channel; the caller sums them over batch / channels."""
    bsz, d, L = u.shape
    n = A.shape[1]
    lam = np.zeros(n, dtype=u.dtype)
    for b in range(bsz):
        for c in range(d):
            lam[:] = 0
            for t in range(L - 1, -1, -1):
                g = gy[b, c, t]
                dt = delta[b, c, t]
                uu = u[b, c, t]
                acc_dd = uu * 0
                acc_du = uu * 0
                for k in range(n):
                    lk = lam[k] + Ct[b, t, k] * g
                    dC[b, c, t, k] = g * xs[b, c, t, k]
                    a = math.exp(dt * A[c, k])
                    prev = xs[b, c, t - 1, k] if t > 0 else 0.0
                    da = lk * prev * a  # dLoss / d(Delta_t A)
                    acc_dd += da * A[c, k] + lk * Bt[b, t, k] * uu
                    dA[b, c, k] += da * dt
                    acc_du += lk * Bt[b, t, k]
                    dB[b, c, t, k] = lk * dt * uu
                    lam[k] = lk * a
                ddelta[b, c, t] = acc_dd
                du[b, c, t] = acc_du * dt


class _FusedScan(torch.autograd.Function):
    """y = scan(u, delta, A, B, C) without D, gradients by :func:`_scan_bwd`; CPU tensors of one float dtype."""

    @staticmethod
    def forward(ctx, u, delta, A, B, C):
        arr = lambda t: t.detach().contiguous().numpy()  # noqa: E731
        un, dn, An = arr(u), arr(delta), arr(A)
        Bt, Ct = arr(B.transpose(1, 2)), arr(C.transpose(1, 2))
        bsz, d, L = un.shape
        xs = np.empty((bsz, d, L, An.shape[1]), dtype=un.dtype)
        y = np.empty_like(un)
        _scan_fwd_states(un, dn, An, Bt, Ct, xs, y)
        ctx.arrays = (un, dn, An, Bt, Ct, xs)
        return torch.from_numpy(y), torch.from_numpy(np.ascontiguousarray(xs[:, :, -1]))

    @staticmethod
    def backward(ctx, gy, gx_last):
        un, dn, An, Bt, Ct, xs = ctx.arrays
        if gx_last is not None and bool(gx_last.ne(0).any()):
            raise NotImplementedError("selective_scan_fused: no gradient through the returned last state")
        z = lambda shape: np.zeros(shape, dtype=un.dtype)  # noqa: E731
        du, dd, dA, dB, dC = z(un.shape), z(un.shape), z((un.shape[0],) + An.shape), z(xs.shape), z(xs.shape)
        _scan_bwd(un, dn, An, Bt, Ct, xs, gy.detach().contiguous().numpy(), du, dd, dA, dB, dC)
        t = torch.from_numpy
        return (t(du), t(dd), t(dA.sum(0)), t(dB.sum(1).transpose(0, 2, 1).copy()), t(dC.sum(1).transpose(0, 2, 1).copy()))


def selective_scan_fused(u, delta, A, B, C, D=None, delta_softplus=False, return_last_state=False):
    """Differentiable scan with a compiled forward and a compiled reverse scan (:class:`_FusedScan`): same result
    and gradients as :func:`selective_scan_ref` up to rounding, O(batch D L N) time and memory (the states are kept
    for the backward). CPU tensors only; the returned last state carries no gradient."""
    bsz, d, L, n = _check(u, delta, A, B, C, D)
    _check_values(u, delta, A, B, C, D, delta_softplus)
    if u.device.type != "cpu":
        raise ValueError(f"u must be on the CPU for selective_scan_fused, got device {u.device}")
    if delta_softplus:
        delta = F.softplus(delta)
    y, x = _FusedScan.apply(u, delta, A, B, C)
    if D is not None:
        y = y + D[:, None] * u
    return (y, x) if return_last_state else y


class ScanCounter:
    """Wraps a selective scan; counts its calls and the state updates (batch * channels * L * N) they perform."""

    def __init__(self, scan=selective_scan_torch):
        self.scan, self.calls, self.state_updates = scan, 0, 0

    def __call__(self, u, delta, A, B, C, D=None, **kw):
        self.calls += 1
        self.state_updates += u.shape[0] * u.shape[1] * u.shape[2] * A.shape[-1]
        return self.scan(u, delta, A, B, C, D, **kw)


# ----------------------------------------------------------------------------------------------------- registry

def _scan_inputs_torch(rng, size):
    b, d, n, L = 2, 3, 4, size
    g = lambda *shape: torch.from_numpy(rng.normal(size=shape))  # noqa: E731
    return {"u": g(b, d, L), "delta": torch.from_numpy(rng.uniform(0.01, 0.5, size=(b, d, L))),
            "A": -torch.from_numpy(rng.uniform(0.5, 2.0, size=(d, n))), "B": g(b, n, L), "C": g(b, n, L),
            "D": g(d)}


def _scan_inputs_numpy(rng, size):
    return {k: v.numpy() for k, v in _scan_inputs_torch(rng, size).items()}


def selective_scan_ref_numpy(u, delta, A, B, C, D=None, delta_softplus=False, return_last_state=False):
    """:func:`selective_scan_ref` on NumPy arrays (the reference of :func:`selective_scan_numba`)."""
    t = lambda a: None if a is None else torch.from_numpy(np.asarray(a))  # noqa: E731
    out = selective_scan_ref(t(u), t(delta), t(A), t(B), t(C), t(D), delta_softplus, return_last_state)
    return tuple(o.numpy() for o in out) if return_last_state else out.numpy()


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    args = (Arg("u", ndim=3), Arg("delta", ndim=3, low=0.0, same_dtype_as="u"),
            Arg("A", ndim=2, same_dtype_as="u"), Arg("B", ndim=3, same_dtype_as="u"),
            Arg("C", ndim=3, same_dtype_as="u"), Arg("D", ndim=1, same_dtype_as="u"))
    shapes = "u, delta: (batch, D, L); A: (D, N); B, C: (batch, N, L); D: (D,); L, N >= 1; one float dtype"
    contract = Contract(args=args, empty="error", shapes=shapes)
    return [
        Kernel("selective_scan.selective_scan_numba", selective_scan_numba, selective_scan_ref_numpy,
               _scan_inputs_numpy, contract, tol={"float64": (1e-10, 1e-12), "float32": (1e-4, 1e-5)},
               benchmark="selective_scan_numba", oracle="mamba-ssm's selective_scan_ref (same recurrence)"),
        Kernel("selective_scan.selective_scan_torch", selective_scan_torch, selective_scan_ref, _scan_inputs_torch,
               contract, tol={"float64": (1e-10, 1e-12), "float32": (1e-4, 1e-5)},
               oracle="mamba-ssm's selective_scan_ref (same recurrence)"),
        Kernel("selective_scan.selective_scan_fused", selective_scan_fused, selective_scan_ref, _scan_inputs_torch,
               contract, tol={"float64": (1e-10, 1e-12), "float32": (1e-4, 1e-5)},
               oracle="mamba-ssm's selective_scan_ref (same recurrence)"),
    ]


KERNELS = _registry()

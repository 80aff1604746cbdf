"""A sheet of leaky integrate-and-fire neurons with per-synapse conduction delays and a passive dendritic low-pass.

Symbols (one neuron ``i``, time step ``dt``, step index ``t``):

* membrane potential ``V_i`` (threshold ``v_th``, reset ``v_reset``), membrane time constant ``tau_m``;
  ``beta = exp(-dt / tau_m)``;
* ``drive[t, i]``: what the external input adds to ``V_i`` during step ``t`` beyond the leak. For a current held
  constant over the step, the exact between-spike solution of ``tau_m dV/dt = -V + R I`` is
  ``V(t + dt) = beta V(t) + (1 - beta) R I``, so ``drive = (1 - beta) R I`` (:func:`constant_current_drive`);
  external delta kicks (Poisson spikes of weight ``J``) add ``J`` per spike;
* synapses in CSR order by presynaptic neuron ``j``: targets ``indices[indptr[j]:indptr[j+1]]``, weights ``w``
  (jump of the target's potential, signed: inhibitory synapses negative) and integer delays ``delays >= 1`` steps;
* dendritic compartment ``D_i``: arrivals ``A_i(t)`` (the weights of all spikes arriving at step ``t``) are
  low-passed, ``D_i(t) = alpha_d D_i(t-1) + (1 - alpha_d) A_i(t)`` with ``alpha_d = exp(-dt / tau_d)``, so that the
  charge ``sum_t D_i(t)`` equals that of the arrivals; ``alpha_d = 0`` is a plain delta synapse.

One step ``t`` (the order is part of the contract)::

    A(t) = ring[t mod R]; ring[t mod R] = 0                 # arrivals of spikes sent with delay d at t - d
    D = alpha_d D + (1 - alpha_d) A
    V = v_reset                        if refractory (counter > 0; the counter counts down)
        beta V + (drive[t] + D)        otherwise
    spike if V > v_th: V = v_reset, counter = n_ref, ring[(t + d_s) mod R, target_s] += w_s for each synapse s

With ``alpha_d = 0``, ``n_ref = 0``, ``v_reset = 0`` and every delay one step this is ``snntorch.Leaky`` with
``reset_mechanism="zero"`` driven by ``x[t] = drive[t] + W s[t-1]`` (tested in tests/spiking_cognition).

Kernels (registered in ``KERNELS``): :func:`lif_sheet` (Numba) and :func:`lif_sheet_ref` (a vectorised NumPy step,
the same signature). Helpers: :func:`torus_network` (Gaussian connectivity on an ``L x L`` torus with distance
delays), :func:`constant_current_drive`, :func:`poisson_drive`.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from paperkit.arrays import real_array


# ------------------------------------------------------------------------------------------ input checks

def _check(drive, indptr, indices, weights, delays, v0, beta, alpha_d, v_th, v_reset, n_ref):
    drive = real_array(drive, "drive", 2)
    weights = real_array(weights, "weights", 1)
    v0 = real_array(v0, "v0", 1)
    for x, name in ((drive, "drive"), (weights, "weights"), (v0, "v0")):
        if x.dtype != np.float64:
            raise TypeError(f"{name} must be float64, got {x.dtype}")
    ints = []
    for x, name in ((indptr, "indptr"), (indices, "indices"), (delays, "delays")):
        x = np.asarray(x)
        if x.dtype.kind not in "iu":
            raise TypeError(f"{name} must be an integer array, got dtype {x.dtype}")
        if x.ndim != 1:
            raise ValueError(f"{name} must have 1 axis, got shape {x.shape}")
        ints.append(x.astype(np.int64))
    indptr, indices, delays = ints
    T, N = drive.shape
    if v0.shape != (N,):
        raise ValueError(f"v0 must have shape ({N},) (drive has {N} neurons), got {v0.shape}")
    if indptr.shape != (N + 1,) or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
        raise ValueError(f"indptr must be a non-decreasing CSR pointer of length {N + 1} starting at 0")
    nnz = int(indptr[-1])
    for x, name in ((indices, "indices"), (weights, "weights"), (delays, "delays")):
        if x.shape != (nnz,):
            raise ValueError(f"{name} must have shape ({nnz},) (indptr[-1]), got {x.shape}")
    if nnz and (indices.min() < 0 or indices.max() >= N):
        raise ValueError(f"indices must lie in [0, {N})")
    if nnz and delays.min() < 1:
        raise ValueError("delays must be at least 1 step")
    for val, name, lo, hi in ((beta, "beta", 0.0, 1.0), (alpha_d, "alpha_d", 0.0, 1.0 - 1e-15)):
        if isinstance(val, bool) or not isinstance(val, (int, float, np.floating, np.integer)):
            raise TypeError(f"{name} must be a number")
        if not (lo <= float(val) <= hi):
            raise ValueError(f"{name} must lie in [{lo}, {hi}], got {val}")
    for val, name in ((v_th, "v_th"), (v_reset, "v_reset")):
        if isinstance(val, bool) or not isinstance(val, (int, float, np.floating, np.integer)) \
                or not math.isfinite(float(val)):
            raise ValueError(f"{name} must be a finite number, got {val!r}")
    if float(v_reset) >= float(v_th):
        raise ValueError(f"v_reset must be below v_th, got v_reset={v_reset}, v_th={v_th}")
    if isinstance(n_ref, bool) or not isinstance(n_ref, (int, np.integer)) or n_ref < 0:
        raise ValueError(f"n_ref must be a non-negative integer, got {n_ref!r}")
    if np.abs(drive).max(initial=0.0) > 1e100 or np.abs(weights).max(initial=0.0) > 1e100 \
            or np.abs(v0).max(initial=0.0) > 1e100:
        raise ValueError("drive, weights and v0 must be below 1e100 in magnitude (potentials in units of v_th)")
    dmax = int(delays.max()) if nnz else 1
    return drive, indptr, indices, weights, delays, v0, float(beta), float(alpha_d), float(v_th), \
        float(v_reset), int(n_ref), dmax


# ------------------------------------------------------------------------------------------ the kernel

@numba.njit(cache=True)
def _lif_numba(drive, indptr, indices, weights, delays, v0, beta, alpha_d, v_th, v_reset, n_ref, R):
    T, N = drive.shape
    spikes = np.zeros((T, N), dtype=np.bool_)
    v = v0.copy()
    dend = np.zeros(N)
    ref = np.zeros(N, dtype=np.int64)
    ring = np.zeros((R, N))
    one_m = 1.0 - alpha_d
    for t in range(T):
        slot = t % R
        for i in range(N):
            # D = alpha_d D + (1 - alpha_d) A(t)
            dend[i] = alpha_d * dend[i] + one_m * ring[slot, i]
            ring[slot, i] = 0.0
            if ref[i] > 0:
                ref[i] -= 1
                v[i] = v_reset
            else:
                # exact step between spikes: V <- beta V + (1 - beta) R I  (+ dendritic input)
                v[i] = beta * v[i] + (drive[t, i] + dend[i])
            if v[i] > v_th:
                spikes[t, i] = True
                v[i] = v_reset
                ref[i] = n_ref
                for s in range(indptr[i], indptr[i + 1]):
                    ring[(t + delays[s]) % R, indices[s]] += weights[s]
    return spikes, v


def lif_sheet(drive, indptr, indices, weights, delays, v0, *, beta, alpha_d=0.0, v_th=1.0, v_reset=0.0, n_ref=0):
    """Simulate the LIF sheet (Numba). ``drive``: (T, N) float64 per-step external increment of ``V``;
    ``indptr``: (N+1,), ``indices``, ``weights``, ``delays``: (nnz,) CSR synapses by presynaptic neuron (delays in
    steps, >= 1); ``v0``: (N,) initial potentials. Returns ``(spikes, v)``: (T, N) bool and the final (N,)
    potentials. See the module docstring for the step."""
    a = _check(drive, indptr, indices, weights, delays, v0, beta, alpha_d, v_th, v_reset, n_ref)
    drive, indptr, indices, weights, delays, v0, beta, alpha_d, v_th, v_reset, n_ref, dmax = a
    return _lif_numba(np.ascontiguousarray(drive), indptr, indices, weights, delays, v0, beta, alpha_d, v_th,
                      v_reset, n_ref, dmax + 1)


def lif_sheet_ref(drive, indptr, indices, weights, delays, v0, *, beta, alpha_d=0.0, v_th=1.0, v_reset=0.0,
                  n_ref=0):
    """:func:`lif_sheet` as a vectorised NumPy step (the plain reference; same arguments and result)."""
    a = _check(drive, indptr, indices, weights, delays, v0, beta, alpha_d, v_th, v_reset, n_ref)
    drive, indptr, indices, weights, delays, v0, beta, alpha_d, v_th, v_reset, n_ref, dmax = a
    T, N = drive.shape
    R = dmax + 1
    pre = np.repeat(np.arange(N), np.diff(indptr))
    spikes = np.zeros((T, N), dtype=bool)
    v, dend, ref, ring = v0.copy(), np.zeros(N), np.zeros(N, dtype=np.int64), np.zeros((R, N))
    for t in range(T):
        slot = t % R
        dend = alpha_d * dend + (1.0 - alpha_d) * ring[slot]
        ring[slot] = 0.0
        hold = ref > 0
        ref[hold] -= 1
        v = np.where(hold, v_reset, beta * v + (drive[t] + dend))
        fired = v > v_th
        spikes[t] = fired
        v[fired] = v_reset
        ref[fired] = n_ref
        if fired.any():
            syn = np.flatnonzero(fired[pre])
            # in-order accumulation, like the kernel's loop over spiking neurons and their synapses
            np.add.at(ring, ((t + delays[syn]) % R, indices[syn]), weights[syn])
    return spikes, v


# ------------------------------------------------------------------------------------------ building the sheet

def constant_current_drive(current, T: int, beta: float) -> np.ndarray:
    """(T, N) drive of a constant current ``R I`` (``current``: (N,), in units of the potential): the exact
    between-spike increment ``(1 - beta) R I`` per step."""
    current = np.asarray(current, dtype=float)
    return np.broadcast_to((1.0 - beta) * current, (T, current.size)).copy()


def poisson_drive(rng: np.random.Generator, T: int, N: int, mu: float, rate_dt: float, J: float,
                  beta: float) -> np.ndarray:
    """(T, N) drive: a constant current ``mu`` (exact step, ``(1 - beta) mu``) plus external kicks of weight ``J``,
    at most one per step, with probability ``rate_dt`` (= external rate x dt, the Bernoulli approximation of a
    Poisson train; requires ``rate_dt <= 1``)."""
    if not 0 <= rate_dt <= 1:
        raise ValueError(f"rate_dt must lie in [0, 1], got {rate_dt}")
    out = (rng.random((T, N)) < rate_dt).astype(np.float64)
    out *= J
    out += (1.0 - beta) * mu
    return out


def torus_network(rng: np.random.Generator, L: int, sigma: float, k_out: float, frac_e: float, w_e: float,
                  w_i: float, v_cells_per_step: float | None, min_delay: int = 1, sigma_i: float | None = None):
    """Gaussian connectivity on an ``L x L`` torus (one neuron per cell, ``N = L^2``).

    Each neuron is excitatory with probability ``frac_e``; it sends on average ``k_out`` synapses, target ``k``
    chosen with probability ``exp(-d^2 / 2 sigma^2)`` (``d`` the torus distance; no self-synapse). Weights ``w_e``
    (> 0) or ``-w_i``. Delays ``min_delay + round(d / v)`` steps (``v`` in cells per step), or ``min_delay``
    everywhere when ``v_cells_per_step`` is None. Returns ``(indptr, indices, weights, delays, pos, is_exc)``.
    """
    N = L * L
    pos = np.stack(np.divmod(np.arange(N), L), 1).astype(float)       # (row, col)
    is_exc = rng.random(N) < frac_e
    R = int(math.ceil(4 * max(sigma, sigma_i or sigma)))
    off = np.array([(a, b) for a in range(-R, R + 1) for b in range(-R, R + 1) if (a, b) != (0, 0)])
    d2 = (off ** 2).sum(1)
    rows_i, rows_w, rows_d, indptr = [], [], [], [0]
    for j in range(N):
        s = sigma if (is_exc[j] or sigma_i is None) else sigma_i
        p = np.exp(-d2 / (2 * s * s))
        p = np.minimum(1.0, p * k_out / p.sum())
        keep = rng.random(len(off)) < p
        o = off[keep]
        tgt = ((pos[j, 0] + o[:, 0]) % L) * L + (pos[j, 1] + o[:, 1]) % L
        rows_i.append(tgt.astype(np.int64))
        rows_w.append(np.full(len(o), w_e if is_exc[j] else -w_i))
        if v_cells_per_step is None:
            rows_d.append(np.full(len(o), min_delay, dtype=np.int64))
        else:
            rows_d.append(min_delay + np.rint(np.sqrt(d2[keep]) / v_cells_per_step).astype(np.int64))
        indptr.append(indptr[-1] + len(o))
    return (np.array(indptr, dtype=np.int64), np.concatenate(rows_i), np.concatenate(rows_w),
            np.concatenate(rows_d), pos, is_exc)


# ------------------------------------------------------------------------------------------ registry

def _inputs(rng, size):
    """``size`` time steps on a random 12-neuron network with dyadic weights (exact sums in any order)."""
    N = 12
    k = rng.integers(0, 4, N)
    indptr = np.r_[0, np.cumsum(k)].astype(np.int64)
    nnz = int(indptr[-1])
    return dict(drive=rng.uniform(0.0, 0.35, (size, N)), indptr=indptr, indices=rng.integers(0, N, nnz),
                weights=rng.integers(-16, 32, nnz) / 64.0, delays=rng.integers(1, 5, nnz), v0=rng.uniform(0, 1, N),
                beta=0.9, alpha_d=0.6, v_th=1.0, v_reset=0.0, n_ref=2)


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    return [
        Kernel("lif_sheet.lif_sheet", lif_sheet, lif_sheet_ref, _inputs,
               Contract(args=(Arg("drive", ("float64",), 2), Arg("weights", ("float64",), 1),
                              Arg("v0", ("float64",), 1), Arg("indptr", ("int64",), 1, finite=False),
                              Arg("indices", ("int64",), 1, finite=False, low=0),
                              Arg("delays", ("int64",), 1, finite=False, low=1)),
                        empty="value", empty_value=lambda kw: (np.zeros((0, kw["v0"].size)), kw["v0"]),
                        shapes="drive: (T, N); indptr: (N+1,); indices, weights, delays: (nnz,); v0: (N,); "
                               "returns spikes (T, N) bool and v (N,)"),
               tol={"float64": (0.0, 0.0)}, benchmark="lif_sheet.lif_sheet",
               oracle="exact between-spike solution of tau_m dV/dt = -V + RI; snntorch.Leaky (reset to zero) on "
                      "delay-free networks"),
    ]


KERNELS = _registry()

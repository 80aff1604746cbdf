"""A batched leaky integrate-and-fire (LIF) layer in Torch, with the dormant gate of the dormant-spiking-neuron
model (our reading), surrogate gradients for training by backpropagation through time, and an energy count.

Symbols, per neuron and time step ``t = 1..T`` (``u_0 = 0``, ``s_0 = 0``):

* ``I_t`` the input current, ``beta`` the leak factor, ``thr`` the firing threshold (``theta`` in the text);
* plain LIF, reset by subtraction one step later (the default of ``snntorch.Leaky`` 1.0.0)::

      u_t = beta u_{t-1} + I_t - thr s_{t-1},      s_t = H(u_t - thr)

* dormant gate (``theta_d > 0``): a neuron whose membrane fell below ``-theta_d`` is *dormant*: its state is frozen
  and it is skipped (no leak, no integration, no threshold compare, no synaptic input)::

      a_t = H(u_{t-1} + theta_d)                       (awake at step t)
      u_t = a_t (beta u_{t-1} + I_t - thr s_{t-1}) + (1 - a_t) u_{t-1}

  A frozen membrane stays below ``-theta_d``, so within one input sample dormancy lasts to the end of the window
  (every sample starts awake, ``u_0 = 0``). ``theta_d = inf`` gives the plain LIF bit for bit.
* ``H`` is the Heaviside step (``H(x) = 1`` for ``x > 0``) with the fast-sigmoid surrogate derivative
  ``1 / (1 + k|x|)^2`` (``k`` = ``slope``), as ``snntorch.surrogate.fast_sigmoid``; the reset term is detached
  as in snntorch.

Kernels (registered in ``KERNELS``): :func:`lif_layer` (vectorised over batch and neurons, one loop over time) and
:func:`lif_layer_ref` (plain Python floats, one neuron-step at a time); :func:`snn_energy` /
:func:`snn_energy_ref` (counted synaptic operations and membrane updates). The tests check :func:`lif_layer`
against ``snntorch.Leaky`` spike for spike and against the exact solution of the membrane equation between spikes.
"""
from __future__ import annotations

import math

import numpy as np
import torch

# 45 nm energies (Horowitz 2014), as used by the SNN energy literature: one accumulate (AC) and one
# multiply-accumulate (MAC) of 32-bit floats, in picojoules.
E_AC_PJ = 0.9
E_MAC_PJ = 4.6


class _Spike(torch.autograd.Function):
    """Heaviside ``H(x) = 1[x > 0]`` forward, fast-sigmoid surrogate ``1 / (1 + k|x|)^2`` backward."""

    @staticmethod
    def forward(ctx, x, slope):
        ctx.save_for_backward(x)
        ctx.slope = slope
        return (x > 0).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g / (ctx.slope * torch.abs(x) + 1.0) ** 2, None


def spike_fn(x: torch.Tensor, slope: float = 25.0) -> torch.Tensor:
    """``H(x)`` with the fast-sigmoid surrogate gradient of slope ``slope``; any shape."""
    return _Spike.apply(x, slope)


def _scalar(x, name: str, low: float | None = None, allow_inf: bool = False) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__}")
    x = float(x)
    if math.isnan(x) or (math.isinf(x) and not (allow_inf and x > 0)):
        raise ValueError(f"{name} must be finite{' or +inf' if allow_inf else ''}, got {x}")
    if low is not None and x < low:
        raise ValueError(f"{name} must be >= {low}, got {x}")
    return x


def _current(I, name: str = "I") -> torch.Tensor:
    if not isinstance(I, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(I).__name__}")
    if I.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"{name} must be float32 or float64, got {I.dtype}")
    if I.ndim != 3:
        raise ValueError(f"{name} must have 3 axes (T, B, N), got shape {tuple(I.shape)}")
    if I.shape[0] == 0:
        raise ValueError(f"{name} must have at least one time step, got shape {tuple(I.shape)}")
    if not torch.isfinite(I).all():
        raise ValueError(f"{name} must be finite")
    return I


def _check_layer(I, beta, thr, theta_d, slope):
    I = _current(I)
    beta = _scalar(beta, "beta", 0.0)
    if beta > 1:
        raise ValueError(f"beta must be in [0, 1], got {beta}")
    thr = _scalar(thr, "thr")
    if thr <= 0:
        raise ValueError(f"thr must be positive, got {thr}")
    theta_d = _scalar(theta_d, "theta_d", 0.0, allow_inf=True)
    slope = _scalar(slope, "slope", 0.0)
    return I, beta, thr, theta_d, slope


def lif_layer(I: torch.Tensor, beta: float = 0.9, thr: float = 1.0, theta_d: float = math.inf,
              slope: float = 25.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run a layer of LIF neurons (with the dormant gate when ``theta_d`` is finite) over ``T`` steps.

    ``I``: (T, B, N) input currents (float32/float64, differentiable). Returns ``(s, u, a)``, each (T, B, N) of
    ``I``'s dtype: spikes ``s_t``, membranes ``u_t`` and the awake mask ``a_t`` (all ones when ``theta_d = inf``).
    Gradients flow through ``s`` and ``a`` by the fast-sigmoid surrogate (``slope`` = ``k``).
    """
    I, beta, thr, theta_d, slope = _check_layer(I, beta, thr, theta_d, slope)
    u = torch.zeros_like(I[0])
    s = torch.zeros_like(I[0])
    gate = math.isfinite(theta_d)
    S, U, A = [], [], []
    ones = torch.ones_like(u)
    for t in range(I.shape[0]):
        # reset signal from the previous step, detached as in snntorch
        r = s.detach()
        # u_t = beta u_{t-1} + I_t - thr s_{t-1}
        new = beta * u + I[t] - thr * r
        if gate:
            # a_t = H(u_{t-1} + theta_d); a dormant neuron keeps u_{t-1}
            a = spike_fn(u + theta_d, slope)
            u = a * new + (1.0 - a) * u
        else:
            a, u = ones, new
        # s_t = H(u_t - thr)
        s = spike_fn(u - thr, slope)
        S.append(s); U.append(u); A.append(a)
    return torch.stack(S), torch.stack(U), torch.stack(A)


def lif_layer_ref(I: torch.Tensor, beta: float = 0.9, thr: float = 1.0, theta_d: float = math.inf,
                  slope: float = 25.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`lif_layer` one neuron-step at a time in plain Python floats (forward only; same returns)."""
    I, beta, thr, theta_d, slope = _check_layer(I, beta, thr, theta_d, slope)
    T, B, N = I.shape
    x = I.detach().tolist()
    S = [[[0.0] * N for _ in range(B)] for _ in range(T)]
    U = [[[0.0] * N for _ in range(B)] for _ in range(T)]
    A = [[[1.0] * N for _ in range(B)] for _ in range(T)]
    for b in range(B):
        for n in range(N):
            u, s = 0.0, 0.0
            for t in range(T):
                awake = u + theta_d > 0 if math.isfinite(theta_d) else True
                if awake:
                    u = beta * u + x[t][b][n] - thr * s
                    s = 1.0 if u - thr > 0 else 0.0
                else:
                    s = 0.0
                S[t][b][n], U[t][b][n], A[t][b][n] = s, u, 1.0 if awake else 0.0
    mk = lambda v: torch.tensor(v, dtype=I.dtype).reshape(T, B, N)
    return mk(S), mk(U), mk(A)


# ------------------------------------------------------------------------------------------ energy

def _count_array(x, name: str, ndim: int) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    x = np.asarray(x)
    if x.dtype == bool:
        x = x.astype(np.float64)
    if np.iscomplexobj(x) or not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise TypeError(f"{name} must be a real array, got dtype {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} axes, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} must be finite")
    if (x < 0).any() or (x > 1).any():
        raise ValueError(f"{name} must hold 0/1 entries (values in [0, 1])")
    return x.astype(np.float64)


def snn_energy(pre_spikes, post_awake, conn, e_ac: float = E_AC_PJ, e_upd: float = E_MAC_PJ,
               e_gate: float = 0.0) -> dict:
    """Counted work and energy of one layer of synapses and the neurons they feed.

    ``pre_spikes``: (T, B, M) presynaptic spikes (0/1); ``post_awake``: (T, B, N) awake mask of the target neurons
    (all ones for plain LIF; a removed neuron is never awake); ``conn``: (M, N) 0/1 connectivity (``W != 0``).
    A synaptic operation (one AC) is a spike arriving at an awake target over an existing synapse::

        SOP = sum_{t,b} s_{t,b,:} conn a_{t,b,:}^T,    UPD = sum_{t,b,n} a_{t,b,n}

    and ``energy_pj = e_ac SOP + (e_upd + e_gate) UPD`` (``e_gate``: the cost of the dormancy compare of an awake
    neuron, zero for plain LIF). Returns a dict of ``sop``, ``upd`` and ``energy_pj`` (floats, summed over the
    batch; divide by B for per-sample numbers).
    """
    s = _count_array(pre_spikes, "pre_spikes", 3)
    a = _count_array(post_awake, "post_awake", 3)
    c = _count_array(conn, "conn", 2)
    if s.shape[:2] != a.shape[:2]:
        raise ValueError(f"pre_spikes {s.shape} and post_awake {a.shape} must share (T, B)")
    if c.shape != (s.shape[2], a.shape[2]):
        raise ValueError(f"conn must have shape (M, N) = {(s.shape[2], a.shape[2])}, got {c.shape}")
    e_ac, e_upd = _scalar(e_ac, "e_ac", 0.0), _scalar(e_upd, "e_upd", 0.0)
    e_gate = _scalar(e_gate, "e_gate", 0.0)
    T, B, M = s.shape
    # SOP = sum_{t,b} (s_{t,b,:} conn) . a_{t,b,:}
    sop = float(((s.reshape(T * B, M) @ c) * a.reshape(T * B, -1)).sum())
    upd = float(a.sum())
    return {"sop": sop, "upd": upd, "energy_pj": e_ac * sop + (e_upd + e_gate) * upd}


def snn_energy_ref(pre_spikes, post_awake, conn, e_ac: float = E_AC_PJ, e_upd: float = E_MAC_PJ,
                   e_gate: float = 0.0) -> dict:
    """:func:`snn_energy` by walking every spike and every synapse (same arguments and returns)."""
    s = _count_array(pre_spikes, "pre_spikes", 3)
    a = _count_array(post_awake, "post_awake", 3)
    c = _count_array(conn, "conn", 2)
    if s.shape[:2] != a.shape[:2]:
        raise ValueError(f"pre_spikes {s.shape} and post_awake {a.shape} must share (T, B)")
    if c.shape != (s.shape[2], a.shape[2]):
        raise ValueError(f"conn must have shape (M, N) = {(s.shape[2], a.shape[2])}, got {c.shape}")
    e_ac, e_upd = _scalar(e_ac, "e_ac", 0.0), _scalar(e_upd, "e_upd", 0.0)
    e_gate = _scalar(e_gate, "e_gate", 0.0)
    T, B, M = s.shape
    N = a.shape[2]
    sop = upd = 0.0
    for t in range(T):
        for b in range(B):
            for n in range(N):
                upd += a[t, b, n]
                if a[t, b, n] == 0:
                    continue
                for m in range(M):
                    if s[t, b, m] and c[m, n]:
                        sop += s[t, b, m] * c[m, n] * a[t, b, n]
    return {"sop": sop, "upd": upd, "energy_pj": e_ac * sop + (e_upd + e_gate) * upd}


# ------------------------------------------------------------------------------------------ registry

def _layer_inputs(rng, size):
    T = 6
    I = torch.tensor(rng.normal(0.2, 0.8, (T, 3, size)))
    return dict(I=I, beta=float(rng.uniform(0.5, 0.95)), thr=1.0, theta_d=float(rng.uniform(0.2, 1.0)), slope=25.0)


def _energy_inputs(rng, size):
    T, B, N = 4, 3, 5
    return dict(pre_spikes=(rng.random((T, B, size)) < 0.3).astype(np.float64),
                post_awake=(rng.random((T, B, N)) < 0.7).astype(np.float64),
                conn=(rng.random((size, N)) < 0.8).astype(np.float64), e_ac=0.9, e_upd=4.6, e_gate=0.9)


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    return [
        Kernel("lif_torch.lif_layer", lif_layer, lif_layer_ref, _layer_inputs,
               Contract(args=(Arg("I", ("float32", "float64"), 3, scale=True),), empty="value",
                        empty_value=lambda kw: (torch.zeros(kw["I"].shape, dtype=torch.float64),) * 2
                        + (torch.ones(kw["I"].shape, dtype=torch.float64),),
                        shapes="I: (T, B, N); returns s, u, a: (T, B, N)"),
               tol={"float64": (1e-12, 1e-12), "float32": (1e-5, 1e-5)}, benchmark="lif_torch.lif_layer",
               oracle="snntorch.Leaky 1.0.0 (spike for spike) and the exact membrane solution between spikes"),
        Kernel("lif_torch.snn_energy", snn_energy, snn_energy_ref, _energy_inputs,
               Contract(args=(Arg("pre_spikes", ("float32", "float64"), 3, low=0.0, high=1.0),
                              Arg("post_awake", ("float32", "float64"), 3, low=0.0, high=1.0),
                              Arg("conn", ("float32", "float64"), 2, low=0.0, high=1.0)), empty="value",
                        empty_value=lambda kw: {"energy_pj": 0.0 + (4.6 + 0.9) * kw["post_awake"].sum(),
                                                "sop": 0.0, "upd": kw["post_awake"].sum()},
                        shapes="pre_spikes: (T, B, M); post_awake: (T, B, N); conn: (M, N)"),
               tol={"float64": (1e-12, 1e-9)}, benchmark="",
               oracle="closed form: dense layer, all awake, SOP = (number of spikes) x N"),
    ]


KERNELS = _registry()

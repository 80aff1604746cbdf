"""paperkit.spiking_cognition.lif_torch: the batched LIF layer against its per-step reference, against
snntorch.Leaky 1.0.0 (spike for spike), against the exact solution of the membrane equation between spikes, and the
dormant gate's properties; the energy count against its reference and a closed form."""
import math

import numpy as np
import pytest
import torch

from paperkit.spiking_cognition import lif_torch as lt

snn = pytest.importorskip("snntorch")
from snntorch import surrogate  # noqa: E402

SEEDS = [0, 1, 2]


def _currents(seed, T=12, B=5, N=17, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(T, B, N, generator=g, dtype=torch.float64) * 0.9 + 0.3).to(dtype)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("theta_d", [math.inf, 0.3, 1.0])
def test_layer_matches_reference(seed, dtype, theta_d):
    I = _currents(seed, dtype=dtype)
    out, ref = lt.lif_layer(I, 0.85, 1.0, theta_d), lt.lif_layer_ref(I, 0.85, 1.0, theta_d)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for a, b in zip(out, ref):
        assert a.dtype == dtype and a.shape == I.shape
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("beta", [0.5, 0.9, 0.99])
@pytest.mark.parametrize("thr", [0.5, 1.0, 2.0])
def test_layer_equals_snntorch_leaky(seed, beta, thr):
    # snntorch keeps beta and the threshold as float32 tensors: compare in float32, where both agree exactly
    I = _currents(seed, T=40, B=8, N=32, dtype=torch.float32) * thr
    s, u, _ = lt.lif_layer(I, beta, thr)
    leaky = snn.Leaky(beta=beta, threshold=thr, spike_grad=surrogate.fast_sigmoid(slope=25))
    mem = leaky.reset_mem()
    S, U = [], []
    for t in range(I.shape[0]):
        spk, mem = leaky(I[t], mem)
        S.append(spk); U.append(mem)
    assert torch.equal(torch.stack(S), s)
    np.testing.assert_allclose(torch.stack(U).numpy(), u.numpy(), rtol=1e-6, atol=1e-6)
    assert s.sum() > 0 and s.sum() < s.numel()


def test_surrogate_gradient_equals_snntorch():
    I = _currents(3, T=10, B=4, N=9, dtype=torch.float32).requires_grad_(True)
    s, u, _ = lt.lif_layer(I, 0.9, 1.0)
    (s * torch.linspace(0.1, 1, 9)).sum().backward()
    g_ours = I.grad.clone()
    I2 = I.detach().clone().requires_grad_(True)
    leaky = snn.Leaky(beta=0.9, threshold=1.0, spike_grad=surrogate.fast_sigmoid(slope=25))
    mem = leaky.reset_mem()
    S = []
    for t in range(I2.shape[0]):
        spk, mem = leaky(I2[t], mem)
        S.append(spk)
    (torch.stack(S) * torch.linspace(0.1, 1, 9)).sum().backward()
    np.testing.assert_allclose(g_ours.numpy(), I2.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("beta", [0.6, 0.9])
@pytest.mark.parametrize("c", [0.05, 0.13, 0.3])
def test_constant_current_matches_exact_solution(beta, c):
    """Constant current c: between spikes u_t = c (1 - beta^t) / (1 - beta) from u_0 = 0 (exact solution of
    u_t = beta u_{t-1} + c), the first spike at the first t with u_t > thr, and afterwards the exact recursion
    with the subtractive reset; c/(1-beta) < thr never fires."""
    T, thr = 60, 1.0
    I = torch.full((T, 1, 1), c, dtype=torch.float64)
    s, u, _ = lt.lif_layer(I, beta, thr)
    t = np.arange(1, T + 1)
    free = c * (1 - beta ** t) / (1 - beta)
    if c / (1 - beta) <= thr:
        assert s.sum() == 0
        np.testing.assert_allclose(u[:, 0, 0].numpy(), free, rtol=1e-12)
        return
    k = int(np.argmax(free > thr))  # index of the first spike
    np.testing.assert_allclose(u[: k + 1, 0, 0].numpy(), free[: k + 1], rtol=1e-12)
    assert s[:k, 0, 0].sum() == 0 and s[k, 0, 0] == 1
    # after a spike at step k the next step starts from u_k - thr: u_{k+j} = beta^j u_k - thr beta^(j-1)
    # + c (1 - beta^j)/(1 - beta), until the next spike
    uk = float(u[k, 0, 0])
    nxt = np.argmax(s[k + 1:, 0, 0].numpy() > 0) if s[k + 1:].sum() else T - k - 1
    for j in range(1, nxt + 1):
        exact = beta ** j * uk - thr * beta ** (j - 1) + c * (1 - beta ** j) / (1 - beta)
        assert float(u[k + j, 0, 0]) == pytest.approx(exact, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_gate_off_is_bit_exact_and_dormant_states_freeze(seed):
    I = _currents(seed, T=16)
    plain = lt.lif_layer(I, 0.9, 1.0)
    off = lt.lif_layer(I, 0.9, 1.0, theta_d=math.inf)
    for a, b in zip(plain, off):
        assert torch.equal(a, b)
    s, u, a = lt.lif_layer(I - 0.6, 0.9, 1.0, theta_d=0.4)
    assert (a == 0).any()
    asleep = a[1:] == 0
    # a dormant neuron keeps its membrane, stays dormant, does not fire
    assert torch.equal(u[1:][asleep], u[:-1][asleep])
    assert (s[1:][asleep] == 0).all()
    assert ((a[1:] <= a[:-1]) | (a[:-1] == 1)).all() and (a[1:][a[:-1] == 0] == 0).all()


def test_gate_has_a_gradient_through_the_awake_mask():
    I = (_currents(1) - 0.5).requires_grad_(True)
    _, _, a = lt.lif_layer(I, 0.9, 1.0, theta_d=0.3)
    a.sum().backward()
    assert torch.isfinite(I.grad).all() and I.grad.abs().sum() > 0


@pytest.mark.parametrize("seed", SEEDS)
def test_energy_matches_reference_and_closed_form(seed):
    kw = lt._energy_inputs(np.random.default_rng(seed), 11)
    e, r = lt.snn_energy(**kw), lt.snn_energy_ref(**kw)
    for k in e:
        assert e[k] == pytest.approx(r[k], rel=1e-12, abs=1e-9)
    # dense connectivity, every target awake: SOP = (number of spikes) x N, UPD = T B N
    s, a, c = kw["pre_spikes"], np.ones_like(kw["post_awake"]), np.ones_like(kw["conn"])
    d = lt.snn_energy(s, a, c, e_ac=0.9, e_upd=4.6)
    assert d["sop"] == s.sum() * a.shape[2] and d["upd"] == a.size
    assert d["energy_pj"] == pytest.approx(0.9 * d["sop"] + 4.6 * d["upd"])


@pytest.mark.parametrize("bad, name", [(dict(beta=1.5), "beta"), (dict(thr=0.0), "thr"), (dict(theta_d=-1.0), "theta_d"),
                                       (dict(theta_d=float("nan")), "theta_d")])
def test_bad_parameters_name_themselves(bad, name):
    kw = dict(I=_currents(0), beta=0.9, thr=1.0, theta_d=0.5)
    kw.update(bad)
    for f in (lt.lif_layer, lt.lif_layer_ref):
        with pytest.raises(ValueError, match=name):
            f(**kw)
    with pytest.raises(ValueError, match="I"):
        lt.lif_layer(torch.zeros(4, 3))

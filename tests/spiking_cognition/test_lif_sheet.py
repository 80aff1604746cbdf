"""paperkit.spiking_cognition.lif_sheet: the Numba sheet against its NumPy reference, the exact between-spike
solution of the membrane equation and snntorch.Leaky; the field readouts against closed forms."""
import math

import numpy as np
import pytest
import torch
import snntorch as snn

from paperkit.spiking_cognition import lif_sheet as ls
from paperkit.spiking_cognition import turbulence_fields as tf

SEEDS = [0, 1, 2]


def _random_net(rng, N, k=6, max_delay=5, dyadic=True):
    ks = rng.integers(0, k + 1, N)
    indptr = np.r_[0, np.cumsum(ks)].astype(np.int64)
    nnz = int(indptr[-1])
    w = rng.integers(-20, 40, nnz) / 128.0 if dyadic else rng.normal(0.05, 0.1, nnz)
    return indptr, rng.integers(0, N, nnz), w, rng.integers(1, max_delay + 1, nnz)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("alpha_d,n_ref", [(0.0, 0), (0.6, 2), (0.95, 5)])
def test_kernel_equals_reference(seed, alpha_d, n_ref):
    rng = np.random.default_rng(seed)
    N, T = 40, 300
    net = _random_net(rng, N, dyadic=False)
    drive = rng.uniform(0, 0.25, (T, N))
    v0 = rng.uniform(0, 1, N)
    kw = dict(beta=0.9, alpha_d=alpha_d, v_th=1.0, v_reset=0.1, n_ref=n_ref)
    s1, v1 = ls.lif_sheet(drive, *net, v0, **kw)
    s2, v2 = ls.lif_sheet_ref(drive, *net, v0, **kw)
    assert s1.sum() > 20
    np.testing.assert_array_equal(s1, s2)
    np.testing.assert_allclose(v1, v2, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("I", [0.5, 0.99, 1.3, 2.0, 5.0])
@pytest.mark.parametrize("n_ref", [0, 3])
def test_exact_between_spike_solution(I, n_ref):
    """Constant current R I, no synapses: V(t) = I (1 - exp(-t / tau_m)) between spikes; the first spike at the
    first grid step past t* = tau_m ln(I / (I - v_th)), then every n_ref + ceil(t*/dt) steps."""
    dt, tau = 0.5, 20.0
    beta = math.exp(-dt / tau)
    T = 2000
    empty = (np.zeros(2, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64))
    drive = ls.constant_current_drive(np.array([I]), T, beta)
    for fn in (ls.lif_sheet, ls.lif_sheet_ref):
        sp, v = fn(drive, *empty, np.zeros(1), beta=beta, n_ref=n_ref)
        times = np.flatnonzero(sp[:, 0])
        if I <= 1.0:
            assert len(times) == 0
            assert v[0] == pytest.approx(I * (1 - math.exp(-T * dt / tau)), rel=1e-11)
            continue
        tstar = tau * math.log(I / (I - 1.0))
        k = math.ceil(tstar / dt - 1e-12)            # first step with V > v_th
        assert times[0] == k - 1                     # step index t holds V at time (t + 1) dt
        np.testing.assert_array_equal(np.diff(times), n_ref + k)
        # the potential at the end: the closed form from the last reset
        last = times[-1]
        free = T - 1 - last - n_ref
        if free > 0:
            assert v[0] == pytest.approx(I * (1 - math.exp(-free * dt / tau)), rel=1e-10)


def _snntorch_run(drive, indptr, indices, weights, beta):
    """snntorch.Leaky (reset to zero) with recurrent input W s[t-1] added to the drive; float64."""
    T, N = drive.shape
    W = np.zeros((N, N))
    pre = np.repeat(np.arange(N), np.diff(indptr))
    np.add.at(W, (indices, pre), weights)
    Wt = torch.tensor(W)
    lif = snn.Leaky(beta=torch.tensor(beta, dtype=torch.float64), threshold=1.0, reset_mechanism="zero")
    mem = torch.zeros(N, dtype=torch.float64)
    spk = torch.zeros(N, dtype=torch.float64)
    out = np.zeros((T, N), bool)
    with torch.no_grad():
        for t in range(T):
            x = torch.tensor(drive[t]) + Wt @ spk.to(torch.float64)
            spk, mem = lif(x, mem)
            out[t] = spk.numpy() > 0
    return out, mem.numpy()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("N", [1, 10, 64])
def test_matches_snntorch_leaky_without_delays(seed, N):
    rng = np.random.default_rng(seed)
    T, beta = 400, math.exp(-0.5 / 20.0)
    indptr, indices, w, _ = _random_net(rng, N)
    delays = np.ones_like(indices)
    drive = rng.integers(0, 16, (T, N)) / 256.0        # dyadic: every sum exact in any order
    s_ref, v_ref = _snntorch_run(drive, indptr, indices, w, beta)
    for fn in (ls.lif_sheet, ls.lif_sheet_ref):
        s, v = fn(drive, indptr, indices, w, delays, np.zeros(N), beta=beta, alpha_d=0.0, v_reset=0.0, n_ref=0)
        assert s_ref.sum() > 0
        np.testing.assert_array_equal(s, s_ref)
        np.testing.assert_allclose(v, v_ref, rtol=1e-12, atol=1e-12)


def test_delays_shift_arrivals_exactly():
    """One spike from neuron 0 at step t0 reaches neuron 1 with weight w at step t0 + d: V_1 jumps there."""
    beta = 0.9
    T = 30
    drive = np.zeros((T, 2)); drive[0, 0] = 2.0
    for d in (1, 4, 9):
        sp, _ = ls.lif_sheet(drive, np.array([0, 1, 1]), np.array([1]), np.array([0.5]), np.array([d]),
                             np.zeros(2), beta=beta)
        assert np.flatnonzero(sp[:, 0]).tolist() == [0]
        _, v = ls.lif_sheet(drive[:d + 1], np.array([0, 1, 1]), np.array([1]), np.array([0.5]), np.array([d]),
                              np.zeros(2), beta=beta)
        assert v[1] == pytest.approx(0.5)
        _, v = ls.lif_sheet(drive[:d], np.array([0, 1, 1]), np.array([1]), np.array([0.5]), np.array([d]),
                            np.zeros(2), beta=beta)
        assert v[1] == 0.0


def test_dendritic_filter_conserves_charge():
    """A unit arrival through the low-pass delivers total charge 1 whatever alpha_d (sum of D over time)."""
    T = 4000
    for a in (0.0, 0.5, 0.95):
        drive = np.zeros((T, 2)); drive[0, 0] = 2e6
        # beta = 1 (no leak) and a high threshold: V_1 integrates D exactly
        _, v = ls.lif_sheet(drive, np.array([0, 1, 1]), np.array([1]), np.array([1.0]), np.array([1]),
                            np.zeros(2), beta=1.0, alpha_d=a, v_th=1e6)
        assert v[1] == pytest.approx(1.0, rel=1e-9)


def test_bad_input_names_the_argument():
    net = _random_net(np.random.default_rng(0), 5)
    d = np.zeros((10, 5))
    with pytest.raises(ValueError, match="delays"):
        ls.lif_sheet(d, net[0], net[1], net[2], np.zeros_like(net[3]), np.zeros(5), beta=0.9)
    with pytest.raises(ValueError, match="beta"):
        ls.lif_sheet(d, *net, np.zeros(5), beta=1.5)
    with pytest.raises(ValueError, match="v0"):
        ls.lif_sheet(d, *net, np.zeros(4), beta=0.9)
    with pytest.raises(TypeError, match="drive"):
        ls.lif_sheet(d.astype(np.float32), *net, np.zeros(5), beta=0.9)


def test_torus_network_degree_and_delays():
    rng = np.random.default_rng(0)
    indptr, idx, w, dl, pos, exc = ls.torus_network(rng, 20, 3.0, 60, 0.8, 0.1, 0.5, 0.1, min_delay=2)
    assert abs(np.diff(indptr).mean() - 60) < 3
    assert dl.min() >= 3 and np.all((w > 0) == np.repeat(exc, np.diff(indptr)))


# ------------------------------------------------------------------------------------------ field readouts

def test_winding_number_of_a_single_vortex():
    L = 16
    y, x = np.mgrid[0:L, 0:L].astype(float)
    phi = np.arctan2(y - 7.5, x - 7.5)[None]
    w = tf.winding_numbers(phi)
    # the wrap-around of the torus adds compensating defects at the border; the interior holds exactly one +1
    inner = w[0, 2:L - 3, 2:L - 3]
    assert inner.sum() == 1 and np.abs(inner).sum() == 1 and w[0, 7, 7] == 1
    assert tf.winding_numbers(-phi)[0, 7, 7] == -1


def test_plane_wave_has_no_defects_and_known_structure_function():
    L = 24
    y, x = np.mgrid[0:L, 0:L].astype(float)
    k = 2 * np.pi * 2 / L
    phi = np.stack([k * x + 0.3 * f for f in range(5)])
    assert np.abs(tf.winding_numbers(phi)).sum() == 0
    rs = [1, 2, 3]
    # S2(r) = 0.5 |e^{ikr} - 1|^2 along x (0 along y)
    np.testing.assert_allclose(tf.structure_function(phi, rs), [0.5 * abs(np.exp(1j * k * r) - 1) ** 2 for r in rs],
                               rtol=1e-12)


def test_track_lifetimes_of_a_moving_vortex():
    L, F = 16, 12
    y, x = np.mgrid[0:L, 0:L].astype(float)
    phi = np.stack([np.arctan2(y - 7.5, x - 4.5 - 0.4 * f) for f in range(F)])
    w = tf.winding_numbers(phi)
    assert w[0, 7, 4] == 1 and w[F - 1, 7, 8] == 1     # the vortex moves 4.4 cells in 12 frames
    life = tf.track_lifetimes(w)
    assert life.max() == F


def test_power_law_tail_fit_recovers_alpha_and_prefers_power_law():
    rng = np.random.default_rng(0)
    x = (1 - rng.random(5000)) ** (-1 / 1.5)           # Pareto, alpha = 2.5, xmin = 1
    out = tf.tail_loglik_ratios(x, 1.0)
    assert out["alpha"] == pytest.approx(2.5, abs=0.06)
    assert out["R_exp"] > 2
    e = tf.tail_loglik_ratios(rng.exponential(1.0, 5000) + 1.0, 1.0)
    assert e["R_exp"] < -2


def test_shuffle_keeps_each_neurons_count():
    rng = np.random.default_rng(0)
    s = rng.random((500, 30)) < 0.05
    np.testing.assert_array_equal(tf.shuffle_spike_times(rng, s).sum(0), s.sum(0))

"""The clocked selective construction, the non-selective floors and the trained scans of the universality chapter.

Fast kernels against their references (the shared Mamba-form oracle, a step-by-step loop), the construction against
SciPy's multilinear interpolation, the floors against scikit-learn, and the trained scans' structure (a
non-selective member is affine in its inputs, ensemble members are independent)."""
import numpy as np
import pytest
import torch
from scipy.interpolate import RegularGridInterpolator
from sklearn.linear_model import LinearRegression

from paperkit.sequence_models import ssm_universality as su
from paperkit.nn.selective_scan import selective_scan_numba, selective_scan_ref

TOL = {np.float64: 1e-12, np.float32: 1e-5}


def seqs(n, T, seed):
    return np.random.default_rng(seed).random((n, T))


@pytest.mark.parametrize("m,T", [(2, 1), (3, 2), (4, 3), (2, 4), (5, 2)])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fused_kernel_matches_shared_selective_scan(m, T, seed, dtype):
    x = seqs(7 if seed else 1, T, seed)
    gates = su.hat_gates(x, m, 0.05, 1e-6).astype(dtype)
    W = su.construction_weights(su.target_sinmax, m, T, 0.05).astype(dtype)
    fast = su.clocked_scan_readout(gates, W)
    ref = su.clocked_scan_readout_ref(gates, W)
    via_numba = su.readout_via_selective_scan(gates, W, selective_scan_numba)
    assert fast.shape == (len(x), T) and fast.dtype == np.float64
    np.testing.assert_allclose(fast, ref, rtol=TOL[dtype], atol=TOL[dtype])
    np.testing.assert_allclose(via_numba, ref, rtol=1e-10, atol=1e-10)


def test_state_is_a_scaled_product_of_hat_features():
    # a readout that picks one coordinate k = (c_1, c_2, c_3) exposes h_t[k] = (1-eps)^t prod_s max(phi_{c_s}, eta)
    m, T, eps, eta = 3, 3, 0.1, 1e-3
    x = seqs(20, T, 3)
    gates = su.hat_gates(x, m, eps, eta)
    phi = np.maximum(su.hat_features(x, m), eta)
    k = (2, 0, 1)
    W = np.zeros((T, m**T))
    W[:, np.ravel_multi_index(k, (m,) * T)] = 1.0
    h = su.clocked_scan_readout(gates, W)
    for t in range(T):
        expect = (1 - eps) ** (t + 1) * np.prod([phi[:, s, k[s]] for s in range(t + 1)], axis=0)
        np.testing.assert_allclose(h[:, t], expect, rtol=1e-12)
    assert np.all((gates > 0) & (gates < 1))


@pytest.mark.parametrize("T,m", [(2, 5), (3, 4)])
def test_construction_is_multilinear_interpolation_of_the_target(T, m):
    x = seqs(300, T, 4)
    nodes = np.linspace(0, 1, m)
    grid = np.stack(np.meshgrid(*[nodes] * T, indexing="ij"), -1).reshape(-1, T)
    f = su.target_sinmax(grid)
    y = su.construct(su.target_sinmax, x, m, 0.05, 1e-12)
    for t in range(T):
        interp = RegularGridInterpolator([nodes] * T, f[:, t].reshape((m,) * T))(x)
        np.testing.assert_allclose(y[:, t], interp, atol=1e-9)


def test_multilinear_targets_are_exact_and_lipschitz_error_falls_like_one_over_m():
    x = np.concatenate([seqs(2000, 3, 5), su.midpoint_probes(16, 3)])
    for name in ("cprod", "linear"):
        f = su.TARGETS[name]
        assert np.abs(su.construct(f, x, 3, 0.05, 1e-10) - f(x)).max() < 1e-7
    sup = [np.abs(su.construct(su.target_sinmax, x, m, 0.05, 1e-8) - su.target_sinmax(x)).max() for m in (8, 16)]
    assert 0.35 < sup[1] / sup[0] < 0.65  # one factor of two in m halves the kink's error
    assert sup[1] < 0.03


def test_targets_are_causal():
    x = seqs(50, 4, 6)
    x2 = x.copy()
    x2[:, 2:] = 1 - x2[:, 2:]
    for name, f in su.TARGETS.items():
        np.testing.assert_array_equal(f(x)[:, :2], f(x2)[:, :2], err_msg=name)


def test_midpoint_probes():
    p = su.midpoint_probes(5, 2)
    assert p.shape == (16, 2)
    np.testing.assert_allclose(np.unique(p), (np.arange(4) + 0.5) / 4)
    assert len(su.midpoint_probes(64, 3, max_probes=1000)) <= 1000


def test_ls_floor_matches_sklearn_and_spans_nest():
    x = seqs(3000, 3, 7)
    y = su.target_sinmax(x)
    floor = su.ls_floor(x, y)
    for t in range(3):
        lr = LinearRegression().fit(x[:, :t + 1], y[:, t])
        np.testing.assert_allclose(floor[t], np.mean((lr.predict(x[:, :t + 1]) - y[:, t]) ** 2), rtol=1e-9, atol=1e-20)
    # hat features with m = 2 are exactly (1 - x, x): the linear span; finer hats contain it
    np.testing.assert_allclose(su.ls_floor(x, y, su.additive_hat_features(2)), floor, rtol=1e-9, atol=1e-20)
    assert np.all(su.ls_floor(x, y, su.additive_hat_features(8)) <= floor + 1e-12)
    assert floor[1] > 0.01  # the target is not linear


def test_lti_scan_states_and_its_floor_stop_at_T_states():
    x = seqs(2000, 3, 8)
    for N in (1, 4, 33):
        decays = np.geomspace(0.1, 0.9, N) if N > 1 else np.array([0.5])
        # the same multiply-add in the same order: bit-identical to the reference
        np.testing.assert_array_equal(su.lti_scan_states(x, decays), su.lti_scan_states_ref(x, decays))
    y = su.target_sinmax(x)
    lin = su.ls_floor(x, y).mean()
    one = su.ls_floor(x, y, su.lti_states_features(np.array([0.5]))).mean()
    many = su.ls_floor(x, y, su.lti_states_features(np.geomspace(0.05, 0.95, 64))).mean()
    assert one > 1.5 * lin
    np.testing.assert_allclose(many, lin, rtol=1e-6)


def test_ls_floor_survives_flush_denormal_on_collinear_features():
    # the SVD least-squares drivers fail on exactly collinear columns once Torch flushes denormals
    x = seqs(10000, 3, 9)
    torch.set_flush_denormal(True)
    try:
        floor = su.ls_floor(x, su.target_sinmax(x), su.lti_states_features(np.geomspace(0.05, 0.95, 256)))
    finally:
        torch.set_flush_denormal(False)
    np.testing.assert_allclose(floor, su.ls_floor(x, su.target_sinmax(x)), rtol=1e-6, atol=1e-20)


def model_and_data(seed=0, E_sel=(True, False), T=3):
    g = torch.Generator().manual_seed(seed)
    model = su.ClockedScanEnsemble(list(E_sel), 3, 4, T, g).double()
    x = torch.rand(len(E_sel), 5, T, generator=g, dtype=torch.float64)
    return model, x


def test_ensemble_forward_with_chunked_scan_matches_oracle():
    model, x = model_and_data()
    y = model(x)
    model.scan = selective_scan_ref
    torch.testing.assert_close(model(x), y, rtol=1e-10, atol=1e-12)


def test_non_selective_member_is_affine_in_the_history_and_selective_one_is_not():
    model, x = model_and_data(1)
    d = 0.1
    e1, e2 = torch.zeros_like(x), torch.zeros_like(x)
    e1[..., 0], e2[..., 1] = d, d
    with torch.no_grad():
        # mixed second difference in (x_1, x_2) at step 2 and 3: zero for an affine map
        mixed = model(x + e1 + e2) - model(x + e1) - model(x + e2) + model(x)
        curv = model(x + 2 * e2) - 2 * model(x + e2) + model(x)
    assert mixed[1].abs().max() < 1e-12 and curv[1].abs().max() < 1e-12
    assert mixed[0][:, 1:].abs().max() > 1e-6 and curv[0].abs().max() > 1e-6


def test_ensemble_members_are_independent():
    model, x = model_and_data(2, (True, True))
    y = torch.rand_like(x)
    grads = []
    for x_first in (x[0], x[0] * 0.3):
        model.zero_grad()
        xx = torch.stack([x_first, x[1]])
        ((model(xx) - y) ** 2).mean((1, 2)).sum().backward()
        grads.append([p.grad[1].clone() for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


def test_training_lowers_error_and_non_selective_stays_above_the_floor():
    g = torch.Generator().manual_seed(0)
    rng = np.random.default_rng(0)
    x_np = rng.random((2, 1000, 3))
    y_np = su.target_cprod(x_np.reshape(-1, 3)).reshape(x_np.shape)
    xt = rng.random((2000, 3))
    X, Y = torch.tensor(x_np, dtype=torch.float32), torch.tensor(y_np, dtype=torch.float32)
    Xt, Yt = torch.tensor(xt, dtype=torch.float32), torch.tensor(su.target_cprod(xt), dtype=torch.float32)
    model = su.ClockedScanEnsemble([True, False], 4, 8, 3, g)
    before = su.ensemble_mse(model, Xt, Yt)
    threads = torch.get_num_threads()
    curve = su.train_ensemble(model, X, Y, 150, 0.05, 64, g, x_eval=Xt, y_eval=Yt, eval_every=50)
    assert torch.get_num_threads() == threads
    after = su.ensemble_mse(model, Xt, Yt, chunk=300)
    assert [s for s, _ in curve] == [50, 100, 150]
    assert np.all(after < before)
    assert after[1] >= su.ls_floor(xt, su.target_cprod(xt)).mean() * (1 - 1e-5)


@pytest.mark.parametrize("call,name", [
    (lambda: su.clocked_scan_readout(np.ones((2, 3)), np.ones((3, 8))), "gates"),
    (lambda: su.clocked_scan_readout(np.full((2, 3, 2), 0.5), np.ones((3, 9))), "W"),
    (lambda: su.hat_features(np.zeros(3), 1), "m"),
    (lambda: su.hat_gates(np.zeros((2, 3)), 4, 1.0, 1e-6), "eps"),
    (lambda: su.hat_gates(np.zeros((2, 3)), 4, 0.1, 0.0), "eta"),
    (lambda: su.hat_gates(np.zeros(3), 4, 0.1, 1e-6), "x"),
    (lambda: su.construction_weights(su.target_sinmax, 64, 4, 0.1), "MAX_STATES"),
    (lambda: su.construction_weights(su.target_sinmax, 4, -1, 0.1), "horizon"),
    (lambda: su.lti_scan_states(np.zeros((2, 3)), np.array([1.5])), "decays"),
    (lambda: su.ls_floor(np.zeros((4, 3)), np.zeros((4, 2))), "y"),
    (lambda: su.midpoint_probes(4, 2, max_probes=0), "max_probes"),
    (lambda: su.ClockedScanEnsemble([True], 0, 4, 3, torch.Generator()), "d"),
    (lambda: su.ClockedScanEnsemble([True], 2, 4, 3, torch.Generator())(torch.zeros(2, 5, 3)), "x"),
])
def test_bad_input_raises_value_error_naming_it(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_bad_training_arguments():
    model, x = model_and_data()
    with pytest.raises(ValueError, match="steps"):
        su.train_ensemble(model, x, x, 0, 0.01, 4, torch.Generator())
    with pytest.raises(ValueError, match="x_train"):
        su.train_ensemble(model, x[:1], x[:1], 5, 0.01, 4, torch.Generator())


@pytest.mark.parametrize("selective", [True, False])
def test_state_features_reproduce_the_readout(selective):
    """The model's own output is a linear readout of ensemble_state_features: the features are the whole state."""
    g = torch.Generator().manual_seed(3)
    model = su.ClockedScanEnsemble([selective, not selective], 3, 4, 3, g)
    x = seqs(11, 3, 5)
    with torch.no_grad():
        y = model(torch.tensor(x, dtype=torch.float32).expand(2, 11, 3))[0].numpy()
    feats = su.ensemble_state_features(model, 0)
    for t in range(1, 4):
        h = feats(x, t).reshape(11, 3, 4)
        pred = np.einsum("bdn,n,d->b", h, model.W_C[0, t - 1].detach().numpy(), model.w_out[0].detach().numpy())
        np.testing.assert_allclose(pred + model.b_out[0, t - 1].item(), y[:, t - 1], atol=1e-5)
    with pytest.raises(ValueError):
        su.ensemble_state_features(model, 2)
    with pytest.raises(ValueError):
        feats(x, 4)

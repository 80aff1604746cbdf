"""MoE selective SSMs: both designs against their per-timestep references, the exact identities between them,
the stability facts, the counted work, and the miniature's task, model and FLOPs."""
import math

import numpy as np
import pytest
import torch

from paperkit.sequence_models import moe_ssm as m
from paperkit.nn.selective_scan import ScanCounter, selective_scan_fused, selective_scan_ref, selective_scan_torch

TOL = {torch.float64: dict(rtol=1e-9, atol=1e-10), torch.float32: dict(rtol=2e-4, atol=2e-5)}
SCANS = {"ref": selective_scan_ref, "torch": lambda *a: selective_scan_torch(*a, chunk=8),
         "numba": m.scan_numba_torch, "fused": selective_scan_fused}
DESIGNS = [(m.moe_param_ssm, m.moe_param_ssm_ref), (m.moe_separated_ssm, m.moe_separated_ssm_ref)]


def inputs(bsz, e, d, L, n, dtype, seed, **kw):
    args = m.random_moe_inputs(torch.Generator().manual_seed(seed), bsz, e, d, n, L, dtype=dtype, **kw)
    D = torch.randn(d, generator=torch.Generator().manual_seed(seed + 100), dtype=dtype)
    return args, D


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1, 1, 1, 1, 1), (2, 3, 4, 17, 5), (3, 4, 2, 40, 8)])
@pytest.mark.parametrize("per_expert_A", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_designs_match_their_references(dtype, shape, per_expert_A, seed):
    args, D = inputs(*shape, dtype, seed, delta_spread=0.7, shared_C=False, per_expert_A=per_expert_A)
    for fast, ref in DESIGNS:
        y_ref = ref(*args, D)
        assert y_ref.dtype == dtype and y_ref.shape == args[0].shape
        for name, scan in SCANS.items():
            torch.testing.assert_close(fast(*args, D, scan=scan), y_ref, **TOL[dtype], msg=f"{fast.__name__} {name}")


@pytest.mark.parametrize("scan", ["torch", "fused"])
@pytest.mark.parametrize("per_expert_A", [False, True])
def test_param_design_gradients_match_the_reference(per_expert_A, scan):
    args, D = inputs(2, 3, 3, 29, 4, torch.float64, 5, delta_spread=0.5, shared_C=False, per_expert_A=per_expert_A)
    leaves = [t.clone().requires_grad_(True) for t in (*args, D)]
    leaves_ref = [t.clone().requires_grad_(True) for t in (*args, D)]
    wt = torch.randn(args[0].shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    (m.moe_param_ssm(*leaves, scan=SCANS[scan]) * wt).sum().backward()
    (m.moe_param_ssm_ref(*leaves_ref) * wt).sum().backward()
    for a, r in zip(leaves, leaves_ref):
        torch.testing.assert_close(a.grad, r.grad, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_b_mixing_equals_input_gated_separated_ssms_for_any_routing(seed):
    # shared Delta, A and C: the scan is linear in its input term, so mixing the B_e is summing gated experts
    args, _ = inputs(3, 4, 5, 64, 6, torch.float64, seed, delta_spread=0.0, shared_C=True)
    y_p, y_s = m.moe_param_ssm(*args), m.moe_separated_ssm(*args)
    assert (y_p - y_s).abs().max() <= 1e-12 * y_s.abs().max()
    # either difference breaks it: spread step sizes, or expert-specific read-outs
    for kw in (dict(delta_spread=0.5, shared_C=True), dict(delta_spread=0.0, shared_C=False)):
        args, _ = inputs(3, 4, 5, 64, 6, torch.float64, seed, **kw)
        assert (m.moe_param_ssm(*args) - m.moe_separated_ssm(*args)).abs().max() > 1e-3


@pytest.mark.parametrize("per_expert_A", [False, True])
def test_one_active_expert_makes_the_designs_coincide(per_expert_A):
    args, D = inputs(2, 4, 3, 50, 5, torch.float64, 7, delta_spread=1.0, shared_C=False, routing="onehot",
                     per_expert_A=per_expert_A)
    u, delta_e, A, B_e, C_e, _ = args
    single = selective_scan_ref(u, delta_e[:, 0], A if A.ndim == 2 else A[0], B_e[:, 0], C_e[:, 0], D)
    torch.testing.assert_close(m.moe_param_ssm(*args, D), single, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(m.moe_separated_ssm(*args, D), single, rtol=1e-12, atol=1e-12)


def test_gap_grows_linearly_with_small_step_size_spread():
    sig = np.array([1e-4, 1e-3, 1e-2])
    gaps = []
    for s in sig:
        args, _ = inputs(2, 4, 3, 64, 4, torch.float64, 11, delta_spread=float(s))
        gaps.append((m.moe_param_ssm(*args) - m.moe_separated_ssm(*args)).abs().max().item())
    slope = np.polyfit(np.log(sig), np.log(gaps), 1)[0]
    assert abs(slope - 1) < 0.05, slope


@pytest.mark.parametrize("per_expert_A", [False, True])
def test_convex_mixing_keeps_transitions_between_the_experts_and_states_under_the_bound(per_expert_A):
    args, _ = inputs(8, 5, 4, 80, 6, torch.float64, 4, delta_spread=1.5, per_expert_A=per_expert_A)
    u, delta_e, A, B_e, _, w = args
    abar, bbar = m.mixed_discretisation(u, delta_e, A, B_e, w)
    lo, hi = m.transition_range(delta_e, A)
    assert (abar > 0).all() and (abar < 1).all()
    assert (abar >= lo * (1 - 1e-12)).all() and (abar <= hi * (1 + 1e-12)).all()
    if not per_expert_A:  # shared A: the range is spanned by the experts' own transitions exp(Delta_e A)
        a_e = torch.exp(delta_e[:, :, :, None] * A[:, :, None])
        torch.testing.assert_close((lo, hi), (a_e.amin(1), a_e.amax(1)))
    h = m.diagonal_scan(abar, bbar, scan=m.scan_numba_torch)
    bound = m.state_bound(abar, bbar)
    assert (h.abs().amax(-1) <= bound).all()
    assert (h.abs().amax(-1) > bbar.abs().amax(-1)).any()  # the 1/(1 - rho) factor is needed
    # affine (non-convex) weights leave the theorem: some transitions exceed 1
    args, _ = inputs(8, 5, 4, 80, 6, torch.float64, 4, delta_spread=1.5, routing="affine")
    assert (m.mixed_discretisation(*args[:4], args[5])[0] > 1).any()


def test_diagonal_scan_matches_a_plain_loop():
    g = torch.Generator().manual_seed(0)
    abar = torch.rand(2, 3, 4, 33, generator=g, dtype=torch.float64) * 0.98 + 0.01
    bbar = torch.randn(2, 3, 4, 33, generator=g, dtype=torch.float64)
    h, expect = torch.zeros(2, 3, 4, dtype=torch.float64), []
    for t in range(33):
        h = abar[..., t] * h + bbar[..., t]
        expect.append(h)
    for scan in SCANS.values():
        torch.testing.assert_close(m.diagonal_scan(abar, bbar, scan=scan), torch.stack(expect, -1))


@pytest.mark.parametrize("E", [1, 2, 5])
def test_counted_scans_and_state_updates(E):
    args, _ = inputs(2, E, 3, 20, 4, torch.float64, 0)
    cp, cs = ScanCounter(), ScanCounter()
    m.moe_param_ssm(*args, scan=cp)
    m.moe_separated_ssm(*args, scan=cs)
    assert (cp.calls, cs.calls) == (1, E)
    assert cp.state_updates == 2 * 3 * 20 * 4 and cs.state_updates == E * cp.state_updates


def test_bad_shapes_are_rejected():
    args, D = inputs(2, 3, 4, 10, 5, torch.float64, 0)
    u, delta_e, A, B_e, C_e, w = args
    bad = {"u must be": (u[0], delta_e, A, B_e, C_e, w, D), "w must be": (u, delta_e, A, B_e, C_e, w[:, :, :-1], D),
           "delta_e must be": (u, delta_e[:, :2], A, B_e, C_e, w, D), "A must be": (u, delta_e, A[None], B_e, C_e, w, D),
           "B_e must be": (u, delta_e, A, B_e[..., :-1], C_e, w, D), "C_e must be": (u, delta_e, A, B_e, C_e[:, 1:], w, D),
           "D must be": (u, delta_e, A, B_e, C_e, w, D[:-1])}
    for msg, a in bad.items():
        for fast, ref in DESIGNS:
            for f in (fast, ref):
                with pytest.raises(ValueError, match=msg):
                    f(*a)
    with pytest.raises(ValueError, match="p_e must be"):
        m.moe_param_mix(w, B_e[:, :, :, :-1])
    with pytest.raises(ValueError, match="routing"):
        m.random_moe_inputs(torch.Generator(), 1, 2, 3, 4, 5, routing="hard")
    with pytest.raises(ValueError, match="n_experts"):
        m.random_moe_inputs(torch.Generator(), 1, 0, 3, 4, 5)
    with pytest.raises(ValueError, match="abar and bbar"):
        m.diagonal_scan(torch.rand(2, 3, 4, 5), torch.rand(2, 3, 4, 6))


def test_regime_task_is_the_stated_filter():
    x, y, r = m.regime_filter_task(np.random.default_rng(0), 5, 200, n_signal=3, cue_noise=0.0)
    assert x.shape == (5, 200, 5) and y.shape == (5, 200, 3) and r.shape == (5, 200)
    np.testing.assert_array_equal(x[..., 3], (r & 1) * 2 - 1)  # noiseless cue: the bits of r
    np.testing.assert_array_equal(x[..., 4], (r >> 1) * 2 - 1)
    a = 1 - np.exp(-1 / np.array(m.TAUS))[r]
    h, sign = np.zeros((5, 3)), np.where(np.isin(r, (1, 2)), -1.0, 1.0)
    for t in range(200):
        h = (1 - a[:, t, None]) * h + a[:, t, None] * x[:, t, :3]
        np.testing.assert_allclose(y[:, t, 0], sign[:, t] * h[:, 0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(y[:, t, 2], h[:, 2], rtol=1e-5, atol=1e-6)
    runs = np.diff(np.flatnonzero(np.diff(r[0]) != 0))
    assert runs.min() >= 8  # segments of 8-32 (consecutive equal draws merge)
    with pytest.raises(ValueError, match="length"):
        m.regime_filter_task(np.random.default_rng(0), 5, 0)


@pytest.mark.parametrize("design, E", [("dense", 1), ("param", 3), ("separated", 3)])
def test_model_forward_counts_its_scans(design, E):
    net = m.MoESSM(4, 2, 6, 3, E, design, torch.Generator().manual_seed(0))
    counter = ScanCounter()
    out, w = net(torch.randn(5, 11, 4), scan=counter, return_router=True)
    assert out.shape == (5, 11, 2) and counter.calls == (E if design == "separated" else 1)
    if design != "dense":
        torch.testing.assert_close(w.sum(1), torch.ones(5, 11))
    with pytest.raises(ValueError, match="design"):
        m.MoESSM(4, 2, 6, 3, E, "mixed", torch.Generator())


def test_param_and_separated_models_agree_with_one_expert():
    g = lambda: torch.Generator().manual_seed(1)  # noqa: E731
    a, b = m.MoESSM(4, 2, 6, 3, 1, "param", g()), m.MoESSM(4, 2, 6, 3, 1, "separated", g())
    x = torch.randn(3, 9, 4, generator=g())
    torch.testing.assert_close(a(x), b(x))


def test_flops_and_matched_width():
    f = lambda D, E, design: m.flops_per_token(8, 6, D, 8, E, design)  # noqa: E731
    Da = m.matched_dense_width(8, 6, 16, 8, 4)
    assert abs(f(Da, 1, "dense") / f(16, 4, "param") - 1) < 0.05
    assert Da > 16
    # the separated design pays E - 1 extra scans (and gating, summing) instead of mixing
    extra = f(16, 4, "separated") - f(16, 4, "param")
    assert extra == 3 * m.SCAN_FLOPS * 16 * 8 + 4 * 16 + 3 * 16 - 2 * 4 * (16 + 16)


def test_mutual_information_in_bits():
    a = np.repeat(np.arange(4), 250)
    assert math.isclose(m.mutual_information_bits(a, a), 2.0, rel_tol=1e-12)
    assert m.mutual_information_bits(a, np.zeros_like(a)) == 0.0
    assert math.isclose(m.mutual_information_bits(a, a % 2), 1.0, rel_tol=1e-12)


def test_forward_time_ratios_shape_and_errors():
    g = torch.Generator().manual_seed(0)
    models = {"a": ("dense", 6, 1), "b": ("param", 4, 2)}
    r = m.forward_time_ratios(models, "a", 2, 8, g, repeats=1, d_state=2)
    assert set(r) == {"b"} and r["b"] > 0
    with pytest.raises(ValueError):
        m.forward_time_ratios(models, "z", 2, 8, g)
    with pytest.raises(ValueError):
        m.forward_time_ratios(models, "a", 0, 8, g)


def test_training_scan_is_the_fused_scan_on_cpu_and_trains_like_the_chunked_scan():
    """The default training scan on the CPU, against the chunked Torch scan: same losses up to float32 rounding."""
    assert m._training_scan(torch.zeros(1)) is selective_scan_fused
    rng = np.random.default_rng(0)
    x, y, _ = m.regime_filter_task(rng, 64, 32)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    curves = []
    for scan in (selective_scan_fused, lambda *a: selective_scan_torch(*a, chunk=16)):
        net = m.MoESSM(8, 6, 8, 4, 3, "param", torch.Generator().manual_seed(1))
        curves.append(m.train_model(net, x, y, 15, 8, 0.03, torch.Generator().manual_seed(2), scan=scan))
    np.testing.assert_allclose(curves[0], curves[1], rtol=1e-3)

"""The three forms of the selective scan agree: outputs, last state, and (Torch form) gradients."""
import numpy as np
import pytest
import torch

from paperkit.nn.selective_scan import (ScanCounter, selective_scan_fused, selective_scan_numba, selective_scan_ref,
                                       selective_scan_torch)

TOL = {torch.float64: dict(rtol=1e-9, atol=1e-10), torch.float32: dict(rtol=2e-4, atol=2e-5)}


def inputs(bsz, d, L, n, dtype, seed, with_D=True):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=dtype)  # noqa: E731
    u, delta_raw = r(bsz, d, L), r(bsz, d, L)
    A = -torch.rand(d, n, generator=g, dtype=dtype) * 2 - 0.1  # stable: Re(A) < 0
    B, C = r(bsz, n, L), r(bsz, n, L)
    D = r(d) if with_D else None
    return u, delta_raw, A, B, C, D


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 3, 17, 4), (3, 5, 64, 16), (1, 2, 130, 8)])
@pytest.mark.parametrize("seed", [0, 1])
def test_numba_and_torch_match_reference(dtype, shape, seed):
    u, dr, A, B, C, D = inputs(*shape, dtype, seed, with_D=seed == 0)
    y_ref, x_ref = selective_scan_ref(u, dr, A, B, C, D, delta_softplus=True, return_last_state=True)
    y_nb, x_nb = selective_scan_numba(*(t.numpy() if t is not None else None for t in (u, dr, A, B, C, D)),
                                      delta_softplus=True, return_last_state=True)
    assert y_nb.dtype == u.numpy().dtype
    np.testing.assert_allclose(y_nb, y_ref.numpy(), **TOL[dtype])
    np.testing.assert_allclose(x_nb, x_ref.numpy(), **TOL[dtype])
    for chunk in (1, 5, 64):
        y_t, x_t = selective_scan_torch(u, dr, A, B, C, D, delta_softplus=True, return_last_state=True, chunk=chunk)
        torch.testing.assert_close(y_t, y_ref, **TOL[dtype])
        torch.testing.assert_close(x_t, x_ref, **TOL[dtype])


def test_closed_form_for_constant_inputs():
    # one channel, one state, u = 1, delta = dt, A = a, B = C = 1: x_t = dt (1 - e^{a dt t}) / (1 - e^{a dt})
    L, dt, a = 50, 0.3, -0.7
    u, delta = torch.ones(1, 1, L, dtype=torch.float64), torch.full((1, 1, L), dt, dtype=torch.float64)
    A, B = torch.tensor([[a]], dtype=torch.float64), torch.ones(1, 1, L, dtype=torch.float64)
    t = torch.arange(1, L + 1, dtype=torch.float64)
    expect = dt * (1 - np.exp(a * dt) ** t) / (1 - np.exp(a * dt))
    for f in (selective_scan_ref, selective_scan_torch):
        torch.testing.assert_close(f(u, delta, A, B, B)[0, 0], expect)
    np.testing.assert_allclose(selective_scan_numba(u.numpy(), delta.numpy(), A.numpy(), B.numpy(), B.numpy())[0, 0],
                               expect.numpy(), rtol=1e-12)


@pytest.mark.parametrize("chunk", [4, 32])
def test_torch_gradients_match_autograd_through_reference(chunk):
    u, dr, A, B, C, D = inputs(2, 3, 37, 4, torch.float64, 3)
    args = [t.clone().requires_grad_(True) for t in (u, dr, A, B, C, D)]
    args_ref = [t.clone().requires_grad_(True) for t in (u, dr, A, B, C, D)]
    w = torch.randn(2, 3, 37, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    (selective_scan_torch(*args, delta_softplus=True, chunk=chunk) * w).sum().backward()
    (selective_scan_ref(*args_ref, delta_softplus=True) * w).sum().backward()
    for a, r in zip(args, args_ref):
        torch.testing.assert_close(a.grad, r.grad, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("bad, msg", [("u", "u must be"), ("A", "A must be"), ("B", "B must be"), ("D", "D must be")])
def test_bad_shapes_are_rejected(bad, msg):
    u, dr, A, B, C, D = inputs(2, 3, 5, 4, torch.float64, 0)
    kw = dict(u=u, delta=dr, A=A, B=B, C=C, D=D)
    kw[bad] = {"u": u[0], "A": A[:-1], "B": B[..., :-1], "D": D[:-1]}[bad]
    for f in (selective_scan_ref, selective_scan_torch):
        with pytest.raises(ValueError, match=msg):
            f(**kw)


def test_scan_counter_counts_calls_and_state_updates_and_passes_results_through():
    u, dr, A, B, C, D = inputs(2, 3, 11, 4, torch.float64, 0)
    counter = ScanCounter(selective_scan_ref)
    y, x = counter(u, dr, A, B, C, D, delta_softplus=True, return_last_state=True)
    counter(u[:1], dr[:1], A, B[:1], C[:1], delta_softplus=True)
    assert counter.calls == 2 and counter.state_updates == (2 + 1) * 3 * 11 * 4
    y_ref, x_ref = selective_scan_ref(u, dr, A, B, C, D, delta_softplus=True, return_last_state=True)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(x, x_ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 3, 17, 4), (1, 2, 70, 8)])
def test_fused_outputs_and_gradients_match_reference(dtype, shape):
    """The compiled forward and hand-written reverse scan against autograd through the per-step reference."""
    u, dr, A, B, C, D = inputs(*shape, dtype, 2)
    leaves = [t.clone().requires_grad_() for t in (u, dr, A, B, C, D)]
    grads, outs = [], []
    for scan in (selective_scan_ref, selective_scan_fused):
        for t in leaves:
            t.grad = None
        y, x = scan(*leaves, delta_softplus=True, return_last_state=True)
        (y * torch.cos(y)).sum().backward()  # a non-uniform output gradient
        outs.append((y.detach(), x.detach()))
        grads.append([t.grad.clone() for t in leaves])
    for a, b in zip(outs[0], outs[1]):
        torch.testing.assert_close(b, a, **TOL[dtype])
    for name, a, b in zip("u delta A B C D".split(), *grads):
        torch.testing.assert_close(b, a, **TOL[dtype], msg=lambda m, name=name: f"d{name}: {m}")


def test_fused_passes_gradcheck_and_refuses_gradient_through_last_state():
    u, dr, A, B, C, D = (t.requires_grad_() for t in inputs(2, 2, 6, 3, torch.float64, 3))
    delta = torch.nn.functional.softplus(dr.detach()).requires_grad_()
    assert torch.autograd.gradcheck(lambda *a: selective_scan_fused(*a), (u, delta, A, B, C, D))
    _, x = selective_scan_fused(u, delta, A, B, C, D, return_last_state=True)
    with pytest.raises(NotImplementedError, match="last state"):
        x.sum().backward()

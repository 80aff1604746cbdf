"""attention_sinks kernels against their plain references and the closed forms they should meet."""
import math

import numpy as np
import pytest
import torch
from scipy.special import softmax

from paperkit.attention_sinks import (min_scale_bisect, min_scale_ref, sink_attention_probs,
                                      sink_attention_probs_ref, smoothing_energy, smoothing_energy_ref,
                                      switch_scale_closed_form)

TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(1, 1, 5, 4), (2, 3, 7, 8)])
@pytest.mark.parametrize("with_sink", [False, True])
def test_sink_probs_match_ref(dtype, causal, shape, with_sink):
    g = torch.Generator().manual_seed(sum(shape))
    q = torch.randn(*shape, generator=g, dtype=dtype)
    k = torch.randn(*shape, generator=g, dtype=dtype)
    ks = torch.randn(shape[-1], generator=g, dtype=dtype) if with_sink else None
    P = sink_attention_probs(q, k, causal, ks)
    R = sink_attention_probs_ref(q, k, causal, ks)
    assert P.shape == (*shape[:3], shape[2] + with_sink)
    torch.testing.assert_close(P, R, atol=TOL[dtype], rtol=TOL[dtype])
    torch.testing.assert_close(P.sum(-1), torch.ones(shape[:3], dtype=dtype), atol=TOL[dtype], rtol=0)
    if causal and with_sink:  # query 0 sees only the sink and key 0
        assert torch.all(P[..., 0, 2:] == 0)


def test_sink_probs_bad_shapes():
    q = torch.zeros(1, 1, 4, 8)
    with pytest.raises(ValueError, match="sink_key"):
        sink_attention_probs(q, q, False, torch.zeros(7))
    with pytest.raises(ValueError, match="k must"):
        sink_attention_probs(q, torch.zeros(1, 1, 4, 6), False)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape", [(1, 3), (10, 4), (64, 32)])
def test_smoothing_energy(seed, shape):
    X = np.random.default_rng(seed).normal(size=shape) + 5.0
    assert smoothing_energy(X) == pytest.approx(smoothing_energy_ref(X), rel=1e-9)
    # constant rows carry no energy, and a uniform attention matrix destroys all of it
    assert smoothing_energy(np.ones(shape) * 3.0) == pytest.approx(0.0, abs=1e-6)
    assert smoothing_energy(np.full((shape[0], shape[0]), 1 / shape[0]) @ X) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="X"):
        smoothing_energy(np.zeros(3))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("p", [0.6, 0.9, 0.999])
def test_min_scale_matches_ref_and_is_minimal(seed, p):
    rng = np.random.default_rng(seed)
    E = rng.normal(size=(40, 16)); E /= np.linalg.norm(E, axis=1, keepdims=True)
    S, t = E @ E.T, np.arange(40)
    b = min_scale_bisect(S, t, p)
    assert b == pytest.approx(min_scale_ref(S, t, p), rel=1e-9)
    rows = np.arange(40)
    assert softmax(b * S, 1)[rows, t].min() >= p - 1e-12
    assert softmax(0.999 * b * S, 1)[rows, t].min() < p


def test_min_scale_closed_form_and_infeasible():
    cos = np.array([1.0, 0.5, 0.1, 0.0, -0.3])
    cf = switch_scale_closed_form(100, 0.99, cos)
    for c, want in zip(cos, cf):
        S = np.zeros((1, 100)); S[0, 0] = c
        got = min_scale_bisect(S, np.array([0]), 0.99)
        assert (np.isinf(got) and np.isinf(want)) or got == pytest.approx(want, rel=1e-12)
    assert math.isinf(min_scale_ref(np.zeros((1, 5)), np.array([0]), 0.9))


def test_min_scale_bad_input():
    with pytest.raises(ValueError, match="target"):
        min_scale_bisect(np.zeros((3, 4)), np.array([0, 1]), 0.9)
    with pytest.raises(ValueError, match="p must"):
        min_scale_bisect(np.zeros((3, 4)), np.array([0, 1, 2]), 0.4)
    with pytest.raises(ValueError, match="S must"):
        min_scale_bisect(np.zeros(4), np.array([0]), 0.9)

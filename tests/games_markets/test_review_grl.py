import numpy as np
import pytest
import torch

from paperkit.games_markets.review_grl import (GradReverse, grad_reverse_ref, probe_accuracy, residualise_on_t,
                                               simulate_features, train_debias, encode)


def test_grad_reverse_matches_reference():
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    y = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    (GradReverse.apply(x, 0.7) ** 2).sum().backward()
    (grad_reverse_ref(y, 0.7) ** 2).sum().backward()
    torch.testing.assert_close(GradReverse.apply(x, 0.7), x)
    torch.testing.assert_close(x.grad, -0.7 * 2 * x.detach())
    y2 = y.detach()
    torch.testing.assert_close(y.grad, -0.7 * 2 * y2)


def test_residualise_removes_linear_t():
    rng = np.random.default_rng(0)
    t = rng.random(500)
    x = simulate_features(rng.standard_normal(500), t, rng)
    r = residualise_on_t(x, t)
    assert np.abs(np.corrcoef(np.column_stack([r, t]).T)[-1, :-1]).max() < 1e-10


def test_encoder_learns_quality_and_probe_reads_raw_timing():
    rng, gen = np.random.default_rng(1), torch.Generator().manual_seed(1)
    n = 3000
    q, t = rng.standard_normal(n), rng.beta(2, 1.5, n)
    x = simulate_features(q, t, rng)
    late = (t > np.median(t)).astype(float)
    tr, te = slice(0, n // 2), slice(n // 2, None)
    net = train_debias(x[tr], q[tr], late[tr], 1.0, gen, epochs=15)
    h = encode(net, x)
    qh = net.quality(torch.as_tensor(h[te], dtype=torch.float32)).squeeze(-1).detach().numpy()
    assert 1 - np.mean((qh - q[te]) ** 2) / np.var(q[te]) > 0.5
    assert probe_accuracy(x[tr], late[tr], x[te], late[te], 0) > 0.7


def test_bad_input_names_parameter():
    with pytest.raises(ValueError, match="dim"):
        simulate_features(np.zeros(3), np.zeros(3), np.random.default_rng(0), dim=1)
    with pytest.raises(ValueError, match="lam"):
        train_debias(np.zeros((4, 2)), np.zeros(4), np.zeros(4), -1.0, torch.Generator())


def test_residualise_matches_lstsq_reference():
    from paperkit.games_markets.review_grl import residualise_on_t_ref
    rng = np.random.default_rng(2)
    x, t = rng.standard_normal((50, 4)), rng.random(50)
    np.testing.assert_allclose(residualise_on_t(x, t), residualise_on_t_ref(x, t), atol=1e-12)
    with pytest.raises(ValueError, match="t must vary"):
        residualise_on_t(x, np.ones(50))

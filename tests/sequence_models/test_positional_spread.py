import numpy as np
import pytest

from paperkit.sequence_models.positional_spread import (min_separation, min_separation_ref, positional_spread,
                                        positional_spread_ref, simplex_pe, spread_lower_bound, two_cluster_pe)

TOL = {np.float64: 1e-10, np.float32: 1e-5}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(1, 3), (2, 1), (7, 5), (40, 16)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kernels_match_reference(dtype, shape, seed):
    E = (np.random.default_rng(seed).normal(size=shape) * 3 + 1).astype(dtype)
    s, r = positional_spread(E), positional_spread_ref(E)
    assert abs(s - r) <= TOL[dtype] * max(1.0, r)
    assert min_separation(E) == pytest.approx(min_separation_ref(E), rel=TOL[dtype])


def test_closed_forms():
    # spread of the simplex: L rows at delta/sqrt2 * e_i -> L * delta^2/2 * (1 - 1/L) = (L-1) delta^2 / 2
    for L in (2, 5, 33):
        E = simplex_pe(L, 0.7)
        assert min_separation(E) == pytest.approx(0.7, rel=1e-12)
        assert positional_spread(E) == pytest.approx(spread_lower_bound(L, 0.7), rel=1e-12)
    # spread is translation invariant and scales as s^2
    E = np.random.default_rng(3).normal(size=(10, 4))
    assert positional_spread(E + 5.0) == pytest.approx(positional_spread(E), rel=1e-10)
    assert positional_spread(3 * E) == pytest.approx(9 * positional_spread(E), rel=1e-12)


def test_bound_holds_and_control_breaks_it():
    rng = np.random.default_rng(0)
    for _ in range(20):
        E = rng.normal(size=(int(rng.integers(2, 30)), int(rng.integers(1, 8))))
        assert positional_spread(E) >= spread_lower_bound(len(E), min_separation(E)) * (1 - 1e-12)
    C = two_cluster_pe(10, 2.0, 4, rng)
    assert min_separation(C) == 0.0
    assert positional_spread(C) < spread_lower_bound(10, 2.0)


def test_bad_input():
    with pytest.raises(ValueError, match="E"):
        positional_spread(np.zeros(5))
    with pytest.raises(ValueError, match="E"):
        min_separation(np.zeros((0, 3)))
    with pytest.raises(ValueError, match="L"):
        spread_lower_bound(0, 1.0)
    with pytest.raises(ValueError, match="delta"):
        spread_lower_bound(3, -1.0)


# --- trained part: tasks, the mean-pooled encoder, vectorised training, the order-breaking gap -----------------

import torch  # noqa: E402

from paperkit.sequence_models.positional_spread import (MeanPoolEncoder, accuracy, gap_vs_spread, meanpool_encoder_ref,  # noqa: E402
                                        n_classes, order_breaking_gap, perm_invariant_ceiling, spread_sweep,
                                        task_batch, train_encoder, train_encoders, train_encoders_ref,
                                        within_slope)

TORCH_TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """Torch threads as the book sets them (PAPERKIT_THREADS, one per test worker): oversubscribed, training is slow."""
    from paperkit.device import setup_torch
    setup_torch("cpu")


def _model(seed, s=0.7, n_out=3, dtype=torch.float32, d=8, heads=2):
    return MeanPoolEncoder(6, n_out, d, heads, 24, s, torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_task_labels(seed):
    g = torch.Generator().manual_seed(seed)
    x, y = task_batch("mean_threshold", 200, 9, 7, g)
    xn = x.numpy()
    assert np.array_equal(y.numpy(), (xn.mean(1) > 3.0).astype(np.int64))
    x, y = task_batch("token_at", 50, 9, 7, g, pos=5)
    assert x.shape == (50, 9) and x.max() < 7 and np.array_equal(y.numpy(), x[:, 5].numpy())
    assert n_classes("mean_threshold", 7) == 2 and n_classes("token_at", 7) == 7


def test_perm_invariant_ceiling_closed_form():
    x = torch.tensor([[0, 0, 1, 2], [3, 3, 3, 3]])
    # max counts 2 and 4 of L = 4: (2/4 + 4/4) / 2
    assert perm_invariant_ceiling(x, 4) == pytest.approx(0.75)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("L,heads", [(1, 1), (5, 2), (16, 4)])
@pytest.mark.parametrize("seed", [0, 1])
def test_encoder_matches_reference(dtype, L, heads, seed):
    m = _model(seed, dtype=dtype, heads=heads)
    g = torch.Generator().manual_seed(10 + seed)
    x = torch.randint(0, 6, (4, L), generator=g)
    with torch.no_grad():
        torch.testing.assert_close(m(x), meanpool_encoder_ref(m, x), rtol=TORCH_TOL[dtype], atol=TORCH_TOL[dtype])
        E = torch.randn(L, 8, generator=g, dtype=dtype)
        torch.testing.assert_close(m(x, pe=E), meanpool_encoder_ref(m, x, pe=E), rtol=TORCH_TOL[dtype],
                                   atol=TORCH_TOL[dtype])


def test_zero_spread_is_permutation_invariant():
    x = torch.randint(0, 6, (5, 12), generator=torch.Generator().manual_seed(0))
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        m0 = _model(0, s=0.0, dtype=torch.float64)
        torch.testing.assert_close(m0(x), m0(x[:, perm]), rtol=1e-12, atol=1e-12)
        m1 = _model(0, s=1.0, dtype=torch.float64)
        assert (m1(x) - m1(x[:, perm])).abs().max() > 1e-4  # control: spread breaks the invariance


def test_vectorised_training_matches_reference():
    kw = dict(L=6, vocab=5, steps=4, batch=8, lr=1e-2, d_model=8, n_heads=2, max_len=12)
    scales = [0.0, 0.5, 2.0]
    fast = train_encoders("token_at", scales, gen=torch.Generator().manual_seed(3), **kw)
    ref = train_encoders_ref("token_at", scales, gen=torch.Generator().manual_seed(3), **kw)
    x = torch.randint(0, 5, (20, 6), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        for a, b in zip(fast, ref):
            assert a.cfg.pe_scale == b.cfg.pe_scale
            torch.testing.assert_close(a(x), b(x), rtol=1e-4, atol=1e-5)
        # the weights moved: training did something
        untrained = MeanPoolEncoder(5, 5, 8, 2, 12, 0.0, torch.Generator().manual_seed(3))
        assert (untrained(x) - fast[0](x)).abs().max() > 1e-3


def test_training_learns_and_sweep_shapes():
    acc, models, tests = spread_sweep("mean_threshold", [0.0, 1.0], [8, 12], replicates=2, L=8, vocab=8, steps=80,
                                      batch=32, lr=3e-3, n_test=500, gen=torch.Generator().manual_seed(0),
                                      d_model=16)
    assert acc.shape == (2, 2, 2) and len(models) == 2 and set(tests) == {8, 12}
    assert acc[:, 0, 0].min() > 0.7  # the order-free task is easy at s = 0 (chance is about 0.5)
    x, y = tests[8]
    with torch.no_grad():
        direct = float((models[0][0](x).argmax(1) == y).double().mean())
    assert accuracy(models[0][0], x, y, chunk=37) == pytest.approx(direct)


def test_order_breaking_gap_shape():
    m = _model(0, dtype=torch.float64)
    g = torch.Generator().manual_seed(5)
    x, y = task_batch("mean_threshold", 16, 10, 6, g)
    y = y.clamp(max=2)
    G = torch.randn(10, 8, generator=g, dtype=torch.float64)
    # zero spread: no gap; cyclic shifts of E's rows leave the symmetrised gap unchanged
    assert order_breaking_gap(m, x, y, torch.ones(10, 1, dtype=torch.float64) * G[0]) == 0.0
    a = order_breaking_gap(m, x, y, 1e-2 * G)
    assert order_breaking_gap(m, x, y, 1e-2 * torch.roll(G, 3, 0)) == pytest.approx(a, rel=1e-8)
    # second order when symmetrised (halving E quarters the gap), first order on the raw sample (halves it)
    assert order_breaking_gap(m, x, y, 5e-4 * G) / order_breaking_gap(m, x, y, 1e-3 * G) == pytest.approx(
        0.25, rel=0.02)
    assert order_breaking_gap(m, x, y, 5e-4 * G, symmetrise=False) / order_breaking_gap(
        m, x, y, 1e-3 * G, symmetrise=False) == pytest.approx(0.5, rel=0.02)
    sp, gs, gr = gap_vs_spread(m.float(), x, y, [1e-4, 3e-4, 1e-3], 2, g)
    assert sp.shape == gs.shape == gr.shape == (2, 3) and np.all(sp > 0)
    assert within_slope(sp, gs / sp) == pytest.approx(0.0, abs=0.1)
    # raw sample along the first direction: the first-order term leads (slope -1/2); a direction whose
    # first-order term nearly vanishes can dip through zero, so only this one is pinned
    assert within_slope(sp[:1], gr[:1] / sp[:1]) == pytest.approx(-0.5, abs=0.1)


def test_within_slope_closed_form():
    x = np.array([[1.0, 10.0, 100.0], [2.0, 4.0, 8.0]])
    # y = c_row * x^0.7: the pooled slope is exactly 0.7 whatever the per-row constants
    assert within_slope(x, np.array([[3.0], [0.01]]) * x ** 0.7) == pytest.approx(0.7, rel=1e-12)
    with pytest.raises(ValueError, match="positive"):
        within_slope(x, -x)
    with pytest.raises(ValueError, match="shape"):
        within_slope(x[0], x[0])


def test_trained_part_bad_input():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="task"):
        task_batch("parity", 4, 4, 4, g)
    with pytest.raises(ValueError, match="pos"):
        task_batch("token_at", 4, 3, 4, g, pos=3)
    with pytest.raises(ValueError, match="n_out"):
        MeanPoolEncoder(4, 1, 8, 2, 8, 1.0, g)
    with pytest.raises(ValueError, match="pe_scale"):
        MeanPoolEncoder(4, 2, 8, 2, 8, -1.0, g)
    m = MeanPoolEncoder(4, 2, 8, 2, 8, 1.0, g)
    with pytest.raises(ValueError, match="pe"):
        m(torch.zeros(2, 5, dtype=torch.long), pe=torch.zeros(4, 8))
    with pytest.raises(ValueError, match="max_len"):
        m(torch.zeros(2, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="steps"):
        train_encoder("token_at", 1.0, L=4, vocab=4, steps=-1, batch=2, lr=1e-3, gen=g)
    with pytest.raises(ValueError, match="scales"):
        train_encoders("token_at", [], L=4, vocab=4, steps=1, batch=2, lr=1e-3, gen=g)
    with pytest.raises(ValueError, match="E"):
        order_breaking_gap(m, torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, dtype=torch.long),
                           torch.zeros(4, 8))


def test_matched_random_pe_and_first_token_control():
    import torch
    from paperkit.nn.tiny_transformer import sinusoidal_pe
    from paperkit.sequence_models.positional_spread import (FirstTokenEncoder, MeanPoolEncoder, matched_random_pe,
                                                            positional_spread, train_encoders)
    g = torch.Generator().manual_seed(0)
    R = matched_random_pe(32, 8, 16, g)
    assert positional_spread(R[:16].double().numpy()) == pytest.approx(
        positional_spread(sinusoidal_pe(16, 8).double().numpy()), rel=1e-5)
    ms = train_encoders("mean_threshold", [0.5, 1.0], L=16, vocab=8, steps=2, batch=4, lr=1e-3, gen=g, d_model=8,
                        max_len=32, pe_table=R)
    assert torch.allclose(ms[1].encoding(16), R[:16])
    m = MeanPoolEncoder(8, 2, 8, 2, 32, 1.0, g)
    f = FirstTokenEncoder.from_encoder(m)
    x = torch.randint(0, 8, (3, 16), generator=g)
    assert f(x).shape == (3, 2)
    # the control reads out position 0: it is not permutation invariant even without an encoding
    E0 = torch.zeros(16, 8)
    perm = torch.randperm(16, generator=g)
    assert not torch.allclose(f(x, pe=E0), f(x[:, perm], pe=E0))
    with pytest.raises(ValueError):
        train_encoders("mean_threshold", [1.0], L=16, vocab=8, steps=1, batch=2, lr=1e-3, gen=g, d_model=8,
                       max_len=32, pe_table=R[:10])

"""paperkit.learning_dynamics.ff_goodness and ff_study: goodness functions against their references and scipy,
1.5-entmax against bisection and its closed form, alpha-entmax by bisection against softmax, 1.5-entmax and
sparsemax, sparsemax against its closed form, the FF loss against binary cross-entropy, the batched label scores
against one label at a time, and the training loop on a task it must learn."""
import math

import numpy as np
import pytest
import torch
from scipy import stats

from paperkit.learning_dynamics import ff_goodness as fg
from paperkit.learning_dynamics import ff_study as fs

SEEDS = [0, 1, 2]


def _rows(seed, b=17, n=40, dtype=torch.float64):
    rng = np.random.default_rng(seed)
    return torch.tensor(np.maximum(rng.normal(size=(b, n)), 0) + 0.01 * rng.random((b, n)), dtype=dtype)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", fg.KINDS)
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 2e-4)])
def test_goodness_matches_reference(seed, kind, dtype, tol):
    h = _rows(seed, dtype=dtype)
    units = torch.tensor([0, 7, 19, 33])
    got = fg.goodness(h, kind, 5, units).double().numpy()
    ref = fg.goodness_ref(h, kind, 5, units)
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("seed", SEEDS)
def test_kurtosis_and_sixth_moment_match_scipy(seed):
    h = _rows(seed)
    x = h.numpy()
    np.testing.assert_allclose(fg.goodness(h, "kurtosis").numpy(), stats.kurtosis(x, axis=1, fisher=True, bias=True),
                               rtol=1e-8, atol=1e-8)
    m6 = stats.moment(x, 6, axis=1) / stats.moment(x, 2, axis=1) ** 3 - 15
    np.testing.assert_allclose(fg.goodness(h, "moment6").numpy(), m6, rtol=1e-8, atol=1e-8)


def test_gaussian_rows_have_zero_excess_moments():
    h = torch.tensor(np.random.default_rng(0).normal(size=(4, 400_000)))
    assert fg.goodness(h, "kurtosis").abs().max() < 0.05
    assert fg.goodness(h, "moment6").abs().max() < 1.0


@pytest.mark.parametrize("c", [0.1, 0.5, 2.0, 1e3])
def test_shape_goodnesses_are_scale_invariant_and_energy_is_not(c):
    h = _rows(3)
    for kind in ("kurtosis", "moment6"):
        torch.testing.assert_close(fg.goodness(c * h, kind), fg.goodness(h, kind), rtol=1e-6, atol=1e-6)  # 1e-12 guard
    torch.testing.assert_close(fg.goodness(c * h, "sos"), c * c * fg.goodness(h, "sos"))
    torch.testing.assert_close(fg.goodness(c * h, "topk", 4), c * c * fg.goodness(h, "topk", 4))


def test_topk_limits():
    h = _rows(4)
    torch.testing.assert_close(fg.goodness(h, "topk", h.shape[1]), fg.goodness(h, "sos"))
    torch.testing.assert_close(fg.goodness(h, "topk", 1), h.max(1).values ** 2)
    torch.testing.assert_close(fg.goodness(h, "randk", units=torch.arange(h.shape[1])), fg.goodness(h, "sos"))


@pytest.mark.parametrize("seed", SEEDS)
def test_entmax15_matches_bisection_and_optimality(seed):
    z = torch.tensor(np.random.default_rng(seed).normal(size=(25, 11)) * 3)
    p = fg.entmax15(z)
    np.testing.assert_allclose(p.numpy(), fg.entmax15_ref(z), rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(p.sum(1), torch.ones(25, dtype=torch.float64))
    # optimality: p_i = [z_i/2 - tau]_+^2 with one tau per row on the support
    tau = (z / 2 - p.sqrt())[p > 0]
    rows = torch.nonzero(p > 0)[:, 0]
    for r in range(25):
        t = tau[rows == r]
        assert float(t.max() - t.min()) < 1e-9
        assert bool((z[r][p[r] == 0] / 2 <= t[0] + 1e-12).all())


def test_entmax15_closed_form_two_entries():
    # for two entries with z = (d, 0), d in (-2, 2): p1 = (1 + sqrt(2 - d^2/4) * d / 2 ... ) from sum = 1; check by
    # solving (d/2 - tau)^2 + tau^2 = 1 for tau directly
    for d in (-1.5, -0.3, 0.0, 0.7, 1.9, 3.0):
        z = torch.tensor([[d, 0.0]], dtype=torch.float64)
        if abs(d) >= 2:
            expect = [1.0, 0.0] if d > 0 else [0.0, 1.0]
        else:
            tau = (d / 2 - math.sqrt(2 - d * d / 4)) / 2
            expect = [(d / 2 - tau) ** 2, tau ** 2]
        np.testing.assert_allclose(fg.entmax15(z)[0].numpy(), expect, atol=1e-12)


def test_entmax15_gradient_by_gradcheck():
    z = torch.tensor(np.random.default_rng(1).normal(size=(3, 6)), requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: fg.entmax15(x), (z,))


@pytest.mark.parametrize("seed", SEEDS)
def test_layer_loss_matches_reference_and_bce(seed):
    rng = np.random.default_rng(seed)
    gp, gn = torch.tensor(rng.normal(size=30) * 4), torch.tensor(rng.normal(size=21) * 4)
    got = float(fg.ff_layer_loss(gp, gn, 0.7))
    assert got == pytest.approx(fg.ff_layer_loss_ref(gp, gn, 0.7), rel=1e-12)
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    want = float(bce(gp - 0.7, torch.ones(30, dtype=gp.dtype)) + bce(gn - 0.7, torch.zeros(21, dtype=gn.dtype)))
    assert got == pytest.approx(want, rel=1e-12)


def test_errors_name_the_argument():
    h = _rows(0)
    with pytest.raises(ValueError, match="kind"):
        fg.goodness(h, "energy")
    with pytest.raises(ValueError, match="k must"):
        fg.goodness(h, "topk", 0)
    with pytest.raises(ValueError, match="units"):
        fg.goodness(h, "randk")
    with pytest.raises(ValueError, match="h must be finite"):
        fg.goodness(torch.full((2, 3), float("nan")))
    with pytest.raises(TypeError, match="gn"):
        fg.ff_layer_loss(torch.zeros(3), torch.zeros(3, dtype=torch.float64), 0.0)
    with pytest.raises(ValueError, match="theta"):
        fg.ff_layer_loss(torch.zeros(3), torch.zeros(3), float("inf"))


@pytest.mark.parametrize("kind", ["sos", "kurtosis", "topk"])
def test_scores_batched_equal_one_label_at_a_time(kind):
    g = torch.Generator().manual_seed(0)
    net = fg.FFNet(9, 16, 3, 4, g)
    X = torch.rand(13, 9, generator=g)
    torch.testing.assert_close(fg.ff_scores(net, X, kind, 3), fg.ff_scores_ref(net, X, kind, 3))
    torch.testing.assert_close(fg.ff_scores(net, X, kind, 3, skip_first=True),
                               fg.ff_scores_ref(net, X, kind, 3, skip_first=True))


def _toy(seed, n=600):
    """Four well separated clusters in 6 dimensions, labels 0-3."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, n)
    centres = rng.random((4, 6)) * 3
    X = np.clip(centres[y] + 0.2 * rng.normal(size=(n, 6)), 0, None)
    return torch.tensor(X, dtype=torch.float32), torch.tensor(y)


@pytest.mark.parametrize("kind,theta", [("sos", 0.5), ("kurtosis", 1.0)])
def test_ff_training_learns_a_separable_task(kind, theta):
    X, y = _toy(0)
    g = torch.Generator().manual_seed(0)
    net = fg.FFNet(6, 32, 2, 4, g)
    hist = fg.ff_train(net, X[:450], y[:450], kind, theta, 15, g, lr=3e-3)
    assert hist[-1] < hist[0]
    assert float((fg.ff_predict(net, X[450:], kind) == y[450:]).float().mean()) > 0.8


def test_same_seed_same_run():
    X, y = _toy(1, 200)
    split = (X[:150], y[:150], X[150:], y[150:])
    a = fs.run_ff(split, dict(kind="kurtosis", theta=1.0), width=8, layers=2, epochs=2, seed=3)
    b = fs.run_ff(split, dict(kind="kurtosis", theta=1.0), width=8, layers=2, epochs=2, seed=3)
    assert a["loss"] == b["loss"] and a["acc"] == b["acc"]


def test_stratified_split_keeps_class_shares():
    y = np.repeat(np.arange(10), 50)
    X = np.random.default_rng(0).random((500, 4))
    Xtr, ytr, Xte, yte = fs.stratified_split(X, y, 0.2, np.random.default_rng(0), n_per_class=40)
    assert len(ytr) == 320 and len(yte) == 80
    assert (np.bincount(yte.numpy()) == 8).all()


def test_shuffled_copy_keeps_values():
    net = fg.FFNet(5, 7, 2, 3, torch.Generator().manual_seed(0))
    twin = fs.shuffled_copy(net, torch.Generator().manual_seed(1))
    for p, q in zip(net.parameters(), twin.parameters()):
        torch.testing.assert_close(torch.sort(p.reshape(-1)).values, torch.sort(q.reshape(-1)).values)


def test_entmax_goodness_gradient_is_finite_on_sparse_rows():
    # rows where entmax puts all its mass on one unit: the unused threshold candidates must not give NaN gradients
    h = torch.tensor([[5.0, 0.0, 0.0, 0.1], [0.0, 0.0, 9.0, 0.0]], dtype=torch.float64, requires_grad=True)
    fg.goodness(h, "entmax15").sum().backward()
    assert torch.isfinite(h.grad).all()


# ------------------------------------------------------------------------------------- alpha-entmax and sparsemax

def _z(seed, b=25, n=11, dtype=torch.float64):
    return torch.tensor(np.random.default_rng(seed).normal(size=(b, n)) * 3, dtype=dtype)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("alpha", [1.0, 1.25, 1.5, 2.0, 3.0, 4.0])
def test_entmax_bisect_matches_reference_and_optimality(seed, alpha):
    z = _z(seed)
    p = fg.entmax_bisect(z, alpha)
    np.testing.assert_allclose(p.numpy(), fg.entmax_bisect_ref(z, alpha), rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(p.sum(1), torch.ones(len(z), dtype=torch.float64))
    if alpha > 1:
        # p_i = [(alpha - 1) z_i - tau]_+^(1/(alpha - 1)): one tau per row on the support, none above it off it
        x = (alpha - 1) * z
        tau = x - p ** (alpha - 1)
        for r in range(len(z)):
            on = p[r] > 0
            assert float(tau[r][on].max() - tau[r][on].min()) < 1e-8
            assert bool((x[r][~on] <= tau[r][on][0] + 1e-12).all())


@pytest.mark.parametrize("seed", SEEDS)
def test_entmax_bisect_equals_closed_forms(seed):
    z = _z(seed)
    torch.testing.assert_close(fg.entmax_bisect(z, 1.5), fg.entmax15(z), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(fg.entmax_bisect(z, 2.0), fg.sparsemax(z), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(fg.entmax_bisect(z, 1.0), torch.softmax(z, 1))
    # alpha -> 1 from above tends to softmax (the gap shrinks about linearly in alpha - 1)
    gaps = [float((fg.entmax_bisect(z, 1 + d) - torch.softmax(z, 1)).abs().max()) for d in (1e-2, 1e-3)]
    assert gaps[1] < 0.2 * gaps[0] and gaps[1] < 5e-3


def test_entmax_gets_sparser_with_alpha():
    z = _z(4, b=40, n=30)
    support = [float((fg.entmax_bisect(z, a) > 0).sum(1).double().mean()) for a in (1.0, 1.25, 1.5, 2.0, 4.0, 8.0)]
    assert support[0] == 30 and all(a >= b for a, b in zip(support, support[1:])) and support[-1] < support[1]


@pytest.mark.parametrize("alpha", [1.25, 1.5, 2.0, 4.0])
def test_entmax_bisect_gradient(alpha):
    # gradcheck of the custom backward, and the same gradient as autograd through the sort-based forms
    z = torch.tensor(np.random.default_rng(1).normal(size=(3, 6)), requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: fg.entmax_bisect(x, alpha), (z,))
    if alpha in (1.5, 2.0):
        w = torch.tensor(np.random.default_rng(2).normal(size=(3, 6)))
        ref = fg.entmax15 if alpha == 1.5 else fg.sparsemax
        g1, = torch.autograd.grad((fg.entmax_bisect(z, alpha) * w).sum(), z)
        g2, = torch.autograd.grad((ref(z) * w).sum(), z)
        torch.testing.assert_close(g1, g2, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
def test_sparsemax_matches_reference_and_projection(seed):
    z = _z(seed)
    p = fg.sparsemax(z)
    np.testing.assert_allclose(p.numpy(), fg.sparsemax_ref(z), rtol=1e-12, atol=1e-12)
    # the Euclidean projection onto the simplex: no point of the simplex is closer to z
    rng = np.random.default_rng(seed)
    q = torch.tensor(rng.dirichlet(np.ones(z.shape[1]), size=(200,)))
    for r in range(len(z)):
        assert float(((p[r] - z[r]) ** 2).sum()) <= float(((q - z[r]) ** 2).sum(1).min()) + 1e-12


def test_sparsemax_closed_form_two_entries():
    # z = (d, 0): p = ((1 + d) / 2, (1 - d) / 2) for |d| < 1, one-hot beyond
    for d in (-2.0, -0.6, 0.0, 0.3, 0.99, 1.5):
        expect = [1.0, 0.0] if d >= 1 else [0.0, 1.0] if d <= -1 else [(1 + d) / 2, (1 - d) / 2]
        np.testing.assert_allclose(fg.sparsemax(torch.tensor([[d, 0.0]], dtype=torch.float64))[0].numpy(), expect,
                                   atol=1e-12)


@pytest.mark.parametrize("alpha", [1.0, 1.25, 1.5, 2.0, 4.0])
def test_entmax_goodness_matches_reference_and_limits(alpha):
    h = _rows(5)
    np.testing.assert_allclose(fg.goodness(h, "entmax", alpha=alpha).numpy(),
                               fg.goodness_ref(h, "entmax", alpha=alpha), rtol=1e-9, atol=1e-10)
    if alpha == 1.5:
        torch.testing.assert_close(fg.goodness(h, "entmax", alpha=1.5), fg.goodness(h, "entmax15"))
    # a weighted mean of h_i^2: between the mean of squares and the largest square
    g = fg.goodness(h, "entmax", alpha=alpha)
    assert bool((g <= (h * h).max(1).values + 1e-12).all())
    if alpha == 1.0:
        torch.testing.assert_close(g, (torch.softmax(h, 1) * h * h).sum(1))


def test_entmax_goodness_gradient_is_finite_at_large_alpha():
    h = torch.tensor([[5.0, 0.0, 0.0, 0.1], [0.0, 0.0, 9.0, 8.9999]], requires_grad=True)
    fg.goodness(h, "entmax", alpha=4.0).sum().backward()
    assert torch.isfinite(h.grad).all()


def test_entmax_errors_name_the_argument():
    z = _z(0)
    for bad in (0.5, 9.0, True, float("nan")):
        with pytest.raises(ValueError, match="alpha"):
            fg.entmax_bisect(z, bad)
    with pytest.raises(ValueError, match="alpha"):
        fg.goodness(z, "entmax", alpha=0.9)
    with pytest.raises(ValueError, match="n_iter"):
        fg.entmax_bisect(z, 2.0, n_iter=0)
    with pytest.raises(ValueError, match="z must be finite"):
        fg.sparsemax(torch.full((2, 3), float("inf")))


def test_entmax_goodness_trains_and_scores():
    X, y = _toy(2, 300)
    g = torch.Generator().manual_seed(0)
    net = fg.FFNet(6, 16, 2, 4, g)
    hist = fg.ff_train(net, X[:200], y[:200], "entmax", 0.5, 3, g, lr=3e-3, alpha=1.25)
    assert all(math.isfinite(v) for v in hist)
    torch.testing.assert_close(fg.ff_scores(net, X[200:], "entmax", alpha=1.25),
                               fg.ff_scores_ref(net, X[200:], "entmax", alpha=1.25))
    assert fs.conf_label(dict(kind="entmax", alpha=1.25, theta=0.5)) == "entmax a=1.25 th=0.5 lr=0.001"

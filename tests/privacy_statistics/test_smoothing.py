"""paperkit.privacy_statistics.smoothing: batched CERTIFY against the per-input reference, scipy's exact binomial interval, and the
closed-form certified radius of a linear classifier."""
import numpy as np
import pytest
import torch
from scipy.stats import binomtest, norm

from paperkit.privacy_statistics import smoothing
from paperkit.privacy_statistics.smoothing import certified_radius, certify, certify_ref, clopper_pearson_lower

SHAPES = [(1, 5, 2), (7, 20, 3), (30, 64, 10), (41, 8, 4)]  # (m inputs, d features, classes)


def mlp(d, c, dtype, seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(d, 16), torch.nn.ReLU(), torch.nn.Linear(16, c)).to(dtype)


class Linear2:
    """Binary linear classifier: logits (0, w.x + b), so f(x) = 1 iff w.x + b > 0. Counts the rows it sees."""

    def __init__(self, w, b):
        self.w, self.b, self.rows = w, b, 0

    def __call__(self, x):
        self.rows += x.shape[0]
        z = x @ self.w + self.b
        return torch.stack([torch.zeros_like(z), z], dim=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("m,d,c", SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_certify_matches_reference(dtype, m, d, c, seed):
    net = mlp(d, c, dtype, seed)
    x = torch.randn(m, d, generator=torch.Generator().manual_seed(seed + 10), dtype=dtype)
    args = dict(sigma=0.5, n0=8, n=50, alpha=0.01, num_classes=c)
    fast = certify(net, x, generator=torch.Generator().manual_seed(seed), **args)
    ref = certify_ref(net, x, generator=torch.Generator().manual_seed(seed), **args)
    assert fast.n_forward == ref.n_forward == m * 58
    assert fast.counts.shape == (m, c) and np.all(fast.counts.sum(axis=1) == 50)
    if dtype == torch.float64:
        # same noise, same arithmetic up to matmul blocking: argmax ties at 1e-15 never happen here
        np.testing.assert_array_equal(fast.counts, ref.counts)
        np.testing.assert_array_equal(fast.cls, ref.cls)
        np.testing.assert_allclose(fast.radius, ref.radius, rtol=1e-12)
    else:
        # float32 round-off may flip an argmax whose two logits are within ~1e-6: allow a rare single flip
        assert np.abs(fast.counts - ref.counts).sum() <= 2 * max(1, m // 100)
        assert np.mean(fast.cls == ref.cls) >= 0.97


@pytest.mark.parametrize("max_rows", [58, 3 * 58, 5 * 58 + 1])  # 1, 3 and 5 inputs per pass; 13 leaves a ragged end
def test_certify_chunking_does_not_change_results(max_rows, monkeypatch):
    net = mlp(8, 4, torch.float64, 0)
    x = torch.randn(13, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    args = dict(sigma=0.5, n0=8, n=50, alpha=0.01, num_classes=4)
    whole = certify(net, x, generator=torch.Generator().manual_seed(0), **args)
    monkeypatch.setattr(smoothing, "_MAX_ROWS", max_rows)
    chunked = certify(net, x, generator=torch.Generator().manual_seed(0), **args)
    np.testing.assert_array_equal(chunked.counts, whole.counts)
    assert chunked.n_forward == whole.n_forward == 13 * 58


@pytest.mark.parametrize("n", [1, 10, 200, 1000])
@pytest.mark.parametrize("alpha", [0.001, 0.05, 0.25])
def test_clopper_pearson_matches_scipy_binomtest(n, alpha):
    ks = np.unique(np.linspace(0, n, 11).round().astype(int))
    ours = clopper_pearson_lower(ks, n, alpha)
    theirs = [binomtest(int(k), n).proportion_ci(confidence_level=1 - 2 * alpha, method="exact").low for k in ks]
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12)
    assert np.all(np.diff(ours) > 0) and ours[0] == 0.0


def test_clopper_pearson_covers_at_its_level():
    # P(p_lower > p) <= alpha: 20,000 binomial draws at n = 100, p = 0.8, alpha = 0.1
    k = np.random.default_rng(0).binomial(100, 0.8, size=20_000)
    miss = np.mean(clopper_pearson_lower(k, 100, 0.1) > 0.8)
    assert miss <= 0.1 + 3 * np.sqrt(0.09 / 20_000)
    assert miss >= 0.02  # exact intervals are conservative but not vacuous


def test_radius_formula_inverts_gaussian_cdf():
    # p_A = Phi(R / sigma) exactly for a linear classifier at distance R from its hyperplane
    for sigma in (0.12, 0.25, 1.0):
        dist = np.array([0.01, 0.1, 0.3, 0.9]) * sigma
        np.testing.assert_allclose(certified_radius(norm.cdf(dist / sigma), sigma), dist, rtol=1e-10)
    np.testing.assert_array_equal(certified_radius([0.0, 0.3, 0.5], 0.25), [0.0, 0.0, 0.0])


@pytest.mark.parametrize("seed", [0, 1])
def test_certified_radius_on_linear_classifier_is_sound_and_tight(seed):
    # exact certified radius of the smoothed linear classifier is the distance |w.x + b| / |w| to its hyperplane
    g = torch.Generator().manual_seed(seed)
    d, sigma, n, alpha = 6, 0.5, 20_000, 0.001
    w = torch.randn(d, generator=g, dtype=torch.float64)
    b = 0.3
    unit = w / w.norm()
    dist = torch.tensor([0.1, 0.4, 0.8, -0.6], dtype=torch.float64)
    base = torch.randn(d, generator=g, dtype=torch.float64)
    base = base - ((base @ w + b) / w.norm()) * unit  # a point on the hyperplane
    x = base + dist[:, None] * unit
    model = Linear2(w, b)
    cert = certify(model, x, sigma=sigma, n0=64, n=n, alpha=alpha, num_classes=2, generator=g)
    exact = dist.abs().numpy()
    assert model.rows == cert.n_forward == 4 * (64 + n)
    np.testing.assert_array_equal(cert.cls, (dist > 0).long().numpy())
    assert np.all(cert.radius <= exact + 1e-9)
    # the lower bound sits at most ~5 binomial standard deviations below p_A
    p = norm.cdf(exact / sigma)
    slack = sigma * (norm.ppf(p) - norm.ppf(p - 5 * np.sqrt(p * (1 - p) / n)))
    assert np.all(cert.radius >= exact - slack)


def test_abstains_on_the_decision_boundary():
    w = torch.tensor([1.0, 0.0])
    x = torch.zeros(20, 2)  # w.x + b = 0: p_A = 1/2, never certifiable
    cert = certify(Linear2(w, 0.0), x, sigma=0.25, n0=16, n=200, alpha=0.001, num_classes=2,
                   generator=torch.Generator().manual_seed(0))
    assert np.all(cert.cls == -1) and np.all(cert.radius == 0.0)


@pytest.mark.parametrize("fn", [certify, certify_ref])
def test_bad_input_raises_naming_the_argument(fn):
    net, g = mlp(4, 3, torch.float32, 0), torch.Generator()
    x = torch.zeros(2, 4)
    ok = dict(sigma=0.5, n0=4, n=10, alpha=0.01, num_classes=3, generator=g)
    for bad, name in [(dict(x=torch.zeros(4)), "x"), (dict(sigma=0.0), "sigma"), (dict(n0=0), "n0"),
                      (dict(n=-5), "n"), (dict(alpha=1.0), "alpha"), (dict(num_classes=1), "num_classes"),
                      (dict(n=2.5), "n")]:
        kw = {**ok, "x": x, **bad}
        with pytest.raises(ValueError, match=name):
            fn(net, **kw)
    with pytest.raises(ValueError, match="k must"):
        clopper_pearson_lower([11], 10, 0.01)
    with pytest.raises(ValueError, match="alpha"):
        clopper_pearson_lower([1], 10, 0.0)


# ------------------------------------------------------------------------------------------ SmoothAdv attack

@pytest.mark.parametrize("m,d,c", SHAPES)
def test_attack_matches_reference_and_stays_in_the_ball(m, d, c):
    net = mlp(d, c, torch.float64, m)
    x = torch.randn(m, d, generator=torch.Generator().manual_seed(m), dtype=torch.float64)
    cls = net(x).argmax(dim=1)
    args = dict(sigma=0.5, radius=0.4, steps=4, m=6)
    fast = smoothing.smooth_adv_attack(net, x, cls, generator=torch.Generator().manual_seed(1), **args)
    ref = smoothing.smooth_adv_attack_ref(net, x, cls, generator=torch.Generator().manual_seed(1), **args)
    torch.testing.assert_close(fast, ref, rtol=1e-10, atol=1e-10)
    assert fast.shape == x.shape and torch.all((fast - x).norm(dim=1) <= 0.4 * (1 + 1e-12))


def test_attack_chunking_does_not_change_results(monkeypatch):
    net = mlp(8, 4, torch.float64, 0)
    x = torch.randn(13, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    cls = net(x).argmax(dim=1)
    args = dict(sigma=0.5, radius=0.4, steps=3, m=5)
    whole = smoothing.smooth_adv_attack(net, x, cls, generator=torch.Generator().manual_seed(0), **args)
    monkeypatch.setattr(smoothing, "_MAX_ROWS", 2 * 15 + 1)
    chunked = smoothing.smooth_adv_attack(net, x, cls, generator=torch.Generator().manual_seed(0), **args)
    # same noise draws, so equal up to the rounding of a matmul over a different number of rows (BLAS may block
    # a 13-row and a 2-row product differently: a few ulps, seen once in CI as 1.1e-16)
    torch.testing.assert_close(whole, chunked, rtol=1e-12, atol=1e-14)


def test_attack_on_a_linear_classifier_is_the_closed_form_optimum():
    # smoothing a linear binary classifier gives the same linear classifier; its optimal L2 attack moves the input
    # by radius straight against the normal w / ||w|| (towards the other class), whatever the noise draws
    rng = np.random.default_rng(0)
    w, b = torch.from_numpy(rng.normal(size=6)), 0.3
    f = Linear2(w, b)
    x = torch.from_numpy(rng.normal(size=(40, 6)))
    cls = (x @ w + b > 0).long()
    xa = smoothing.smooth_adv_attack(f, x, cls, 0.5, 0.7, 5, 4, torch.Generator().manual_seed(0))
    u = (w / w.norm())[None, :]
    expected = x - 0.7 * torch.where(cls[:, None] == 1, u, -u)
    torch.testing.assert_close(xa, expected, rtol=1e-12, atol=1e-12)
    # so the attack flips exactly the inputs within 0.7 of the decision boundary
    dist = (x @ w + b).abs() / w.norm()
    assert torch.equal((xa @ w + b > 0).long() != cls, dist < 0.7)
    # the radius is zero: nothing moves
    x0 = smoothing.smooth_adv_attack(f, x, cls, 0.5, 0.0, 3, 2, torch.Generator().manual_seed(0))
    torch.testing.assert_close(x0, x, rtol=0, atol=0)


def test_attack_bad_input_names_the_argument():
    net = mlp(4, 3, torch.float64, 0)
    x = torch.zeros(5, 4, dtype=torch.float64)
    cls = torch.zeros(5, dtype=torch.int64)
    g = torch.Generator().manual_seed(0)
    ok = dict(model=net, x=x, cls=cls, sigma=0.5, radius=0.3, steps=2, m=3, generator=g)
    for key, bad in [("x", torch.zeros(5)), ("cls", torch.zeros(4, dtype=torch.int64)), ("cls", cls.float()),
                     ("sigma", 0.0), ("radius", -1.0), ("radius", float("nan")), ("steps", 0), ("m", 1.5)]:
        with pytest.raises(ValueError, match=key):
            smoothing.smooth_adv_attack(**{**ok, key: bad})
        with pytest.raises(ValueError, match=key):
            smoothing.smooth_adv_attack_ref(**{**ok, key: bad})
    with pytest.raises(ValueError, match="x"):
        smoothing.smooth_adv_attack(**{**ok, "x": x * np.nan})

"""Gradient-reversal (Ganin & Lempitsky 2015) encoder for simulated review features, and a timing probe.

Our miniature of the paper's adversarial temporal debiasing. Each review has a feature vector x (N, D) that mixes
the paper's quality q and the review time t nonlinearly (:func:`simulate_features`). An encoder f: R^D -> R^H
(two tanh layers) feeds a quality head (regression on q) and, through a gradient-reversal layer with weight
lambda, a timing head (logistic on late = t > median). lambda = 0 is the plain quality encoder.

``GradReverse.apply(x, lam)`` is the identity forward and multiplies the gradient by -lam backward;
``residualise_on_t`` (closed form) has the least-squares reference ``residualise_on_t_ref``.
``grad_reverse_ref`` is the same map written as ``x.detach() * (1 + lam) - lam * x`` (identity value, gradient
-lam), used by the test. ``probe_accuracy`` fits a fresh MLP probe (sklearn) for late/early on frozen features.
"""
from __future__ import annotations

import numpy as np
import torch
from sklearn.neural_network import MLPClassifier

from paperkit.contracts import Arg, Contract, Kernel


def simulate_features(q, t, rng, dim=16, noise=0.3):
    """x (N, dim) = tanh([q, t, t^2, u] W) + noise e, u (N, 3) nuisance, W (6, dim) ~ N(0, 1/2); q, t shape (N,)."""
    q, t = np.asarray(q, float), np.asarray(t, float)
    if q.shape != t.shape or q.ndim != 1:
        raise ValueError(f"q and t must be 1-D of one shape, got {q.shape} and {t.shape}")
    if int(dim) != dim or dim < 2:
        raise ValueError(f"dim must be an integer >= 2, got {dim!r}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator")
    W = rng.normal(0, np.sqrt(0.5), (6, int(dim)))
    z = np.column_stack([q, 2 * t - 1, (2 * t - 1) ** 2, rng.standard_normal((q.size, 3))])
    return np.tanh(z @ W) + noise * rng.standard_normal((q.size, int(dim)))


def _check_res(x, t):
    for name, a, nd in (("x", x, 2), ("t", t, 1)):
        if not isinstance(a, np.ndarray) or a.dtype.kind != "f":
            raise TypeError(f"{name} must be a float NumPy array")
        if a.ndim != nd:
            raise ValueError(f"{name} must be {nd}-D, got shape {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name} must be finite")
    if t.dtype != x.dtype:
        raise TypeError(f"t must have the dtype of x, got {t.dtype} and {x.dtype}")
    if x.shape[0] != t.shape[0] or x.shape[0] < 2:
        raise ValueError(f"x and t need the same number >= 2 of rows, got {x.shape[0]} and {t.shape[0]}")
    if np.ptp(t) == 0:
        raise ValueError("t must vary")


def residualise_on_t(x, t):
    """The cheap rival: x minus its least-squares fit on [1, t] per column; x (N, D), t (N,) -> (N, D)."""
    _check_res(x, t)
    tc = t - t.mean()
    xc = x - x.mean(0)
    return xc - np.outer(tc, (tc @ xc) / (tc @ tc))


def residualise_on_t_ref(x, t):
    """Reference of :func:`residualise_on_t`: scipy least squares on [1, t], column by column."""
    import scipy.linalg as sla

    _check_res(x, t)
    A = np.column_stack([np.ones_like(t), t])
    out = np.empty_like(x)
    for j in range(x.shape[1]):
        coef = sla.lstsq(A, x[:, j], lapack_driver="gelsy")[0]
        out[:, j] = x[:, j] - A @ coef
    return out


class GradReverse(torch.autograd.Function):
    """Identity forward; gradient times -lam backward."""

    @staticmethod
    def forward(ctx, x, lam):
        """y = x; stores lam for the backward pass."""
        ctx.lam = float(lam)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        """dL/dx = -lam * dL/dy; lam gets no gradient."""
        return -ctx.lam * g, None


def grad_reverse_ref(x, lam):
    """Reference of :class:`GradReverse`: value x, gradient -lam."""
    return x.detach() * (1.0 + lam) - lam * x


class DebiasNet(torch.nn.Module):
    """Encoder D -> hidden -> H (tanh), quality head H -> 1, timing head H -> 16 -> 1 behind the GRL."""

    def __init__(self, d_in, hidden=32, d_rep=8):
        super().__init__()
        self.enc = torch.nn.Sequential(torch.nn.Linear(d_in, hidden), torch.nn.Tanh(),
                                       torch.nn.Linear(hidden, d_rep), torch.nn.Tanh())
        self.quality = torch.nn.Linear(d_rep, 1)
        self.timing = torch.nn.Sequential(torch.nn.Linear(d_rep, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

    def forward(self, x, lam):
        h = self.enc(x)
        return h, self.quality(h).squeeze(-1), self.timing(GradReverse.apply(h, lam)).squeeze(-1)


def train_debias(x, q, late, lam, gen, epochs=40, batch=256, lr=3e-3):
    """Train :class:`DebiasNet` on x (N, D) float32, q (N,), late (N,) in {0,1}; lambda ramps 0 -> lam
    (Ganin's schedule 2/(1+exp(-10 p)) - 1). Returns the model; ``gen`` a torch.Generator for init and batches."""
    if lam < 0:
        raise ValueError(f"lam must be >= 0, got {lam!r}")
    x, q, late = (torch.as_tensor(a, dtype=torch.float32) for a in (x, q, late))
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
    net = DebiasNet(x.shape[1])
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    n, steps = x.shape[0], 0
    total = epochs * ((n + batch - 1) // batch)
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, batch):
            b = perm[i:i + batch]
            ramp = 2.0 / (1.0 + np.exp(-10.0 * steps / total)) - 1.0
            _, qh, th = net(x[b], lam * ramp)
            loss = torch.mean((qh - q[b]) ** 2) + torch.nn.functional.binary_cross_entropy_with_logits(th, late[b])
            opt.zero_grad(); loss.backward(); opt.step(); steps += 1
    return net


def encode(net, x):
    """Frozen representation (N, H) as NumPy."""
    with torch.no_grad():
        return net.enc(torch.as_tensor(x, dtype=torch.float32)).numpy().astype(float)


def probe_accuracy(h_tr, late_tr, h_te, late_te, seed):
    """Held-out accuracy of a fresh MLP probe (one hidden layer of 32) predicting late from features h."""
    clf = MLPClassifier(hidden_layer_sizes=(32,), max_iter=300, random_state=int(seed))
    clf.fit(h_tr, late_tr)
    return float(clf.score(h_te, late_te))


def _res_inputs(rng, size):
    return {"x": rng.standard_normal((size, 3)), "t": rng.random(size)}


KERNELS = [Kernel(
    name="residualise_on_t", fn=residualise_on_t, reference=residualise_on_t_ref, make_inputs=_res_inputs,
    contract=Contract(args=(Arg("x", ndim=2, scale=True), Arg("t", ndim=1, same_dtype_as="x")),
                      empty="error", size_one=False, shapes="x: (N, D), t: (N,) -> (N, D)"),
    tol={"float64": (1e-9, 1e-10), "float32": (1e-3, 1e-4)},
    oracle="scipy.linalg.lstsq on [1, t] per column")]

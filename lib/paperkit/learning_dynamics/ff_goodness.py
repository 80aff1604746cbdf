"""Goodness functions for Forward-Forward training, and a small FF network that trains with any of them.

Forward-Forward (FF, Hinton 2022) trains each layer ``l`` on its own: a *goodness* ``G(h_l)`` of the layer's
activity ``h_l`` (one row per example, ``(B, n)``) should exceed a threshold ``theta`` on positive data (an image
with its own label embedded in the input) and fall below it on negative data (the image with a wrong label). The
per-layer loss is ``softplus(theta - G(h_pos)) + softplus(G(h_neg) - theta)`` (:func:`ff_layer_loss`).

Goodness functions (:func:`goodness`, ``kind``), per row ``h = (h_1, ..., h_n)``:

* ``"sos"``: sum of squares ``sum_i h_i^2``, the total activity energy of Hinton's paper;
* ``"mean"``: mean of squares ``sum_i h_i^2 / n``;
* ``"topk"``: energy of the ``k`` largest units, ``sum_{i in top-k(h)} h_i^2`` (a *selective* goodness);
* ``"randk"``: energy of ``k`` fixed units ``units`` chosen at random once (energy of fewer units, no selection);
* ``"entmax15"``: entmax-weighted energy ``sum_i p_i h_i^2`` with ``p = entmax_1.5(h)`` (:func:`entmax15`), a
  sparse weighting that concentrates on the peak units (our reading of "entmax-weighted energy");
* ``"entmax"``: the same energy with ``p = entmax_alpha(h)`` for any ``alpha`` in [1, 8]: ``alpha = 1`` is softmax
  (dense), ``alpha = 2`` sparsemax (:func:`sparsemax`), and the weights get sparser as ``alpha`` grows (exact
  sort-based forms at 1.5 and 2, :func:`entmax_bisect` at other values);
* ``"kurtosis"``: excess kurtosis ``m_4 / m_2^2 - 3`` of the ``n`` values of the row (central moments ``m_j``),
  the "burstiness"; it is unchanged when ``h`` is multiplied by ``c > 0``;
* ``"moment6"``: standardised sixth moment ``m_6 / m_2^3 - 15`` (0 for a Gaussian), also scale-invariant.

:class:`FFNet` is an MLP of ``layers`` ReLU layers of ``width`` units; the label enters as a one-hot vector
concatenated to the input. Each layer's input is divided by its Euclidean length (Hinton) unless ``normalize`` is
off, so that a layer cannot read the previous layer's goodness from the length of its input. :func:`ff_train` trains
all layers at once on minibatches (each layer's input detached, so every layer follows its own loss);
:func:`ff_predict` labels an image by the label whose embedding gives the largest goodness summed over layers.

Kernels (registered in ``KERNELS``): :func:`goodness` / :func:`goodness_ref` (one row at a time in NumPy),
:func:`entmax15` (sort-based, exact) / :func:`entmax15_ref` (bisection on the threshold), :func:`entmax_bisect`
(any ``alpha``, batched bisection, exact gradient) / :func:`entmax_bisect_ref`, :func:`sparsemax` (sort-based) /
:func:`sparsemax_ref`, :func:`ff_layer_loss` /
:func:`ff_layer_loss_ref`, :func:`ff_scores` (all labels in one batch) / :func:`ff_scores_ref` (one label at a time).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

KINDS = ("sos", "mean", "topk", "randk", "entmax15", "entmax", "kurtosis", "moment6")
ALPHA_MAX = 8.0
EPS = 1e-12


def _check_h(h, name: str = "h") -> torch.Tensor:
    if not isinstance(h, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(h).__name__}")
    if h.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"{name} must be float32 or float64, got {h.dtype}")
    if h.ndim != 2:
        raise ValueError(f"{name} must be 2-D (batch, units), got shape {tuple(h.shape)}")
    if h.shape[1] < 1:
        raise ValueError(f"{name} must have at least one unit (column), got shape {tuple(h.shape)}")
    if h.numel() and not bool(torch.isfinite(h).all()):
        raise ValueError(f"{name} must be finite")
    return h


def _check_alpha(alpha):
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 1.0 <= alpha <= ALPHA_MAX:
        raise ValueError(f"alpha must be a number in [1, {ALPHA_MAX:g}], got {alpha!r}")


def _check_kind(kind: str, k: int, units, n: int, alpha: float = 1.5):
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if kind == "entmax":
        _check_alpha(alpha)
    if kind == "topk" and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n):
        raise ValueError(f"k must be an integer in [1, {n}] for kind 'topk', got {k!r}")
    if kind == "randk":
        if not isinstance(units, torch.Tensor) or units.dtype != torch.int64 or units.ndim != 1 or not len(units):
            raise ValueError("units must be a non-empty 1-D int64 tensor of unit indices for kind 'randk'")
        if int(units.min()) < 0 or int(units.max()) >= n:
            raise ValueError(f"units must index columns 0..{n - 1}")


def entmax15(z: torch.Tensor) -> torch.Tensor:
    """1.5-entmax of each row of ``z`` (B, n): ``p_i = [z_i / 2 - tau]_+^2`` with ``tau`` such that ``sum p = 1``
    (Peters, Niculae and Martins 2019), by the exact sort-based threshold. Differentiable by autograd. (B, n)."""
    return _entmax15(_check_h(z, "z"))


def _entmax15(z):
    x = (z - z.max(dim=1, keepdim=True).values) / 2
    xs = torch.sort(x, dim=1, descending=True).values
    rho = torch.arange(1, x.shape[1] + 1, dtype=x.dtype)
    mean = xs.cumsum(1) / rho
    mean_sq = (xs * xs).cumsum(1) / rho
    ss = rho * (mean_sq - mean * mean)
    # the floor 1e-30 keeps the square root's derivative finite where the candidate is not used (0 * inf = NaN)
    tau = mean - torch.sqrt(torch.clamp((1 - ss) / rho, min=1e-30))
    support = (tau <= xs).sum(dim=1, keepdim=True).clamp(min=1)
    tau_star = tau.gather(1, support - 1)
    return torch.clamp(x - tau_star, min=0) ** 2


def entmax15_ref(z: torch.Tensor) -> np.ndarray:
    """Reference for :func:`entmax15`: for each row, bisection on ``tau`` until ``sum_i [z_i/2 - tau]_+^2 = 1``
    (float64 NumPy, 200 halvings)."""
    z = _check_h(z, "z")
    x = z.detach().to(torch.float64).numpy() / 2
    out = np.zeros_like(x)
    for b in range(x.shape[0]):
        row = x[b] - x[b].max()
        lo, hi = -1.0, 0.0                      # sum at tau = -1 is >= 1, at tau = 0 it is 0
        for _ in range(200):
            mid = (lo + hi) / 2
            if (np.maximum(row - mid, 0) ** 2).sum() >= 1:
                lo = mid
            else:
                hi = mid
        out[b] = np.maximum(row - lo, 0) ** 2
    return out


def _power(y, power):
    """``y ** power`` for ``y >= 0``, by multiplications where ``power`` is 1, 2 or 4 (alpha = 2, 1.5, 1.25) and by a
    square root where it is 1/2 (alpha = 3); ``pow`` otherwise (several times slower)."""
    if power == 1:
        return y
    if power == 0.5:
        return torch.sqrt(y)
    if power == 2:
        return y * y
    if power == 4:
        y2 = y * y
        return y2 * y2
    return y.pow(power)


def sparsemax(z: torch.Tensor) -> torch.Tensor:
    """Sparsemax (2-entmax) of each row of ``z`` (B, n): the Euclidean projection onto the simplex, ``p_i = [z_i -
    tau]_+`` with ``tau = (sum_{j <= k} z_(j) - 1) / k`` over the ``k`` largest entries ``z_(1) >= z_(2) >= ...``,
    ``k`` the largest with ``1 + k z_(k) > sum_{j <= k} z_(j)`` (Martins and Astudillo 2016). Differentiable by
    autograd. (B, n)."""
    return _sparsemax(_check_h(z, "z"))


def _sparsemax(z):
    zs = torch.sort(z, dim=1, descending=True).values
    rho = torch.arange(1, z.shape[1] + 1, dtype=z.dtype)
    cs = zs.cumsum(1)
    support = (1 + rho * zs > cs).sum(dim=1, keepdim=True)
    tau = (cs.gather(1, support - 1) - 1) / support.to(z.dtype)
    return torch.relu(z - tau)


def sparsemax_ref(z: torch.Tensor) -> np.ndarray:
    """Reference for :func:`sparsemax`: the same closed form one row at a time in float64 with Python loops."""
    z = _check_h(z, "z")
    x = z.detach().to(torch.float64).numpy()
    out = np.zeros_like(x)
    for b in range(x.shape[0]):
        zs, cs, tau = sorted(x[b], reverse=True), 0.0, 0.0
        for k, v in enumerate(zs, start=1):
            cs += v
            if 1 + k * v > cs:
                tau = (cs - 1) / k
        out[b] = [max(v - tau, 0.0) for v in x[b]]
    return out


class _EntmaxBisect(torch.autograd.Function):
    """alpha-entmax by bisection on ``tau`` (forward) with the exact Jacobian ``diag(s) - s s^T / sum(s)``,
    ``s_i = p_i^(2 - alpha)`` on the support (backward; Peters, Niculae and Martins 2019)."""

    @staticmethod
    def forward(ctx, z, alpha, n_iter):
        x = (alpha - 1) * (z - z.max(dim=1, keepdim=True).values)
        power = 1 / (alpha - 1)
        # sum_i [x_i - tau]_+^power is >= 1 at tau = -1 (the largest x_i is 0) and <= 1 at tau = -(1/n)^(alpha - 1)
        lo = torch.full_like(x[:, :1], -1.0)
        hi = torch.full_like(lo, -(1 / x.shape[1]) ** (alpha - 1))
        for _ in range(n_iter):
            mid = (lo + hi) / 2
            big = _power(torch.relu(x - mid), power).sum(dim=1, keepdim=True) >= 1
            lo, hi = torch.where(big, mid, lo), torch.where(big, hi, mid)
        p = _power(torch.relu(x - lo), power)
        p = p / p.sum(dim=1, keepdim=True)
        ctx.save_for_backward(p)
        ctx.alpha = alpha
        return p

    @staticmethod
    def backward(ctx, grad):
        (p,) = ctx.saved_tensors
        # in float64: for alpha > 2 the exponent 2 - alpha is negative and s is large near the support's edge
        pd = p.double()
        s = torch.where(pd > 0, pd.clamp(min=1e-300).pow(2 - ctx.alpha), torch.zeros_like(pd))
        gs = grad.double() * s
        dz = gs - s * gs.sum(dim=1, keepdim=True) / s.sum(dim=1, keepdim=True)
        return dz.to(grad.dtype), None, None


def entmax_bisect(z: torch.Tensor, alpha: float = 1.5, n_iter: int | None = None) -> torch.Tensor:
    """alpha-entmax of each row of ``z`` (B, n) for any ``alpha`` in [1, 8]: ``p_i = [(alpha - 1) z_i - tau]_+^(1 /
    (alpha - 1))`` with ``tau`` such that ``sum p = 1`` (Peters, Niculae and Martins 2019), ``tau`` found by
    ``n_iter`` halvings of a bracket of width below 1 (None: 25 for float32, 54 for float64, the dtype's
    resolution), then the row is renormalised. ``alpha = 1`` is softmax (the limit ``alpha -> 1``), ``alpha = 1.5``
    is :func:`entmax15`, ``alpha = 2`` :func:`sparsemax`. Differentiable, with the exact entmax Jacobian. (B, n)."""
    z = _check_h(z, "z")
    _check_alpha(alpha)
    if n_iter is not None and (isinstance(n_iter, bool) or not isinstance(n_iter, int) or not 1 <= n_iter <= 200):
        raise ValueError(f"n_iter must be None or an integer in [1, 200], got {n_iter!r}")
    if alpha == 1:
        return torch.softmax(z, dim=1)
    return _EntmaxBisect.apply(z, float(alpha), n_iter or (25 if z.dtype == torch.float32 else 54))


def _entmax(z, alpha):
    """alpha-entmax for the ``"entmax"`` goodness: the exact sort-based forms at alpha = 1.5 and 2, softmax at 1,
    :func:`entmax_bisect` otherwise."""
    if alpha == 1.5:
        return _entmax15(z)
    if alpha == 2:
        return _sparsemax(z)
    if alpha == 1:
        return torch.softmax(z, dim=1)
    return _EntmaxBisect.apply(z, float(alpha), 25 if z.dtype == torch.float32 else 54)


def entmax_bisect_ref(z: torch.Tensor, alpha: float = 1.5, n_iter: int | None = None) -> np.ndarray:
    """Reference for :func:`entmax_bisect`: for each row, in float64 NumPy, 200 halvings of ``tau`` until
    ``sum_i [(alpha - 1) z_i - tau]_+^(1 / (alpha - 1)) = 1``; ``alpha = 1`` by ``exp(z - max z) / sum``.
    ``n_iter`` is accepted for the signature and not used."""
    z = _check_h(z, "z")
    _check_alpha(alpha)
    x = z.detach().to(torch.float64).numpy()
    out = np.zeros_like(x)
    for b in range(x.shape[0]):
        row = x[b] - x[b].max()
        if alpha == 1:
            out[b] = np.exp(row) / np.exp(row).sum()
            continue
        row = (alpha - 1) * row
        lo, hi = -1.0, 0.0
        for _ in range(200):
            mid = (lo + hi) / 2
            if (np.maximum(row - mid, 0) ** (1 / (alpha - 1))).sum() >= 1:
                lo = mid
            else:
                hi = mid
        out[b] = np.maximum(row - lo, 0) ** (1 / (alpha - 1))
    return out


def goodness(h: torch.Tensor, kind: str = "sos", k: int = 16, units: torch.Tensor | None = None,
             alpha: float = 1.5) -> torch.Tensor:
    """Goodness ``G(h)`` of each row of the layer activity ``h`` (B, n); ``kind`` as in the module docstring,
    ``k`` the number of peak units of ``"topk"``, ``units`` the fixed unit indices of ``"randk"``, ``alpha`` the
    entmax parameter of ``"entmax"``. Returns (B,). Differentiable by autograd. Central moments of a row with no
    spread are divided by ``m_2 + 1e-12``."""
    h = _check_h(h)
    _check_kind(kind, k, units, h.shape[1], alpha)
    return _goodness(h, kind, k, units, alpha)


def _goodness(h, kind, k, units, alpha=1.5):
    """:func:`goodness` without the argument checks (the training loop's inner call)."""
    if kind == "sos":
        return (h * h).sum(1)
    if kind == "mean":
        return (h * h).mean(1)
    if kind == "topk":
        return torch.topk(h * h, k, dim=1).values.sum(1)
    if kind == "randk":
        return (h[:, units] ** 2).sum(1)
    if kind == "entmax15":
        return (_entmax15(h) * h * h).sum(1)
    if kind == "entmax":
        return (_entmax(h, alpha) * h * h).sum(1)
    d = h - h.mean(1, keepdim=True)
    d2 = d * d
    m2 = d2.mean(1) + EPS
    if kind == "kurtosis":
        return (d2 * d2).mean(1) / (m2 * m2) - 3.0
    return (d2 * d2 * d2).mean(1) / (m2 * m2 * m2) - 15.0


def goodness_ref(h: torch.Tensor, kind: str = "sos", k: int = 16, units: torch.Tensor | None = None,
                 alpha: float = 1.5) -> np.ndarray:
    """Reference for :func:`goodness`: one row at a time in float64 NumPy with plain loops over the units
    (top-k by a full sort, entmax by :func:`entmax15_ref` and :func:`entmax_bisect_ref`)."""
    h = _check_h(h)
    _check_kind(kind, k, units, h.shape[1], alpha)
    x = h.detach().to(torch.float64).numpy()
    out = np.zeros(x.shape[0])
    for b in range(x.shape[0]):
        row = x[b]
        n = len(row)
        if kind == "sos":
            out[b] = sum(v * v for v in row)
        elif kind == "mean":
            out[b] = sum(v * v for v in row) / n
        elif kind == "topk":
            out[b] = sum(sorted(row * row, reverse=True)[:k])
        elif kind == "randk":
            out[b] = sum(row[i] ** 2 for i in units.tolist())
        elif kind in ("entmax15", "entmax"):
            p = (entmax15_ref(torch.tensor(row[None])) if kind == "entmax15"
                 else entmax_bisect_ref(torch.tensor(row[None]), alpha))[0]
            out[b] = sum(p[i] * row[i] ** 2 for i in range(n))
        else:
            mu = sum(row) / n
            m2 = sum((v - mu) ** 2 for v in row) / n + EPS
            if kind == "kurtosis":
                out[b] = sum((v - mu) ** 4 for v in row) / n / m2 ** 2 - 3.0
            else:
                out[b] = sum((v - mu) ** 6 for v in row) / n / m2 ** 3 - 15.0
    return out


def _check_loss(gp, gn, theta):
    for name, g in (("gp", gp), ("gn", gn)):
        if not isinstance(g, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(g).__name__}")
        if g.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"{name} must be float32 or float64, got {g.dtype}")
        if g.ndim != 1:
            raise ValueError(f"{name} must be 1-D (batch,), got shape {tuple(g.shape)}")
        if g.numel() == 0:
            raise ValueError(f"{name} must not be empty")
        if not bool(torch.isfinite(g).all()):
            raise ValueError(f"{name} must be finite")
    if gn.dtype != gp.dtype:
        raise TypeError(f"gn must have the dtype of gp, got {gn.dtype} and {gp.dtype}")
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not math.isfinite(theta):
        raise ValueError(f"theta must be a finite number, got {theta!r}")


def ff_layer_loss(gp: torch.Tensor, gn: torch.Tensor, theta: float) -> torch.Tensor:
    """FF loss of one layer: ``mean softplus(theta - G_pos) + mean softplus(G_neg - theta)`` for the goodness of
    positive rows ``gp`` (B,) and of negative rows ``gn`` (B',), threshold ``theta``. A 0-d tensor."""
    _check_loss(gp, gn, theta)
    return _layer_loss(gp, gn, theta)


def _layer_loss(gp, gn, theta):
    return F.softplus(theta - gp).mean() + F.softplus(gn - theta).mean()


def ff_layer_loss_ref(gp: torch.Tensor, gn: torch.Tensor, theta: float) -> float:
    """Reference for :func:`ff_layer_loss`: element by element with ``log1p(exp(-|u|)) + max(u, 0)``."""
    _check_loss(gp, gn, theta)
    sp = lambda u: math.log1p(math.exp(-abs(u))) + max(u, 0.0)
    return (sum(sp(theta - float(v)) for v in gp) / len(gp) + sum(sp(float(v) - theta) for v in gn) / len(gn))


class FFNet(torch.nn.Module):
    """Forward-Forward MLP: ``layers`` Linear + ReLU layers of ``width`` units on inputs ``[x, onehot(y)]`` of size
    ``d_in + n_classes``; ``label_value`` is the height of the one-hot entry; ``normalize`` divides each layer's
    input by its length (plus 1e-8). Weights drawn from ``generator`` (PyTorch's default Linear init)."""

    def __init__(self, d_in: int, width: int, layers: int, n_classes: int, generator: torch.Generator,
                 normalize: bool = True, label_value: float = 1.0):
        super().__init__()
        sizes = [d_in + n_classes] + [width] * layers
        self.lins = torch.nn.ModuleList()
        for a, b in zip(sizes[:-1], sizes[1:]):
            lin = torch.nn.Linear(a, b)
            bound = 1 / math.sqrt(a)
            with torch.no_grad():
                lin.weight.uniform_(-bound, bound, generator=generator)
                lin.bias.uniform_(-bound, bound, generator=generator)
            self.lins.append(lin)
        self.n_classes, self.normalize, self.label_value = n_classes, normalize, label_value

    def embed(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``[x, label_value * onehot(y)]``: (B, d_in + n_classes)."""
        return torch.cat([x, self.label_value * F.one_hot(y, self.n_classes).to(x.dtype)], dim=1)

    def layer_outputs(self, z: torch.Tensor, detach: bool = True) -> list[torch.Tensor]:
        """Activities of every layer for embedded inputs ``z`` (B, d_in + n_classes); each layer's input is the
        previous activity (detached when ``detach``: FF's local learning), normalised when ``normalize``."""
        hs = []
        for lin in self.lins:
            if self.normalize:
                z = z / (z.norm(dim=1, keepdim=True) + 1e-8)
            h = torch.relu(lin(z))
            hs.append(h)
            z = h.detach() if detach else h
        return hs


def ff_train(net: FFNet, X: torch.Tensor, y: torch.Tensor, kind: str, theta: float, epochs: int,
             generator: torch.Generator, k: int = 16, units: torch.Tensor | None = None, lr: float = 1e-3,
             batch: int = 64, alpha: float = 1.5) -> list[float]:
    """Train ``net`` by FF on images ``X`` (N, d_in) with labels ``y`` (N,): per minibatch, positives are
    ``(x, y)``, negatives ``(x, y')`` with ``y'`` a uniformly drawn wrong label, and the summed per-layer losses
    :func:`ff_layer_loss` of goodness ``kind`` (``k``, ``units``, ``alpha`` as in :func:`goodness`) are minimised by
    Adam (learning rate ``lr``). Returns the mean loss per epoch."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    _check_kind(kind, k, units, net.lins[0].out_features, alpha)
    _check_h(X, "X")
    opt = torch.optim.Adam(net.parameters(), lr=lr, foreach=True)
    n, C = len(y), net.n_classes
    hist = []
    for _ in range(epochs):
        perm = torch.randperm(n, generator=generator)
        wrong = (y + torch.randint(1, C, (n,), generator=generator)) % C
        tot = 0.0
        for s in range(0, n, batch):
            idx = perm[s:s + batch]
            z = torch.cat([net.embed(X[idx], y[idx]), net.embed(X[idx], wrong[idx])])
            loss = 0.0
            for h in net.layer_outputs(z):
                g = _goodness(h, kind, k, units, alpha)
                loss = loss + _layer_loss(g[:len(idx)], g[len(idx):], theta)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(idx)
        hist.append(tot / n)
    return hist


def _check_scores(net, X, kind, k, units, alpha):
    if not isinstance(net, FFNet):
        raise TypeError(f"net must be an FFNet, got {type(net).__name__}")
    X = _check_h(X, "X")
    if X.shape[1] + net.n_classes != net.lins[0].in_features:
        raise ValueError(f"X must have {net.lins[0].in_features - net.n_classes} columns, got {X.shape[1]}")
    if X.dtype != net.lins[0].weight.dtype:
        raise TypeError(f"X must have the network's dtype {net.lins[0].weight.dtype}, got {X.dtype}")
    _check_kind(kind, k, units, net.lins[0].out_features, alpha)
    return X


@torch.no_grad()
def ff_scores(net: FFNet, X: torch.Tensor, kind: str, k: int = 16, units: torch.Tensor | None = None,
              skip_first: bool = False, alpha: float = 1.5) -> torch.Tensor:
    """Goodness summed over layers (from the second when ``skip_first``) for every image of ``X`` (N, d_in)
    paired with every label: (N, n_classes); all labels in one batch of N * n_classes rows."""
    X = _check_scores(net, X, kind, k, units, alpha)
    N, C = X.shape[0], net.n_classes
    labels = torch.arange(C).repeat(N)
    hs = net.layer_outputs(net.embed(X.repeat_interleave(C, 0), labels))
    tot = sum(_goodness(h, kind, k, units, alpha) for h in hs[int(skip_first):])
    return tot.reshape(N, C)


@torch.no_grad()
def ff_scores_ref(net: FFNet, X: torch.Tensor, kind: str, k: int = 16, units: torch.Tensor | None = None,
                  skip_first: bool = False, alpha: float = 1.5) -> torch.Tensor:
    """Reference for :func:`ff_scores`: one label at a time."""
    X = _check_scores(net, X, kind, k, units, alpha)
    cols = []
    for c in range(net.n_classes):
        hs = net.layer_outputs(net.embed(X, torch.full((X.shape[0],), c, dtype=torch.int64)))
        cols.append(sum(goodness(h, kind, k, units, alpha) for h in hs[int(skip_first):]))
    return torch.stack(cols, 1) if cols else torch.zeros(X.shape[0], 0, dtype=X.dtype)


def ff_predict(net: FFNet, X: torch.Tensor, kind: str, k: int = 16, units: torch.Tensor | None = None,
               alpha: float = 1.5) -> torch.Tensor:
    """Predicted labels (N,): the label of largest summed goodness (:func:`ff_scores`)."""
    return ff_scores(net, X, kind, k, units, alpha=alpha).argmax(1)


# ----------------------------------------------------------------------------------------------------- registry

def _h_inputs(kind):
    def make(rng, size):
        h = torch.tensor(np.maximum(rng.normal(size=(size, 12)), 0) + 0.05 * rng.random((size, 12)))
        kw = {"h": h, "kind": kind, "k": 4}
        if kind == "entmax":
            kw["alpha"] = 1.25
        if kind == "randk":
            kw["units"] = torch.tensor([0, 3, 7, 11])
        return kw
    return make


def _z_inputs(rng, size):
    return {"z": torch.tensor(rng.normal(size=(size, 9)) * 2)}


def _zalpha_inputs(rng, size):
    return {"z": torch.tensor(rng.normal(size=(size, 9)) * 2), "alpha": float(rng.choice([1.0, 1.25, 2.0, 4.0]))}


def _loss_inputs(rng, size):
    return {"gp": torch.tensor(rng.normal(size=size) * 3), "gn": torch.tensor(rng.normal(size=size) * 3),
            "theta": 0.5}


def _score_inputs(rng, size):
    g = torch.Generator().manual_seed(int(rng.integers(1 << 30)))
    net = FFNet(6, 8, 2, 3, g).double()
    return {"net": net, "X": torch.tensor(rng.random((size, 6))), "kind": "kurtosis"}


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    tol = {"float64": (1e-9, 1e-10), "float32": (2e-4, 2e-4)}
    rows = [Kernel(f"ff_goodness.goodness[{kind}]", goodness, goodness_ref, _h_inputs(kind),
                   Contract(args=(Arg("h", ndim=2),), empty="value", empty_value=lambda kw: np.zeros(0),
                            shapes="h: (B, n) layer activity; returns (B,)"),
                   tol=tol, benchmark="ff_goodness.goodness" if kind in ("kurtosis", "entmax15") else "",
                   oracle="scipy.stats.kurtosis / moment (kurtosis, moment6); numpy sort (topk)")
            for kind in KINDS]
    rows += [
        Kernel("ff_goodness.entmax15", entmax15, entmax15_ref, _z_inputs,
               Contract(args=(Arg("z", ndim=2),), empty="value", empty_value=lambda kw: np.zeros((0, 9)),
                        shapes="z: (B, n); returns (B, n), rows on the simplex"),
               tol={"float64": (1e-9, 1e-10), "float32": (1e-4, 1e-5)}, benchmark="ff_goodness.entmax15",
               oracle="the optimality conditions of 1.5-entmax (sum to one, p_i = [z_i/2 - tau]_+^2); closed form "
                      "for two entries"),
        Kernel("ff_goodness.entmax_bisect", entmax_bisect, entmax_bisect_ref, _zalpha_inputs,
               Contract(args=(Arg("z", ndim=2),), empty="value", empty_value=lambda kw: np.zeros((0, 9)),
                        shapes="z: (B, n); returns (B, n), rows on the simplex"),
               # float32: at alpha > 2, p = y^(1/(alpha - 1)) magnifies the threshold's rounding near the support's edge
               tol={"float64": (1e-9, 1e-10), "float32": (1e-3, 1e-3)}, benchmark="ff_goodness.entmax_bisect",
               oracle="sort-based 1.5-entmax (entmax15) at alpha = 1.5; the sort-based sparsemax closed form at "
                      "alpha = 2; softmax at alpha = 1 and as the limit alpha -> 1"),
        Kernel("ff_goodness.sparsemax", sparsemax, sparsemax_ref, _z_inputs,
               Contract(args=(Arg("z", ndim=2),), empty="value", empty_value=lambda kw: np.zeros((0, 9)),
                        shapes="z: (B, n); returns (B, n), rows on the simplex"),
               tol={"float64": (1e-10, 1e-12), "float32": (1e-5, 1e-6)}, benchmark="ff_goodness.sparsemax",
               oracle="the Euclidean projection onto the simplex (closed form for two entries); entmax_bisect at "
                      "alpha = 2"),
        Kernel("ff_goodness.ff_layer_loss", ff_layer_loss, ff_layer_loss_ref, _loss_inputs,
               Contract(args=(Arg("gp", ndim=1, scale=True), Arg("gn", ndim=1, same_dtype_as="gp", scale=True)),
                        empty="error", shapes="gp: (B,), gn: (B',); returns a 0-d tensor"),
               tol={"float64": (1e-10, 1e-12), "float32": (1e-5, 1e-6)},
               oracle="torch.nn.functional.binary_cross_entropy_with_logits"),
        Kernel("ff_goodness.ff_scores", ff_scores, ff_scores_ref, _score_inputs,
               Contract(args=(Arg("X", ("float64",), ndim=2),), empty="value",
                        empty_value=lambda kw: np.zeros((0, 3)),
                        shapes="X: (N, d_in); returns (N, n_classes)"),
               tol={"float64": (1e-9, 1e-10)}, benchmark="ff_goodness.ff_scores"),
    ]
    return rows


KERNELS = _registry()

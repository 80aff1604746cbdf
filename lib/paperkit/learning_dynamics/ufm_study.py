"""The neural side of the joint-versus-separate chapter: two-layer tanh networks with weight decay, one shared network
for all K targets against K single-output networks of the same width and decay, on real multi-output data.

Network: ``f(x) = W2^T tanh(W1^T x + b1) + b2`` with ``W1`` (p, width), ``W2`` (width, K); objective
``1/(2N) ||F - Y||_F^2 + lam/2 (||W1||^2 + ||W2||^2)`` (biases not decayed), minimised by L-BFGS from a Gaussian
start. The separate networks solve the same objective one target column at a time, so their summed objective is
the joint one with the hidden layer split into K private blocks: the matched regularisation of the UFM comparison.
"""
from __future__ import annotations

import numpy as np
from scipy import optimize

from paperkit.learning_dynamics import ufm_regression as ur


def _unpack(x, p, h, K):
    i = 0
    out = []
    for shape in ((p, h), (h,), (h, K), (K,)):
        n = int(np.prod(shape))
        out.append(x[i:i + n].reshape(shape))
        i += n
    return out


def mlp_loss_grad(x, X, Y, width: int, lam: float):
    """Objective and gradient of the two-layer tanh network with flat parameters ``x`` (W1, b1, W2, b2 in that
    order), inputs ``X`` (N, p) and targets ``Y`` (N, K). Returns ``(L, grad)`` with ``grad`` shaped like ``x``."""
    N, p = X.shape
    K = Y.shape[1]
    W1, b1, W2, b2 = _unpack(x, p, width, K)
    A = np.tanh(X @ W1 + b1)
    E = (A @ W2 + b2 - Y) / N
    L = 0.5 * N * (E * E).sum() + 0.5 * lam * ((W1 * W1).sum() + (W2 * W2).sum())
    dA = (E @ W2.T) * (1.0 - A * A)
    g = [X.T @ dA + lam * W1, dA.sum(0), A.T @ E + lam * W2, E.sum(0)]
    return L, np.concatenate([v.ravel() for v in g])


def mlp_fit(X, Y, width: int, lam: float, rng: np.random.Generator, max_iter: int = 500):
    """Train one network on ``X`` (N, p), ``Y`` (N, K) by L-BFGS (at most ``max_iter`` iterations). Returns a
    function mapping inputs (M, p) to predictions (M, K)."""
    N, p = X.shape
    K = Y.shape[1]
    x0 = np.concatenate([rng.normal(size=p * width) / np.sqrt(p), np.zeros(width),
                         rng.normal(size=width * K) / np.sqrt(width), np.zeros(K)])
    res = optimize.minimize(mlp_loss_grad, x0, args=(X, Y, width, lam), jac=True, method="L-BFGS-B",
                            options={"maxiter": max_iter, "gtol": 1e-8})
    W1, b1, W2, b2 = _unpack(res.x, p, width, K)
    return lambda Z: np.tanh(Z @ W1 + b1) @ W2 + b2


def split(X, Y, rng: np.random.Generator, n_train: int):
    """A random train/test split; inputs standardised and targets centred and standardised with training statistics.
    Returns ``(Xtr, Ytr, Xte, Yte)``."""
    idx = rng.permutation(len(X))
    tr, te = idx[:n_train], idx[n_train:]
    mx, sx = X[tr].mean(0), X[tr].std(0)
    my, sy = Y[tr].mean(0), Y[tr].std(0)
    return (X[tr] - mx) / sx, (Y[tr] - my) / sy, (X[te] - mx) / sx, (Y[te] - my) / sy


def _mse(pred, Y):
    return float(((pred - Y) ** 2).mean())


def joint_vs_separate(X, Y, lam: float, width: int, rng: np.random.Generator, n_train: int, max_iter: int = 500,
                      decorrelated: bool = True):
    """One split: train and test MSE (per entry, standardised units) of the joint network, of K separate networks,
    and of K separate networks on the principal-component targets ``Y U`` (U: eigenvectors of the training target
    covariance; uncorrelated targets, the same spectrum), whose MSE is measured in those coordinates (a rotation
    keeps the MSE; skipped when ``decorrelated`` is False). Returns a dict of the (four or) six numbers."""
    Xtr, Ytr, Xte, Yte = split(X, Y, rng, n_train)
    U = np.linalg.eigh(Ytr.T @ Ytr / len(Ytr))[1]
    out = {}
    fj = mlp_fit(Xtr, Ytr, width, lam, rng, max_iter)
    out["joint_train"], out["joint_test"] = _mse(fj(Xtr), Ytr), _mse(fj(Xte), Yte)
    for key, (A, B) in (("sep", (Ytr, Yte)), ("pc_sep", (Ytr @ U, Yte @ U)))[: 2 if decorrelated else 1]:
        fs = [mlp_fit(Xtr, A[:, j:j + 1], width, lam, rng, max_iter) for j in range(A.shape[1])]
        out[key + "_train"] = _mse(np.hstack([f(Xtr) for f in fs]), A)
        out[key + "_test"] = _mse(np.hstack([f(Xte) for f in fs]), B)
    return out


def whitening_gap(X, Y, lam: float, width: int, scales, rng: np.random.Generator, n_train: int,
                  max_iter: int = 500):
    """One split: for each target scale ``c`` in ``scales`` (targets standardised, then multiplied by ``c``: mean
    variance ``c^2``), the joint network's original-scale train and test MSE with whitened targets minus those with
    raw targets. Returns ``(d_train (len(scales),), d_test (len(scales),))``."""
    Xtr, Ytr, Xte, Yte = split(X, Y, rng, n_train)
    d_tr, d_te = [], []
    for c in scales:
        res = {}
        for mode in ("raw", "whiten"):
            Yw, Ainv = ur.whiten_targets(c * Ytr.T, mode)
            f = mlp_fit(Xtr, Yw.T, width, lam, rng, max_iter)
            res[mode] = (_mse(f(Xtr) @ Ainv.T, c * Ytr), _mse(f(Xte) @ Ainv.T, c * Yte))
        d_tr.append(res["whiten"][0] - res["raw"][0])
        d_te.append(res["whiten"][1] - res["raw"][1])
    return np.array(d_tr), np.array(d_te)

"""Joint versus separate multi-output regression in the unconstrained feature model (UFM), and target whitening.

The UFM replaces a network's last hidden layer by free features ``H`` (d, N) and its output layer by a linear head
``W`` (K, d), for ``K`` targets ``Y`` (K, N) over ``N`` samples, with weight decay on both::

    L(W, H) = 1/(2N) ||W H - Y||_F^2 + lam_W/2 ||W||_F^2 + lam_H/2 ||H||_F^2.

Because ``min {||W||^2 + c ||H||^2 : W H = Z} = 2 sqrt(c) ||Z||_*`` (the nuclear norm, when ``d >= rank Z``), the
minimum over (W, H) equals that of the convex problem ``min_Z 1/(2N) ||Z - Y||^2 + sqrt(lam_W lam_H) ||Z||_*``,
solved by soft-thresholding the singular values ``s_k`` of ``Y`` at ``tau = N sqrt(lam_W lam_H)``. Its residual
keeps ``min(s_k, tau)`` in every singular direction, so the minimal training MSE (per entry) is::

    MSE_joint = 1/(N K) sum_k min(s_k^2, tau^2) = 1/K sum_k min(sigma_k^2, t),   t = N lam_W lam_H,

with ``sigma_k^2 = s_k^2 / N`` the eigenvalues of the (uncentred) target covariance ``Sigma = Y Y^T / N``: a function of
the product ``lam_W lam_H`` and of the spectrum of ``Sigma`` only. ``K`` separate models (one UFM per target, the
same decays) threshold each row norm instead: ``MSE_sep = 1/K sum_j min(Sigma_jj, t)``; since the diagonal of
``Sigma`` is majorised by its eigenvalues (Schur) and ``min(., t)`` is concave, ``MSE_joint <= MSE_sep``.

Whitening (``Y' = Sigma^{-1/2} Y``, fit, map the predictions back with ``Sigma^{1/2}``) gives the original-scale
training MSE ``min(1, t) * mean_k sigma_k^2``; standardising divides each target by its own standard deviation.

Kernels (registered in ``KERNELS``): :func:`ufm_closed_form` (eigen-decomposition of the K x K Gram matrix) /
:func:`ufm_closed_form_ref` (thin SVD of ``Y``); :func:`separate_closed_form` (vectorised row norms) /
:func:`separate_closed_form_ref` (one single-target UFM at a time); :func:`ufm_loss_grad` (matrix products) /
:func:`ufm_loss_grad_ref` (one sample at a time). :func:`ufm_factored_fit` minimises ``L(W, H)`` itself by
L-BFGS, with no use of the closed form.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import optimize

from paperkit.arrays import real_array


# ---------------------------------------------------------------------------------------------- checks


def _check_Y(Y) -> np.ndarray:
    Y = real_array(Y, "Y", 2)
    if Y.shape[0] == 0 or Y.shape[1] == 0:
        raise ValueError(f"Y must be (K, N) with K >= 1 targets and N >= 1 samples, got shape {Y.shape}")
    return Y


def _check_lam(lam_w, lam_h) -> tuple[float, float]:
    out = []
    for name, v in (("lam_w", lam_w), ("lam_h", lam_h)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating)) or not (v >= 0 and math.isfinite(v)):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        out.append(float(v))
    return out[0], out[1]


def threshold(N: int, lam_w: float, lam_h: float) -> float:
    """The singular-value threshold ``tau = N sqrt(lam_W lam_H)``."""
    return N * math.sqrt(lam_w * lam_h)


# ---------------------------------------------------------------------------------------------- closed forms

def _finish(Y, Z, lam_w, lam_h, s):
    N, K = Y.shape[1], Y.shape[0]
    tau = threshold(N, lam_w, lam_h)
    mse = float(((Z - Y) ** 2).sum() / (N * K))
    obj = 0.5 / N * float(((Z - Y) ** 2).sum()) + math.sqrt(lam_w * lam_h) * float(np.maximum(s - tau, 0).sum())
    return Z, mse, obj


def ufm_closed_form(Y, lam_w, lam_h):
    """Minimiser of the balanced UFM problem ``min_Z 1/(2N)||Z - Y||^2 + sqrt(lam_W lam_H) ||Z||_*`` for targets
    ``Y`` (K, N): ``Z = U diag((1 - tau/s_k)_+) U^T Y`` from the eigen-decomposition ``Y Y^T = U diag(s^2) U^T``.

    Returns ``(Z (K, N), mse, objective)``: ``mse = ||Z - Y||^2 / (N K)`` and the minimal value of ``L(W, H)``.
    Cost O(N K^2): only the K x K Gram matrix is decomposed.
    """
    Y = _check_Y(Y)
    lam_w, lam_h = _check_lam(lam_w, lam_h)
    ev, U = np.linalg.eigh(Y @ Y.T)
    s = np.sqrt(np.maximum(ev, 0.0))
    tau = threshold(Y.shape[1], lam_w, lam_h)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.where(s > tau, 1.0 - tau / np.where(s > 0, s, 1.0), 0.0)
    Z = (U * f) @ (U.T @ Y)
    return _finish(Y, Z, lam_w, lam_h, s)


def ufm_closed_form_ref(Y, lam_w, lam_h):
    """Reference for :func:`ufm_closed_form`: thin SVD ``Y = U S V^T`` and ``Z = U (S - tau)_+ V^T``."""
    Y = _check_Y(Y)
    lam_w, lam_h = _check_lam(lam_w, lam_h)
    U, s, Vt = np.linalg.svd(Y, full_matrices=False)
    tau = threshold(Y.shape[1], lam_w, lam_h)
    Z = (U * np.maximum(s - tau, 0.0)) @ Vt
    s_full = np.zeros(Y.shape[0])
    s_full[: s.size] = s
    return _finish(Y, Z, lam_w, lam_h, s_full)


def min_mse_from_spectrum(sigma2, t: float) -> float:
    """``1/K sum_k min(sigma_k^2, t)``: the minimal joint training MSE from the covariance eigenvalues ``sigma2``
    (K,) and ``t = N lam_W lam_H``; with the diagonal of ``Sigma`` instead of its eigenvalues, the separate one."""
    sigma2 = np.asarray(sigma2, dtype=float)
    return float(np.minimum(sigma2, t).mean())


def separate_closed_form(Y, lam_w, lam_h):
    """K separate single-target UFMs (each with its own features and the same decays): row ``j`` of ``Y`` (K, N) is
    shrunk by ``(1 - tau/||y_j||)_+``. Returns ``(Z (K, N), mse, objective)`` with the summed objectives."""
    Y = _check_Y(Y)
    lam_w, lam_h = _check_lam(lam_w, lam_h)
    r = np.sqrt((Y ** 2).sum(1))
    tau = threshold(Y.shape[1], lam_w, lam_h)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.where(r > tau, 1.0 - tau / np.where(r > 0, r, 1.0), 0.0)
    return _finish(Y, Y * f[:, None], lam_w, lam_h, r)


def separate_closed_form_ref(Y, lam_w, lam_h):
    """Reference for :func:`separate_closed_form`: :func:`ufm_closed_form_ref` on each row in turn."""
    Y = _check_Y(Y)
    lam_w, lam_h = _check_lam(lam_w, lam_h)
    Z = np.vstack([ufm_closed_form_ref(Y[j:j + 1], lam_w, lam_h)[0] for j in range(Y.shape[0])])
    return _finish(Y, Z, lam_w, lam_h, np.sqrt((Y ** 2).sum(1)))


# ---------------------------------------------------------------------------------------------- target scaling

def whiten_targets(Y, mode: str):
    """Rescale targets ``Y`` (K, N) before fitting: ``mode`` ``"raw"`` (identity), ``"standardise"`` (each target by
    its own root mean square, ``A = diag(Sigma)^{-1/2}``) or ``"whiten"`` (``A = Sigma^{-1/2}``, symmetric), with
    ``Sigma = Y Y^T / N``. Returns ``(A Y, A^{-1})``: predictions ``Z'`` of ``A Y`` map back as ``A^{-1} Z'``."""
    Y = _check_Y(Y)
    K, N = Y.shape
    if mode == "raw":
        return Y.copy(), np.eye(K)
    S = Y @ Y.T / N
    if mode == "standardise":
        d = np.sqrt(np.diag(S))
        if (d <= 0).any():
            raise ValueError("Y has a target that is identically zero; it cannot be standardised")
        return Y / d[:, None], np.diag(d)
    if mode == "whiten":
        ev, U = np.linalg.eigh(S)
        if ev.min() <= 1e-12 * max(ev.max(), 1e-300):
            raise ValueError("Y has a singular target covariance; it cannot be whitened")
        return (U / np.sqrt(ev)) @ U.T @ Y, (U * np.sqrt(ev)) @ U.T
    raise ValueError(f"mode must be 'raw', 'standardise' or 'whiten', got {mode!r}")


def scaled_closed_form_mse(Y, lam_w, lam_h, mode: str) -> float:
    """Original-scale training MSE of the joint UFM fitted to ``whiten_targets(Y, mode)`` (closed form), with the
    predictions mapped back: ``||A^{-1} Z' - Y||^2 / (N K)``."""
    Yt, Ainv = whiten_targets(Y, mode)
    Z = ufm_closed_form(Yt, lam_w, lam_h)[0]
    return float(((Ainv @ Z - Y) ** 2).mean())


# ---------------------------------------------------------------------------------------------- factored model

def _check_WH(W, H, Y):
    W = real_array(W, "W", 2)
    H = real_array(H, "H", 2)
    Y = _check_Y(Y)
    if W.shape[0] != Y.shape[0] or H.shape[1] != Y.shape[1] or W.shape[1] != H.shape[0]:
        raise ValueError(f"W (K, d), H (d, N) and Y (K, N) disagree: W {W.shape}, H {H.shape}, Y {Y.shape}")
    if W.dtype != H.dtype or W.dtype != Y.dtype:
        raise TypeError(f"W, H and Y must share one dtype, got {W.dtype}, {H.dtype}, {Y.dtype}")
    return W, H, Y


def ufm_loss_grad(W, H, Y, lam_w, lam_h):
    """``L(W, H)`` and its gradients for head ``W`` (K, d), features ``H`` (d, N), targets ``Y`` (K, N):
    returns ``(L, dL/dW (K, d), dL/dH (d, N))`` with ``R = (W H - Y)/N``, ``dW = R H^T + lam_W W``,
    ``dH = W^T R + lam_H H``."""
    W, H, Y = _check_WH(W, H, Y)
    lam_w, lam_h = _check_lam(lam_w, lam_h)
    N = Y.shape[1]
    E = W @ H - Y
    L = 0.5 / N * (E * E).sum() + 0.5 * lam_w * (W * W).sum() + 0.5 * lam_h * (H * H).sum()
    R = E / N
    return L, R @ H.T + lam_w * W, W.T @ R + lam_h * H


def ufm_loss_grad_ref(W, H, Y, lam_w, lam_h):
    """Reference for :func:`ufm_loss_grad`: the data term and its gradients summed one sample at a time."""
    W, H, Y = _check_WH(W, H, Y)
    lam_w, lam_h = _check_lam(lam_w, lam_h)
    N = Y.shape[1]
    L = 0.5 * lam_w * (W * W).sum() + 0.5 * lam_h * (H * H).sum()
    gW, gH = lam_w * W, lam_h * H
    for n in range(N):
        e = W @ H[:, n] - Y[:, n]
        L = L + 0.5 / N * e @ e
        gW = gW + np.outer(e, H[:, n]) / N
        gH[:, n] = gH[:, n] + W.T @ e / N
    return L, gW, gH


def ufm_factored_fit(Y, lam_w, lam_h, d_feat: int, rng: np.random.Generator, init_scale: float = 0.1,
                     max_iter: int = 20000, gtol: float = 1e-11):
    """Minimise ``L(W, H)`` over head ``W`` (K, d_feat) and free features ``H`` (d_feat, N) by L-BFGS from a small
    random start (entries ``N(0, init_scale^2)``), without the closed form. Returns a dict with ``W``, ``H``,
    ``Z = W H``, ``mse`` (per entry), ``objective``, ``grad_norm`` (final gradient norm) and ``iters``."""
    Y = _check_Y(Y)
    lam_w, lam_h = _check_lam(lam_w, lam_h)
    K, N = Y.shape
    nW = K * d_feat

    def f(x):
        W, H = x[:nW].reshape(K, d_feat), x[nW:].reshape(d_feat, N)
        L, gW, gH = ufm_loss_grad(W, H, Y, lam_w, lam_h)
        return L, np.concatenate([gW.ravel(), gH.ravel()])

    x0 = rng.normal(scale=init_scale, size=nW + d_feat * N)
    res = optimize.minimize(f, x0, jac=True, method="L-BFGS-B",
                            options={"maxiter": max_iter, "maxfun": 2 * max_iter, "gtol": gtol, "ftol": 1e-16,
                                     "maxcor": 30})
    W, H = res.x[:nW].reshape(K, d_feat), res.x[nW:].reshape(d_feat, N)
    Z = W @ H
    return {"W": W, "H": H, "Z": Z, "mse": float(((Z - Y) ** 2).mean()), "objective": float(res.fun),
            "grad_norm": float(np.linalg.norm(res.jac)), "iters": int(res.nit)}


def separate_factored_fit(Y, lam_w, lam_h, d_feat: int, rng: np.random.Generator, **kw):
    """K separate factored UFMs, one per row of ``Y`` (K, N), each by :func:`ufm_factored_fit` with the same decays
    and width. Returns ``(Z (K, N), mse per entry, summed objective, largest final gradient norm)``."""
    Y = _check_Y(Y)
    fits = [ufm_factored_fit(Y[j:j + 1], lam_w, lam_h, d_feat, rng, **kw) for j in range(Y.shape[0])]
    Z = np.vstack([r["Z"] for r in fits])
    return Z, float(((Z - Y) ** 2).mean()), sum(r["objective"] for r in fits), max(r["grad_norm"] for r in fits)


# ---------------------------------------------------------------------------------------------- target matrices

def spectrum(kind: str, K: int, mean_var: float = 1.0, anisotropy: float = 10.0) -> np.ndarray:
    """Covariance eigenvalues (K,) with mean ``mean_var``: ``"isotropic"`` (all equal), ``"decay"`` (geometric, largest
    over smallest = ``anisotropy``) or ``"dominant"`` (one eigenvalue ``anisotropy`` times the others)."""
    if kind == "isotropic":
        g = np.ones(K)
    elif kind == "decay":
        g = anisotropy ** (-np.arange(K) / max(K - 1, 1))
    elif kind == "dominant":
        g = np.ones(K); g[0] = anisotropy
    else:
        raise ValueError(f"kind must be 'isotropic', 'decay' or 'dominant', got {kind!r}")
    return mean_var * g / g.mean()


def make_targets(sigma2, N: int, rng: np.random.Generator, rotate: bool = True) -> np.ndarray:
    """Targets ``Y`` (K, N) whose covariance ``Y Y^T / N`` has exactly the eigenvalues ``sigma2`` (K,), with
    eigenvectors a random rotation (``rotate``; otherwise the coordinate axes: uncorrelated targets)."""
    sigma2 = np.asarray(sigma2, dtype=float)
    K = sigma2.size
    G = rng.normal(size=(K, N))
    G -= G.mean(1, keepdims=True)
    ev, U = np.linalg.eigh(G @ G.T / N)
    G = (U / np.sqrt(ev)) @ U.T @ G                      # exactly white: G G^T / N = I
    Q = np.linalg.qr(rng.normal(size=(K, K)))[0] if rotate else np.eye(K)
    return (Q * np.sqrt(sigma2)) @ G


# ----------------------------------------------------------------------------------------------------- registry

def _y_inputs(rng, size):
    return {"Y": rng.normal(size=(3, size)) * rng.uniform(0.5, 2.0, size=(3, 1)), "lam_w": 0.02, "lam_h": 0.05}


def _wh_inputs(rng, size):
    d = 4
    return {"W": rng.normal(size=(3, d)), "H": rng.normal(size=(d, size)), "Y": rng.normal(size=(3, size)),
            "lam_w": 0.1, "lam_h": 0.01}


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    y = Contract(args=(Arg("Y", ("float64", "float32"), 2),), empty="error", shapes="Y: (K, N) targets by samples")
    return [
        Kernel("ufm_regression.ufm_closed_form", ufm_closed_form, ufm_closed_form_ref, _y_inputs, y,
               tol={"float64": (1e-9, 1e-10), "float32": (1e-3, 1e-4)}, benchmark="ufm_regression.ufm_closed_form",
               oracle="cvxpy nuclear-norm problem; L-BFGS on the factored objective"),
        Kernel("ufm_regression.separate_closed_form", separate_closed_form, separate_closed_form_ref, _y_inputs, y,
               tol={"float64": (1e-10, 1e-12), "float32": (1e-5, 1e-6)},
               benchmark="ufm_regression.separate_closed_form", oracle="L-BFGS on each single-target factored model"),
        Kernel("ufm_regression.ufm_loss_grad", ufm_loss_grad, ufm_loss_grad_ref, _wh_inputs,
               Contract(args=(Arg("W", ("float64", "float32"), 2, same_dtype_as="Y"),
                              Arg("H", ("float64", "float32"), 2, same_dtype_as="Y"),
                              Arg("Y", ("float64", "float32"), 2)), empty="error",
                        shapes="W: (K, d); H: (d, N); Y: (K, N)"),
               tol={"float64": (1e-10, 1e-12), "float32": (1e-4, 1e-5)}, benchmark="ufm_regression.ufm_loss_grad",
               oracle="torch.autograd"),
    ]


KERNELS = _registry()

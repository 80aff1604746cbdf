"""q-exponentials and elliptical q-Gaussians: the maximum-entropy family of the Tsallis negentropy with quadratic
statistics.

The Tsallis negentropy of a density ``p`` with index ``q`` (``alpha = 2 - q`` in the entmax convention) is

    Omega_q(p) = (int p^(2-q) - 1) / ((2-q)(1-q)),    Omega_1(p) = int p log p  (the limit q -> 1).

Its maximiser of ``<lambda, E_p T> - Omega_q(p)`` for the quadratic statistics ``T(x) = (x, x x^T)``, with
``lambda = (S m, -S / 2)`` and ``S`` positive definite (here diagonal, given by its diagonal ``s``), is

    p(x) = [(1-q) (c - (x-m)^T S (x-m) / 2)]_+^(1/(1-q))        (c fixed by normalisation),

the q-Gaussian. For ``q < 1`` it has compact (ellipsoidal) support; for ``q = 1`` it is the Gaussian with
precision ``S``; for ``1 < q < 1 + 2/(d+2)`` it is a multivariate Student t with ``nu = 2/(q-1) - d`` degrees of
freedom (heavy tails, finite covariance). In whitened coordinates ``w = S^(1/2) (x - m)`` the density is spherical:

* ``q < 1``: ``|w| <= r`` with ``r^2 = 2c``; ``|w|^2 / r^2 ~ Beta(d/2, a+1)``, ``a = 1/(1-q)``;
* ``q > 1``: ``w = sqrt(2 tau) z / sqrt(chi2_nu)``, ``z`` standard normal, ``tau = -c``;
* the covariance is ``kappa S^(-1)`` with ``kappa = r^2/(d+2a+2)`` (``q < 1``), ``1`` (``q = 1``),
  ``2 tau/(nu-2)`` (``q > 1``).

The *escort* of order ``2 - q`` (density proportional to ``p^(2-q)``) is again of this kind with the same centre and
scale: ``a -> a + 1`` for ``q < 1``, ``nu -> nu - 2`` for ``q > 1``, itself for ``q = 1``. It is the distribution
under which the generalized Bayesian learning rule averages the Hessian (see
:mod:`paperkit.learning_dynamics.tsallis_blr`).

Kernels (registered in ``KERNELS``): :func:`q_gaussian_logpdf` (vectorised) / :func:`q_gaussian_logpdf_ref` (one
point at a time, from ``c`` in the form above); :func:`q_exp` / :func:`q_exp_ref`.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit
from scipy.special import gammaln

from paperkit.arrays import real_array


def _q(q, name: str = "q") -> float:
    if isinstance(q, bool) or not isinstance(q, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {q!r}")
    q = float(q)
    if not math.isfinite(q) or q >= 2.0 or q <= -10.0:
        raise ValueError(f"{name} must lie in (-10, 2), got {q}")
    return q


def max_q(d: int) -> float:
    """The largest ``q`` (exclusive) at which a ``d``-dimensional q-Gaussian still has a finite covariance."""
    return 1.0 + 2.0 / (d + 2)


def q_exp(x, q):
    """The Tsallis q-exponential ``[1 + (1-q) x]_+^(1/(1-q))`` (``exp`` at ``q = 1``; ``+inf`` past the pole
    for ``q > 1``), elementwise."""
    x = real_array(x, "x")
    q = _q(q)
    if q == 1.0:
        return np.exp(x)
    base = 1.0 + (1.0 - q) * x
    with np.errstate(divide="ignore", over="ignore"):
        if q < 1.0:
            return np.where(base > 0, np.maximum(base, 0.0) ** (1.0 / (1.0 - q)), 0.0)
        return np.where(base > 0, np.maximum(base, 1e-300) ** (1.0 / (1.0 - q)), np.inf)


def q_exp_ref(x, q):
    """Reference for :func:`q_exp`: one element at a time."""
    x = real_array(x, "x")
    q = _q(q)
    out = np.empty(x.shape, dtype=np.float64)
    for i, v in np.ndenumerate(x):
        if q == 1.0:
            out[i] = math.exp(v)
            continue
        base = 1.0 + (1.0 - q) * v
        out[i] = (base ** (1.0 / (1.0 - q)) if base > 0 else 0.0) if q < 1 else \
            (base ** (1.0 / (1.0 - q)) if base > 0 else math.inf)
    return out


def q_log(x, q):
    """The Tsallis q-logarithm ``(x^(1-q) - 1)/(1-q)`` (``log`` at ``q = 1``), the inverse of :func:`q_exp` on
    ``x > 0``."""
    x = real_array(x, "x")
    if (x <= 0).any():
        raise ValueError("x must be positive")
    q = _q(q)
    return np.log(x) if q == 1.0 else (x ** (1.0 - q) - 1.0) / (1.0 - q)


def shape_params(q, d: int, logdet_s: float) -> dict:
    """The whitened shape of the q-Gaussian with index ``q`` in ``d`` dimensions whose matrix ``S`` has
    log-determinant ``logdet_s``.

    Returns ``kind`` (``"compact"``, ``"gauss"``, ``"t"``), ``a`` or ``nu``, ``log_r2`` (``q < 1``: log of the squared
    whitened support radius) or ``log_2tau`` (``q > 1``), ``kappa`` (covariance = ``kappa S^(-1)``) and ``log_c_abs``
    (log of ``|c|``).
    """
    q = _q(q)
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError(f"d must be a positive integer, got {d!r}")
    if q == 1.0:
        return {"kind": "gauss", "kappa": 1.0, "d": d}
    if q < 1.0:
        a = 1.0 / (1.0 - q)
        # [(1-q)/2]^a r^(2a+d) pi^(d/2) Gamma(a+1)/Gamma(a+1+d/2) det(S)^(-1/2) = 1
        log_r = (0.5 * logdet_s - a * math.log((1.0 - q) / 2.0) - 0.5 * d * math.log(math.pi)
                 - gammaln(a + 1.0) + gammaln(a + 1.0 + d / 2.0)) / (2.0 * a + d)
        log_r2 = 2.0 * log_r
        return {"kind": "compact", "a": a, "log_r2": log_r2, "kappa": math.exp(log_r2) / (d + 2 * a + 2),
                "log_c_abs": log_r2 - math.log(2.0), "d": d}
    b = 1.0 / (q - 1.0)
    nu = 2.0 * b - d
    if nu <= 2.0:
        raise ValueError(f"q must be below 1 + 2/(d+2) = {max_q(d):.4f} for a finite covariance in d = {d} "
                         f"dimensions, got {q}")
    # [(q-1) tau]^(-b) (2 pi tau)^(d/2) Gamma(b-d/2)/Gamma(b) det(S)^(-1/2) = 1
    log_tau = (b * math.log(q - 1.0) - 0.5 * d * math.log(2 * math.pi) + gammaln(b) - gammaln(b - d / 2.0)
               + 0.5 * logdet_s) / (d / 2.0 - b)
    log_2tau = math.log(2.0) + log_tau
    return {"kind": "t", "nu": nu, "log_2tau": log_2tau, "kappa": math.exp(log_2tau) / (nu - 2.0),
            "log_c_abs": log_tau, "d": d}


def _check_ms(m, s):
    m = real_array(m, "m", 1)
    s = real_array(s, "s", 1)
    if m.shape != s.shape:
        raise ValueError(f"m and s must have the same shape, got {m.shape} and {s.shape}")
    if m.size < 1:
        raise ValueError("m must have at least one entry")
    if (s <= 0).any():
        raise ValueError("s must be positive (the diagonal of S)")
    if m.dtype != s.dtype:
        raise TypeError(f"s must have the dtype of m, got {s.dtype} and {m.dtype}")
    return m, s


def _check_x(x, m):
    x = real_array(x, "x", 2)
    if x.shape[1] != m.shape[0]:
        raise ValueError(f"x must be (n, d) with d = len(m) = {m.shape[0]}, got {x.shape}")
    if x.dtype != m.dtype:
        raise TypeError(f"x must have the dtype of m, got {x.dtype} and {m.dtype}")
    return x


@njit(cache=True)
def _quad_form(x, m, s):
    """``u_i^T S u_i`` with ``u_i = x_i - m`` for every row, in float64, in one pass without temporaries (the
    NumPy form ``((x - m)**2 * s).sum(1)`` made three (n, d) temporaries and was 0.83x
    scipy.stats.multivariate_t.logpdf)."""
    out = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        acc = 0.0
        for j in range(x.shape[1]):
            u = np.float64(x[i, j]) - m[j]
            acc += s[j] * u * u
        out[i] = acc
    return out


def q_gaussian_logpdf(x, m, s, q):
    """Log density at the rows of ``x`` (n, d) of the q-Gaussian with centre ``m`` (d,), diagonal ``S = diag(s)``
    and index ``q``; ``-inf`` outside the support (``q < 1``). Float64 result of shape (n,)."""
    m, s = _check_ms(m, s)
    x = _check_x(x, m)
    q = _q(q)
    d = m.shape[0]
    m64, s64 = m.astype(np.float64), s.astype(np.float64)
    logdet = float(np.log(s64).sum())
    quad = _quad_form(x, m64, s64)
    if q == 1.0:
        return 0.5 * logdet - 0.5 * d * math.log(2 * math.pi) - 0.5 * quad
    sp = shape_params(q, d, logdet)
    if q < 1.0:
        inner = 1.0 - quad / math.exp(sp["log_r2"])          # (1-q)(c - quad/2) = (1-q) c (1 - quad/r^2)
        with np.errstate(divide="ignore"):
            return np.where(inner > 0, sp["a"] * (math.log(1.0 - q) + sp["log_c_abs"]
                                                  + np.log(np.maximum(inner, 1e-300))), -np.inf)
    inner = 1.0 + quad / math.exp(sp["log_2tau"])             # (q-1)(tau + quad/2) = (q-1) tau (1 + quad/(2 tau))
    return -(1.0 / (q - 1.0)) * (math.log(q - 1.0) + sp["log_c_abs"] + np.log(inner))


def q_gaussian_logpdf_ref(x, m, s, q):
    """Reference for :func:`q_gaussian_logpdf`: each point from ``p = [(1-q)(c - u^T S u / 2)]_+^(1/(1-q))``
    with ``c`` from :func:`shape_params`, one at a time."""
    m, s = _check_ms(m, s)
    x = _check_x(x, m)
    q = _q(q)
    d = m.shape[0]
    logdet = float(np.sum(np.log(s.astype(np.float64))))
    sp = shape_params(q, d, logdet)
    out = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        u2 = sum(float(s[j]) * (float(x[i, j]) - float(m[j])) ** 2 for j in range(d))
        if q == 1.0:
            out[i] = 0.5 * logdet - 0.5 * d * math.log(2 * math.pi) - 0.5 * u2
            continue
        c = math.exp(sp["log_c_abs"]) * (1.0 if q < 1 else -1.0)
        base = (1.0 - q) * (c - 0.5 * u2)
        out[i] = math.log(base) / (1.0 - q) if base > 0 else -math.inf
    return out


def support_radius(q, s) -> np.ndarray:
    """Half-widths of the bounding box of a compact (``q < 1``) q-Gaussian's support along each axis,
    ``r / sqrt(s_j)``; ``inf`` for ``q >= 1``."""
    s = real_array(s, "s", 1)
    q = _q(q)
    if q >= 1.0:
        return np.full(s.shape, np.inf)
    sp = shape_params(q, s.shape[0], float(np.log(s).sum()))
    return math.exp(0.5 * sp["log_r2"]) / np.sqrt(s)


def covariance_factor(q, s) -> float:
    """``kappa`` with covariance ``kappa S^(-1)`` for the q-Gaussian of diagonal ``s``."""
    s = real_array(s, "s", 1)
    return shape_params(q, s.shape[0], float(np.log(s).sum()))["kappa"]


def sample_whitened(q, d: int, n: int, logdet_s: float, rng: np.random.Generator, escort: bool = False):
    """``n`` draws (n, d) of ``w = S^(1/2)(x - m)`` for the q-Gaussian (``escort``: its escort of order 2-q)."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    sp = shape_params(q, d, logdet_s)
    z = rng.standard_normal((n, d))
    if sp["kind"] == "gauss":
        return z
    if sp["kind"] == "compact":
        a = sp["a"] + (1.0 if escort else 0.0)
        rad = np.sqrt(rng.beta(d / 2.0, a + 1.0, size=n) * math.exp(sp["log_r2"]))
        return z / np.linalg.norm(z, axis=1, keepdims=True) * rad[:, None]
    nu = sp["nu"] - (2.0 if escort else 0.0)
    return z * np.sqrt(math.exp(sp["log_2tau"]) / rng.chisquare(nu, size=n))[:, None]


def q_gaussian_sample(m, s, q, n: int, rng: np.random.Generator, escort: bool = False) -> np.ndarray:
    """``n`` draws (n, d) of the q-Gaussian with centre ``m``, diagonal ``S = diag(s)`` and index ``q`` (or of its
    escort of order ``2 - q`` when ``escort``)."""
    m, s = _check_ms(m, s)
    w = sample_whitened(q, m.shape[0], n, float(np.log(s).sum()), rng, escort)
    return m + w / np.sqrt(s)


# ----------------------------------------------------------------------------------------------------- registry

def _pdf_inputs(rng, size):
    d = 3
    return {"x": rng.normal(size=(size, d)) * 0.6, "m": rng.normal(size=d) * 0.1,
            "s": rng.uniform(0.5, 2.0, size=d), "q": 0.6}


def _qexp_inputs(rng, size):
    return {"x": rng.normal(size=size), "q": 0.7}


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    return [
        Kernel("q_gaussian.q_gaussian_logpdf", q_gaussian_logpdf, q_gaussian_logpdf_ref, _pdf_inputs,
               Contract(args=(Arg("x", ("float64", "float32"), 2, same_dtype_as="m"),
                              Arg("m", ("float64", "float32"), 1), Arg("s", ("float64", "float32"), 1, low=1e-300,
                                                                     same_dtype_as="m")),
                        empty="value", empty_value=lambda kw: np.zeros(0),
                        shapes="x: (n, d); m, s: (d,); s > 0; q in (-10, 2), below 1 + 2/(d+2)"),
               tol={"float64": (1e-10, 1e-12), "float32": (1e-5, 1e-5)}, benchmark="q_gaussian.q_gaussian_logpdf",
               oracle="scipy.stats.t / multivariate_t (q > 1), scaled Beta (q < 1), norm (q = 1); "
                      "scipy.integrate normalisers"),
        Kernel("q_gaussian.q_exp", q_exp, q_exp_ref, _qexp_inputs,
               Contract(args=(Arg("x", ("float64",)),), empty="value", empty_value=lambda kw: np.zeros(0),
                        shapes="x: any shape; q in (-10, 2)"),
               tol={"float64": (1e-12, 1e-14)}, oracle="numpy.exp at q = 1; inverse of q_log"),
    ]


KERNELS = _registry()

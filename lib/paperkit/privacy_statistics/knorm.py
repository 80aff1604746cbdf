"""Pure-DP covariance release: the nuclear-ball K-norm mechanism, perturb-and-project, Schatten-p errors.

Set-up (our reading of the paper). A data set is n rows x_i in R^d with ||x_i||_2 <= 1; the statistic released is
the second-moment matrix S = (1/n) sum_i x_i x_i^T. Replacing one row moves S by (x x^T - y y^T)/n, whose nuclear
norm is at most 2/n (equality for orthogonal unit rows). The K-norm mechanism with K the nuclear ball of radius 2/n
releases S + Z with noise density

    p(Z) ∝ exp(-eps * n * ||Z||_* / 2)        (the paper's K-norm mechanism, K ≈ nuclear ball)

which is eps-DP because |(||Z - S'||_* - ||Z - S||_*)| <= ||S - S'||_* <= 2/n. We sample the unit law
p(Z) ∝ exp(-||Z||_*) over symmetric d x d matrices (D = d(d+1)/2 free coordinates) and multiply by
``knorm_scale(eps, n) = 2/(eps n)``. A symmetric matrix law that depends on Z only through its eigenvalues is a Haar
rotation of eigenvalues with density ∝ exp(-sum_i |lam_i|) * prod_{i<j} |lam_i - lam_j| (the beta = 1 Vandermonde
Jacobian), so:

* :func:`knorm_eigs_mcmc` (Numba) / :func:`knorm_eigs_mcmc_ref` (NumPy, same signature, same draws): Metropolis on
  the eigenvalues (single-site moves, a scale move and a shift move). Approximate: a released MCMC draw is only
  approximately eps-DP; the exact guarantee needs an exact sampler.
* :func:`sample_knorm_nuclear_exact`: exact rejection sampler, usable for d <= 4 (acceptance 0.53, 0.11, 0.0065 at
  d = 2, 3, 4): propose from p(Z) ∝ exp(-||Z||_F) (Gamma(D) radius times a uniform direction), accept with
  probability exp(-(||Z||_* - ||Z||_F)) <= 1.

Perturb-and-project (our reading of the estimator): release S + Z, then project it in Frobenius norm onto the feasible
second-moment matrices {M PSD, tr M <= t} (:func:`psd_trace_projection`); t = 1 is the data-independent bound and a
private estimate of tr S makes the error adapt to ||Sigma||_*.
"""
from __future__ import annotations

import numpy as np
from numba import njit
from scipy import stats

# Random numbers for the MCMC are drawn in blocks of this many steps, so memory stays O(block * chains * d).
_MCMC_BLOCK = 256
# Acceptance rate of the exact rejection sampler by d (measured); above d = 4 it is 1e-4 and falls like exp(-c d^2).
_EXACT_ACCEPT = {1: 1.0, 2: 0.53, 3: 0.105, 4: 0.0065}
# Proposals per rejection round, capped so a round stays under ~100 MiB at d = 4.
_EXACT_BATCH_MAX = 400_000


def sym_dim(d: int) -> int:
    """D = d(d+1)/2, the number of free coordinates of a symmetric d x d matrix (the K-norm mechanism's dimension)."""
    return d * (d + 1) // 2


def knorm_scale(eps: float, n: int) -> float:
    """Noise scale 2/(eps n): the unit law exp(-||Z||_*) times this is eps-DP for S = X^T X / n with ||x_i|| <= 1."""
    _check_pos(eps, "eps")
    _check_int(n, "n", 1)
    return 2.0 / (eps * n)


def _check_int(v, name: str, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    return int(v)


def _check_pos(v, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not np.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    return float(v)


def _check_sym(M, name: str) -> np.ndarray:
    M = np.asarray(M, dtype=np.float64)
    if M.ndim < 2 or M.shape[-1] != M.shape[-2] or M.shape[-1] < 1:
        raise ValueError(f"{name} must be a (..., d, d) array of square matrices, got shape {M.shape}")
    if not np.all(np.isfinite(M)):
        raise ValueError(f"{name} contains NaN or inf")
    return M


# ---------------------------------------------------------------------------------------------------------------
# Schatten norms


def schatten(M, p: float) -> np.ndarray:
    """Schatten-p norm ||M||_p = (sum_k sigma_k(M)^p)^(1/p) of each matrix in M (..., d, d); p in [1, inf].

    Symmetric input is assumed (the paper's matrices are covariances): singular values are |eigenvalues|.
    Returns an array of shape M.shape[:-2].
    """
    M = _check_sym(M, "M")
    p = _check_p(p)
    sv = np.abs(np.linalg.eigvalsh(M))
    if np.isinf(p):
        return sv.max(axis=-1)
    # ||M||_p = (sum_k sigma_k^p)^(1/p), computed relative to the top value so large p cannot overflow
    top = sv.max(axis=-1, keepdims=True)
    safe = np.where(top > 0, top, 1.0)
    return safe[..., 0] * np.sum((sv / safe) ** p, axis=-1) ** (1.0 / p)


def schatten_ref(M, p: float) -> np.ndarray:
    """Plain reference for :func:`schatten`: one ``numpy.linalg.svd`` per matrix, same signature and output."""
    M = _check_sym(M, "M")
    p = _check_p(p)
    flat = M.reshape(-1, M.shape[-1], M.shape[-1])
    out = np.empty(len(flat))
    for k, A in enumerate(flat):
        sv = np.linalg.svd(A, compute_uv=False)
        out[k] = sv.max() if np.isinf(p) else np.sum(sv ** p) ** (1.0 / p)
    return out.reshape(M.shape[:-2])


def _check_p(p) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float, np.floating, np.integer)) or np.isnan(p) or p < 1:
        raise ValueError(f"p must be a number in [1, inf], got {p!r}")
    return float(p)


# ---------------------------------------------------------------------------------------------------------------
# K-norm noise: eigenvalues by Metropolis (Numba kernel and NumPy reference), Haar rotation, exact sampler for small d


@njit(cache=True)
def _mcmc_kernel(lam, nrm, unif, step, scale_step, shift_step, use_vandermonde, accepted):
    n_blocks, n_chains, d = nrm.shape[0], lam.shape[0], lam.shape[1]
    D = d * (d + 1) // 2
    for b in range(n_blocks):
        for c in range(n_chains):
            for i in range(d):
                old = lam[c, i]
                new = old + step * nrm[b, c, i]
                # log target = -sum_i |lam_i| + sum_{i<j} log|lam_i - lam_j|; only the terms with i change
                log_a = abs(old) - abs(new)
                if use_vandermonde:
                    for j in range(d):
                        if j != i:
                            log_a += np.log(abs(new - lam[c, j]) / abs(old - lam[c, j]))
                if np.log(unif[b, c, i]) < log_a:
                    lam[c, i] = new
                    accepted[0] += 1
            # scale move lam -> s lam: log a = -(s-1) sum|lam| + (#Vandermonde pairs + d) log s, Jacobian included
            total = 0.0
            for i in range(d):
                total += abs(lam[c, i])
            log_s = scale_step * nrm[b, c, d]
            log_a = -(np.exp(log_s) - 1.0) * total + ((D if use_vandermonde else d)) * log_s
            if np.log(unif[b, c, d]) < log_a:
                s = np.exp(log_s)
                for i in range(d):
                    lam[c, i] *= s
                accepted[1] += 1
            # shift move lam -> lam + h: differences (the Vandermonde) do not change
            h = shift_step * nrm[b, c, d + 1]
            log_a = 0.0
            for i in range(d):
                log_a += abs(lam[c, i]) - abs(lam[c, i] + h)
            if np.log(unif[b, c, d + 1]) < log_a:
                for i in range(d):
                    lam[c, i] += h
                accepted[2] += 1


def _mcmc_ref_block(lam, nrm, unif, step, scale_step, shift_step, use_vandermonde, accepted):
    """NumPy twin of :func:`_mcmc_kernel`, vectorised over chains, same arithmetic order per chain."""
    n_blocks, d = nrm.shape[0], lam.shape[1]
    D = d * (d + 1) // 2
    for b in range(n_blocks):
        for i in range(d):
            old = lam[:, i].copy()
            new = old + step * nrm[b, :, i]
            log_a = np.abs(old) - np.abs(new)
            if use_vandermonde:
                for j in range(d):
                    if j != i:
                        log_a = log_a + np.log(np.abs(new - lam[:, j]) / np.abs(old - lam[:, j]))
            ok = np.log(unif[b, :, i]) < log_a
            lam[ok, i] = new[ok]
            accepted[0] += ok.sum()
        total = np.zeros(lam.shape[0])
        for i in range(d):
            total = total + np.abs(lam[:, i])
        log_s = scale_step * nrm[b, :, d]
        log_a = -(np.exp(log_s) - 1.0) * total + (D if use_vandermonde else d) * log_s
        ok = np.log(unif[b, :, d]) < log_a
        lam[ok] *= np.exp(log_s[ok])[:, None]
        accepted[1] += ok.sum()
        h = shift_step * nrm[b, :, d + 1]
        log_a = np.zeros(lam.shape[0])
        for i in range(d):
            log_a = log_a + (np.abs(lam[:, i]) - np.abs(lam[:, i] + h))
        ok = np.log(unif[b, :, d + 1]) < log_a
        lam[ok] += h[ok][:, None]
        accepted[2] += ok.sum()


def _run_mcmc(block_fn, d, n_chains, n_steps, rng, step, vandermonde):
    d, n_chains, n_steps = _check_int(d, "d", 2), _check_int(n_chains, "n_chains", 1), _check_int(n_steps, "n_steps", 1)
    step = _check_pos(step, "step")
    # start spread over [-d, d]: the law's eigenvalues live on an interval of half-width about 1.4 d
    lam = rng.uniform(-d, d, size=(n_chains, d))
    accepted = np.zeros(3)
    # scale-move step ~ 1/sqrt(D): sum|lam| ~ Gamma(D) has relative spread 1/sqrt(D)
    scale_step = 1.5 / np.sqrt(sym_dim(d))
    for s in range(0, n_steps, _MCMC_BLOCK):
        b = min(_MCMC_BLOCK, n_steps - s)
        nrm = rng.standard_normal((b, n_chains, d + 2))
        unif = rng.random((b, n_chains, d + 2))
        block_fn(lam, nrm, unif, step, scale_step, 1.0, bool(vandermonde), accepted)
    rates = accepted / (n_steps * n_chains * np.array([d, 1, 1]))
    return lam, rates


def knorm_eigs_mcmc(d: int, n_chains: int, n_steps: int, rng: np.random.Generator, step: float = 2.5,
                    vandermonde: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues of the unit K-norm noise law p(Z) ∝ exp(-||Z||_*) over symmetric d x d Z, by Metropolis (Numba).

    Runs ``n_chains`` independent chains for ``n_steps`` sweeps (a sweep = d single-site moves of size ``step``,
    one scale move, one shift move) on the density exp(-sum|lam|) prod_{i<j}|lam_i - lam_j| and returns the final
    states ``lam`` (n_chains, d) and the acceptance rates (single-site, scale, shift). ``vandermonde=False`` drops
    the Jacobian (i.i.d. Laplace eigenvalues): a wrong sampler kept as a negative control.
    """
    return _run_mcmc(_mcmc_kernel, d, n_chains, n_steps, rng, step, vandermonde)


def knorm_eigs_mcmc_ref(d: int, n_chains: int, n_steps: int, rng: np.random.Generator, step: float = 2.5,
                        vandermonde: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Plain NumPy reference for :func:`knorm_eigs_mcmc`: same signature, same random numbers, same output."""
    return _run_mcmc(_mcmc_ref_block, d, n_chains, n_steps, rng, step, vandermonde)


def haar_rotate(lam, rng: np.random.Generator) -> np.ndarray:
    """Q diag(lam_k) Q^T for each row lam_k of ``lam`` (size, d), Q Haar-distributed on O(d) (scipy ortho_group)."""
    lam = np.asarray(lam, dtype=np.float64)
    if lam.ndim != 2 or lam.shape[1] < 2:
        raise ValueError(f"lam must have shape (size, d) with d >= 2, got {lam.shape}")
    Q = stats.ortho_group.rvs(dim=lam.shape[1], size=lam.shape[0], random_state=rng).reshape(lam.shape + (-1,))
    return np.einsum("kij,kj,klj->kil", Q, lam, Q)


def sample_knorm_nuclear(d: int, size: int, rng: np.random.Generator, n_steps: int = 1000,
                         vandermonde: bool = True) -> np.ndarray:
    """``size`` draws (size, d, d) of the unit K-norm noise p(Z) ∝ exp(-||Z||_*): MCMC eigenvalues, Haar rotation.

    Multiply by :func:`knorm_scale` for the eps-DP mechanism. Approximate (Metropolis, ``n_steps`` sweeps).
    """
    lam, _ = knorm_eigs_mcmc(d, size, n_steps, rng, vandermonde=vandermonde)
    return haar_rotate(lam, rng)


def _frobenius_laplace(d: int, size: int, rng: np.random.Generator) -> np.ndarray:
    # Gaussian symmetric matrix with diag variance 1 and off-diagonal variance 1/2 is isotropic in the coordinates
    # (z_ii, sqrt(2) z_ij) in which ||Z||_F is Euclidean; normalised, it is a uniform direction of the Frobenius sphere
    G = rng.standard_normal((size, d, d))
    Z = (G + G.transpose(0, 2, 1)) / 2
    Z /= np.sqrt(np.sum(Z * Z, axis=(1, 2)))[:, None, None]
    # K-norm radial law: ||Z||_F ~ Gamma(D, 1) for density ∝ exp(-||Z||_F) in D dimensions
    return Z * rng.gamma(sym_dim(d), size=size)[:, None, None]


def sample_knorm_frobenius(d: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """Exact draws (size, d, d) of p(Z) ∝ exp(-||Z||_F): the K-norm mechanism for the wrong K (Frobenius ball)."""
    return _frobenius_laplace(_check_int(d, "d", 1), _check_int(size, "size", 1), rng)


def sample_knorm_nuclear_exact(d: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """Exact draws (size, d, d) of p(Z) ∝ exp(-||Z||_*) by rejection from exp(-||Z||_F); d <= 4 only.

    Since ||Z||_* >= ||Z||_F, p_*(Z)/p_F(Z) ∝ exp(-(||Z||_* - ||Z||_F)) <= 1 is a valid acceptance probability.
    """
    d, size = _check_int(d, "d", 1), _check_int(size, "size", 1)
    if d not in _EXACT_ACCEPT:
        raise ValueError(f"d must be <= {max(_EXACT_ACCEPT)} for exact rejection sampling, got {d}")
    out, have = np.empty((size, d, d)), 0
    while have < size:
        batch = min(_EXACT_BATCH_MAX, int(1.2 * (size - have) / _EXACT_ACCEPT[d]) + 16)
        Z = _frobenius_laplace(d, batch, rng)
        nuc = np.abs(np.linalg.eigvalsh(Z)).sum(axis=1)
        fro = np.sqrt(np.sum(Z * Z, axis=(1, 2)))
        keep = Z[rng.random(len(Z)) < np.exp(-(nuc - fro))][: size - have]
        out[have:have + len(keep)] = keep
        have += len(keep)
    return out


# ---------------------------------------------------------------------------------------------------------------
# privacy: the exact log density ratio of the mechanism on neighbouring inputs


def knorm_log_ratio(Y, S, S_prime, scale: float) -> np.ndarray:
    """log p(Y | S) - log p(Y | S') for the mechanism Y = S + scale * Z, Z ~ exp(-||Z||_*); Y (..., d, d).

    The normalising constants are equal (translation), so the privacy loss is
    (||Y - S'||_* - ||Y - S||_*) / scale, exactly.
    """
    Y, S, S_prime = _check_sym(Y, "Y"), _check_sym(S, "S"), _check_sym(S_prime, "S_prime")
    scale = _check_pos(scale, "scale")
    # privacy loss L(Y) = (||Y - S'||_* - ||Y - S||_*) / b
    return (schatten(Y - S_prime, 1) - schatten(Y - S, 1)) / scale


# ---------------------------------------------------------------------------------------------------------------
# perturb-and-project: Frobenius projection onto {M PSD, tr M <= t}


def _capped_simplex(mu: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Euclidean projection of each row of mu (m, d) onto {nu >= 0, sum nu <= t_row} (sort-and-threshold)."""
    pos = np.maximum(mu, 0.0)
    inside = pos.sum(axis=1) <= t
    # otherwise the constraint binds: nu = max(mu - tau, 0) with sum nu = t (the classic simplex threshold)
    srt = -np.sort(-mu, axis=1)
    k = np.arange(1, mu.shape[1] + 1)
    tau_k = (np.cumsum(srt, axis=1) - t[:, None]) / k
    rho = np.sum(srt - tau_k > 0, axis=1)
    tau = tau_k[np.arange(len(mu)), np.maximum(rho, 1) - 1]
    return np.where(inside[:, None], pos, np.maximum(mu - tau[:, None], 0.0))


def _check_projection(M, t) -> tuple[np.ndarray, np.ndarray]:
    M = _check_sym(M, "M")
    t = np.broadcast_to(np.asarray(t, dtype=np.float64), M.shape[:-2])
    if np.any(np.isnan(t)) or np.any(t < 0):
        raise ValueError("t must be >= 0 (inf allowed: PSD cone only)")
    return M, t


def psd_trace_projection(M, t) -> np.ndarray:
    """argmin_{P PSD, tr P <= t} ||P - M||_F for each symmetric M (..., d, d); t broadcast over the batch.

    Frobenius projection onto a unitarily invariant set acts on eigenvalues only (von Neumann): project the
    eigenvalues onto {nu >= 0, sum nu <= t} and keep the eigenvectors. ``t = inf`` gives the PSD cone projection.
    """
    M, t = _check_projection(M, t)
    d = M.shape[-1]
    mu, U = np.linalg.eigh(0.5 * (M + np.swapaxes(M, -1, -2)))
    nu = _capped_simplex(mu.reshape(-1, d), t.reshape(-1)).reshape(mu.shape)
    return np.einsum("...ij,...j,...kj->...ik", U, nu, U)


def psd_trace_projection_ref(M, t) -> np.ndarray:
    """Plain reference for :func:`psd_trace_projection`: per matrix, eigh, then bisection on the threshold tau."""
    M, t = _check_projection(M, t)
    d = M.shape[-1]
    flat, tf = M.reshape(-1, d, d), t.reshape(-1)
    out = np.empty_like(flat)
    for k in range(len(flat)):
        mu, U = np.linalg.eigh(0.5 * (flat[k] + flat[k].T))
        lo, hi = 0.0, max(float(mu.max()), 0.0)
        # smallest tau >= 0 with sum max(mu - tau, 0) <= t; the sum is decreasing in tau
        if np.maximum(mu, 0).sum() > tf[k]:
            for _ in range(200):
                mid = 0.5 * (lo + hi)
                lo, hi = (mid, hi) if np.maximum(mu - mid, 0).sum() > tf[k] else (lo, mid)
        nu = np.maximum(mu - hi if np.maximum(mu, 0).sum() > tf[k] else mu, 0.0)
        out[k] = (U * nu) @ U.T
    return out.reshape(M.shape)


# ---------------------------------------------------------------------------------------------------------------
# data, the three releases, and their errors


def sphere_rows(n: int, d: int, trace: float, cond: float, rng: np.random.Generator) -> np.ndarray:
    """n rows (n, d) on the sphere of radius sqrt(trace) <= 1: directions of N(0, diag(lam_k)) normalised.

    lam_k = cond^(-k/(d-1)) falls geometrically from 1 to 1/cond, so the spectrum's shape does not depend on d.
    Every row has ||x||^2 = trace, so S = X^T X / n has tr S = ||S||_* = trace exactly and the rows are feasible.
    """
    n, d = _check_int(n, "n", 1), _check_int(d, "d", 2)
    if not 0 < trace <= 1:
        raise ValueError(f"trace must be in (0, 1], got {trace!r}")
    if not cond >= 1:
        raise ValueError(f"cond must be >= 1, got {cond!r}")
    G = rng.standard_normal((n, d)) * np.sqrt(cond ** (-np.arange(d) / (d - 1)))
    return np.sqrt(trace) * G / np.linalg.norm(G, axis=1, keepdims=True)


def releases(S, Z_unit, lap_unit, eps: float, n: int, trace_frac: float = 0.25) -> dict[str, np.ndarray]:
    """The three private releases of S (d, d) for every noise draw: a dict of (draws, d, d) arrays.

    * ``knorm``: S + (2/(eps n)) Z, the K-norm mechanism (eps-DP for an exact draw Z).
    * ``pp``: the same release projected onto {PSD, tr <= 1} (post-processing: still eps-DP).
    * ``pp_adaptive``: budget split eps_1 = trace_frac * eps for a Laplace trace t_hat = tr S + Lap(1/(eps_1 n))
      (tr S moves by at most 1/n between neighbours), eps - eps_1 for K-norm noise, projection onto
      {PSD, tr <= clip(t_hat, 0, 1)}; eps-DP by basic composition.

    ``Z_unit`` (draws, d, d) are unit K-norm draws and ``lap_unit`` (draws,) standard Laplace draws, shared across
    n so that curves differ by the method, not by the noise.
    """
    S, Z_unit = _check_sym(S, "S"), _check_sym(Z_unit, "Z_unit")
    eps, n = _check_pos(eps, "eps"), _check_int(n, "n", 1)
    if not 0 < trace_frac < 1:
        raise ValueError(f"trace_frac must be in (0, 1), got {trace_frac!r}")
    Y = S + knorm_scale(eps, n) * Z_unit
    eps1 = trace_frac * eps
    t_hat = np.clip(np.trace(S) + np.asarray(lap_unit) / (eps1 * n), 0.0, 1.0)
    Y2 = S + knorm_scale(eps - eps1, n) * Z_unit
    return {"knorm": Y, "pp": psd_trace_projection(Y, 1.0), "pp_adaptive": psd_trace_projection(Y2, t_hat)}


def release_errors(S, Z_unit, lap_unit, eps: float, n: int, ps, trace_frac: float = 0.25) -> dict[str, np.ndarray]:
    """Schatten-p errors ||S_hat - S||_p of :func:`releases`: dict method -> (len(ps), draws) array."""
    out = releases(S, Z_unit, lap_unit, eps, n, trace_frac)
    return {m: np.stack([schatten(R - S, p) for p in ps]) for m, R in out.items()}


def frobenius_scale(eps: float, n: int) -> float:
    """Noise scale sqrt(2)/(eps n) of the Frobenius-ball K-norm mechanism (the isotropic baseline).

    ||x x^T - y y^T||_F^2 = |x|^4 + |y|^4 - 2 (x.y)^2 <= 2 for rows in the unit ball, so the Frobenius sensitivity of
    S = X^T X / n is sqrt(2)/n and S + frobenius_scale(eps, n) * Z, Z ~ exp(-||Z||_F), is eps-DP.
    """
    _check_pos(eps, "eps")
    _check_int(n, "n", 1)
    return np.sqrt(2.0) / (eps * n)


def data_families(d: int, n: int, trace: float, cond: float, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Three second-moment matrices (d, d) of data sets of n rows with ||x_i||^2 = trace (or 0), tr S <= trace.

    ``flat``: :func:`sphere_rows` (spectrum falling geometrically by ``cond``); ``spike``: every row equal to
    sqrt(trace) e_1 (rank one); ``zero``: every row 0. The spike and zero matrices are extreme points of
    {S PSD, tr S <= trace}, where a constant estimator c I has its worst case.
    """
    flat = sphere_rows(n, d, trace, cond, rng)
    spike = np.zeros((d, d))
    spike[0, 0] = trace
    return {"flat": flat.T @ flat / n, "spike": spike, "zero": np.zeros((d, d))}


def best_constant_error(Ss, p: float, cs=None) -> float:
    """min over c of max over the matrices S in ``Ss`` (m, d, d) of ||c I - S||_p: the best constant estimator c I.

    c runs over the grid ``cs`` (default 401 points on [0, 1]). For a unitarily invariant norm and a rotation-closed
    convex set of inputs the best constant is a multiple of I, so this is the trivial estimator's worst-case error.
    """
    Ss = _check_sym(Ss, "Ss")
    Ss = Ss.reshape(-1, Ss.shape[-1], Ss.shape[-1])
    if len(Ss) == 0:
        raise ValueError("Ss must hold at least one matrix")
    p = _check_p(p)
    cs = np.linspace(0.0, 1.0, 401) if cs is None else np.asarray(cs, dtype=np.float64)
    eye = np.eye(Ss.shape[-1])
    worst = np.max([schatten(c * eye - Ss, p) for c in cs], axis=1)
    return float(worst.min())


def worst_case_errors(families, Z_unit, Z_frob, lap_unit, eps: float, n: int, ps,
                      trace_frac: float = 0.25) -> dict[str, np.ndarray]:
    """Mean Schatten-p error of each release, worst over the data sets ``families`` (dict name -> S): method -> (len(ps),).

    Methods: the three of :func:`releases`; ``psd`` (the K-norm release projected onto the PSD cone only, no trace
    bound); ``frobenius`` (S + frobenius_scale * Z_frob, Z_frob unit Frobenius-ball draws); ``zero`` (output 0);
    ``const`` (the best c I for these data sets, :func:`best_constant_error`).
    """
    out = {m: np.zeros(len(ps)) for m in ("knorm", "pp", "pp_adaptive", "psd", "frobenius", "zero")}
    for S in families.values():
        rel = releases(S, Z_unit, lap_unit, eps, n, trace_frac)
        rel["psd"] = psd_trace_projection(rel["knorm"], np.inf)
        rel["frobenius"] = S + frobenius_scale(eps, n) * _check_sym(Z_frob, "Z_frob")
        rel["zero"] = np.zeros_like(S)[None]
        for m, R in rel.items():
            out[m] = np.maximum(out[m], [schatten(R - S, p).mean() for p in ps])
    stack = np.stack(list(families.values()))
    out["const"] = np.array([best_constant_error(stack, p) for p in ps])
    return out


def shrinkage_oracle_errors(families, Z_unit, eps: float, n: int, ps, trace_bound: float,
                            lambdas) -> dict[str, np.ndarray]:
    """Worst-case (over ``families``) mean Schatten-p errors of two trace baselines for the PP release.

    * ``shrink`` (len(lambdas), len(ps)): lambda * PP, PP = S + (2/(eps n)) Z projected onto {PSD, tr <= 1}; a
      non-adaptive estimator for each lambda in [0, 1] (lambda = 0 is the zero output, lambda = 1 is PP itself).
    * ``oracle`` (len(ps),): the same release projected onto {PSD, tr <= trace_bound}, i.e. PP told the class's
      trace bound (not private in the bound; a yardstick, not a mechanism).
    """
    Z_unit = _check_sym(Z_unit, "Z_unit")
    eps, n = _check_pos(eps, "eps"), _check_int(n, "n", 1)
    trace_bound = _check_pos(trace_bound, "trace_bound")
    lambdas = np.asarray(lambdas, dtype=np.float64)
    if lambdas.ndim != 1 or len(lambdas) == 0 or np.any(lambdas < 0):
        raise ValueError(f"lambdas must be a non-empty 1-D array of values >= 0, got {lambdas!r}")
    shrink, oracle = np.zeros((len(lambdas), len(ps))), np.zeros(len(ps))
    for S in families.values():
        S = _check_sym(S, "families")
        Y = S + knorm_scale(eps, n) * Z_unit
        P = psd_trace_projection(Y, 1.0)
        O = psd_trace_projection(Y, trace_bound)
        oracle = np.maximum(oracle, [schatten(O - S, p).mean() for p in ps])
        shrink = np.maximum(shrink, [[schatten(lam * P - S, p).mean() for p in ps] for lam in lambdas])
    return {"shrink": shrink, "oracle": oracle}


def threshold_n(ns, err, base) -> float:
    """Smallest n at which ``err`` (one value per n in increasing ``ns``) drops below ``base`` (scalar or per n).

    Linear interpolation of log(err / base) in log n between the last grid point above and the first below;
    ``ns[0]`` if err < base already there, ``inf`` if it never drops below on the grid.
    """
    ns, err = np.asarray(ns, dtype=np.float64), np.asarray(err, dtype=np.float64)
    if ns.shape != err.shape:
        raise ValueError(f"ns and err must have the same shape, got {ns.shape}, {err.shape}")
    r = np.log(err / np.broadcast_to(np.asarray(base, dtype=np.float64), err.shape))
    if ns.ndim != 1 or len(ns) == 0 or r.shape != ns.shape or np.any(np.diff(ns) <= 0) or np.any(ns <= 0):
        raise ValueError(f"ns must be increasing positive and match err, got {ns.shape}, {err.shape}")
    below = np.nonzero(r < 0)[0]
    if len(below) == 0:
        return float("inf")
    k = below[0]
    if k == 0:
        return float(ns[0])
    x0, x1 = np.log(ns[k - 1]), np.log(ns[k])
    return float(np.exp(x0 + r[k - 1] / (r[k - 1] - r[k]) * (x1 - x0)))


def loglog_slope(x, y) -> float:
    """Least-squares slope of log y against log x (the rate exponent read off a log-log plot)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 2 or np.any(x <= 0) or np.any(y <= 0):
        raise ValueError(f"x and y must be positive 1-D arrays of the same length >= 2, got {x.shape}, {y.shape}")
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


# ---------------------------------------------------------------------------------------------------------------
# privacy checks: exact worst-case loss over neighbours, and a black-box audit


def neighbour_pair(d: int, n: int, rng: np.random.Generator, orthogonal: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Second-moment matrices (S, S') of two data sets of n rows in the unit ball that differ in their last row.

    ``orthogonal=True`` makes the differing rows orthogonal unit vectors, the pair with ||S - S'||_* = 2/n.
    """
    d, n = _check_int(d, "d", 2), _check_int(n, "n", 1)
    # rows: uniform directions, radii uniform in [0, 1]
    X = rng.standard_normal((n, d))
    X *= rng.uniform(0.0, 1.0, size=(n, 1)) / np.linalg.norm(X, axis=1, keepdims=True)
    y = rng.standard_normal(d)
    y *= rng.uniform(0.0, 1.0) / np.linalg.norm(y)
    if orthogonal:
        X[-1] /= np.linalg.norm(X[-1])
        y -= (y @ X[-1]) * X[-1]
        y /= np.linalg.norm(y)
    Xp = X.copy()
    Xp[-1] = y
    return X.T @ X / n, Xp.T @ Xp / n


def max_privacy_loss(d: int, n: int, eps: float, scale: float, Z_unit, rng: np.random.Generator,
                     n_pairs: int = 20) -> float:
    """Largest exact privacy loss log p(Y|S)/p(Y|S') found, in units of eps, for Y = S + scale * Z.

    Scans ``n_pairs`` neighbouring pairs (half with orthogonal unit differing rows, the extreme case) and, for each,
    the outputs Y = S + scale * Z_unit (typical draws) and Y = S + c (S - S') for c in {0.01, 1, 100} (the
    direction where the triangle inequality is tight). With ``scale = 2/(eps n)`` the answer is <= 1 and equals 1.
    """
    eps, scale = _check_pos(eps, "eps"), _check_pos(scale, "scale")
    Z_unit = _check_sym(Z_unit, "Z_unit")
    worst = -np.inf
    for k in range(_check_int(n_pairs, "n_pairs", 1)):
        S, Sp = neighbour_pair(d, n, rng, orthogonal=k % 2 == 0)
        Y = np.concatenate([S + scale * Z_unit,
                            np.stack([S + c * (S - Sp) for c in (0.01, 1.0, 100.0)])])
        worst = max(worst, float(knorm_log_ratio(Y, S, Sp, scale).max()))
    return worst / eps


def audit_lower_bound(stat_S, stat_Sp, tau: float, alpha: float) -> dict[str, float]:
    """Black-box audit: a (1 - alpha)-confidence lower bound on eps from the event A = {statistic >= tau}.

    ``stat_S``/``stat_Sp`` (m,) are a fixed statistic of outputs drawn under S and under S'. With Clopper-Pearson
    intervals (scipy ``binomtest(...).proportion_ci(method="exact")``, each at level 1 - alpha/2),
    eps_lb = log(lower(P[A | S]) / upper(P[A | S'])); an eps-DP mechanism gives eps_lb <= eps with probability
    >= 1 - alpha, so eps_lb > eps proves the mechanism is not eps-DP (at that confidence).
    """
    stat_S, stat_Sp = np.asarray(stat_S), np.asarray(stat_Sp)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    k1, k2 = int(np.sum(stat_S >= tau)), int(np.sum(stat_Sp >= tau))
    ci1 = stats.binomtest(k1, len(stat_S)).proportion_ci(confidence_level=1 - alpha / 2, method="exact")
    ci2 = stats.binomtest(k2, len(stat_Sp)).proportion_ci(confidence_level=1 - alpha / 2, method="exact")
    # eps >= log P[A|S] - log P[A|S'] for every event A; pessimistic ends of both intervals
    lb = np.log(ci1.low / ci2.high) if ci1.low > 0 else -np.inf
    return {"eps_lb": float(lb), "p_S": k1 / len(stat_S), "p_Sp": k2 / len(stat_Sp),
            "p_S_low": ci1.low, "p_Sp_high": ci2.high}


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Contract, Kernel

    def inputs(rng, size):
        X = rng.normal(size=(3, 4, 4))
        return {"M": X + X.transpose(0, 2, 1), "p": 3.0}

    def proj_inputs(rng, size):
        X = rng.normal(size=(3, 4, 4))
        return {"M": X + X.transpose(0, 2, 1), "t": 1.5}

    def const_inputs(rng, size):
        X = rng.normal(size=(size, 4, 4))
        return {"Ss": np.einsum("kij,klj->kil", X, X) / 16, "p": 2.0}

    def threshold_inputs(rng, size):
        ns = np.cumsum(rng.uniform(1.0, 2.0, size=size)) + 1.0
        return {"ns": ns, "err": 10.0 / ns, "base": 1.0}

    return [Kernel("knorm.schatten", schatten, schatten_ref, inputs, Contract(empty="value",
                   shapes="M: (..., d, d) symmetric"), tol={"float64": (1e-10, 1e-12)}, oracle="numpy.linalg.svd"),
            Kernel("knorm.psd_trace_projection", psd_trace_projection, psd_trace_projection_ref, proj_inputs,
                   Contract(empty="value", shapes="M: (..., d, d) symmetric; t >= 0"),
                   tol={"float64": (1e-9, 1e-11)}, oracle="cvxpy projection"),
            Kernel("knorm.best_constant_error", best_constant_error, None, const_inputs,
                   Contract(empty="error", shapes="Ss: (m, d, d) symmetric"), oracle="closed forms; scipy minimize_scalar"),
            Kernel("knorm.threshold_n", threshold_n, None, threshold_inputs,
                   Contract(empty="error", shapes="ns, err: (k,) with ns increasing"), oracle="power laws (exact)")]


KERNELS = _registry()

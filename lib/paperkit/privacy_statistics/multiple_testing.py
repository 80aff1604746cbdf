"""False-discovery control with conformal p-values and e-values, run over many independent blocks at once.

Every function works on the last axis and broadcasts over any leading axes, so one call handles a whole
``(repeats, modules, candidates)`` array: each leading index is a block that is tested on its own.

* :func:`bh`: Benjamini-Hochberg at level ``alpha`` (agrees with :func:`scipy.stats.false_discovery_control`,
  which returns adjusted p-values only; we need the rejection set of many blocks in one vectorised call).
* :func:`ebh`: e-BH of Wang & Ramdas (2022): reject the ``k*`` largest e-values, ``k* = max{k : e_(k) >= m/(alpha k)}``.
* :func:`conformal_pvalues` / :func:`conformal_pvalues_ref`: split-conformal p-values of test scores against a
  block's calibration nulls (Bates et al. 2023): ``p_j = (1 + #{i : C_i >= S_j}) / (n + 1)``.
* :func:`conformal_evalues` / :func:`conformal_evalues_ref`: the rank-indicator conformal e-values of Bashari et
  al. (2023) / Lee & Ren (2024), ``e_j = (n + 1) 1{S_j >= T} / (1 + #{i : C_i >= T})`` with ``T`` the BH-type
  data-dependent threshold of the block. e-BH on them rejects exactly what BH on the conformal p-values rejects.
* :func:`certra`: conformal e-values and e-BH inside every block (our reading of the CERTRA procedure).
* :func:`pooled_conformal_bh`: the marginal baseline; all blocks share one pooled calibration set and one BH.
* :func:`block_fdp`: the false discovery proportion of every block; :func:`mean_ci` and :func:`proportion_ci` give
  the confidence intervals of the repeated-simulation estimates (FDR is a mean of FDPs, a rate is binomial).
* :func:`block_trace_matrix`: a synthetic block-structured trace matrix (Gaussian scores, module-dependent null
  laws); :func:`simulate_block_fdr` runs every method above on many of them, chunk by chunk, and keeps per-block
  FDPs and recalls; :func:`fair_level` reads off the largest level at which the marginal baseline keeps every
  block's FDR <= alpha (the baseline moved to a per-block-fair operating point).

Scores are "higher means more link-like". The Numba kernels are serial (chapters may share the two cores).
"""
from __future__ import annotations

import numpy as np
from numba import njit
from scipy import stats


def _check_alpha(alpha) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) or not 0 < alpha < 1:
        raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}")
    return float(alpha)


def _as_scores(x, name: str) -> np.ndarray:
    x = np.asarray(x)
    if np.iscomplexobj(x) or not np.issubdtype(x.dtype, np.number):
        raise TypeError(f"{name} must be a real array, got dtype {x.dtype}")
    x = x.astype(np.float64)
    if x.ndim < 1 or x.shape[-1] < 1:
        raise ValueError(f"{name} must have at least one entry on its last axis, got shape {x.shape}")
    if np.isnan(x).any():
        raise ValueError(f"{name} contains NaN")
    return x


def _check_blocks(cal, test) -> tuple[np.ndarray, np.ndarray]:
    """Float64 ``cal`` (..., n) and ``test`` (..., m) with equal leading shapes."""
    cal, test = _as_scores(cal, "cal"), _as_scores(test, "test")
    if cal.shape[:-1] != test.shape[:-1]:
        raise ValueError(f"cal and test must share their leading (block) axes, got {cal.shape} and {test.shape}")
    return cal, test


def bh(p, alpha: float) -> np.ndarray:
    """Benjamini-Hochberg rejections of p-values ``p`` (..., m) at level ``alpha``, per block; bool (..., m).

    ``k* = max{k : p_(k) <= alpha k / m}``; reject every ``p_j <= alpha k* / m`` (nothing when no ``k`` qualifies).
    The comparison is ``p * m <= alpha * k`` in float64, each product rounded once: a p-value within one rounding
    of the line alpha k / m may be rejected where exact arithmetic on the same floats would not (conformal p-values
    sit exactly on such lines, and the chapters' numbers are computed with this rule). Kept so that :func:`ebh` on
    ``1/p`` and BH agree exactly.
    """
    alpha = _check_alpha(alpha)
    p = _as_scores(p, "p")
    if np.any(p < 0):
        # p > 1 (and +inf) is allowed and never rejected: BH on 1/e for e-values e < 1
        raise ValueError("p must hold p-values >= 0")
    m = p.shape[-1]
    ps = np.sort(p, axis=-1)
    k = np.arange(1, m + 1)
    # p_(k) <= alpha k / m, written without division so it matches ebh on 1/e exactly
    ok = ps * m <= alpha * k
    kstar = np.where(ok.any(-1), m - np.argmax(ok[..., ::-1], axis=-1), 0)
    return (p * m <= alpha * kstar[..., None]) & (kstar[..., None] > 0)


def ebh(e, alpha: float) -> np.ndarray:
    """e-BH rejections of e-values ``e`` (..., m) at level ``alpha``, per block; bool (..., m).

    ``k* = max{k : e_(k) >= m / (alpha k)}`` with ``e_(1) >= e_(2) >= ...``; reject every ``e_j >= m / (alpha k*)``.
    The comparison is ``alpha * k * e >= m`` in float64 (rounded products, as :func:`bh`): on the line it may
    reject where exact arithmetic would not.
    """
    alpha = _check_alpha(alpha)
    e = _as_scores(e, "e")
    if (e < 0).any():
        raise ValueError("e must be non-negative (e-values)")
    m = e.shape[-1]
    es = -np.sort(-e, axis=-1)
    k = np.arange(1, m + 1)
    # e_(k) >= m / (alpha k)
    ok = alpha * k * es >= m
    kstar = np.where(ok.any(-1), m - np.argmax(ok[..., ::-1], axis=-1), 0)
    return (alpha * kstar[..., None] * e >= m) & (kstar[..., None] > 0)


@njit(cache=True)
def _count_ge(sorted_row, t):
    """#{x in sorted_row : x >= t} for an ascending row, by binary search for the first x >= t."""
    lo, hi = 0, sorted_row.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if sorted_row[mid] < t:
            lo = mid + 1
        else:
            hi = mid
    return sorted_row.shape[0] - lo


@njit(cache=True)
def _pvalue_kernel(cal_sorted, test, out):
    n = cal_sorted.shape[1]
    for b in range(test.shape[0]):
        for j in range(test.shape[1]):
            # p_j = (1 + #{C_i >= S_j}) / (n + 1); ties count as ">=", which keeps p super-uniform
            out[b, j] = (1.0 + _count_ge(cal_sorted[b], test[b, j])) / (n + 1.0)


def conformal_pvalues(cal, test) -> np.ndarray:
    """Conformal p-values ``p_j = (1 + #{i : C_i >= S_j}) / (n + 1)`` per block (Numba, sort + binary search).

    ``cal`` (..., n) are the block's calibration null scores C, ``test`` (..., m) its test scores S; returns (..., m).
    """
    cal, test = _check_blocks(cal, test)
    lead, n, m = cal.shape[:-1], cal.shape[-1], test.shape[-1]
    out = np.empty((int(np.prod(lead)), m))
    # one vectorised NumPy sort for all blocks is several times faster than sorting block by block inside Numba
    _pvalue_kernel(np.sort(cal.reshape(-1, n), axis=-1), np.ascontiguousarray(test.reshape(-1, m)), out)
    return out.reshape(*lead, m)


def conformal_pvalues_ref(cal, test) -> np.ndarray:
    """Reference for :func:`conformal_pvalues`: counts every (test, calibration) pair, O(m n) memory per block."""
    cal, test = _check_blocks(cal, test)
    ge = (cal[..., None, :] >= test[..., :, None]).sum(-1)
    return (1.0 + ge) / (cal.shape[-1] + 1.0)


@njit(cache=True)
def _evalue_kernel(cal_sorted, test_sorted, test, alpha, out):
    n, m = cal_sorted.shape[1], test.shape[1]
    for b in range(test.shape[0]):
        ts = test_sorted[b]
        thr, c_thr = np.inf, 0
        first = 0  # index of the first test score equal to ts[r], so #{S >= ts[r]} = m - first under ties
        # smallest test score t with FDP_hat(t) <= alpha: scan the sorted test scores upwards, stop at the first
        for r in range(m):
            if r == 0 or ts[r] != ts[r - 1]:
                first = r
            n_cal = _count_ge(cal_sorted[b], ts[r])
            # FDP_hat(t) = m (1 + #{C >= t}) / ((n + 1) #{S >= t}) <= alpha
            if m * (1.0 + n_cal) <= alpha * (n + 1.0) * (m - first):
                thr, c_thr = ts[r], n_cal
                break
        for j in range(m):
            # e_j = (n + 1) 1{S_j >= T} / (1 + #{C >= T})
            out[b, j] = (n + 1.0) / (1.0 + c_thr) if test[b, j] >= thr else 0.0


def conformal_evalues(cal, test, alpha: float) -> np.ndarray:
    """Rank-indicator conformal e-values per block (Numba); ``cal`` (..., n), ``test`` (..., m) -> (..., m).

    In each block, ``FDP_hat(t) = m (1 + #{C_i >= t}) / ((n + 1) #{S_j >= t})`` estimates the false discovery
    proportion of rejecting every score ``>= t``; ``T`` is the smallest test score with ``FDP_hat(T) <= alpha``
    (``T = inf`` when none) and ``e_j = (n + 1) 1{S_j >= T} / (1 + #{C_i >= T})``. Under exchangeability of the
    block's calibration and null test scores, the null e-values sum to at most ``m`` in expectation, which is what
    e-BH needs for FDR <= alpha under any dependence inside the block.
    """
    alpha = _check_alpha(alpha)
    cal, test = _check_blocks(cal, test)
    lead, n, m = cal.shape[:-1], cal.shape[-1], test.shape[-1]
    out = np.empty((int(np.prod(lead)), m))
    t2 = np.ascontiguousarray(test.reshape(-1, m))
    _evalue_kernel(np.sort(cal.reshape(-1, n), axis=-1), np.sort(t2, axis=-1), t2, alpha, out)
    return out.reshape(*lead, m)


def conformal_evalues_ref(cal, test, alpha: float) -> np.ndarray:
    """Reference for :func:`conformal_evalues`: a Python loop over blocks, counting every pair by brute force."""
    alpha = _check_alpha(alpha)
    cal, test = _check_blocks(cal, test)
    n, m = cal.shape[-1], test.shape[-1]
    c2, t2 = cal.reshape(-1, n), test.reshape(-1, m)
    out = np.zeros(t2.shape)
    for b in range(c2.shape[0]):
        n_cal = (c2[b][None, :] >= t2[b][:, None]).sum(1)
        n_test = (t2[b][None, :] >= t2[b][:, None]).sum(1)
        # FDP_hat(t) = m (1 + #{C >= t}) / ((n + 1) #{S >= t}) <= alpha, at every test score t
        ok = m * (1.0 + n_cal) <= alpha * (n + 1.0) * n_test
        if ok.any():
            i = np.flatnonzero(ok)[np.argmin(t2[b][ok])]
            out[b] = np.where(t2[b] >= t2[b][i], (n + 1.0) / (1.0 + n_cal[i]), 0.0)
    return out.reshape(test.shape)


def certra(cal, test, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-block FDR control: conformal e-values and e-BH at ``alpha`` inside every block (our reading of CERTRA).

    ``cal`` (..., n) holds each block's calibration nulls (known non-links of that source module), ``test`` (..., m)
    its candidate scores. Returns ``(e, reject)``, both (..., m).
    """
    e = conformal_evalues(cal, test, alpha)
    return e, ebh(e, alpha)


def pooled_conformal_bh(cal, test, alpha: float) -> np.ndarray:
    """Marginal split-conformal baseline: calibration pooled over all K blocks, one BH over all K m candidates.

    ``cal`` (..., K, n), ``test`` (..., K, m); returns the rejections, bool (..., K, m).
    """
    cal, test = _check_blocks(cal, test)
    if cal.ndim < 2:
        raise ValueError(f"cal and test need a block axis before the score axis, got shape {cal.shape}")
    lead, K, m = test.shape[:-2], test.shape[-2], test.shape[-1]
    p = conformal_pvalues(cal.reshape(*lead, -1), test.reshape(*lead, -1))
    return bh(p, alpha).reshape(*lead, K, m)


def fair_level(level_fdp, levels, alpha: float) -> float:
    """The largest of ``levels`` whose per-block FDR (mean FDP over repeats) is <= ``alpha`` in every block.

    ``level_fdp`` (L, R, K) holds the FDP of each of K blocks in R tuning repeats for each of the L ``levels`` (from
    :func:`simulate_block_fdr` with ``marginal_levels=levels``); tune on repeats other than those the result is
    judged on. Returns 0.0 (reject nothing) when no level qualifies.
    """
    alpha = _check_alpha(alpha)
    level_fdp, levels = np.asarray(level_fdp, dtype=np.float64), np.asarray(levels, dtype=np.float64)
    if level_fdp.ndim != 3 or level_fdp.shape[0] != levels.shape[0]:
        raise ValueError(f"level_fdp must be (L, R, K) with L = len(levels) = {levels.shape[0]}, got {level_fdp.shape}")
    ok = levels[level_fdp.mean(1).max(-1) <= alpha]
    return float(ok.max()) if ok.size else 0.0


def block_fdp(reject, is_null) -> np.ndarray:
    """False discovery proportion ``V / max(R, 1)`` of every block: ``reject``, ``is_null`` bool (..., m) -> (...)."""
    reject, is_null = np.asarray(reject, dtype=bool), np.asarray(is_null, dtype=bool)
    if reject.shape != is_null.shape:
        raise ValueError(f"reject and is_null must have the same shape, got {reject.shape} and {is_null.shape}")
    return (reject & is_null).sum(-1) / np.maximum(reject.sum(-1), 1)


def block_trace_matrix(rng: np.random.Generator, reps: int, K: int, n_cal: int, m_test: int, hard: int,
                       null_shift: float, signal: float, link_rate: float, hard_link_rate: float):
    """``reps`` independent synthetic trace matrices with K source modules; the last ``hard`` modules are "hard".

    A black-box scorer gives candidate j of module k the score ``S = mu_k + signal * link_j + N(0, 1)``, where
    ``mu_k = null_shift`` in hard modules and 0 elsewhere; each module also has ``n_cal`` known non-links
    ``C = mu_k + N(0, 1)``. Links occur at ``link_rate`` (``hard_link_rate`` in hard modules). Inside a module,
    calibration and null test scores are exchangeable; across modules the null law differs.
    Returns ``cal`` (reps, K, n_cal), ``test`` (reps, K, m_test), ``is_link`` (reps, K, m_test) and ``mu`` (K,).
    """
    for name, v, lo in (("reps", reps, 1), ("K", K, 1), ("n_cal", n_cal, 1), ("m_test", m_test, 1), ("hard", hard, 0)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    if hard > K:
        raise ValueError(f"hard must be <= K={K}, got {hard}")
    for name, v in (("link_rate", link_rate), ("hard_link_rate", hard_link_rate)):
        if not 0 <= v <= 1:
            raise ValueError(f"{name} must be in [0, 1], got {v}")
    mu = np.where(np.arange(K) >= K - hard, float(null_shift), 0.0)
    rate = np.where(np.arange(K) >= K - hard, hard_link_rate, link_rate)
    is_link = rng.random((reps, K, m_test)) < rate[:, None]
    cal = mu[:, None] + rng.standard_normal((reps, K, n_cal))
    test = mu[:, None] + signal * is_link + rng.standard_normal((reps, K, m_test))
    return cal, test, is_link, mu


def simulate_block_fdr(rng: np.random.Generator, reps: int, *, K: int, n_cal: int, m_test: int, hard: int,
                       null_shift: float, signal: float, link_rate: float, hard_link_rate: float, alpha: float,
                       marginal_levels=(), max_elems: int = 4_000_000) -> dict:
    """Run every method on ``reps`` matrices from :func:`block_trace_matrix`; keep per-block FDPs and recalls.

    Methods: ``"CERTRA"`` (:func:`certra`), ``"marginal"`` (:func:`pooled_conformal_bh` at ``alpha``) and
    ``"oracle"`` (BH per block on the exact null p-values ``1 - Phi(S - mu_k)``, the power a method that knew each
    module's null law would have). Matrices are drawn ``max_elems`` scores at a time, so memory does not grow with
    ``reps``. Returns a dict with ``fdp[method]`` (reps, K), ``recall[method]`` and ``overall_fdp[method]`` (reps,)
    (over the whole matrix), ``certra_equals_bh`` and ``marginal_equals_bh`` (reps, K) (whether the block's
    rejections equal per-block BH on conformal p-values), and ``level_fdp`` (L, reps, K) / ``level_recall``
    (L, reps) for the marginal baseline at each of the L ``marginal_levels``.
    """
    alpha = _check_alpha(alpha)
    chunk = max(1, max_elems // max(1, K * (n_cal + m_test)))
    methods = ("CERTRA", "marginal", "oracle")
    parts = []
    for start in range(0, reps, chunk):
        cal, test, link, mu = block_trace_matrix(rng, min(chunk, reps - start), K, n_cal, m_test, hard, null_shift,
                                                 signal, link_rate, hard_link_rate)
        per_block_bh = bh(conformal_pvalues(cal, test), alpha)
        # pooled_conformal_bh, with the pooled p-values computed once for all levels
        p_pooled = conformal_pvalues(cal.reshape(len(cal), -1), test.reshape(len(test), -1))
        rej = {"CERTRA": certra(cal, test, alpha)[1], "marginal": bh(p_pooled, alpha).reshape(test.shape),
               "oracle": bh(stats.norm.sf(test - mu[:, None]), alpha)}
        levels = [bh(p_pooled, a).reshape(test.shape) for a in marginal_levels]
        n_link = np.maximum(link.sum((1, 2)), 1)
        parts.append({
            "fdp": {k: block_fdp(r, ~link) for k, r in rej.items()},
            "recall": {k: (r & link).sum((1, 2)) / n_link for k, r in rej.items()},
            "overall_fdp": {k: (r & ~link).sum((1, 2)) / np.maximum(r.sum((1, 2)), 1) for k, r in rej.items()},
            "certra_equals_bh": (rej["CERTRA"] == per_block_bh).all(-1),
            "marginal_equals_bh": (rej["marginal"] == per_block_bh).all(-1),
            "level_fdp": np.stack([block_fdp(r, ~link) for r in levels]) if levels else np.zeros((0, len(link), K)),
            "level_recall": (np.stack([(r & link).sum((1, 2)) / n_link for r in levels]) if levels
                             else np.zeros((0, len(link)))),
        })
    out = {key: {k: np.concatenate([p[key][k] for p in parts]) for k in methods}
           for key in ("fdp", "recall", "overall_fdp")}
    out["certra_equals_bh"] = np.concatenate([p["certra_equals_bh"] for p in parts])
    out["marginal_equals_bh"] = np.concatenate([p["marginal_equals_bh"] for p in parts])
    out["level_fdp"] = np.concatenate([p["level_fdp"] for p in parts], axis=1)
    out["level_recall"] = np.concatenate([p["level_recall"] for p in parts], axis=1)
    return out


def mean_ci(x, level: float = 0.95, n_intervals: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over axis 0 (the repeats) of ``x`` (R, ...) with a Student-t interval; ``(mean, lo, hi)``, each (...).

    FDR is the mean of FDP, a bounded variable, not a binomial count, so the interval comes from the t
    distribution (scipy) on R independent repeats. ``n_intervals`` > 1 widens each interval by Bonferroni so that
    all of them hold together (one per module when the worst module is picked from the data).
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim < 1 or x.shape[0] < 2:
        raise ValueError(f"x needs at least two repeats on axis 0, got shape {x.shape}")
    if not 0 < level < 1 or n_intervals < 1:
        raise ValueError(f"level must be in (0, 1) and n_intervals >= 1, got {level}, {n_intervals}")
    r = x.shape[0]
    mean, se = x.mean(0), x.std(0, ddof=1) / np.sqrt(r)
    half = stats.t.ppf(1 - (1 - level) / (2 * n_intervals), df=r - 1) * se
    return mean, mean - half, mean + half


def proportion_ci(k, n, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Clopper-Pearson interval for ``k`` successes in ``n`` trials (arrays broadcast); ``(lo, hi)``.

    The exact interval of :meth:`scipy.stats.binomtest(...).proportion_ci <scipy.stats.binomtest>`, written with
    :data:`scipy.stats.beta` quantiles so that it broadcasts over arrays (``binomtest`` takes one count at a time).
    """
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    for name, x in (("k", k), ("n", n)):
        if np.isnan(x).any() or (x != np.round(x)).any():
            raise ValueError(f"{name} must hold integer counts, got {x!r}")
    if (k < 0).any() or (k > n).any() or (n < 1).any():
        raise ValueError("need 0 <= k <= n and n >= 1")
    a = (1 - level) / 2
    lo = np.where(k > 0, stats.beta.ppf(a, np.maximum(k, 1), n - k + 1), 0.0)
    hi = np.where(k < n, stats.beta.ppf(1 - a, k + 1, np.maximum(n - k, 1)), 1.0)
    return lo, hi


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    def inputs(rng, size):
        return {"cal": rng.normal(size=(2, 6)), "test": rng.normal(size=(2, max(size, 1)))}

    return [Kernel("multiple_testing.conformal_pvalues", conformal_pvalues, conformal_pvalues_ref, inputs,
                   Contract(args=(Arg("cal", ("float64",), finite=False), Arg("test", ("float64",), finite=False)),
                            empty="value",
                            shapes="cal: (..., n), test: (..., m), same leading axes"),
                   tol={"float64": (0, 0)}, benchmark="conformal_pvalues (Numba, sort + binary search)",
                   oracle="(1 + #{C_i >= S_j}) / (n + 1) counted directly")]


KERNELS = _registry()

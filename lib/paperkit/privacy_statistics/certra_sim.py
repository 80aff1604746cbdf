"""Stress simulations for the CERTRA chapter: intra-module dependence, per-level sweeps and hard-module power.

Built on :mod:`paperkit.privacy_statistics.multiple_testing` (:func:`~.multiple_testing.block_trace_matrix`,
:func:`~.multiple_testing.certra`, :func:`~.multiple_testing.bh`), whose kernels are checked there.
"""
from __future__ import annotations

import numpy as np
from scipy import stats

from paperkit.privacy_statistics import multiple_testing as mt

DEPENDENCE = ("independent", "shared_scale", "test_factor")


def dependent_trace_matrix(rng: np.random.Generator, reps: int, *, K: int, n_cal: int, m_test: int, hard: int,
                           null_shift: float, signal: float, link_rate: float, hard_link_rate: float,
                           dependence: str = "independent", rho: float = 0.0):
    """Trace matrices as :func:`~.multiple_testing.block_trace_matrix`, with dependence inside each module.

    ``dependence``:

    * ``"independent"``: the base model, noise i.i.d. N(0, 1);
    * ``"shared_scale"``: every noise term of module k in repetition r (calibration and candidates) is multiplied by
      one ``W = exp(rho * Z)``, Z ~ N(0, 1): calibration and null candidates stay exchangeable, but all scores of a
      module are strongly dependent (a heavy-tailed scale mixture), and the link/non-link margin changes from
      module to module and repetition to repetition, so ranks, e-values and rejection counts move;
    * ``"test_factor"``: the candidates' noise (not the calibration's) is ``sqrt(rho) Z + sqrt(1 - rho) eps``, one
      Z per module and repetition: every null candidate is still N(0, 1) like the calibration non-links, but the
      candidates are equicorrelated with correlation ``rho`` among themselves.

    Returns ``cal``, ``test``, ``is_link`` and ``mu`` as :func:`~.multiple_testing.block_trace_matrix` does.
    """
    if dependence not in DEPENDENCE:
        raise ValueError(f"dependence must be one of {DEPENDENCE}, got {dependence!r}")
    if not 0 <= rho <= (1 if dependence == "test_factor" else 5):
        raise ValueError(f"rho out of range for {dependence!r}: {rho}")
    cal, test, link, mu = mt.block_trace_matrix(rng, reps, K, n_cal, m_test, hard, null_shift, signal, link_rate,
                                                hard_link_rate)
    ec, et = cal - mu[:, None], test - mu[:, None] - signal * link
    if dependence == "shared_scale":
        W = np.exp(rho * rng.standard_normal((reps, K, 1)))
        ec, et = W * ec, W * et
    elif dependence == "test_factor":
        Z = rng.standard_normal((reps, K, 1))
        et = np.sqrt(rho) * Z + np.sqrt(1 - rho) * et
    cal, test = mu[:, None] + ec, mu[:, None] + signal * link + et
    return cal, test, link, mu


def simulate_certra_levels(rng: np.random.Generator, reps: int, levels, *, alpha: float, hard_modules: int | None = None,
                           dependence: str = "independent", rho: float = 0.0, max_elems: int = 4_000_000,
                           **world) -> dict:
    """CERTRA at each of ``levels`` (and per-module oracle BH at ``alpha``) on ``reps`` matrices.

    ``world`` holds the arguments of :func:`dependent_trace_matrix` (K, n_cal, m_test, hard, null_shift, signal,
    link_rate, hard_link_rate). Returns ``fdp`` (L, reps, K), ``recall`` (L, reps), ``hard_recall`` (L, reps)
    (share of the hard modules' links found; NaN when a repetition has none), and ``oracle_fdp`` (reps, K),
    ``oracle_recall``, ``oracle_hard_recall`` (reps,) for BH at ``alpha`` per module on the independent model's exact
    null p-values (valid only for ``dependence="independent"``), and ``marginal_fdp`` (reps, K) for the pooled
    split-conformal baseline (:func:`~.multiple_testing.pooled_conformal_bh`) at ``alpha`` on the same matrices.
    """
    K, n_cal, m_test, hard = world["K"], world["n_cal"], world["m_test"], world["hard"]
    hard_modules = hard if hard_modules is None else hard_modules
    chunk = max(1, max_elems // max(1, K * (n_cal + m_test)))
    hard_mask = np.arange(K) >= K - hard_modules
    keys = ("fdp", "recall", "hard_recall", "oracle_fdp", "oracle_recall", "oracle_hard_recall", "marginal_fdp")
    parts = {k: [] for k in keys}

    def recalls(r, link):
        n_link = np.maximum(link.sum((-2, -1)), 1)
        hl = link[..., hard_mask, :].sum((-2, -1))
        hr = (r & link)[..., hard_mask, :].sum((-2, -1)) / np.maximum(hl, 1)
        return (r & link).sum((-2, -1)) / n_link, np.where(hl > 0, hr, np.nan)

    for start in range(0, reps, chunk):
        cal, test, link, mu = dependent_trace_matrix(rng, min(chunk, reps - start), dependence=dependence,
                                                        rho=rho, **world)
        fd, rc, hr = [], [], []
        for a in levels:
            rej = mt.certra(cal, test, float(a))[1]
            fd.append(mt.block_fdp(rej, ~link))
            r1, r2 = recalls(rej, link)
            rc.append(r1)
            hr.append(r2)
        parts["fdp"].append(np.stack(fd))
        parts["recall"].append(np.stack(rc))
        parts["hard_recall"].append(np.stack(hr))
        # oracle: BH per module on 1 - Phi(S - mu_k), exact for the independent model (meaningful only there)
        rej = mt.bh(stats.norm.sf(test - mu[:, None]), alpha)
        parts["oracle_fdp"].append(mt.block_fdp(rej, ~link))
        r1, r2 = recalls(rej, link)
        parts["oracle_recall"].append(r1)
        parts["oracle_hard_recall"].append(r2)
        parts["marginal_fdp"].append(mt.block_fdp(mt.pooled_conformal_bh(cal, test, alpha), ~link))
    axis = {"fdp": 1, "recall": 1, "hard_recall": 1}
    return {k: np.concatenate(v, axis=axis.get(k, 0)) for k, v in parts.items()}


"""The experiments of the deployment-portfolio chapter: portfolios of every method across K on one archive, the
theorem-check instance families, and sample-then-optimise by repetition.

Methods (each returns K model indices): ``greedy`` and ``exact`` (they see the coverage matrix C and the demand
weights w), ``scalarised`` and ``pareto`` (they see only the archive's measurements), ``random`` (mean over draws)
and ``top-singletons`` (the K models that cover most on their own, overlap ignored).
"""
from __future__ import annotations

import numpy as np

from paperkit.games_markets import portfolio_archive as pa
from paperkit.games_markets import portfolio_coverage as pc

METHODS = ("exact", "greedy", "scalarised", "pareto", "random", "top-singletons")


def tight_instance(K: int, eps: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """The classic instance on which greedy attains 1 - (1 - 1/K)^K of OPT (up to ``eps``): C (K^2 + K, 2K), w.

    Models 0..K-1 are greedy's picks G_i, models K..2K-1 the optimal O_j. Profile (i, j) (weight
    (1 - 1/K)^(i-1) / K^2) is covered by G_i and O_j; profile (0, j) (weight (1 - 1/K)^K (1 - eps) / K) by O_j only.
    At round i every O_j offers (1 - 1/K)^(i-1) (1 - O(eps)) / K, a hair less than G_i, so greedy takes G_1..G_K.
    """
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 1:
        raise ValueError(f"K must be an integer >= 1, got {K!r}")
    C = np.zeros((K * K + K, 2 * K), dtype=bool)
    w = np.zeros(K * K + K)
    for i in range(K):
        for j in range(K):
            r = i * K + j
            C[r, i] = C[r, K + j] = True
            w[r] = (1 - 1 / K) ** i / K**2
    for j in range(K):
        C[K * K + j, K + j] = True
        w[K * K + j] = (1 - 1 / K) ** K * (1 - eps) / K
    return C, w


def redundant_archive(rng: np.random.Generator, archive: dict, C: np.ndarray, w: np.ndarray, copies: int,
                      sigma: float = 0.002) -> dict:
    """``archive`` with ``copies`` near-duplicates (log costs jittered by ``sigma``) of its best single model."""
    best = int(np.argmax(w @ C))
    v = archive["values"]
    clones = v[best] + sigma * rng.standard_normal((copies, v.shape[1])) * (np.arange(v.shape[1]) > 0)
    return {**archive, "values": np.vstack([v, clones])}


def portfolios(rng: np.random.Generator, values: np.ndarray, C: np.ndarray, w: np.ndarray, K: int,
               n_random: int = 20) -> dict:
    """Coverage of every method of :data:`METHODS` at portfolio size K: dict method -> covered weight; ``random``
    is the mean over ``n_random`` draws. Also ``coverable`` (weight of profiles some model covers) and ``picks``
    (method -> indices; ``random`` holds one draw)."""
    M = C.shape[1]
    picks = {"exact": pc.exact_max_coverage(C, w, K)[0], "greedy": pc.greedy_max_coverage(C, w, K),
             "scalarised": pa.scalarised_top_k(values, K), "pareto": pa.pareto_spread(values, K),
             "top-singletons": pa.top_singletons(C, w, K)}
    draws = [pa.random_k(rng, M, K) for _ in range(n_random)]
    cov = {k: pc.coverage_value(C, w, s) for k, s in picks.items()}
    cov["random"] = float(np.mean([pc.coverage_value(C, w, s) for s in draws]))
    picks["random"] = draws[0]
    cov["coverable"] = float(w[C.any(1)].sum())
    return {"cov": cov, "picks": picks, "draws": draws}


def covered_mask(C: np.ndarray, S) -> np.ndarray:
    """Which profiles (rows of C) the portfolio S covers: bool (P,)."""
    return C[:, np.asarray(S, dtype=np.int64)].any(1)


def sample_then_optimise(rng: np.random.Generator, C_pop: np.ndarray, K: int, ns, reps: int) -> dict:
    """Optimise exactly on n profiles drawn uniformly from the population's rows, score on the whole population.

    Returns ``opt`` (population optimum, uniform weights), ``gap`` (len(ns), reps): opt minus the population
    coverage of the sample-optimal portfolio, and ``gap_random`` (len(ns), reps): the same for a random portfolio
    drawn in each repetition (a portfolio that does not use the sample).
    """
    P, M = C_pop.shape
    w_pop = np.full(P, 1.0 / P)
    opt = pc.exact_max_coverage(C_pop, w_pop, K)[1]
    gap, gap_rand = np.zeros((len(ns), reps)), np.zeros((len(ns), reps))
    for a, n in enumerate(ns):
        for r in range(reps):
            idx = rng.integers(0, P, n)
            S = pc.exact_max_coverage(C_pop[idx], np.full(n, 1.0 / n), K)[0]
            gap[a, r] = opt - pc.coverage_value(C_pop, w_pop, S)
            gap_rand[a, r] = opt - pc.coverage_value(C_pop, w_pop, pa.random_k(rng, M, K))
    return {"opt": opt, "gap": gap, "gap_random": gap_rand}


def marginal_rows(archive: dict, prof: dict) -> np.ndarray:
    """The bundle split into its four parts: bool (4P, M), block j (rows jP..(j+1)P) says whether model m meets
    part j of profile p alone (accuracy, memory, latency on the profile's device, energy on it).

    Greedy on these rows, with weights ``np.tile(w, 4) / 4``, optimises the unbundled (marginal) coverage: the
    average share of the constraints met, one constraint at a time. The four blocks AND-ed give the bundled matrix
    of :func:`paperkit.games_markets.portfolio_coverage.coverage_matrix`.
    """
    v, lo, hi, dev = archive["values"], prof["lo"], prof["hi"], np.asarray(prof["device"], dtype=np.int64)
    D, P = archive["D"], lo.shape[0]
    cols = [np.zeros(P, dtype=np.int64), np.ones(P, dtype=np.int64), 2 + dev, 2 + D + dev]
    r = np.arange(P)
    return np.vstack([(v[:, c].T >= lo[r, c][:, None]) & (v[:, c].T <= hi[r, c][:, None]) for c in cols])


def marginal_greedy(archive: dict, prof: dict, w: np.ndarray, K: int) -> np.ndarray:
    """The greedy portfolio for the unbundled objective of :func:`marginal_rows` (each constraint scored apart)."""
    return pc.greedy_max_coverage(marginal_rows(archive, prof), np.tile(np.asarray(w, dtype=np.float64), 4) / 4, K)

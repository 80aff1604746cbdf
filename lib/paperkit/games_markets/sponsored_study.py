"""Experiments of the sponsored-suggestions chapter, built on :mod:`paperkit.games_markets.sponsored_mechanisms`.

* :data:`PAIRS`: the three modular designs (suggestion auction / ad auction) with their slot counts.
* :func:`family_sweep`: on the hard family, the equilibrium reached by best-response dynamics from the profile in
  which only the single-advertiser intents are bid on, its exhaustive Nash gap and OPT / W, for every M.
* :func:`family_worst`: worst and best pure-equilibrium welfare ratio by full enumeration (small grids).
* :func:`random_sweep`: worst OPT / W over several best-response starts on random instances.
* :func:`refined_gap` and :func:`robust_inefficient`: whether an inefficient equilibrium found on the grid is still an
  equilibrium when every advertiser may deviate on a finer grid (so not an artefact of the grid).
* :func:`truthfulness_sweep`: the largest misreport gain per random instance under VCG and under the controls.
"""
from __future__ import annotations

import numpy as np

from paperkit.games_markets import sponsored_mechanisms as sm

# label -> (stage-1 rule, suggestion slots)
PAIRS = {"SP/SP": (0, 1), "FP/SP": (1, 1), "GSP/SP": (0, 2)}


def _bad_start(inst, levels):
    """b advertisers (rows 0, 1) bid 0 on b; every other advertiser bids its whole value on its own intent."""
    V = inst["V"]
    start = np.zeros(V.shape[0], np.int64)
    for i in range(2, V.shape[0]):
        start[i] = int(V[i].argmax()) * levels + levels - 1
    return start


def family_run(M, rule, slots, rho, levels, q_b=0.5, theta2=0.5, null=False):
    """One hard-family instance: dict with the equilibrium's OPT / W, Nash gap, convergence and rounds."""
    inst = sm.family_instance(M, slots, q_b, theta2, null)
    tab = sm.bid_table(inst["q"], inst["V"], inst["theta"], levels)
    prof, conv, rounds = sm.best_response_dynamics(**inst, rule=rule, rho=rho, table=tab,
                                                   start=_bad_start(inst, levels))
    _, w = sm.profile_outcome(**inst, rule=rule, rho=rho, table=tab, profile=prof)
    return {"ratio": sm.optimal_welfare(**inst) / w, "gap": sm.nash_gap(**inst, rule=rule, rho=rho, table=tab,
                                                                         profile=prof),
            "converged": conv, "rounds": rounds}


def family_sweep(M_list, levels, rho=0.0, null=False, pairs=PAIRS, q_b=0.5, theta2=0.5):
    """{label: {"ratio", "gap", "converged", "pred"}} arrays over M for every pair, and for the VCG control game
    (label "VCG", on the single-slot and two-slot families: "VCG-1", "VCG-2")."""
    out = {}
    runs = dict(pairs)
    runs.update({"VCG-1": (3, 1), "VCG-2": (3, 2)})
    for lab, (rule, S) in runs.items():
        rs = [family_run(M, rule, S, rho, levels, q_b, theta2, null) for M in M_list]
        out[lab] = {k: np.array([r[k] for r in rs]) for k in ("ratio", "gap", "converged", "rounds")}
        out[lab]["pred"] = np.array([sm.predicted_family_ratio(M, S, q_b, theta2) for M in M_list])
    return out


def loglog_slope(M, r):
    """Least-squares slope of log r against log M."""
    return float(np.polyfit(np.log(M), np.log(r), 1)[0])


def family_worst(M, rule, slots, rho, levels, q_b=0.5, theta2=0.5, null=False):
    """(worst OPT / W, best OPT / W, number of pure equilibria) by full enumeration of the gridded game."""
    inst = sm.family_instance(M, slots, q_b, theta2, null)
    tab = sm.bid_table(inst["q"], inst["V"], inst["theta"], levels)
    w = sm.pure_nash_welfare(**inst, rule=rule, rho=rho, table=tab)
    opt = sm.optimal_welfare(**inst)
    if w.size == 0:
        return np.nan, np.nan, 0
    return float(opt / w.min()), float(opt / w.max()), int(w.size)


def random_sweep(rng, n_random, n_intents, n_adv, levels, rhos=(0.0, 1.0), n_starts=3, pairs=PAIRS, theta2=0.6,
                 extra=()):
    """Random instances (Dirichlet intents, Exp(1) values). For every pair and rho: the worst OPT / W over the
    converged runs of best-response dynamics from ``n_starts`` starts (everyone at its top bid on its best
    intent; everyone at zero; the rest uniformly random), the share of converged runs, and the largest Nash gap.
    ``extra``: further (label, rule, slots, rho) games run on the same instances and starts (controls).
    Returns {(label, rho): {"ratio": (n_random,) (NaN where no run converged), "conv": share, "profile":
    (n_random, n_adv) the worst converged profile (strategy indices into the ``levels``-level table of
    :func:`~paperkit.games_markets.sponsored_mechanisms.bid_table`; -1 where none), "q": (n_random, n_intents) and
    "V": (n_random, n_adv, n_intents) the instances}}."""
    games = [(lab, rule, S, rho) for lab, (rule, S) in pairs.items() for rho in rhos] + list(extra)
    out = {(lab, rho): {"ratio": np.full(n_random, np.nan), "conv": [],
                        "profile": np.full((n_random, n_adv), -1, np.int64), "q": np.empty((n_random, n_intents)),
                        "V": np.empty((n_random, n_adv, n_intents))} for lab, _, _, rho in games}
    for t in range(n_random):
        base = sm.random_instance(rng, n_intents, n_adv, 1, theta2)
        K = n_intents * levels
        starts = [np.array([int(v.argmax()) * levels + levels - 1 for v in base["V"] * base["q"]]),
                  np.zeros(n_adv, np.int64)]
        starts += [rng.integers(0, K, n_adv) for _ in range(n_starts - 2)]
        for lab, rule, S, rho in games:
            inst = {**base, "theta": theta2 ** np.arange(S, dtype=np.float64)}
            tab = sm.bid_table(inst["q"], inst["V"], inst["theta"], levels)
            opt = sm.optimal_welfare(**inst)
            rec = out[(lab, rho)]
            rec["q"][t], rec["V"][t] = base["q"], base["V"]
            for st in starts:
                prof, conv, _ = sm.best_response_dynamics(**inst, rule=rule, rho=rho, table=tab, start=st)
                rec["conv"].append(conv)
                if conv:
                    r = opt / sm.profile_outcome(**inst, rule=rule, rho=rho, table=tab, profile=prof)[1]
                    if not r <= rec["ratio"][t]:          # the first converged run (ratio NaN) or a worse one
                        rec["ratio"][t], rec["profile"][t] = r, prof
    for rec in out.values():
        rec["conv"] = float(np.mean(rec["conv"]))
    return out


def refined_gap(q, V, theta, rule, rho, levels, profile, factor=5):
    """Largest gain of any unilateral deviation from ``profile`` (strategy indices into the ``levels``-level table of
    :func:`~paperkit.games_markets.sponsored_mechanisms.bid_table`) when every advertiser may choose among
    ``factor * (levels - 1) + 1`` levels, a grid that holds every bid of the coarse one. At most 1e-12 when the
    coarse equilibrium is also an equilibrium of the finer game."""
    if isinstance(factor, bool) or not isinstance(factor, (int, np.integer)) or factor < 1:
        raise ValueError(f"factor must be a positive integer, got {factor!r}")
    prof = np.asarray(profile)
    if prof.dtype.kind not in "iu" or prof.min() < 0 or prof.max() >= np.asarray(V).shape[1] * levels:
        raise ValueError(f"profile must hold strategy indices of the {levels}-level table")
    fine = factor * (levels - 1) + 1
    tab = sm.bid_table(q, V, theta, fine)
    return sm.nash_gap(q, V, theta, rule, rho, tab, (prof // levels) * fine + (prof % levels) * factor)


def robust_inefficient(rec, rule, slots, rho, levels, tol, factor=5, theta2=0.6):
    """Per instance of one game of a :func:`random_sweep` record (its ``rule``, ``slots``, ``rho``, ``levels`` and
    ``theta2``): 1.0 where the worst equilibrium found has OPT / W > ``tol`` and survives every deviation on the
    ``factor`` times finer grid (:func:`refined_gap` <= 1e-12), 0.0 otherwise, NaN where no run converged:
    float64 (n_random,)."""
    theta = theta2 ** np.arange(slots, dtype=np.float64)
    out = np.where(np.isnan(rec["ratio"]), np.nan, 0.0)
    for t in np.flatnonzero(rec["ratio"] > tol):
        gap = refined_gap(rec["q"][t], rec["V"][t], theta, rule, rho, levels, rec["profile"][t], factor)
        out[t] = float(gap <= 1e-12)
    return out


def truthfulness_sweep(rng, n_random, n_intents, n_adv, slots, grid_levels=7, theta2=0.6):
    """Largest misreport gain of any advertiser, per random instance, under each payment rule of
    :data:`~paperkit.games_markets.sponsored_mechanisms.PAYMENTS`: {payment: (n_random,)}; also the smallest
    truthful VCG utility and payment ({"min_util", "min_pay"})."""
    gains = {p: np.empty(n_random) for p in sm.PAYMENTS}
    min_u, min_p = np.inf, np.inf
    for t in range(n_random):
        d = sm.random_instance(rng, n_intents, n_adv, slots, theta2)
        grid = np.linspace(0.0, 2.0 * d["V"].max(), grid_levels)
        for p in sm.PAYMENTS:
            gains[p][t] = max(sm.misreport_gain(**d, i=i, grid=grid, payment=p) for i in range(n_adv))
        v = sm.vcg_joint(d["q"], d["V"], d["theta"])
        min_u, min_p = min(min_u, v["util"].min()), min(min_p, v["pay"].min())
    return {**gains, "min_util": float(min_u), "min_pay": float(min_p)}

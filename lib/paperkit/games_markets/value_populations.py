"""Synthetic demand and supply of value profiles on the five-value simplex (SAF, HEL, HON, AUT, EQU).

Demand: n users from a Dirichlet mixture with one component per leading value; component k has share ``shares[k]``
and mean ``lead * e_k + (1 - lead) / 4 * (1 - e_k)``, concentration ``conc``. Supply: ``n_families`` model families
over ``n_generations`` generations; family f has a centre (a common base near safety/helpfulness plus a family
perturbation), generation g adds ``g * drift_vec`` (sum zero), and each archetype's profile is
Dirichlet(``alpha`` * centre). ``drift_slopes`` fits the per-family least-squares slope of one value over
generations. All functions take an explicit generator.
"""
from __future__ import annotations

import numpy as np

VALUES = ("SAF", "HEL", "HON", "AUT", "EQU")


def demand(rng: np.random.Generator, n: int, shares, lead: float = 0.5, conc: float = 8.0):
    """U (n, 5) user weights and their component labels (n,)."""
    shares = np.asarray(shares, float)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if shares.shape != (5,) or np.any(shares < 0) or abs(shares.sum() - 1) > 1e-9:
        raise ValueError("shares must be 5 non-negative numbers summing to 1")
    lab = rng.choice(5, size=n, p=shares)
    means = np.full((5, 5), (1 - lead) / 4)
    np.fill_diagonal(means, lead)
    U = np.vstack([rng.dirichlet(conc * means[k]) for k in lab])
    return U, lab


def supply(rng: np.random.Generator, n_families: int, n_generations: int, base, drift_vec, alpha: float = 40.0,
           family_spread: float = 0.04, n_archetypes: int | None = None):
    """S (m, 5) archetype profiles, family (m,) and generation (m,) labels; the last archetypes beyond
    ``n_archetypes`` are dropped (the paper's 23 = 6 x 4 - 1)."""
    base, drift_vec = np.asarray(base, float), np.asarray(drift_vec, float)
    if abs(drift_vec.sum()) > 1e-12:
        raise ValueError("drift_vec must sum to zero")
    rows, fam, gen = [], [], []
    for f in range(n_families):
        c = np.clip(base + rng.normal(scale=family_spread, size=5), 0.02, None)
        c /= c.sum()
        for g in range(n_generations):
            cg = np.clip(c + g * drift_vec, 0.01, None)
            rows.append(rng.dirichlet(alpha * cg / cg.sum()))
            fam.append(f)
            gen.append(g)
    m = len(rows) if n_archetypes is None else n_archetypes
    if not 5 <= m <= len(rows):
        raise ValueError(f"n_archetypes must be in [5, {len(rows)}], got {m}")
    return np.array(rows[:m]), np.array(fam[:m]), np.array(gen[:m])


def drift_slopes(S, family, generation, value: int):
    """Least-squares slope of S[:, value] over generation within each family: (slopes (F,), std errors (F,));
    a family with fewer than 3 generations gets NaN."""
    out, se = [], []
    for f in np.unique(family):
        x, y = generation[family == f].astype(float), S[family == f, value]
        if len(x) < 3:
            out.append(np.nan)
            se.append(np.nan)
            continue
        xc = x - x.mean()
        b = (xc @ (y - y.mean())) / (xc @ xc)
        res = y - y.mean() - b * xc
        out.append(b)
        se.append(np.sqrt(res @ res / (len(x) - 2) / (xc @ xc)))
    return np.array(out), np.array(se)

"""The digit-parity experiment of the chapter 'The Bayesian learning rule beyond KL'.

One train/test split per generator: PCA features of scikit-learn's digits (fitted on the training rows only,
standardised, with a bias column), the generalized BLR trained at each index q, and the competing hypotheses the
chapter compares against (a posterior pulled onto the prior, a VON stopped early, the prior predictive, MAP with
and without regularisation, the majority class). Every run is scored on the same held-out rows.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import expit

from paperkit.learning_dynamics import q_gaussian as qg
from paperkit.learning_dynamics import tsallis_blr as tb


def scores(p: np.ndarray, y: np.ndarray) -> dict:
    """Accuracy, mean negative log-likelihood, its per-row standard deviation and the per-row values
    ('nll_rows', shape (n,)), and ECE of probabilities `p` (shape (n,), clipped to [1e-12, 1 - 1e-12]) for labels
    `y` in {0, 1}."""
    p = np.clip(p, 1e-12, 1 - 1e-12)
    nll_rows = -(y * np.log(p) + (1 - y) * np.log(1 - p))
    return {"acc": float(((p >= 0.5) == (y == 1)).mean()), "nll": float(nll_rows.mean()),
            "nll_sd": float(np.std(nll_rows, ddof=1)), "nll_rows": nll_rows, "ece": tb.ece(p, y)}


def paired_nll_bound(row: dict, key, base=1.0) -> tuple[float, float]:
    """Paired comparison of two methods of one split on the same test rows: the mean per-row NLL difference
    ``d = NLL(key) - NLL(base)`` and the upper end of its two-standard-error interval, ``d + 2 sd(d_n) / sqrt(n)``.
    A bound at most a margin ``delta`` says that `key` loses at most ``delta`` nats per row against `base`."""
    diff = row[key]["nll_rows"] - row[base]["nll_rows"]
    mean = float(diff.mean())
    return mean, mean + 2.0 * float(diff.std(ddof=1)) / math.sqrt(len(diff))


def pca_features(X: np.ndarray, train: np.ndarray, n_pca: int) -> np.ndarray:
    """The first `n_pca` principal components of `X` (fitted on the rows `train`), each divided by its training
    standard deviation, with a column of ones appended: shape (n, n_pca + 1)."""
    mu = X[train].mean(0)
    _, _, Vt = np.linalg.svd(X[train] - mu, full_matrices=False)
    Z = (X - mu) @ Vt[:n_pca].T
    return np.hstack([Z / Z[train].std(0), np.ones((len(Z), 1))])


def digit_parity_run(X: np.ndarray, y: np.ndarray, q_class, rng: np.random.Generator, *, n_train: int = 1200,
                     steps: int = 300, rho: float = 0.1, s0: float = 1.0, n_mc: int = 5, n_pca: int = 10,
                     n_draw: int = 400) -> dict:
    """One split of the digit-parity task. Returns a dict keyed by each q in `q_class` (scores plus the trained
    centre m, precision S and marginal standard deviations 'sd'), and by the controls 'overreg' (VON with
    S0 = 1000 I), 'von3' (VON after 3 steps), 'prior' (P = 1/2), 'map0' (MAP without regularisation), 'map'
    (MAP with S0), plus 'majority' (the majority-class accuracy) and 'n_test'."""
    perm = rng.permutation(len(y))
    tr, te = perm[:n_train], perm[n_train:]
    Z = pca_features(X, tr, n_pca)
    row = {}
    for q in q_class:
        m, s = tb.train_blr(Z[tr], y[tr], q, rng, steps=steps, rho=rho, s0=s0, n_mc=n_mc)
        row[q] = scores(tb.predictive(Z[te], m, s, q, rng, n_draw), y[te])
        row[q].update(m=m, s=s, sd=np.sqrt(qg.covariance_factor(q, s) / s))
    for key, kw in (("overreg", dict(steps=steps, s0=1000.0)), ("von3", dict(steps=3, s0=s0))):
        m, s = tb.train_blr(Z[tr], y[tr], 1.0, rng, rho=rho, n_mc=n_mc, **kw)
        row[key] = scores(tb.predictive(Z[te], m, s, 1.0, rng, n_draw), y[te])
    row["prior"] = {"acc": float(y[te].mean()), "nll": math.log(2.0)}
    row["map0"] = scores(expit(Z[te] @ tb.map_logistic(Z[tr], y[tr], 1e-6)), y[te])
    row["map"] = scores(expit(Z[te] @ tb.map_logistic(Z[tr], y[tr], s0)), y[te])
    row["majority"] = float(max(y[te].mean(), 1 - y[te].mean()))
    row["n_test"] = len(te)
    return row

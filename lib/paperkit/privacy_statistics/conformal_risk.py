"""Conformal risk control (Angelopoulos, Bates, Fisch, Lei and Schuster 2022) for an accept/reject threshold.

A proxy accepts input ``i`` when its score ``s_i > t``; accepting it costs a bounded loss ``l_i`` in ``[0, B]``
(for a false approval: ``l_i = 1`` when the sound certificate does *not* certify ``i``, else ``0``). The empirical
risk ``R_n(t) = (1/n) sum_i l_i 1{s_i > t}`` falls as ``t`` grows, and conformal risk control picks

    t_hat = min { t : (n R_n(t) + B) / (n + 1) <= alpha },

so that for a new point exchangeable with the ``n`` calibration points ``E[l_{n+1} 1{s_{n+1} > t_hat}] <= alpha``
(the expectation is over calibration and test draw together: a *marginal* guarantee). The calibration set needs
no labels, only the losses, which here come from running the expensive certificate offline.

The minimum runs over ``-inf`` and the scores themselves, since ``R_n`` only changes there; with the strict
``s > t`` rule ``R_n`` is right-continuous, so the minimum is attained. If no finite threshold qualifies (too few
calibration points for ``alpha``: ``B / (n + 1) > alpha``) the threshold is ``+inf`` and nothing is accepted.

No maintained library (scipy, scikit-learn) implements conformal risk control, hence this module.

* :func:`crc_threshold`: sort once, cumulative sums (O(n log n)); :func:`crc_threshold_ref`: the plain reference
  of the same signature, evaluating the condition at every candidate threshold (O(n^2)).
* :func:`uncorrected_threshold` (and its reference :func:`uncorrected_threshold_ref`): the same scan without the
  conformal correction (``R_n(t) <= alpha``), the naive procedure a chapter runs as a control.
* :func:`evaluate_splits`: the repeated random calibration/test splits a chapter uses to check the guarantee.
"""
from __future__ import annotations

import numpy as np


def _check(scores, losses, alpha, bound) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64)
    l = np.asarray(losses, dtype=np.float64)
    if s.ndim != 1 or s.shape[0] < 1:
        raise ValueError(f"scores must be a non-empty 1-D array, got shape {s.shape}")
    if l.shape != s.shape:
        raise ValueError(f"losses must have the shape of scores {s.shape}, got {l.shape}")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores contain NaN or inf")
    if not bound > 0:
        raise ValueError(f"bound must be > 0, got {bound}")
    if np.any((l < 0) | (l > bound)) or not np.all(np.isfinite(l)):
        raise ValueError(f"losses must lie in [0, bound={bound}]")
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    return s, l


def _candidates(s: np.ndarray, l: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every threshold where ``R_n`` changes, increasing (``-inf``, then the scores), and ``n R_n`` at each."""
    order = np.argsort(-s, kind="stable")
    s_desc, l_desc = s[order], l[order]
    # risk_sum[j] = sum of losses of the j+1 highest scores, i.e. n R_n(t) for t just below s_desc[j]
    risk_sum = np.cumsum(l_desc)
    # t = s_desc[j] accepts exactly the scores strictly above it: those before the first copy of s_desc[j]
    first = np.searchsorted(-s_desc, -s_desc, side="left")
    accepted_sum = np.where(first > 0, risk_sum[np.maximum(first - 1, 0)], 0.0)
    # candidates in increasing t: -inf (all accepted), then the scores from smallest to largest
    return np.concatenate([[-np.inf], s_desc[::-1]]), np.concatenate([[risk_sum[-1]], accepted_sum[::-1]])


def crc_threshold(scores, losses, alpha: float, bound: float = 1.0) -> float:
    """Conformal-risk-control threshold: accept a new input iff its score ``> t``.

    ``scores`` (n,) proxy scores and ``losses`` (n,) losses-if-accepted in ``[0, bound]`` of the calibration set;
    ``alpha`` the target risk. Returns ``t_hat`` (``-inf``: accept all; ``+inf``: accept none).
    """
    s, l = _check(scores, losses, alpha, bound)
    n = s.shape[0]
    cand_t, cand_sum = _candidates(s, l)
    # (n R_n(t) + B) / (n + 1) <= alpha; the sums fall with t, so the valid set is an upper set of candidates
    ok = (cand_sum + bound) / (n + 1) <= alpha
    if not ok[-1]:
        return float("inf")
    return float(cand_t[np.argmax(ok)])


def crc_threshold_ref(scores, losses, alpha: float, bound: float = 1.0) -> float:
    """Plain reference of :func:`crc_threshold`: try every candidate threshold from the smallest up."""
    s, l = _check(scores, losses, alpha, bound)
    n = s.shape[0]
    for t in [-np.inf] + sorted(set(s.tolist())):
        risk = sum(li for si, li in zip(s, l) if si > t) / n
        if (n * risk + bound) / (n + 1) <= alpha:
            return float(t)
    return float("inf")


def uncorrected_threshold(scores, losses, alpha: float, bound: float = 1.0) -> float:
    """The plug-in threshold without the conformal correction: the smallest ``t`` with ``R_n(t) <= alpha``.

    Same arguments and conventions as :func:`crc_threshold`, but the condition drops the ``+ B`` and the
    ``n + 1``; its risk on a new point can exceed ``alpha`` by up to about ``B / n``. It is the naive procedure a
    chapter runs as the control of the correction, not a method. The largest score accepts nothing, so some
    candidate always qualifies (never ``+inf``).
    """
    s, l = _check(scores, losses, alpha, bound)
    cand_t, cand_sum = _candidates(s, l)
    return float(cand_t[np.argmax(cand_sum / s.shape[0] <= alpha)])


def uncorrected_threshold_ref(scores, losses, alpha: float, bound: float = 1.0) -> float:
    """Plain reference of :func:`uncorrected_threshold`: try every candidate threshold from the smallest up."""
    s, l = _check(scores, losses, alpha, bound)
    n = s.shape[0]
    for t in [-np.inf] + sorted(set(s.tolist())):
        if sum(li for si, li in zip(s, l) if si > t) / n <= alpha:
            return float(t)
    raise AssertionError("unreachable: the largest score accepts nothing")


def evaluate_splits(scores, losses, n_cal: int, alpha: float, n_splits: int, rng: np.random.Generator,
                    columns: dict | None = None, bound: float = 1.0, threshold_fn=None) -> dict:
    """Repeat: shuffle the pool, calibrate ``t_hat`` on the first ``n_cal`` points, apply it to the rest.

    ``scores``, ``losses`` (N,) describe the pool; ``columns`` maps names to (N,) per-point values ``c``. Returns
    (n_splits,) arrays: ``threshold``; ``accept`` (fraction of test points accepted); ``risk`` (mean test loss of
    the accepted, ``mean(l 1{s > t})``); ``first_loss`` (the loss of the first test point only: independent
    across splits given the pool, so a binomial interval over splits is exact); and for each column
    ``c``: ``c`` (mean of ``c`` over the test points) and ``c|accept`` (mean of ``c 1{s > t}``).
    Shuffling a fixed pool keeps calibration and test points exchangeable, so the guarantee holds given the pool.
    ``threshold_fn`` (default :func:`crc_threshold`) calibrates the threshold with the same signature, e.g.
    :func:`uncorrected_threshold` as a control.
    """
    s, l = _check(scores, losses, alpha, bound)
    N = s.shape[0]
    if isinstance(n_cal, bool) or not isinstance(n_cal, (int, np.integer)) or not 1 <= n_cal < N:
        raise ValueError(f"n_cal must be an integer in [1, {N - 1}], got {n_cal!r}")
    if isinstance(n_splits, bool) or not isinstance(n_splits, (int, np.integer)) or n_splits < 1:
        raise ValueError(f"n_splits must be an integer >= 1, got {n_splits!r}")
    if threshold_fn is not None and not callable(threshold_fn):
        raise ValueError(f"threshold_fn must be callable like crc_threshold, got {threshold_fn!r}")
    columns = {k: np.asarray(v, dtype=np.float64) for k, v in (columns or {}).items()}
    for k, v in columns.items():
        if v.shape != s.shape:
            raise ValueError(f"column {k!r} must have shape {s.shape}, got {v.shape}")
    keys = ["threshold", "accept", "risk", "first_loss"] + [x for k in columns for x in (k, f"{k}|accept")]
    out = {k: np.empty(n_splits) for k in keys}
    for r in range(n_splits):
        perm = rng.permutation(N)
        cal, test = perm[:n_cal], perm[n_cal:]
        t = (threshold_fn or crc_threshold)(s[cal], l[cal], alpha, bound)
        acc = s[test] > t
        out["threshold"][r] = t
        out["accept"][r] = acc.mean()
        out["risk"][r] = (l[test] * acc).mean()
        out["first_loss"][r] = l[test[0]] * acc[0]
        for k, v in columns.items():
            out[k][r] = v[test].mean()
            out[f"{k}|accept"][r] = (v[test] * acc).mean()
    return out


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Contract, Kernel

    def inputs(rng, size):
        n = max(size, 1)
        return {"scores": rng.normal(size=n), "losses": rng.uniform(0, 1, n), "alpha": 0.2}

    return [Kernel("conformal_risk.crc_threshold", crc_threshold, crc_threshold_ref, inputs,
                   Contract(empty="value", shapes="scores, losses: (n,); losses in [0, bound]"),
                   tol={"float64": (0, 0)}, oracle="scan of every candidate threshold"),
            Kernel("conformal_risk.uncorrected_threshold", uncorrected_threshold, uncorrected_threshold_ref, inputs,
                   Contract(empty="value", shapes="scores, losses: (n,); losses in [0, bound]"),
                   tol={"float64": (0, 0)}, oracle="scan of every candidate threshold")]


KERNELS = _registry()


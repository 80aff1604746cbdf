"""Bounds on probabilities of causation (PNS, PN, PS), their plug-in estimates, and sample-size rules for them.

Binary treatment X and outcome Y. Experimental data give ``p_exp = (P(y_x), P(y_x'))``, the outcome rates under
do(X=1) and do(X=0); observational data give ``p_obs = (P(x,y), P(x,y'), P(x',y), P(x',y'))``. Tian & Pearl
(2000) bound the probabilities of causation by finitely many *pieces*, each a ratio of affine functions of
``z = (p_exp, p_obs)`` (6 numbers): a lower endpoint is the max of its pieces, an upper endpoint the min.

* PNS = P(y_x, y'_x') is bounded by affine pieces (denominator 1);
* PN = P(y'_x' | x, y) and PS = P(y_x | x', y') by ratio pieces with denominator P(x,y) resp. P(x',y').

Sampling design (ours, fixed throughout): ``n_exp`` experimental units split equally over the two arms
(``n_exp / 2`` each, binomial outcome counts) and ``n_obs`` observational units (multinomial over the 4 cells).

Sample-size rules for a margin ``m`` on both endpoints at level ``1 - alpha`` (our reading of the paper's
abstract; the endpoint-wise view and the worst-case / pilot split are the abstract's, the details are ours):

* :func:`distribution_free_rule` (affine endpoints, PNS): the variance of each piece's estimate is bounded over
  *all* distributions using the joint multinomial covariance of the observational cells, and ``n`` is chosen so
  that the worst piece of each endpoint meets the margin (Bonferroni over the two endpoints).
* :func:`pilot_rule` (ratio endpoints, PN and PS; works for PNS too): :func:`endpoint_size` at a pilot
  estimate, i.e. the delta-method variance of every piece against its distance from the endpoint, with the gaps
  shrunk by what the pilot cannot resolve; :func:`pilot_estimate` adds Agresti-Coull pseudo-counts (our safety
  device against nearly empty pilot cells).
* :func:`additive_margin_rule`: our reconstruction of the earlier calculation (Li, Mao & Pearl 2022) that the
  abstract compares with: one worst-case Wald margin per estimated probability, margins added through the bound
  formula (no covariance). It is what the size comparison is made against.

Simulation: :func:`draw_counts` draws experimental and observational counts with NumPy's generator;
:func:`bound_estimates` (Numba) turns counts into estimated endpoints; :func:`bound_estimates_ref` is the plain
reference with the same signature. :func:`coverage_sim` and :func:`pilot_coverage_sim` combine them;
:func:`smallest_adequate_n` finds by simulation the least size that reaches the target on one model.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit
from scipy import stats

POCS = ("PNS", "PN", "PS")
_CHUNK_ROWS = 250_000  # (model, repetition) rows simulated at once
# latent response types (Y_x', Y_x): never, benefit (Y only under treatment), harm, always
TYPES = ((0, 0), (0, 1), (1, 0), (1, 1))


class Pieces(NamedTuple):
    """Pieces of one endpoint: piece j is ``(a[j] @ z + c[j]) / (d[j] @ z + e[j])`` with ``z`` of length 6.

    a, d: (J, 6) float64; c, e: (J,) float64. Affine pieces have ``d[j] = 0, e[j] = 1``.
    """

    a: np.ndarray
    c: np.ndarray
    d: np.ndarray
    e: np.ndarray


def _pieces(rows) -> Pieces:
    a = np.array([r[0] for r in rows], dtype=np.float64)
    c = np.array([r[1] for r in rows], dtype=np.float64)
    d = np.array([r[2] for r in rows], dtype=np.float64)
    e = np.array([r[3] for r in rows], dtype=np.float64)
    return Pieces(a, c, d, e)


_ONE = (0, 0, 0, 0, 0, 0)
_DEN_XY = (0, 0, 1, 0, 0, 0)    # P(x, y)
_DEN_XPYP = (0, 0, 0, 0, 0, 1)  # P(x', y')
# z = (P(y_x), P(y_x'), P(x,y), P(x,y'), P(x',y), P(x',y')); each row: (a, c, d, e)
_TABLE = {
    ("PNS", "lower"): _pieces([
        (_ONE, 0, _ONE, 1),                  # 0
        ((1, -1, 0, 0, 0, 0), 0, _ONE, 1),   # P(y_x) - P(y_x')
        ((0, -1, 1, 0, 1, 0), 0, _ONE, 1),   # P(y) - P(y_x')
        ((1, 0, -1, 0, -1, 0), 0, _ONE, 1),  # P(y_x) - P(y)
    ]),
    ("PNS", "upper"): _pieces([
        ((1, 0, 0, 0, 0, 0), 0, _ONE, 1),    # P(y_x)
        ((0, -1, 0, 0, 0, 0), 1, _ONE, 1),   # P(y'_x') = 1 - P(y_x')
        ((0, 0, 1, 0, 0, 1), 0, _ONE, 1),    # P(x,y) + P(x',y')
        ((1, -1, 0, 1, 1, 0), 0, _ONE, 1),   # P(y_x) - P(y_x') + P(x,y') + P(x',y)
    ]),
    ("PN", "lower"): _pieces([
        (_ONE, 0, _ONE, 1),                          # 0
        ((0, -1, 1, 0, 1, 0), 0, _DEN_XY, 0),        # (P(y) - P(y_x')) / P(x,y)
    ]),
    ("PN", "upper"): _pieces([
        (_ONE, 1, _ONE, 1),                          # 1
        ((0, -1, 0, 0, 0, -1), 1, _DEN_XY, 0),       # (P(y'_x') - P(x',y')) / P(x,y)
    ]),
    ("PS", "lower"): _pieces([
        (_ONE, 0, _ONE, 1),                          # 0
        ((1, 0, -1, 0, -1, 0), 0, _DEN_XPYP, 0),     # (P(y_x) - P(y)) / P(x',y')
    ]),
    ("PS", "upper"): _pieces([
        (_ONE, 1, _ONE, 1),                          # 1
        ((1, 0, -1, 0, 0, 0), 0, _DEN_XPYP, 0),      # (P(y_x) - P(x,y)) / P(x',y')
    ]),
}


def pieces(poc: str, endpoint: str) -> Pieces:
    """The Tian-Pearl pieces of ``poc`` ("PNS", "PN", "PS") for ``endpoint`` ("lower": max, "upper": min)."""
    if poc not in POCS:
        raise ValueError(f"poc must be one of {POCS}, got {poc!r}")
    if endpoint not in ("lower", "upper"):
        raise ValueError(f"endpoint must be 'lower' or 'upper', got {endpoint!r}")
    return _TABLE[(poc, endpoint)]


# ----------------------------------------------------------------------------------------------- bounds

# Round-off tolerated on a probability, the same everywhere: values in [-_PROB_TOL, 1 + _PROB_TOL] are accepted and
# clipped to [0, 1] (sums of model probabilities land at 1 + 2.2e-16), and consistency holds up to it.
_PROB_TOL = 1e-12


def _real(x, name: str) -> np.ndarray:
    x = np.asarray(x)
    if np.iscomplexobj(x) or not np.issubdtype(x.dtype, np.number):
        raise TypeError(f"{name} must be a real array, got dtype {x.dtype}")
    return x.astype(np.float64)


def _check_probs(p_exp, p_obs) -> tuple[np.ndarray, np.ndarray]:
    p_exp = _real(p_exp, "p_exp")
    p_obs = _real(p_obs, "p_obs")
    if p_exp.ndim < 1 or p_exp.shape[-1] != 2:
        raise ValueError(f"p_exp must have last axis 2 (P(y_x), P(y_x')), got shape {p_exp.shape}")
    if p_obs.ndim < 1 or p_obs.shape[-1] != 4:
        raise ValueError(f"p_obs must have last axis 4 (P(x,y), P(x,y'), P(x',y), P(x',y')), got {p_obs.shape}")
    if not (np.all(np.isfinite(p_exp)) and np.all((p_exp >= -_PROB_TOL) & (p_exp <= 1 + _PROB_TOL))):
        raise ValueError("p_exp must hold probabilities in [0, 1]")
    if not (np.all(np.isfinite(p_obs)) and np.all(p_obs >= -_PROB_TOL)):
        raise ValueError("p_obs must hold probabilities >= 0")
    if not np.allclose(p_obs.sum(-1), 1.0, atol=1e-9):
        raise ValueError("p_obs must sum to 1 over its last axis")
    return np.clip(p_exp, 0.0, 1.0), np.clip(p_obs, 0.0, 1.0)


def _check_consistent(p_exp: np.ndarray, p_obs: np.ndarray) -> None:
    """Refuse experimental and observational data that no model can produce (the bounds' LP is infeasible):
    consistency needs P(x,y) <= P(y_x) <= 1 - P(x,y') and P(x',y) <= P(y_x') <= 1 - P(x',y'), up to round-off."""
    y_x, y_xp = p_exp[..., 0], p_exp[..., 1]
    bad = ((p_obs[..., 0] > y_x + _PROB_TOL) | (p_obs[..., 1] > 1 - y_x + _PROB_TOL)
           | (p_obs[..., 2] > y_xp + _PROB_TOL) | (p_obs[..., 3] > 1 - y_xp + _PROB_TOL))
    if np.any(bad):
        raise ValueError(f"p_exp and p_obs contradict each other ({int(np.sum(bad))} of {bad.size} rows): consistency "
                         "needs P(x,y) <= P(y_x) <= 1 - P(x,y') and P(x',y) <= P(y_x') <= 1 - P(x',y'); no model "
                         "has these probabilities, so there are no bounds")



def _check_models(p_exp, p_obs, reps: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Validated p_exp (M, 2), p_obs (M, 4) sharing M models, and M; reps must be >= 1."""
    p_exp, p_obs = _check_probs(p_exp, p_obs)
    if p_exp.ndim != 2 or p_obs.ndim != 2 or p_exp.shape[0] != p_obs.shape[0]:
        raise ValueError(f"p_exp (M, 2) and p_obs (M, 4) must share M, got {p_exp.shape} and {p_obs.shape}")
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    return p_exp, p_obs, p_exp.shape[0]

def piece_values(p_exp, p_obs, pcs: Pieces) -> np.ndarray:
    """Every piece evaluated at ``z = (p_exp, p_obs)``: (..., J); NaN where a denominator is <= 0."""
    z = _stack_z(np.asarray(p_exp, dtype=np.float64), np.asarray(p_obs, dtype=np.float64))
    num = z @ pcs.a.T + pcs.c
    den = z @ pcs.d.T + pcs.e
    out = np.full(num.shape, np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


def _stack_z(p_exp: np.ndarray, p_obs: np.ndarray) -> np.ndarray:
    lead = np.broadcast_shapes(p_exp.shape[:-1], p_obs.shape[:-1])
    return np.concatenate([np.broadcast_to(p_exp, lead + (2,)), np.broadcast_to(p_obs, lead + (4,))], axis=-1)


def poc_bounds(p_exp, p_obs, poc: str = "PNS", allow_contradiction: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Tian-Pearl bounds ``(lower, upper)`` of ``poc`` from experimental and observational probabilities.

    p_exp: (..., 2) = (P(y_x), P(y_x')); p_obs: (..., 4) = (P(x,y), P(x,y'), P(x',y), P(x',y')); leading axes
    broadcast. Lower = max of the lower pieces, upper = min of the upper pieces (ratio pieces whose denominator
    is 0 are left out, so PN with P(x,y) = 0 is [0, 1]). Vectorised NumPy. Data that contradict each other (no
    model produces them, lower would exceed upper) are refused with a ValueError; probabilities may miss [0, 1] by
    round-off up to 1e-12. ``allow_contradiction=True`` evaluates the pieces anyway (plug-in estimates, whose
    bounds may cross; :func:`bound_estimates` does this).
    """
    p_exp, p_obs = _check_probs(p_exp, p_obs)
    if not allow_contradiction:
        _check_consistent(p_exp, p_obs)
    return _bounds(p_exp, p_obs, poc)


def _bounds(p_exp, p_obs, poc: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`poc_bounds` without the consistency check (plug-in estimates may contradict; their bounds cross)."""
    lo = np.nanmax(piece_values(p_exp, p_obs, pieces(poc, "lower")), axis=-1)
    hi = np.nanmin(piece_values(p_exp, p_obs, pieces(poc, "upper")), axis=-1)
    return lo, hi


# ----------------------------------------------------------------------------------------------- models

def model_probabilities(r, s) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Experimental and observational probabilities, and the true PoCs, of a binary response-type model.

    r: (..., 4) probabilities of the response types (Y_x', Y_x) in :data:`TYPES` order; s: (..., 4)
    P(X = 1 | type), the confounded selection. Returns ``p_exp`` (..., 2), ``p_obs`` (..., 4) and
    ``truth = {"PNS", "PN", "PS"}`` with PNS = P(type 01), PN = P(type 01 | x, y), PS = P(type 01 | x', y').
    """
    r, s = np.asarray(r, dtype=np.float64), np.asarray(s, dtype=np.float64)
    if r.shape[-1:] != (4,) or s.shape[-1:] != (4,):
        raise ValueError(f"r and s must have last axis 4, got {r.shape} and {s.shape}")
    if np.any(r < -_PROB_TOL) or not np.allclose(r.sum(-1), 1.0) or np.any((s < -_PROB_TOL) | (s > 1 + _PROB_TOL)):
        raise ValueError("r must be a distribution over 4 types and s must lie in [0, 1]")
    r00, r01, r10, r11 = np.moveaxis(r, -1, 0)
    s00, s01, s10, s11 = np.moveaxis(s, -1, 0)
    # P(y_x) = P(Y_x = 1) and P(y_x') = P(Y_x' = 1) over types
    p_exp = np.stack([r01 + r11, r10 + r11], axis=-1)
    # consistency: under X = 1 we see Y_x, under X = 0 we see Y_x'
    p_obs = np.stack([r01 * s01 + r11 * s11, r00 * s00 + r10 * s10,
                      r10 * (1 - s10) + r11 * (1 - s11), r00 * (1 - s00) + r01 * (1 - s01)], axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        truth = {"PNS": r01, "PN": r01 * s01 / p_obs[..., 0], "PS": r01 * (1 - s01) / p_obs[..., 3]}
    return p_exp, p_obs, truth


def random_models(rng: np.random.Generator, n_models: int, s_low: float = 0.05, s_high: float = 0.95):
    """``n_models`` random models: type probabilities r ~ Dirichlet(1, 1, 1, 1), selection s ~ U(s_low, s_high)^4.

    Returns (r, s), each (n_models, 4).
    """
    if n_models < 1:
        raise ValueError(f"n_models must be >= 1, got {n_models}")
    if not 0 <= s_low < s_high <= 1:
        raise ValueError(f"need 0 <= s_low < s_high <= 1, got {s_low}, {s_high}")
    r = rng.dirichlet(np.ones(4), size=n_models)
    s = rng.uniform(s_low, s_high, size=(n_models, 4))
    return r, s


def hard_pns_model() -> tuple[np.ndarray, np.ndarray]:
    """A model whose active PNS upper piece has nearly the largest possible variance (our construction).

    Uniform types and s = (0.1, 0.9, 0.1, 0.5) give P(y_x) = P(y_x') = 1/2 and P(x,y') + P(x',y) = 0.4, so the
    upper endpoint is the 4th piece, 0.4, with unit variance 2/4 + 2/4 + 0.24 = 1.24 (the bound is 1.25); the
    lower endpoint is P(y) - P(y_x') = 0.2. Returns (r, s), each (1, 4).
    """
    return np.full((1, 4), 0.25), np.array([[0.1, 0.9, 0.1, 0.5]])


# ----------------------------------------------------------------------------------------------- variances

def delta_unit_variance(p_exp, p_obs, pcs: Pieces, obs_ratio: float = 1.0,
                        covariance: str = "multinomial") -> np.ndarray:
    """Delta-method variance of every piece's plug-in estimate, times ``n_exp``: (..., J).

    With ``n_exp / 2`` units per arm and ``n_obs = obs_ratio * n_exp``, piece f_j(z) = N_j / D_j has gradient
    g = (a - f d) / D and ``n_exp * Var(f_j) ~ 2 sum_arm g_k^2 p_k (1 - p_k) + (g' diag(p) g - (g'p)^2) / obs_ratio``
    (independent binomial arms; the multinomial covariance of the 4 observational cells). Exact for affine
    pieces. ``covariance="ignored"`` drops the cells' covariance, ``sum_c g_c^2 p_c (1 - p_c)``: the naive variant a
    chapter can compare against. NaN where a denominator is <= 0.
    """
    if covariance not in ("multinomial", "ignored"):
        raise ValueError(f"covariance must be 'multinomial' or 'ignored', got {covariance!r}")
    p_exp, p_obs = _check_probs(p_exp, p_obs)
    f = piece_values(p_exp, p_obs, pcs)                                   # (..., J)
    z = _stack_z(p_exp, p_obs)
    den = z @ pcs.d.T + pcs.e                                             # (..., J)
    with np.errstate(invalid="ignore", divide="ignore"):
        # g = (a - f d) / D, the gradient of N / D
        g = (pcs.a - f[..., None] * pcs.d) / den[..., None]               # (..., J, 6)
    pe = np.broadcast_to(p_exp, z.shape[:-1] + (2,))[..., None, :]
    po = np.broadcast_to(p_obs, z.shape[:-1] + (4,))[..., None, :]
    v_exp = 2.0 * np.sum(g[..., :2] ** 2 * pe * (1 - pe), axis=-1)
    if covariance == "multinomial":
        v_obs = np.sum(g[..., 2:] ** 2 * po, axis=-1) - np.sum(g[..., 2:] * po, axis=-1) ** 2
    else:
        v_obs = np.sum(g[..., 2:] ** 2 * po * (1 - po), axis=-1)
    return v_exp + np.maximum(v_obs, 0.0) / obs_ratio


class ActivePiece(NamedTuple):
    """The piece attaining an endpoint at the true probabilities: ``index`` (...,), its delta-method unit variance
    ``v`` (...,), and ``gap`` (...,), the distance from the endpoint to the nearest other piece (inf if none)."""

    index: np.ndarray
    v: np.ndarray
    gap: np.ndarray


def active_piece(p_exp, p_obs, poc: str, endpoint: str, obs_ratio: float = 1.0,
                 covariance: str = "multinomial") -> ActivePiece:
    """Which piece attains ``endpoint`` of ``poc``, how variable its estimate is, and how far the runner-up is.

    Where the gap is many standard deviations wide, the endpoint's estimate behaves like that one piece's and the
    delta method applies to it; near ties it is the max (min) of several pieces and does not.
    """
    pcs = pieces(poc, endpoint)
    f = piece_values(p_exp, p_obs, pcs)
    v = delta_unit_variance(p_exp, p_obs, pcs, obs_ratio, covariance)
    idx = (np.nanargmax if endpoint == "lower" else np.nanargmin)(f, axis=-1)
    f_star = np.take_along_axis(f, idx[..., None], -1)
    others = np.where(np.arange(f.shape[-1]) == idx[..., None], np.nan, np.abs(f - f_star))
    gap = np.where(np.all(np.isnan(others), axis=-1), np.inf,
                   np.nanmin(np.where(np.isnan(others), np.inf, others), axis=-1))
    return ActivePiece(idx, np.take_along_axis(v, idx[..., None], -1)[..., 0], gap)


def worst_case_unit_variance(pcs: Pieces, obs_ratio: float = 1.0, covariance: str = "multinomial") -> np.ndarray:
    """Bound on ``n_exp * Var`` of each affine piece's estimate over *all* distributions: (J,).

    ``covariance="multinomial"`` (ours): arm k contributes a_k^2 / 2 (p(1-p) <= 1/4 on n_exp/2 units) and the
    observational part ``b' p_obs`` is one draw of a variable taking value b_c on cell c, whose variance is at most
    (max b - min b)^2 / 4 (Popoviciu), divided by obs_ratio. ``covariance="ignored"`` treats the 4 cell estimates
    as independent and adds b_c^2 / 4 per cell instead. Raises ValueError for ratio pieces (no distribution-free
    bound: the denominator can be near 0).
    """
    if np.any(pcs.d != 0) or np.any(pcs.e != 1):
        raise ValueError("worst_case_unit_variance needs affine pieces (PNS); use the pilot rule for PN and PS")
    if covariance not in ("multinomial", "ignored"):
        raise ValueError(f"covariance must be 'multinomial' or 'ignored', got {covariance!r}")
    a_exp, b = pcs.a[:, :2], pcs.a[:, 2:]
    if covariance == "multinomial":
        v_obs = (b.max(axis=1) - b.min(axis=1)) ** 2 / 4
    else:
        v_obs = np.sum(b ** 2, axis=1) / 4
    return np.sum(a_exp ** 2, axis=1) / 2 + v_obs / obs_ratio


# ----------------------------------------------------------------------------------------------- rules

class Design(NamedTuple):
    """A sample-size design: experimental units (even, split over two arms) and observational units."""

    n_exp: int
    n_obs: int
    n_lower: int
    n_upper: int


def _z(alpha: float, sides: int) -> float:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    return float(stats.norm.ppf(1 - alpha / sides))


def _check_design_args(margin: float, obs_ratio: float) -> None:
    if not 0 < margin < 1:
        raise ValueError(f"margin must be in (0, 1), got {margin}")
    if not obs_ratio > 0:
        raise ValueError(f"obs_ratio must be > 0, got {obs_ratio}")


def _even_up(n: float) -> int:
    return int(2 * np.ceil(n / 2))


def _design(n_lower: float, n_upper: float, obs_ratio: float, n_min: int = 2) -> Design:
    n_exp = _even_up(max(n_lower, n_upper, n_min))
    return Design(n_exp, int(np.ceil(obs_ratio * n_exp)), _even_up(n_lower), _even_up(n_upper))


def distribution_free_rule(margin: float, alpha: float, poc: str = "PNS", obs_ratio: float = 1.0,
                           covariance: str = "multinomial") -> Design:
    """Distribution-free endpoint-wise sample size for affine bounds (PNS): our reading of the paper's rule.

    For endpoint E with pieces j: ``n_E = z^2 max_j w_j / m^2`` where w_j = :func:`worst_case_unit_variance` and
    ``z = Phi^{-1}(1 - alpha / 4)`` (two sides, Bonferroni over the two endpoints), so that
    ``P(|L_hat - L| <= m and |U_hat - U| <= m) >= 1 - alpha`` asymptotically for every distribution whose active
    pieces are unique. ``n_exp = max(n_L, n_U)`` rounded up to even, ``n_obs = obs_ratio * n_exp``.
    """
    _check_design_args(margin, obs_ratio)
    z = _z(alpha, 4)
    n = [z ** 2 * worst_case_unit_variance(pieces(poc, ep), obs_ratio, covariance).max() / margin ** 2
         for ep in ("lower", "upper")]
    return _design(n[0], n[1], obs_ratio)


def additive_margin_rule(margin: float, alpha: float, poc: str = "PNS", obs_ratio: float = 1.0) -> Design:
    """The earlier, larger calculation as we reconstruct it (Li, Mao & Pearl 2022; not given in the abstract).

    Every probability in a piece gets its own worst-case Wald margin at level 1 - alpha,
    ``z sqrt(1/4 / n_k)`` with ``z = Phi^{-1}(1 - alpha/2)``, and a piece's margin is the |coefficient|-weighted
    *sum* of its probabilities' margins (triangle inequality, no covariance). ``n_E`` makes the worst piece's summed
    margin equal to m.
    """
    _check_design_args(margin, obs_ratio)
    z = _z(alpha, 2)
    n = []
    for ep in ("lower", "upper"):
        pcs = pieces(poc, ep)
        if np.any(pcs.d != 0):
            raise ValueError("additive_margin_rule is defined for affine pieces (PNS)")
        # per-unit margin: arm sd sqrt(1/4 / (1/2)) = sqrt(1/2); observational cell sd 1/2 / sqrt(obs_ratio)
        unit = np.abs(pcs.a[:, :2]).sum(1) * np.sqrt(0.5) + np.abs(pcs.a[:, 2:]).sum(1) * 0.5 / np.sqrt(obs_ratio)
        n.append((z * unit.max() / margin) ** 2)
    return _design(n[0], n[1], obs_ratio)


def endpoint_size(p_exp, p_obs, poc: str, endpoint: str, margin: float, alpha: float, n_pilot: int | None = None,
                  obs_ratio: float = 1.0) -> np.ndarray:
    """n_exp that one endpoint needs at probabilities (p_exp, p_obs), by the delta method: (...,) float64.

    A piece j at distance gap_j from the endpoint spoils the estimate only if its own estimate moves by more than
    gap_j + m towards it, so it asks for ``z^2 v_j / (gap_j + m)^2`` (v_j: :func:`delta_unit_variance`;
    ``z = Phi^{-1}(1 - alpha/4)``); the active piece (gap 0) asks for ``z^2 v_* / m^2``, and the endpoint takes the
    largest request. With ``n_pilot`` the probabilities are a pilot's estimates, so every gap is first shrunk by
    what the pilot cannot resolve, ``z sqrt((v_j + v_*) / n_pilot)`` (clipped at 0): a piece the pilot cannot
    separate from the active one counts as active.
    """
    _check_design_args(margin, obs_ratio)
    pcs = pieces(poc, endpoint)
    z = _z(alpha, 4)
    f = piece_values(p_exp, p_obs, pcs)
    v = np.nan_to_num(delta_unit_variance(p_exp, p_obs, pcs, obs_ratio), nan=0.0)
    star = (np.nanargmax if endpoint == "lower" else np.nanargmin)(f, axis=-1)[..., None]
    gap = np.nan_to_num(np.abs(f - np.take_along_axis(f, star, -1)), nan=np.inf)
    if n_pilot is not None:
        if n_pilot < 2:
            raise ValueError(f"n_pilot must be >= 2, got {n_pilot}")
        gap = np.maximum(gap - z * np.sqrt((v + np.take_along_axis(v, star, -1)) / n_pilot), 0.0)
    return np.max(z ** 2 * v / (gap + margin) ** 2, axis=-1)


def pilot_rule(p_exp_hat, p_obs_hat, n_pilot: int, margin: float, alpha: float, poc: str,
               obs_ratio: float = 1.0) -> np.ndarray:
    """Pilot-based plug-in sample size (delta method), vectorised over leading axes: returns n_exp (...,) int64.

    The larger :func:`endpoint_size` of the two endpoints at the pilot estimate (with the pilot's uncertainty about
    which piece is active), never below ``n_pilot``, rounded up to even; ``n_obs = ceil(obs_ratio * n_exp)``.
    Our reading of the paper's pilot rule: the abstract names the rule, not its formula.
    """
    if n_pilot < 2:
        raise ValueError(f"n_pilot must be >= 2, got {n_pilot}")
    p_exp_hat, p_obs_hat = _check_probs(p_exp_hat, p_obs_hat)
    n = np.maximum.reduce([endpoint_size(p_exp_hat, p_obs_hat, poc, ep, margin, alpha, n_pilot, obs_ratio)
                           for ep in ("lower", "upper")] + [np.full(p_exp_hat.shape[:-1], float(n_pilot))])
    return (2 * np.ceil(n / 2)).astype(np.int64)


# ----------------------------------------------------------------------------------------------- simulation

def draw_counts(rng: np.random.Generator, p_exp, p_obs, n_exp, n_obs, reps: int):
    """Experimental and observational counts for ``reps`` repetitions of each model.

    p_exp: (M, 2), p_obs: (M, 4); n_exp (even; n_exp/2 per arm) and n_obs: ints, (M,) or (M, reps).
    Returns k_exp (M, reps, 2) int64 (successes per arm), k_obs (M, reps, 4) int64 (multinomial cell counts),
    and the per-row sizes n_arm, n_obs as (M, reps) int64 arrays.
    """
    p_exp, p_obs, M = _check_models(p_exp, p_obs, reps)
    n_exp = _sizes(n_exp, "n_exp", M, reps)
    if np.any(n_exp % 2):
        raise ValueError("n_exp must be even (it is split equally over the two arms)")
    n_arm, n_obs = n_exp // 2, _sizes(n_obs, "n_obs", M, reps)
    k_exp = rng.binomial(n_arm[..., None], p_exp[:, None, :])
    p_cells = p_obs / p_obs.sum(-1, keepdims=True)  # exact sums for the multinomial sampler
    k_obs = rng.multinomial(n_obs, np.broadcast_to(p_cells[:, None, :], (M, reps, 4)))
    return k_exp.astype(np.int64), k_obs.astype(np.int64), n_arm, n_obs


def _sizes(n, name: str, M: int, reps: int) -> np.ndarray:
    n = np.asarray(n)
    if not np.issubdtype(n.dtype, np.integer):
        raise ValueError(f"{name} must be integer, got dtype {n.dtype}")
    if n.ndim == 1:
        n = n[:, None]
    try:
        n = np.broadcast_to(n, (M, reps)).astype(np.int64)
    except ValueError:
        raise ValueError(f"{name} must be an int, (M,) or (M, reps) with M={M}, reps={reps}; got {n.shape}") from None
    if np.any(n < 1):
        raise ValueError(f"{name} must be >= 1")
    return n


def _check_counts(k_exp, k_obs, n_arm, n_obs):
    k_exp, k_obs = np.asarray(k_exp), np.asarray(k_obs)
    for name, k, width in (("k_exp", k_exp, 2), ("k_obs", k_obs, 4)):
        if not np.issubdtype(k.dtype, np.integer):
            raise ValueError(f"{name} must hold integer counts, got dtype {k.dtype}")
        if k.ndim < 1 or k.shape[-1] != width:
            raise ValueError(f"{name} must have last axis {width}, got shape {k.shape}")
    lead = k_exp.shape[:-1]
    if k_obs.shape[:-1] != lead:
        raise ValueError(f"k_exp and k_obs must share leading axes, got {k_exp.shape} and {k_obs.shape}")
    out = []
    for name, n in (("n_arm", n_arm), ("n_obs", n_obs)):
        n = np.asarray(n)
        if not np.issubdtype(n.dtype, np.integer):
            raise ValueError(f"{name} must be integer, got dtype {n.dtype}")
        try:
            n = np.broadcast_to(n, lead)
        except ValueError:
            raise ValueError(f"{name} must broadcast to {lead}, got shape {n.shape}") from None
        if np.any(n < 1):
            raise ValueError(f"{name} must be >= 1")
        out.append(np.ascontiguousarray(n, dtype=np.int64).reshape(-1))
    if np.any(k_exp < 0) or np.any(k_obs < 0):
        raise ValueError("k_exp and k_obs must be >= 0")
    if np.any(k_exp.reshape(-1, 2) > out[0][:, None]):
        raise ValueError("k_exp must not exceed n_arm")
    if np.any(k_obs.reshape(-1, 4).sum(1) != out[1]):
        raise ValueError("k_obs must sum to n_obs over its last axis")
    flat = (np.ascontiguousarray(k_exp, dtype=np.int64).reshape(-1, 2),
            np.ascontiguousarray(k_obs, dtype=np.int64).reshape(-1, 4))
    return flat + tuple(out) + (lead,)


@njit(cache=True)
def _bounds_kernel(k_exp, k_obs, n_arm, n_obs, la, lc, ld, le, ua, uc, ud, ue, lo, hi):
    z = np.empty(6)
    for r in range(k_exp.shape[0]):
        z[0] = k_exp[r, 0] / n_arm[r]
        z[1] = k_exp[r, 1] / n_arm[r]
        for c in range(4):
            z[2 + c] = k_obs[r, c] / n_obs[r]
        best = -np.inf
        for j in range(la.shape[0]):
            num, den = lc[j], le[j]
            for c in range(6):
                num += la[j, c] * z[c]
                den += ld[j, c] * z[c]
            # a ratio piece with an empty denominator cell carries no information: skip it
            if den > 0 and num / den > best:
                best = num / den
        lo[r] = best
        best = np.inf
        for j in range(ua.shape[0]):
            num, den = uc[j], ue[j]
            for c in range(6):
                num += ua[j, c] * z[c]
                den += ud[j, c] * z[c]
            if den > 0 and num / den < best:
                best = num / den
        hi[r] = best


def bound_estimates(k_exp, k_obs, n_arm, n_obs, poc: str = "PNS") -> tuple[np.ndarray, np.ndarray]:
    """Plug-in Tian-Pearl bounds from counts (Numba, serial): estimated ``(lower, upper)``, each (...,) float64.

    k_exp: (..., 2) successes in the treated and control arms; k_obs: (..., 4) observational cell counts in the
    order (x,y), (x,y'), (x',y), (x',y'); n_arm, n_obs: ints or arrays broadcasting to the leading axes.
    The plug-in estimate is ``z_hat = (k_exp / n_arm, k_obs / n_obs)`` and the endpoints are the max / min of the
    pieces at z_hat (:func:`poc_bounds`). Estimated bounds may cross (lower > upper); they are returned as is.
    """
    ke, ko, na, no, lead = _check_counts(k_exp, k_obs, n_arm, n_obs)
    lo, hi = np.empty(ke.shape[0]), np.empty(ke.shape[0])
    pl, pu = pieces(poc, "lower"), pieces(poc, "upper")
    _bounds_kernel(ke, ko, na, no, *pl, *pu, lo, hi)
    return lo.reshape(lead), hi.reshape(lead)


def bound_estimates_ref(k_exp, k_obs, n_arm, n_obs, poc: str = "PNS") -> tuple[np.ndarray, np.ndarray]:
    """Plain reference for :func:`bound_estimates`: same signature; one :func:`poc_bounds` call per row."""
    ke, ko, na, no, lead = _check_counts(k_exp, k_obs, n_arm, n_obs)
    lo, hi = np.empty(ke.shape[0]), np.empty(ke.shape[0])
    for r in range(ke.shape[0]):
        lo[r], hi[r] = _bounds(*_check_probs(ke[r] / na[r], ko[r] / no[r]), poc)  # estimates may contradict
    return lo.reshape(lead), hi.reshape(lead)


class Coverage(NamedTuple):
    """Simulated precision of the estimated bounds: ``hits`` (M,) repetitions with both endpoint errors <= margin
    out of ``reps``; ``err_lower``, ``err_upper`` (M, reps) = estimate - true endpoint; ``n_exp`` (M, reps)."""

    hits: np.ndarray
    reps: int
    err_lower: np.ndarray
    err_upper: np.ndarray
    n_exp: np.ndarray


def coverage_sim(rng: np.random.Generator, p_exp, p_obs, n_exp, n_obs, reps: int, poc: str,
                 margin: float) -> Coverage:
    """Draw ``reps`` data sets of each model at the given sizes and count ``|L_hat-L| <= m and |U_hat-U| <= m``.

    p_exp (M, 2), p_obs (M, 4); n_exp (even), n_obs: int, (M,) or (M, reps) (a size per repetition lets a
    pilot-based design vary from one repetition to the next). Models are simulated a few at a time so that the
    count arrays stay small.
    """
    p_exp, p_obs, M = _check_models(p_exp, p_obs, reps)
    n_exp, n_obs = _sizes(n_exp, "n_exp", M, reps), _sizes(n_obs, "n_obs", M, reps)
    lo, hi = poc_bounds(p_exp, p_obs, poc)
    err_lo, err_hi = np.empty((M, reps)), np.empty((M, reps))
    step = max(1, _CHUNK_ROWS // reps)
    for i in range(0, M, step):
        sl = slice(i, i + step)
        k_exp, k_obs, n_arm, n_o = draw_counts(rng, p_exp[sl], p_obs[sl], n_exp[sl], n_obs[sl], reps)
        lo_hat, hi_hat = bound_estimates(k_exp, k_obs, n_arm, n_o, poc)
        err_lo[sl], err_hi[sl] = lo_hat - lo[sl, None], hi_hat - hi[sl, None]
    hits = np.sum((np.abs(err_lo) <= margin) & (np.abs(err_hi) <= margin), axis=1)
    return Coverage(hits, reps, err_lo, err_hi, n_exp)


def pilot_estimate(k_exp, k_obs, n_arm, n_obs, pseudo: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Pilot probabilities from pilot counts: (..., 2) and (..., 4).

    ``pseudo=True`` (our safety device, not from the paper) adds Agresti-Coull pseudo-counts: 2 successes and 2
    failures per arm, ``(k + 2) / (n + 4)``, and 1 unit per observational cell, ``(k + 1) / (n + 4)``. A pilot
    cell that is nearly empty otherwise makes the plug-in variance p(1 - p) ~ 0 and the design far too small.
    """
    k_exp, k_obs = np.asarray(k_exp, dtype=np.float64), np.asarray(k_obs, dtype=np.float64)
    n_arm, n_obs = np.asarray(n_arm, dtype=np.float64)[..., None], np.asarray(n_obs, dtype=np.float64)[..., None]
    if pseudo:
        return (k_exp + 2) / (n_arm + 4), (k_obs + 1) / (n_obs + 4)
    return k_exp / n_arm, k_obs / n_obs


def pilot_coverage_sim(rng: np.random.Generator, p_exp, p_obs, n_pilot: int, reps: int, poc: str,
                       margin: float, alpha: float, obs_ratio: float = 1.0, pseudo: bool = True,
                       size_factor: float = 1.0) -> Coverage:
    """The whole pilot-based design, repeated: per repetition a fresh pilot (n_pilot experimental and
    ``ceil(obs_ratio * n_pilot)`` observational units) sets n_exp by :func:`pilot_rule` on :func:`pilot_estimate`,
    times ``size_factor`` (1 = the rule; 0.5 = half of it, a control), then a fresh main sample of that size is
    drawn and its estimated bounds are checked against the margin."""
    if n_pilot < 2 or n_pilot % 2:
        raise ValueError(f"n_pilot must be even and >= 2, got {n_pilot}")
    if not size_factor > 0:
        raise ValueError(f"size_factor must be > 0, got {size_factor}")
    p_exp, p_obs = _check_probs(p_exp, p_obs)
    parts = []
    # the pilot rule holds (models, reps, pieces, 6) gradients: a few models at a time keeps that under ~100 MB
    step = max(1, _CHUNK_ROWS // reps)
    for i in range(0, p_exp.shape[0], step):
        pe, po = p_exp[i:i + step], p_obs[i:i + step]
        k_exp, k_obs, n_arm, n_o = draw_counts(rng, pe, po, n_pilot, int(np.ceil(obs_ratio * n_pilot)), reps)
        pe_hat, po_hat = pilot_estimate(k_exp, k_obs, n_arm, n_o, pseudo)
        n_rule = pilot_rule(pe_hat, po_hat, n_pilot, margin, alpha, poc, obs_ratio)
        n_exp = np.maximum(2, 2 * np.ceil(size_factor * n_rule / 2)).astype(np.int64)
        n_obs = np.ceil(obs_ratio * n_exp).astype(np.int64)
        parts.append(coverage_sim(rng, pe, po, n_exp, n_obs, reps, poc, margin))
    return Coverage(*(np.concatenate([getattr(c, f) for c in parts]) if f != "reps" else reps
                      for f in Coverage._fields))


def smallest_adequate_n(rng: np.random.Generator, p_exp, p_obs, n_grid, reps: int, poc: str, margin: float,
                        alpha: float) -> tuple[float, np.ndarray]:
    """Smallest n_exp (= n_obs) at which one model's simulated coverage reaches 1 - alpha.

    p_exp (2,), p_obs (4,); n_grid: increasing even sizes. Coverage is simulated at every grid size, made
    monotone in n by isotonic regression (scikit-learn), and the crossing of 1 - alpha is interpolated linearly in
    log n. Returns (n_min, hits on the grid); n_min is NaN when the grid never reaches the target and the first grid
    size when it already does there.
    """
    from sklearn.isotonic import IsotonicRegression

    n_grid = np.asarray(n_grid, dtype=np.int64)
    if n_grid.ndim != 1 or np.any(np.diff(n_grid) <= 0):
        raise ValueError("n_grid must be a 1-D increasing array")
    G = n_grid.size
    pe = np.broadcast_to(np.asarray(p_exp, dtype=np.float64), (G, 2))
    po = np.broadcast_to(np.asarray(p_obs, dtype=np.float64), (G, 4))
    hits = coverage_sim(rng, pe, po, n_grid, n_grid, reps, poc, margin).hits
    x = np.log(n_grid)
    fit = IsotonicRegression(increasing=True).fit_transform(x, hits / reps)
    target = 1 - alpha
    if fit[0] >= target:
        return float(n_grid[0]), hits
    above = np.nonzero(fit >= target)[0]
    if above.size == 0:
        return float("nan"), hits
    i = above[0]
    t = (target - fit[i - 1]) / (fit[i] - fit[i - 1])
    return float(np.exp(x[i - 1] + t * (x[i] - x[i - 1]))), hits


def coverage_interval(hits, reps: int, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson intervals for coverage ``hits / reps`` (scipy.stats.binomtest), elementwise over ``hits``."""
    hits = np.atleast_1d(np.asarray(hits))
    lo, hi = np.empty(hits.shape), np.empty(hits.shape)
    for i, k in np.ndenumerate(hits):
        ci = stats.binomtest(int(k), reps).proportion_ci(confidence, method="wilson")
        lo[i], hi[i] = ci.low, ci.high
    return lo, hi


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Contract, Kernel

    def inputs(rng, size):
        n = max(size, 1)
        return {"k_exp": rng.integers(0, 51, size=(n, 2)), "k_obs": rng.multinomial(100, [0.25] * 4, size=n),
                "n_arm": 50, "n_obs": 100}

    return [Kernel("causation_bounds.bound_estimates", bound_estimates, bound_estimates_ref, inputs,
                   Contract(empty="value", shapes="k_exp: (..., 2); k_obs: (..., 4); n_arm, n_obs broadcast"),
                   tol={"float64": (1e-12, 1e-14)}, oracle="Tian-Pearl LP (scipy.optimize.linprog)")]


KERNELS = _registry()

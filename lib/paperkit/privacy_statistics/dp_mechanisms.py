"""Noise for differentially private counting, and its exact privacy loss on neighbouring counts.

Two integer noise families, both built from random bits so that they can be committed to bit by bit
(:mod:`paperkit.privacy_statistics.commitments`):

* **Binomial** (VBM): ``n_bits`` fair coins, noise ``Z = sum(coins) - n_bits / 2`` (``n_bits`` even).
* **Discrete Laplace from bits** (VLM): ``Z = G1 - G2`` with ``G1, G2`` independent. Each ``G`` has the binary
  expansion ``G = sum_i 2^i b_i`` (``i < n_bits``) with independent bits ``b_i ~ Bernoulli(p_i)``,
  ``p_i = a^(2^i) / (1 + a^(2^i))``, ``a = exp(-eps0)``: for infinitely many bits that is exactly the geometric law
  ``P(G = g) = (1 - a) a^g``, and the difference of two is the two-sided geometric (discrete Laplace)
  ``P(Z = z) = (1 - a) / (1 + a) a^|z|``. With finitely many bits, each ``p_i`` realised as ``[U < T_i]`` for a
  uniform ``precision``-bit integer ``U`` (so ``p_i`` becomes ``T_i / 2^precision``), the law is computed exactly by
  :func:`vlm_noise_pmf`, and the chosen design is checked against its exact privacy loss, not the ideal one.

Privacy loss. A counting query has sensitivity 1, so neighbouring inputs give outputs ``c + Z`` and ``c + 1 + Z``.
For a noise pmf ``P`` on consecutive integers, the mechanism is (eps, delta)-DP exactly when the hockey-stick
divergence ``delta(eps) = max_s sum_y max(0, P(y) - e^eps P(y - s))`` over ``s = +1, -1`` is at most ``delta``
(:func:`hockey_stick_delta`). This is the exact privacy profile, no bound is used.

pmfs are 1-D float64 arrays over consecutive integers; which integers is the caller's bookkeeping (binomial noise
is centred, discrete Laplace is symmetric, so both are centred arrays of odd length). scipy.stats supplies the
binomial pmf and, in the tests, the ideal discrete Laplace (``scipy.stats.dlaplace``). Only the bit construction
(and the search over its sizes) is written here: no library samples a discrete Laplace through committed bits.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.special
import scipy.stats

# design_vlm lets the pure-DP design parameter eps0 sit slightly below the target eps, so that rounding the bit
# probabilities to `precision` bits cannot push the exact privacy loss over the target.
_EPS0_FRACTIONS = (1.0, 0.98, 0.95, 0.9)
_MAX_PRECISION = 40


def _check_pmf(pmf) -> np.ndarray:
    pmf = np.asarray(pmf)
    if np.iscomplexobj(pmf) or not np.issubdtype(pmf.dtype, np.number):
        raise TypeError(f"pmf must be a real array, got dtype {pmf.dtype}")
    pmf = pmf.astype(np.float64)
    if pmf.ndim != 1 or pmf.size == 0:
        raise ValueError(f"pmf must be a non-empty 1-D array, got shape {pmf.shape}")
    if not np.all(np.isfinite(pmf)) or np.any(pmf < 0):
        raise ValueError("pmf must be finite and non-negative")
    if abs(math.fsum(pmf) - 1.0) > 1e-9:
        raise ValueError(f"pmf must sum to 1 (a distribution), got sum {math.fsum(pmf)!r}")
    return pmf


def _check_eps_delta(eps: float, delta: float | None = None) -> None:
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be a positive number, got {eps!r}")
    if delta is not None and not (0 < delta < 1):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")


def hockey_stick_delta(pmf, eps: float) -> float:
    """Exact delta(eps) of the additive mechanism with integer noise ``pmf`` on counts differing by one.

    ``pmf``: (m,) over consecutive integers. Returns ``max_s sum_y max(0, P(y) - e^eps P(y - s))``, s = +-1.
    """
    pmf = _check_pmf(pmf)
    _check_eps_delta(eps)
    a = np.concatenate([pmf, [0.0]])  # P(y) on the support of both outputs
    b = np.concatenate([[0.0], pmf])  # P(y - 1): the neighbour's output
    e = math.exp(eps)
    # delta = sum_y (P(y) - e^eps P'(y))_+ , in both directions
    return float(max(np.clip(a - e * b, 0.0, None).sum(), np.clip(b - e * a, 0.0, None).sum()))


def hockey_stick_delta_ref(pmf, eps: float) -> float:
    """Plain-loop reference of :func:`hockey_stick_delta` (same signature): walks every output y of both inputs."""
    pmf = [float(v) for v in _check_pmf(pmf)]
    _check_eps_delta(eps)
    m = len(pmf)

    def p(y: int) -> float:
        return pmf[y] if 0 <= y < m else 0.0

    best = 0.0
    for s in (1, -1):
        total = 0.0
        for y in range(-1, m + 1):
            total += max(0.0, p(y) - math.exp(eps) * p(y - s))
        best = max(best, total)
    return best


def epsilon_for_delta(pmf, delta: float, tol: float = 1e-9) -> float:
    """Smallest eps with ``hockey_stick_delta(pmf, eps) <= delta`` (bisection; delta(eps) is non-increasing)."""
    pmf = _check_pmf(pmf)
    _check_eps_delta(1.0, delta)
    lo, hi = 0.0, 1.0
    while hockey_stick_delta(pmf, hi) > delta:
        hi *= 2
        if hi > 1e3:
            return math.inf
    while hi - lo > tol * max(1.0, hi):
        mid = (lo + hi) / 2
        if mid > 0 and hockey_stick_delta(pmf, mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


# ----- binomial mechanism (VBM) ---------------------------------------------------------------------------------


def binomial_noise_pmf(n_bits: int) -> np.ndarray:
    """pmf of ``sum of n_bits fair coins - n_bits/2`` over ``-n_bits/2 .. n_bits/2``; shape (n_bits + 1,)."""
    if isinstance(n_bits, bool) or not isinstance(n_bits, (int, np.integer)) or n_bits < 2 or n_bits % 2:
        raise ValueError(f"n_bits must be an even integer >= 2, got {n_bits!r}")
    return scipy.stats.binom.pmf(np.arange(n_bits + 1), n_bits, 0.5)


def min_binomial_bits(eps: float, delta: float) -> int:
    """Fewest (even) coins ``n_bits`` whose centred binomial noise makes counting exactly (eps, delta)-DP."""
    _check_eps_delta(eps, delta)

    def ok(n: int) -> bool:
        return hockey_stick_delta(binomial_noise_pmf(n), eps) <= delta

    hi = 2
    while not ok(hi):
        hi *= 2
    lo = hi // 2  # ok(lo) is False unless hi == 2
    if hi == 2:
        return 2
    # bisection over even n in (lo, hi]; delta(eps) falls as coins are added
    while hi - lo > 2:
        mid = (lo + hi) // 2
        mid += mid % 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def sample_binomial_noise(n_bits: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` draws of centred binomial noise (int64), via numpy's binomial sampler."""
    binomial_noise_pmf(n_bits)  # validates n_bits
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    return rng.binomial(n_bits, 0.5, size=size).astype(np.int64) - n_bits // 2


# ----- discrete Laplace from biased bits (VLM) ------------------------------------------------------------------


def geometric_bit_probs(eps0: float, n_bits: int) -> np.ndarray:
    """p_i = a^(2^i) / (1 + a^(2^i)), a = exp(-eps0), i < n_bits: the bit probabilities of a geometric's expansion."""
    _check_eps_delta(eps0)
    if n_bits < 1:
        raise ValueError(f"n_bits must be >= 1, got {n_bits}")
    # a^(2^i) / (1 + a^(2^i)) = 1 / (1 + exp(eps0 2^i)), computed without overflow
    return scipy.special.expit(-eps0 * 2.0 ** np.arange(n_bits))


def bit_thresholds(eps0: float, n_bits: int, precision: int) -> tuple[int, ...]:
    """T_i = round(p_i 2^precision): bit i is ``[U < T_i]`` for a uniform ``precision``-bit integer U."""
    if not 1 <= precision <= _MAX_PRECISION:
        raise ValueError(f"precision must be in [1, {_MAX_PRECISION}], got {precision}")
    return tuple(int(t) for t in np.rint(geometric_bit_probs(eps0, n_bits) * 2.0**precision))


def _check_thresholds(thresholds, precision: int) -> np.ndarray:
    if not 1 <= precision <= _MAX_PRECISION:
        raise ValueError(f"precision must be in [1, {_MAX_PRECISION}], got {precision}")
    t = np.asarray(thresholds, dtype=np.int64)
    if t.ndim != 1 or t.size == 0 or t.size > 24:
        raise ValueError(f"thresholds must be a 1-D sequence of 1..24 integers, got shape {t.shape}")
    if np.any(t < 0) or np.any(t > 2**precision):
        raise ValueError(f"thresholds must lie in [0, 2^precision], got {thresholds}")
    return t


def geometric_from_bits_pmf(thresholds, precision: int) -> np.ndarray:
    """pmf of ``G = sum_i 2^i [U_i < T_i]`` over ``0 .. 2^B - 1`` (B = len(thresholds)); shape (2^B,)."""
    t = _check_thresholds(thresholds, precision)
    p = t / 2.0**precision
    g = np.arange(2 ** t.size)
    bits = (g[:, None] >> np.arange(t.size)) & 1
    # P(G = g) = prod_i p_i^{b_i} (1 - p_i)^{1 - b_i}: the bits are independent
    return np.prod(np.where(bits == 1, p, 1.0 - p), axis=1)


def vlm_noise_pmf(thresholds, precision: int) -> np.ndarray:
    """pmf of ``Z = G1 - G2`` over ``-(2^B - 1) .. 2^B - 1``; shape (2^(B+1) - 1,)."""
    g = geometric_from_bits_pmf(thresholds, precision)
    # P(Z = z) = sum_g P(G1 = g + z) P(G2 = g)
    return np.convolve(g, g[::-1])


def vlm_noise_pmf_ref(thresholds, precision: int) -> np.ndarray:
    """Reference of :func:`vlm_noise_pmf` (same signature): enumerates every pattern of the 2B bits."""
    t = _check_thresholds(thresholds, precision)
    p = [float(v) / 2.0**precision for v in t]
    n = len(p)
    out = np.zeros(2 ** (n + 1) - 1)
    for pattern in range(4**n):
        prob, z = 1.0, 0
        for i in range(2 * n):
            bit = (pattern >> i) & 1
            pi = p[i % n]
            prob *= pi if bit else 1.0 - pi
            z += bit * (2 ** (i % n)) * (1 if i < n else -1)
        out[z + 2**n - 1] += prob
    return out


def sample_vlm_noise(thresholds, precision: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` draws of ``G1 - G2`` (int64) made exactly as the protocol makes them: bit i is ``[U < T_i]``."""
    t = _check_thresholds(thresholds, precision)
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    weights = 2 ** np.arange(t.size, dtype=np.int64)
    u = rng.integers(0, 2**precision, size=(2, size, t.size), dtype=np.int64)
    g = ((u < t).astype(np.int64) * weights).sum(axis=2)
    return g[0] - g[1]


@dataclass(frozen=True)
class VLMDesign:
    """A discrete-Laplace-from-bits design: which bits, how precise, and what it costs in randomness.

    ``coins`` = 2 B precision fair bits (each U is flipped by public coins); ``committed_bits`` = 2 B (2 precision
    + 1): per biased bit, the precision bits of U, the bit itself and the precision bits of the range witness.
    """

    eps: float
    delta: float
    eps0: float
    n_bits: int
    precision: int
    thresholds: tuple[int, ...]
    delta_exact: float

    @property
    def coins(self) -> int:
        return 2 * self.n_bits * self.precision

    @property
    def committed_bits(self) -> int:
        return 2 * self.n_bits * (2 * self.precision + 1)


def design_vlm(eps: float, delta: float) -> VLMDesign:
    """The cheapest (fewest committed bits) VLM design whose *exact* privacy loss meets (eps, delta).

    Searches bits B (up to where the tail a^(2^B) is far below delta), precision L and the design parameter
    eps0 in ``eps * (1, .98, .95, .9)``; ties go to the smaller noise variance.
    """
    _check_eps_delta(eps, delta)
    best = None
    for frac in _EPS0_FRACTIONS:
        eps0 = eps * frac
        # past this many bits the geometric tail a^(2^B) is below delta^2: more bits cannot help
        b_max = max(1, math.ceil(math.log2(2 * math.log(1 / delta) / eps0)) + 1)
        for n_bits in range(1, min(b_max, 20) + 1):
            for precision in range(1, _MAX_PRECISION + 1):
                cost = 2 * n_bits * (2 * precision + 1)
                if best is not None and cost > best[0]:
                    break
                thr = bit_thresholds(eps0, n_bits, precision)
                pmf = vlm_noise_pmf(thr, precision)
                d = hockey_stick_delta(pmf, eps)
                if d <= delta:
                    var = float(pmf @ (np.arange(pmf.size) - (pmf.size - 1) / 2) ** 2)
                    cand = (cost, var, VLMDesign(eps, delta, eps0, n_bits, precision, thr, d))
                    if best is None or cand[:2] < best[:2]:
                        best = cand
                    break
    return best[2]


# ----- continuous Laplace (the ideal the discrete designs approximate) ------------------------------------------


def sample_laplace_noise(eps: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` draws of Laplace(0, 1/eps) noise (float64), the textbook eps-DP counting noise; RMSE sqrt(2)/eps."""
    _check_eps_delta(eps)
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    return rng.laplace(0.0, 1.0 / eps, size=size)


def pmf_std(pmf) -> float:
    """Standard deviation of a centred (odd-length, symmetric-support) pmf: the RMSE it adds to a count."""
    pmf = _check_pmf(pmf)
    z = np.arange(pmf.size) - (pmf.size - 1) / 2
    return float(np.sqrt(pmf @ z**2 / pmf.sum()))


def total_variation(samples, pmf) -> float:
    """TV distance between the empirical law of integer ``samples`` and a centred ``pmf`` (mass off its support
    counts fully)."""
    pmf = _check_pmf(pmf)
    s = np.asarray(samples, dtype=np.int64)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"samples must be a non-empty 1-D integer array, got shape {s.shape}")
    half = (pmf.size - 1) // 2
    inside = (s >= -half) & (s <= half)
    emp = np.bincount(s[inside] + half, minlength=pmf.size) / s.size
    return float(0.5 * (np.abs(emp - pmf).sum() + (~inside).mean()))



def chi_square_log10_p(samples, pmf, min_expected: float = 5.0) -> float:
    """-log10 of the chi-square goodness-of-fit p-value of integer ``samples`` against a centred ``pmf``.

    Neighbouring cells are merged left to right until each bin expects ``min_expected`` draws (the usual validity
    rule); samples off the support are counted in the outermost bins, so they inflate the statistic. The p-value
    comes from ``scipy.stats.chi2.logsf`` (and, where that underflows, from the leading term of the tail's asymptotic
    expansion), so a gross misfit gives a large finite number. Under a correct sampler the result exceeds t with
    probability about 10^-t.
    """
    pmf = _check_pmf(pmf)
    s = np.asarray(samples, dtype=np.int64)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"samples must be a non-empty 1-D integer array, got shape {s.shape}")
    half = (pmf.size - 1) // 2
    observed = np.bincount(np.clip(s, -half, half) + half, minlength=pmf.size).astype(np.float64)
    expected = pmf / pmf.sum() * s.size
    edges, acc = [0], 0.0
    for i, e in enumerate(expected):
        acc += e
        if acc >= min_expected:
            edges.append(i + 1)
            acc = 0.0
    edges[-1] = pmf.size  # a short last bin joins the one before it
    if len(edges) < 3:
        raise ValueError(f"too few samples ({s.size}) for two bins of {min_expected} expected draws")
    obs, exp = np.add.reduceat(observed, edges[:-1]), np.add.reduceat(expected, edges[:-1])
    stat, dof = float(np.sum((obs - exp) ** 2 / exp)), obs.size - 1
    log_sf = scipy.stats.chi2.logsf(stat, dof)
    if not np.isfinite(log_sf):  # underflow for enormous misfits: leading term of the upper incomplete gamma
        log_sf = -stat / 2 + (dof / 2 - 1) * np.log(stat / 2) - scipy.special.gammaln(dof / 2)
    return float(-log_sf / np.log(10))


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    def inputs(rng, size):
        pmf = rng.random(max(size, 0))
        return {"pmf": pmf / pmf.sum() if size else pmf, "eps": 0.5}

    return [Kernel("dp_mechanisms.hockey_stick_delta", hockey_stick_delta, hockey_stick_delta_ref, inputs,
                   Contract(args=(Arg("pmf", ("float64",), 1, low=0.0, high=1.0),), empty="error",
                            shapes="pmf: (m,) >= 0 summing to 1"),
                   tol={"float64": (1e-12, 1e-15)}, oracle="walk over every output of both inputs")]


KERNELS = _registry()

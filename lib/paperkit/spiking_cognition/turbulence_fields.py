"""From spikes on a sheet to a phase field, its defects, structure function and avalanches (our reading).

Symbols: spikes ``s[t, i]`` of ``N = L^2`` neurons on an ``L x L`` torus (neuron ``i`` at cell ``pos[i]``);
frames of ``bin_steps`` steps; the activity density ``rho(x, f)`` (spike counts per cell and frame, Gaussian-smoothed
over space with width ``sigma`` cells, periodic); its band-passed version ``u`` (Butterworth, zero phase) and the
Hilbert phase ``phi = arg(u + i H[u])`` along time (``scipy.signal.hilbert``).

* phase defects: the winding number of ``phi`` around each plaquette ``(y, x) -> (y, x+1) -> (y+1, x+1) -> (y+1, x)``
  (sum of wrapped phase differences over 2 pi), +1 or -1 at a vortex (:func:`winding_numbers`);
* tracks: a defect continues into the next frame if a defect of the same charge lies within ``max_dist`` cells
  (torus distance; greedy nearest-first matching), lifetime = frames x frame length (:func:`track_lifetimes`);
* ``S2(r) = < |exp(i phi(x + r)) - exp(i phi(x))|^2 >`` over sites, frames and both axes
  (:func:`structure_function`), and its log-log slope and R^2 over a range of ``r``;
* field avalanches: runs of frames in which the number of cells whose band-passed field exceeds ``k`` of its
  standard deviation is above its median; size = the excess summed over the run (:func:`field_avalanches`); tails
  compared by maximum likelihood: power law, exponential, lognormal above ``xmin`` (:func:`tail_loglik_ratios`).
"""
from __future__ import annotations

import math

import numpy as np
from scipy import ndimage, optimize, signal, special, stats


def spike_field(spikes: np.ndarray, pos: np.ndarray, L: int, bin_steps: int, sigma: float) -> np.ndarray:
    """(F, L, L) activity density: counts of ``spikes`` ((T, N) bool) in frames of ``bin_steps`` steps, placed at
    ``pos`` ((N, 2) integer cells), smoothed with a periodic Gaussian of ``sigma`` cells."""
    T, N = spikes.shape
    F = T // bin_steps
    c = spikes[:F * bin_steps].reshape(F, bin_steps, N).sum(1).astype(np.float64)
    grid = np.zeros((F, L, L))
    p = np.asarray(pos, dtype=np.int64)
    flat = p[:, 0] * L + p[:, 1]
    if len(np.unique(flat)) == len(flat):          # one neuron per cell: a plain scatter
        grid.reshape(F, L * L)[:, flat] = c
    else:
        np.add.at(grid, (slice(None), p[:, 0], p[:, 1]), c)
    return ndimage.gaussian_filter(grid, (0, sigma, sigma), mode="wrap")


def hilbert_phase(field: np.ndarray, fs_hz: float, band: tuple[float, float], trim: int):
    """Band-pass ``field`` ((F, L, L)) along time (4th-order Butterworth, ``sosfiltfilt``) and return the Hilbert
    phase and amplitude, both (F - 2 trim, L, L) (``trim`` frames cut at each end against edge effects)."""
    sos = signal.butter(4, band, btype="band", fs=fs_hz, output="sos")
    u = signal.sosfiltfilt(sos, field - field.mean(0), axis=0)
    z = signal.hilbert(u, axis=0)[trim:len(u) - trim]
    return np.angle(z), np.abs(z)


def _wrap(a):
    return (a + np.pi) % (2 * np.pi) - np.pi


def winding_numbers(phi: np.ndarray) -> np.ndarray:
    """(F, L, L) int8 winding numbers of ``phi`` ((F, L, L), radians) around each periodic plaquette."""
    a = phi
    b = np.roll(phi, -1, 2)
    c = np.roll(b, -1, 1)
    d = np.roll(phi, -1, 1)
    w = _wrap(b - a) + _wrap(c - b) + _wrap(d - c) + _wrap(a - d)
    return np.rint(w / (2 * np.pi)).astype(np.int8)


def track_lifetimes(w: np.ndarray, max_dist: float = 1.5) -> np.ndarray:
    """Lifetimes in frames of defect tracks in ``w`` ((F, L, L) winding numbers; tracks still alive at the end
    are cut there). Greedy nearest-first matching of same-charge defects between consecutive frames."""
    F, L, _ = w.shape
    ages_prev = None
    pts_prev = None
    out = []
    for f in range(F):
        ys, xs = np.nonzero(w[f])
        q = w[f][ys, xs]
        pts = np.stack([ys, xs], 1)
        ages = np.ones(len(pts), dtype=np.int64)
        if pts_prev is not None and len(pts) and len(pts_prev):
            d = np.abs(pts_prev[:, None, :] - pts[None, :, :])
            d = np.minimum(d, L - d)
            dist = np.sqrt((d ** 2).sum(-1))
            dist[q_prev[:, None] != q[None, :]] = np.inf
            used_p = np.zeros(len(pts_prev), bool)
            used_c = np.zeros(len(pts), bool)
            order = np.argsort(dist, axis=None)
            for k in order:
                i, j = divmod(int(k), len(pts))
                if dist[i, j] > max_dist:
                    break
                if used_p[i] or used_c[j]:
                    continue
                used_p[i] = used_c[j] = True
                ages[j] = ages_prev[i] + 1
            out.extend(ages_prev[~used_p].tolist())
        elif pts_prev is not None:
            out.extend(ages_prev.tolist())
        pts_prev, ages_prev, q_prev = pts, ages, q
    if ages_prev is not None:
        out.extend(ages_prev.tolist())
    return np.array(out, dtype=np.int64)


def structure_function(phi: np.ndarray, rs) -> np.ndarray:
    """``S2(r)`` for each integer lag in ``rs`` (cells), averaged over both axes, all sites and frames."""
    z = np.exp(1j * phi)
    return np.array([0.5 * (np.abs(np.roll(z, r, 1) - z) ** 2).mean()
                     + 0.5 * (np.abs(np.roll(z, r, 2) - z) ** 2).mean() for r in rs])


def loglog_fit(r, s):
    """Slope and R^2 of the least-squares line of log s against log r."""
    x, y = np.log(np.asarray(r, float)), np.log(np.asarray(s, float))
    slope, icpt = np.polyfit(x, y, 1)
    resid = y - (slope * x + icpt)
    return float(slope), float(1 - resid.var() / y.var())


def field_avalanches(amp_u: np.ndarray, k: float = 1.0):
    """Avalanche sizes and durations (frames) of the band-passed field ``amp_u`` ((F, L, L)): the active-cell count
    ``n(f) = #{x : amp_u(x, f) > k sd}``; an avalanche is a run of frames with ``n`` above its median, its size the
    sum of ``n - median`` over the run."""
    n = (amp_u > k * amp_u.std()).reshape(len(amp_u), -1).sum(1).astype(float)
    med = np.median(n)
    above = n > med
    sizes, durs = [], []
    s, dcount = 0.0, 0
    for f in range(len(n)):
        if above[f]:
            s += n[f] - med
            dcount += 1
        elif dcount:
            sizes.append(s); durs.append(dcount); s, dcount = 0.0, 0
    if dcount:
        sizes.append(s); durs.append(dcount)
    return np.array(sizes), np.array(durs)


def tail_loglik_ratios(x: np.ndarray, xmin: float) -> dict:
    """Maximum-likelihood fits to ``x >= xmin`` (continuous): power law ``alpha``, exponential ``lambda``,
    lognormal truncated at ``xmin``. Returns ``alpha``, ``n_tail`` and the normalised log-likelihood ratios
    ``R_exp``, ``R_lognormal`` (Vuong: sum of pointwise differences over sqrt(n) sd; > 0 favours the power law)."""
    t = np.asarray(x, float)
    t = t[t >= xmin]
    n = len(t)
    if n < 10:
        return dict(alpha=float("nan"), n_tail=n, R_exp=float("nan"), R_lognormal=float("nan"))
    lx = np.log(t / xmin)
    alpha = 1 + n / lx.sum()
    l_pl = np.log(alpha - 1) - np.log(xmin) - alpha * lx
    lam = 1 / (t - xmin).mean()
    l_ex = np.log(lam) - lam * (t - xmin)

    def nll(th):
        mu, ls = th
        sd = math.exp(ls)
        z = (np.log(t) - mu) / sd
        tail = special.log_ndtr(-(math.log(xmin) - mu) / sd)
        return -(-np.log(t) - math.log(sd) - 0.5 * math.log(2 * math.pi) - 0.5 * z ** 2 - tail).sum()

    lt = np.log(t)
    res = optimize.minimize(nll, [lt.mean(), math.log(lt.std() + 1e-3)], method="Nelder-Mead",
                            options=dict(xatol=1e-6, fatol=1e-8, maxiter=2000))
    mu, sd = res.x[0], math.exp(res.x[1])
    l_ln = (-lt - math.log(sd) - 0.5 * math.log(2 * math.pi) - 0.5 * ((lt - mu) / sd) ** 2
            - special.log_ndtr(-(math.log(xmin) - mu) / sd))

    def vuong(a, b):
        d = a - b
        return float(d.sum() / (math.sqrt(n) * d.std() + 1e-300))

    return dict(alpha=float(alpha), n_tail=n, R_exp=vuong(l_pl, l_ex), R_lognormal=vuong(l_pl, l_ln))


def shuffle_spike_times(rng: np.random.Generator, spikes: np.ndarray) -> np.ndarray:
    """Each neuron's spike train circularly shifted by its own random offset: rates and ISIs kept, the timing
    between neurons destroyed."""
    T, N = spikes.shape
    sh = rng.integers(0, T, N)
    idx = (np.arange(T)[:, None] - sh[None, :]) % T
    return np.take_along_axis(spikes, idx, 0)


def poisson_null(rng: np.random.Generator, spikes: np.ndarray) -> np.ndarray:
    """Independent Bernoulli spikes with each neuron's own rate (the pipeline null: no coupling at all)."""
    p = spikes.mean(0)
    return rng.random(spikes.shape) < p[None, :]

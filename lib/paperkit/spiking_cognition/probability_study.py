"""Simulated probability-estimation observers and the models fitted to them (the study of the chapter on inverse-S
probability distortion; the observer and its likelihood are in :mod:`paperkit.spiking_cognition.probability_coding`).

An *observer* is a true encoding ``F`` (values on a fine grid), a prior per condition, the encoding noise ``sigma``
and the motor noise ``tau``; :func:`simulate` draws its reports ``r = phat(F(p) + sigma eps) + tau eta``.

The fitted models (:func:`fit`), all by maximum likelihood with L-BFGS in Torch on the training trials, scored by
their log likelihood on held-out trials (:func:`heldout_loglik`):

* ``"free"``: free encoding precision ``F'`` (``n_enc`` bins, one encoding for both conditions) and a free prior per
  condition (``n_prior`` bins), ``sigma``, ``tau``;
* ``"free_sep"``: the same with one free encoding per condition;
* ``"uniform"``: ``F(p) = p``, free priors (the uniform-encoding Bayesian observer);
* ``"efficient"``: ``F' proportional to pi^kappa`` in each condition (``kappa >= 0`` fitted; ``kappa = 1`` is the
  efficient code of Wei and Stocker), free priors;
* ``"prelec"`` and ``"llo"``: a deterministic weighting function per condition plus Gaussian report noise whose
  standard deviation may shrink toward the bounds, ``sd(p)^2 = s0^2 + s1^2 w(p) (1 - w(p))`` (``s0``, ``s1`` per
  condition; constant noise is the limit ``s1 = 0``), so that the rivals are not beaten merely by a noise model
  that cannot narrow near 0 and 1.
"""
from __future__ import annotations

import numpy as np
import torch

from paperkit.spiking_cognition import probability_coding as pc

MODELS = ("free", "free_sep", "uniform", "efficient", "prelec", "llo")


# ------------------------------------------------------------------------------------------ observers

def arcsine_encoding(p: np.ndarray) -> np.ndarray:
    """``F(p) = (2/pi) arcsin(sqrt p)``: precision ``F'(p) = 1 / (pi sqrt(p (1-p)))``, U-shaped (the ground truth)."""
    return 2 / np.pi * np.arcsin(np.sqrt(np.clip(p, 0, 1)))


def power_encoding(p: np.ndarray, alpha: float, c: float = 0.01, n: int = 4001) -> np.ndarray:
    """``F`` with ``F' proportional to (p (1-p) + c)^(-alpha)`` (U-shaped for ``alpha > 0``, uniform at 0,
    peaked at 0.5 for ``alpha < 0``), by a trapezoid rule on ``n`` points, normalised to ``F(1) = 1``."""
    x = np.linspace(0, 1, n)
    d = (x * (1 - x) + c) ** (-alpha)
    cum = np.concatenate([[0.0], np.cumsum((d[1:] + d[:-1]) / 2)])
    return np.interp(p, x, cum / cum[-1])


def beta_mixture_logpdf(p: np.ndarray, comps) -> np.ndarray:
    """Log density of a mixture of Beta distributions ``comps = [(weight, a, b), ...]`` at ``p`` (any shape)."""
    from scipy import stats

    return np.log(sum(w * stats.beta(a, b).pdf(p) for w, a, b in comps))


def simulate(rng: np.random.Generator, p: np.ndarray, F, log_prior, sigma: float, tau: float,
             n_grid: int = 1000) -> np.ndarray:
    """Reports of a Bayesian observer to stimuli ``p`` (T,): ``F`` and ``log_prior`` are callables of ``p`` (the
    prior is placed on ``n_grid`` cell centres), posterior mean decoding, motor noise ``tau``. Returns (T,)."""
    pg = (np.arange(n_grid) + 0.5) / n_grid
    m = F(p) + sigma * rng.standard_normal(len(p))
    return pc.posterior_mean(m, pg, F(pg), log_prior(pg), sigma) + tau * rng.standard_normal(len(p))


def simulate_weighting(rng: np.random.Generator, p: np.ndarray, w, sd: float, sd_bin: float = 0.0) -> np.ndarray:
    """Reports of a weighting-function observer (a competing hypothesis): ``r = w(p) + s(p) * eta`` with
    ``s(p)^2 = sd^2 + sd_bin^2 w(p) (1 - w(p))`` (constant noise when ``sd_bin = 0``). ``p``: (T,). Returns (T,)."""
    wp = w(p)
    return wp + np.sqrt(sd ** 2 + sd_bin ** 2 * wp * (1 - wp)) * rng.standard_normal(len(p))


def split(rng: np.random.Generator, cond: np.ndarray, test_share: float) -> np.ndarray:
    """Boolean test mask (T,), the same share of test trials in each condition."""
    test = np.zeros(len(cond), bool)
    for c in np.unique(cond):
        idx = np.flatnonzero(cond == c)
        test[rng.choice(idx, int(round(test_share * len(idx))), replace=False)] = True
    return test


# ------------------------------------------------------------------------------------------ models in Torch

def _enc_values(p: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    K = a.shape[-1]
    t = torch.clamp(p[:, None] * K - torch.arange(K, dtype=p.dtype), 0.0, 1.0)
    return t @ a


class Fit:
    """A fitted model: ``kind`` (one of :data:`MODELS`), its Torch parameters and how to evaluate it."""

    def __init__(self, kind: str, n_cond: int, n_enc: int, n_prior: int, n_grid: int, m_grid: np.ndarray):
        if kind not in MODELS:
            raise ValueError(f"kind must be one of {MODELS}, got {kind!r}")
        self.kind, self.n_cond, self.n_prior = kind, n_cond, n_prior
        dt = torch.float64
        self.pg = torch.tensor((np.arange(n_grid) + 0.5) / n_grid, dtype=dt)
        self.mg = torch.tensor(m_grid, dtype=dt)
        self.bin_of = torch.tensor(np.minimum((np.arange(n_grid) + 0.5) / n_grid * n_prior, n_prior - 1)
                                   .astype(int))
        z = lambda *s: torch.zeros(*s, dtype=dt, requires_grad=True)
        if kind in ("prelec", "llo"):
            self.theta = {"w1": z(n_cond), "w2": z(n_cond), "log_sd": z(n_cond), "log_sd_bin": z(n_cond)}
            with torch.no_grad():
                self.theta["log_sd"] += np.log(0.05)
                self.theta["log_sd_bin"] += np.log(0.1)
        else:
            self.theta = {"prior": z(n_cond, n_prior), "log_sigma": z(()), "log_tau": z(())}
            with torch.no_grad():
                self.theta["log_sigma"] += np.log(0.1)
                self.theta["log_tau"] += np.log(0.05)
            if kind == "free":
                self.theta["enc"] = z(n_enc)
            elif kind == "free_sep":
                self.theta["enc"] = z(n_cond, n_enc)
            elif kind == "efficient":
                self.theta["kappa"] = z(())

    def increments(self, c: int) -> torch.Tensor:
        """Bin increments ``a`` of the encoding in condition ``c`` (``F' = a_k * K`` on bin ``k``)."""
        th = self.theta
        if self.kind == "free":
            return torch.softmax(th["enc"], 0)
        if self.kind == "free_sep":
            return torch.softmax(th["enc"][c], 0)
        if self.kind == "uniform":
            return torch.full((self.n_prior,), 1.0 / self.n_prior, dtype=torch.float64)
        kappa = torch.nn.functional.softplus(th["kappa"] + 0.5413)       # softplus(0.5413) = 1: start at kappa = 1
        return torch.softmax(kappa * torch.log_softmax(th["prior"][c], 0), 0)

    def prior(self, c: int) -> torch.Tensor:
        """Prior mass of the ``n_prior`` bins in condition ``c``."""
        return torch.softmax(self.theta["prior"][c], 0)

    def loglik(self, r: torch.Tensor, p: torch.Tensor, c: int) -> torch.Tensor:
        """Log likelihood of reports ``r`` to stimuli ``p`` in condition ``c`` (both (T,)), one value per trial."""
        th = self.theta
        if self.kind in ("prelec", "llo"):
            pp = torch.clamp(p, 1e-9, 1 - 1e-9)
            if self.kind == "prelec":
                w = torch.exp(-torch.exp(th["w2"][c]) * (-torch.log(pp)) ** torch.exp(th["w1"][c]))
            else:
                w = torch.sigmoid(torch.exp(th["w1"][c]) * torch.log(pp / (1 - pp)) + th["w2"][c])
            # report noise sd(p)^2 = s0^2 + s1^2 w (1 - w): constant noise is the limit s1 -> 0
            sd = torch.sqrt(torch.exp(2 * th["log_sd"][c]) + torch.exp(2 * th["log_sd_bin"][c]) * w * (1 - w))
            return -0.5 * ((r - w) / sd) ** 2 - torch.log(sd) - pc.LOG_SQRT_2PI
        a = self.increments(c)
        sigma, tau = torch.exp(th["log_sigma"]), torch.exp(th["log_tau"])
        log_w = torch.log_softmax(th["prior"][c], 0)[self.bin_of]
        phat = pc.posterior_mean_torch(self.mg, self.pg, _enc_values(self.pg, a), log_w, sigma)
        return pc.trial_loglik_torch(r, _enc_values(p, a), self.mg, phat, sigma, tau)

    def penalty(self) -> torch.Tensor:
        """Smoothness penalty: squared second differences of the free logits (encoding and priors)."""
        th, out = self.theta, torch.zeros((), dtype=torch.float64)
        for key in ("enc", "prior"):
            if key in th:
                x = th[key] if th[key].dim() == 2 else th[key][None]
                out = out + ((x[:, 2:] - 2 * x[:, 1:-1] + x[:, :-2]) ** 2).sum()
        return out

    def precision(self, c: int = 0) -> np.ndarray:
        """The fitted ``F'`` on each encoding bin (its mean is 1)."""
        a = self.increments(c).detach().numpy()
        return a * len(a)


def fit(kind: str, r: np.ndarray, p: np.ndarray, cond: np.ndarray, *, n_enc: int = 10, n_prior: int = 12,
        n_grid: int = 120, n_m: int = 181, smooth: float = 1.0, max_iter: int = 150) -> Fit:
    """Fit model ``kind`` to reports ``r``, stimuli ``p`` and condition labels ``cond`` (T,) by L-BFGS on the
    negative log likelihood plus ``smooth`` times :meth:`Fit.penalty`. Deterministic (starts from flat values)."""
    n_cond = int(cond.max()) + 1
    model = Fit(kind, n_cond, n_enc, n_prior, n_grid, np.linspace(-0.45, 1.45, n_m))
    data = [(torch.tensor(r[cond == c]), torch.tensor(p[cond == c])) for c in range(n_cond)]
    opt = torch.optim.LBFGS(list(model.theta.values()), lr=1.0, max_iter=max_iter, history_size=20,
                            line_search_fn="strong_wolfe", tolerance_grad=1e-7, tolerance_change=1e-10)

    def closure():
        opt.zero_grad()
        loss = -sum(model.loglik(rc, pc_, c).sum() for c, (rc, pc_) in enumerate(data)) + smooth * model.penalty()
        loss.backward()
        return loss

    opt.step(closure)
    return model


def heldout_loglik(model: Fit, r: np.ndarray, p: np.ndarray, cond: np.ndarray) -> np.ndarray:
    """Per-trial log likelihood (T,) of ``model`` on the given (held-out) trials."""
    out = np.zeros(len(r))
    with torch.no_grad():
        for c in np.unique(cond):
            idx = cond == c
            out[idx] = model.loglik(torch.tensor(r[idx]), torch.tensor(p[idx]), int(c)).numpy()
    return out


def paired_bound(ll_a: np.ndarray, ll_b: np.ndarray) -> tuple[float, float]:
    """Mean per-trial NLL difference ``NLL_a - NLL_b`` over the same trials and the upper end of its two-standard-
    error interval (negative: ``a`` predicts the held-out reports better)."""
    d = ll_b - ll_a
    return float(d.mean()), float(d.mean() + 2 * d.std(ddof=1) / np.sqrt(len(d)))


def u_index(prec: np.ndarray) -> float:
    """Log ratio of the fitted precision at the two outer bins to the two central bins (> 0: U-shaped)."""
    K = len(prec)
    mid = prec[K // 2 - 1:K // 2 + 1].mean() if K % 2 == 0 else prec[K // 2]
    return float(np.log(0.5 * (prec[0] + prec[-1]) / mid))


# ------------------------------------------------------------------------------------------ forward-model readouts

def smooth_observer(c: float = 0.05, lam: float = 1.2) -> dict:
    """A smooth test observer in closed form: precision ``F' proportional to (p (1-p) + c)^(-1/2)`` (U-shaped,
    finite at the bounds) and prior ``pi(p) proportional to exp(lam p)``. Returns callables ``F``, ``dF``, ``d2F``,
    ``prior`` (density), ``log_prior``, ``dlog_prior``."""
    R = np.sqrt(c + 0.25)
    A = 2 * np.arcsin(0.5 / R)
    F = lambda p: (np.arcsin((np.asarray(p) - 0.5) / R) + np.arcsin(0.5 / R)) / A
    dF = lambda p: 1 / (A * np.sqrt(R ** 2 - (np.asarray(p) - 0.5) ** 2))
    d2F = lambda p: dF(p) * (np.asarray(p) - 0.5) / (R ** 2 - (np.asarray(p) - 0.5) ** 2)
    Z = (np.exp(lam) - 1) / lam
    return {"F": F, "dF": dF, "d2F": d2F, "prior": lambda p: np.exp(lam * np.asarray(p)) / Z,
            "log_prior": lambda p: lam * np.asarray(p) - np.log(Z), "dlog_prior": lambda p: lam + 0 * np.asarray(p)}


def mean_curve(p: np.ndarray, F, log_prior, sigma: float, n_grid: int = 1000, n_m: int = 1201):
    """``E[phat | p]`` and the standard deviation of ``phat`` for stimuli ``p`` (N,), for the observer with encoding
    ``F`` and prior ``log_prior`` (callables), on ``n_grid`` cell centres and ``n_m`` measurements."""
    pg = (np.arange(n_grid) + 0.5) / n_grid
    return pc.estimate_moments(p, pg, F(pg), log_prior(pg), sigma, F_p=F(p), n_m=n_m)


def slopes(F, log_prior, sigma: float, h: float = 0.01, edge: float = 0.05) -> tuple[float, float]:
    """Slope of the mean estimate ``dE[phat]/dp`` near the bounds (the smaller of the slopes at ``edge`` and
    ``1 - edge``) and at 0.5, by central differences of :func:`mean_curve`."""
    x = np.array([edge - h, edge + h, 0.5 - h, 0.5 + h, 1 - edge - h, 1 - edge + h])
    e = mean_curve(x, F, log_prior, sigma)[0]
    d = (e[1::2] - e[::2]) / (2 * h)
    return float(min(d[0], d[2])), float(d[1])


def inverse_s_index(F, log_prior, sigma: float) -> float:
    """``min(1 - s_mid, s_edge - s_mid)`` from :func:`slopes`: positive when the mean estimate is flatter than the
    identity in the middle *and* steeper near the bounds than in the middle (the inverse S)."""
    s_edge, s_mid = slopes(F, log_prior, sigma)
    return min(1 - s_mid, s_edge - s_mid)


# ------------------------------------------------------------------------------------------ one experiment

def stimuli(rng: np.random.Generator, n_levels: int, n_trials: int, comps) -> tuple[np.ndarray, np.ndarray]:
    """Stimuli of the two conditions: ``n_levels`` equally spaced levels in (0, 1); condition 0 shows every level
    ``n_trials`` times (uniform statistics), condition 1 draws as many trials from the levels with probabilities
    proportional to the Beta mixture ``comps`` (bimodal statistics). Returns ``p`` and ``cond`` (both (T,))."""
    levels = np.arange(1, n_levels + 1) / (n_levels + 1)
    w = np.exp(beta_mixture_logpdf(levels, comps))
    pB = rng.choice(levels, n_levels * n_trials, p=w / w.sum())
    p = np.concatenate([np.repeat(levels, n_trials), pB])
    return p, np.repeat([0, 1], n_levels * n_trials)


def respond(rng: np.random.Generator, p: np.ndarray, cond: np.ndarray, encodings, log_priors, sigma: float,
            tau: float) -> np.ndarray:
    """Reports of a Bayesian observer whose encoding and prior in condition ``c`` are ``encodings[c]`` and
    ``log_priors[c]`` (callables). Returns (T,)."""
    r = np.empty(len(p))
    for c in (0, 1):
        idx = cond == c
        r[idx] = simulate(rng, p[idx], encodings[c], log_priors[c], sigma, tau)
    return r


def compare(rng: np.random.Generator, p: np.ndarray, r: np.ndarray, cond: np.ndarray, kinds, test_share: float,
            **fit_kw) -> dict:
    """Fit each model in ``kinds`` on a random training share of the trials and score it on the rest. Returns
    ``{"test": mask, "fits": {kind: Fit}, "ll": {kind: per-trial held-out log likelihood}}``."""
    test = split(rng, cond, test_share)
    fits = {k: fit(k, r[~test], p[~test], cond[~test], **fit_kw) for k in kinds}
    return {"test": test, "fits": fits,
            "ll": {k: heldout_loglik(f, r[test], p[test], cond[test]) for k, f in fits.items()}}


def true_precision(F, n_bins: int) -> np.ndarray:
    """Mean precision ``F'`` of the encoding ``F`` on each of ``n_bins`` equal bins (comparable to
    :meth:`Fit.precision`)."""
    e = np.linspace(0, 1, n_bins + 1)
    return np.diff(F(e)) * n_bins


def binned_prior(log_prior, n_bins: int, n: int = 4000) -> np.ndarray:
    """Mass of the prior ``exp(log_prior)`` in each of ``n_bins`` equal bins (midpoint rule on ``n`` cells)."""
    x = (np.arange(n) + 0.5) / n
    w = np.exp(log_prior(x))
    return np.bincount(np.minimum((x * n_bins).astype(int), n_bins - 1), w, n_bins) / w.sum()

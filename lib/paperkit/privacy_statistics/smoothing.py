"""Randomized-smoothing certificates (Cohen, Rosenfeld and Kolter 2019, CERTIFY) in Torch, with forward passes counted.

The smoothed classifier ``g(x) = argmax_c P(f(x + eps) = c)``, ``eps ~ N(0, sigma^2 I)``, is certified at ``x`` by
Monte-Carlo: ``n0`` noisy copies pick the candidate class ``c_A``, ``n`` fresh copies count how often the base
classifier ``f`` returns ``c_A``, a one-sided Clopper-Pearson bound turns the count into ``p_A_lower`` (valid with
probability ``1 - alpha``), and if ``p_A_lower > 1/2`` the prediction is certified within the L2 radius
``R = sigma * Phi^-1(p_A_lower)``; otherwise the certificate abstains (class ``-1``, radius ``0``).

* :func:`certify`: batched over inputs (one forward pass of ``chunk * (n0 + n)`` rows at a time).
* :func:`certify_ref`: the plain per-input reference of the same signature (one forward pass per input).
* :func:`smooth_adv_attack` / :func:`smooth_adv_attack_ref`: an L2 attack on the *smoothed* classifier
  (SmoothAdv, Salman et al. 2019), batched and per input: projected gradient ascent on
  ``-log mean_j softmax(f(x + delta + eps_j))[c]`` over ``||delta||_2 <= radius``, to look for inputs whose
  smoothed prediction a perturbation flips.

Both draw the noise of input ``i`` as ``randn(n0 + n, d)`` from ``generator`` in input order, so with the same
generator state they see the same noise and return the same counts (up to float round-off in the matmuls).
Every row pushed through ``model`` is counted: a "forward pass" here is one noisy copy of one input, the unit in
which the paper prices randomized smoothing (``n0 + n`` per input) against its proxy (one per input).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import beta, norm

# Rows per forward pass in the batched kernel: a ~25 MiB noise block for MNIST-sized inputs (larger blocks fall out
# of cache on CPU and gain nothing).
_MAX_ROWS = 8192


@dataclass
class Certificate:
    """CERTIFY's output for ``m`` inputs.

    ``cls`` (m,) int64: the certified class ``c_A`` or ``-1`` (abstain); ``radius`` (m,) float64: certified L2 radius
    (``0`` when abstaining); ``p_lower`` (m,) float64: Clopper-Pearson lower bound on ``p_A``; ``counts`` (m, C)
    int64: class counts of the ``n`` estimation draws; ``n_forward``: rows pushed through the model in all.
    """

    cls: np.ndarray
    radius: np.ndarray
    p_lower: np.ndarray
    counts: np.ndarray
    n_forward: int


def clopper_pearson_lower(k, n: int, alpha: float) -> np.ndarray:
    """One-sided ``1 - alpha`` Clopper-Pearson lower bound on a binomial proportion from ``k`` successes in ``n``.

    Equal to the lower end of the two-sided exact interval at level ``1 - 2 alpha`` (what Cohen et al. call via
    statsmodels' ``proportion_confint(k, n, 2 alpha, method="beta")``).
    """
    k = np.asarray(k, dtype=np.float64)
    if isinstance(n, bool) or not float(n).is_integer() or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if np.any(np.isnan(k)) or np.any(k != np.round(k)):
        raise ValueError("k must hold integer counts (no NaN, no fractions)")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if np.any((k < 0) | (k > n)):
        raise ValueError(f"k must lie in [0, n={n}]")
    # p_lower = Beta^-1(alpha; k, n - k + 1), and 0 when k = 0
    safe_k = np.maximum(k, 1.0)
    return np.where(k > 0, beta.ppf(alpha, safe_k, n - safe_k + 1), 0.0)


def certified_radius(p_lower, sigma: float) -> np.ndarray:
    """``R = sigma * Phi^-1(p_lower)`` where ``p_lower > 1/2``, else ``0`` (abstain)."""
    p_lower = np.asarray(p_lower, dtype=np.float64)
    if np.any(np.isnan(p_lower)) or np.any((p_lower < 0) | (p_lower > 1)):
        raise ValueError("p_lower must hold probabilities in [0, 1]")
    if not (isinstance(sigma, (int, float, np.floating)) and np.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be a finite number > 0, got {sigma!r}")
    return np.where(p_lower > 0.5, sigma * norm.ppf(np.clip(p_lower, 0.5, 1.0)), 0.0)


def _check(model, x, sigma, n0, n, alpha, num_classes) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or x.ndim != 2:
        raise ValueError(f"x must be a 2-D tensor (m, d), got {getattr(x, 'shape', type(x))}")
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    for name, v in (("n0", n0), ("n", n), ("num_classes", num_classes)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not callable(model):
        raise ValueError("model must be callable on a (rows, d) tensor")
    return x


def _noise(generator: torch.Generator, rows: int, x: torch.Tensor) -> torch.Tensor:
    """``randn(rows, d)`` drawn on the generator's device in ``x``'s dtype, then moved to ``x``'s device."""
    eps = torch.randn(rows, x.shape[1], generator=generator, device=generator.device, dtype=x.dtype)
    return eps.to(x.device)


def _finish(counts0: np.ndarray, counts: np.ndarray, n: int, sigma: float, alpha: float, n_forward: int):
    m = counts.shape[0]
    # c_A = argmax of the selection counts (ties to the lower class, as numpy's argmax)
    c_a = counts0.argmax(axis=1)
    n_a = counts[np.arange(m), c_a]
    p_lower = clopper_pearson_lower(n_a, n, alpha)
    radius = certified_radius(p_lower, sigma)
    cls = np.where(p_lower > 0.5, c_a, -1)
    return Certificate(cls.astype(np.int64), radius, p_lower, counts, n_forward)


@torch.no_grad()
def certify(model, x: torch.Tensor, sigma: float, n0: int, n: int, alpha: float, num_classes: int,
            generator: torch.Generator) -> Certificate:
    """CERTIFY for every row of ``x`` (m, d), batched: many inputs' noisy copies share one forward pass.

    ``model`` maps (rows, d) to logits (rows, num_classes); ``sigma`` is the noise level, ``n0`` the selection and
    ``n`` the estimation sample size, ``alpha`` the failure probability of each certificate.
    """
    x = _check(model, x, sigma, n0, n, alpha, num_classes)
    m, k = x.shape[0], n0 + n
    chunk = max(1, _MAX_ROWS // k)
    counts0 = np.zeros((m, num_classes), dtype=np.int64)
    counts = np.zeros((m, num_classes), dtype=np.int64)
    n_forward = 0
    for start in range(0, m, chunk):
        xs = x[start:start + chunk]
        # x_i + sigma * eps_i for every input of the chunk, built in place: (b, n0 + n, d) -> (b (n0 + n), d)
        noisy = torch.cat([_noise(generator, k, x) for _ in range(xs.shape[0])])
        noisy = noisy.mul_(sigma).view(xs.shape[0], k, -1).add_(xs[:, None, :]).view(-1, x.shape[1])
        pred = model(noisy).argmax(dim=1).reshape(xs.shape[0], k)
        n_forward += noisy.shape[0]
        # one bincount over (input, class) pairs gives every input's class counts at once
        offs = torch.arange(xs.shape[0], device=pred.device)[:, None] * num_classes
        c0 = torch.bincount((pred[:, :n0] + offs).ravel(), minlength=xs.shape[0] * num_classes)
        c1 = torch.bincount((pred[:, n0:] + offs).ravel(), minlength=xs.shape[0] * num_classes)
        counts0[start:start + xs.shape[0]] = c0.reshape(-1, num_classes).cpu().numpy()
        counts[start:start + xs.shape[0]] = c1.reshape(-1, num_classes).cpu().numpy()
    return _finish(counts0, counts, n, sigma, alpha, n_forward)


@torch.no_grad()
def certify_ref(model, x: torch.Tensor, sigma: float, n0: int, n: int, alpha: float, num_classes: int,
                generator: torch.Generator) -> Certificate:
    """Plain reference of :func:`certify`: one input at a time, its ``n0 + n`` noisy copies in one forward pass."""
    x = _check(model, x, sigma, n0, n, alpha, num_classes)
    m = x.shape[0]
    counts0 = np.zeros((m, num_classes), dtype=np.int64)
    counts = np.zeros((m, num_classes), dtype=np.int64)
    n_forward = 0
    for i in range(m):
        eps = _noise(generator, n0 + n, x)
        pred = model(x[i] + sigma * eps).argmax(dim=1).cpu().numpy()
        n_forward += n0 + n
        counts0[i] = np.bincount(pred[:n0], minlength=num_classes)
        counts[i] = np.bincount(pred[n0:], minlength=num_classes)
    return _finish(counts0, counts, n, sigma, alpha, n_forward)


def _check_attack(model, x, cls, sigma, radius, steps, m) -> None:
    if not isinstance(x, torch.Tensor) or x.ndim != 2:
        raise ValueError(f"x must be a 2-D tensor (m, d), got {getattr(x, 'shape', type(x))}")
    if not isinstance(cls, torch.Tensor) or cls.shape != (x.shape[0],) or cls.dtype != torch.int64:
        raise ValueError(f"cls must be an int64 tensor of shape ({x.shape[0]},), got {getattr(cls, 'shape', cls)}")
    if not torch.isfinite(x).all():
        raise ValueError("x contains NaN or inf")
    if not (isinstance(sigma, (int, float)) and np.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be a finite number > 0, got {sigma!r}")
    if not (isinstance(radius, (int, float)) and np.isfinite(radius) and radius >= 0):
        raise ValueError(f"radius must be a finite number >= 0, got {radius!r}")
    for name, v in (("steps", steps), ("m", m)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if not callable(model):
        raise ValueError("model must be callable on a (rows, d) tensor")


def _pgd(model, x, cls, eps, sigma, radius):
    """Projected gradient ascent of the SmoothAdv loss; ``eps`` (b, steps, m, d) is the noise of every step."""
    steps = eps.shape[1]
    delta = torch.zeros_like(x)
    with torch.enable_grad():
        return _pgd_steps(model, x, cls, eps, sigma, radius, steps, delta)


def _pgd_steps(model, x, cls, eps, sigma, radius, steps, delta):
    for k in range(steps):
        delta.requires_grad_(True)
        noisy = (x + delta)[:, None, :] + sigma * eps[:, k]                      # (b, m, d)
        p = model(noisy.reshape(-1, x.shape[1])).softmax(dim=1).reshape(x.shape[0], eps.shape[2], -1).mean(dim=1)
        loss = -torch.log(p.gather(1, cls[:, None]).clamp_min(1e-30)).sum()
        (grad,) = torch.autograd.grad(loss, delta)
        # normalised L2 step of 2.5 radius / steps (Madry et al.'s rule), then back onto the ball
        step = grad / grad.norm(dim=1, keepdim=True).clamp_min(1e-30)
        delta = delta.detach() + (2.5 * radius / steps) * step
        norm = delta.norm(dim=1, keepdim=True)
        delta = delta * torch.clamp(radius / norm.clamp_min(1e-30), max=1.0)
    return (x + delta).detach()


def smooth_adv_attack(model, x: torch.Tensor, cls: torch.Tensor, sigma: float, radius: float, steps: int, m: int,
                      generator: torch.Generator) -> torch.Tensor:
    """SmoothAdv L2 attack on the smoothed classifier, batched over inputs.

    ``x`` (b, d) inputs, ``cls`` (b,) int64 the class to move away from (``c``), ``sigma`` the smoothing noise,
    ``radius`` the L2 budget, ``steps`` gradient steps with ``m`` noise draws each. Returns ``x + delta`` (b, d)
    with ``||delta||_2 <= radius`` (no clipping to a pixel box: the certificate covers the whole ball). Input
    ``i``'s noise is ``randn(steps * m, d)`` from ``generator`` in input order, as in :func:`smooth_adv_attack_ref`.
    Costs ``b * steps * m`` forward and backward passes.
    """
    _check_attack(model, x, cls, sigma, radius, steps, m)
    chunk = max(1, _MAX_ROWS // (steps * m))
    out = []
    for start in range(0, x.shape[0], chunk):
        xs = x[start:start + chunk]
        eps = torch.stack([_noise(generator, steps * m, x) for _ in range(xs.shape[0])])
        out.append(_pgd(model, xs, cls[start:start + chunk], eps.view(xs.shape[0], steps, m, -1), sigma, radius))
    return torch.cat(out) if out else x.clone()


def smooth_adv_attack_ref(model, x: torch.Tensor, cls: torch.Tensor, sigma: float, radius: float, steps: int,
                          m: int, generator: torch.Generator) -> torch.Tensor:
    """Plain reference of :func:`smooth_adv_attack`: one input at a time, the same noise draws."""
    _check_attack(model, x, cls, sigma, radius, steps, m)
    rows = [_pgd(model, x[i:i + 1], cls[i:i + 1], _noise(generator, steps * m, x).view(1, steps, m, -1), sigma,
                 radius) for i in range(x.shape[0])]
    return torch.cat(rows) if rows else x.clone()


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Contract, Kernel

    def inputs(rng, size):
        net = torch.nn.Linear(3, 2).double()
        with torch.no_grad():
            net.weight.copy_(torch.from_numpy(rng.normal(size=(2, 3))))
            net.bias.copy_(torch.from_numpy(rng.normal(size=2)))
        return {"model": net, "x": torch.from_numpy(rng.normal(size=(2, 3))), "sigma": 0.5, "n0": 4, "n": 20,
                "alpha": 0.01, "num_classes": 2, "generator": torch.Generator().manual_seed(int(rng.integers(99)))}

    def attack_inputs(rng, size):
        args = inputs(rng, size)
        x = torch.from_numpy(rng.normal(size=(size, 3)))
        return {"model": args["model"], "x": x, "cls": torch.from_numpy(rng.integers(0, 2, size)),
                "sigma": 0.5, "radius": 0.3, "steps": 3, "m": 4, "generator": args["generator"]}

    return [Kernel("smoothing.certify", certify, certify_ref, inputs, Contract(empty="value",
                   shapes="x: (m, d); model maps (rows, d) to (rows, num_classes) logits"),
                   tol={"float64": (1e-12, 1e-12)}, oracle="Cohen et al.'s CERTIFY, statsmodels' beta interval"),
            Kernel("smoothing.smooth_adv_attack", smooth_adv_attack, smooth_adv_attack_ref, attack_inputs,
                   Contract(empty="value", shapes="x: (b, d); cls: (b,) int64; returns (b, d)"),
                   tol={"float64": (1e-12, 1e-12)},
                   oracle="closed-form optimal L2 attack on a linear classifier (step against the normal)")]


KERNELS = _registry()

"""Batched two-point zeroth-order (ZO) gradient estimates in Torch, with matched or mismatched data.

The estimator, for a stochastic oracle ``F(theta; xi)`` and a Gaussian direction ``u``, is
``g_hat = [F(theta + mu u; xi_plus) - F(theta - mu u; xi_minus)] / (2 mu) * u``. It is *matched* when both
evaluations see the same data (``xi_plus = xi_minus``: one minibatch, one set of rollouts) and *mismatched* when
they see independent draws (two minibatches, fresh on-policy rollouts for each side).

Everything here is batched over leading axes: ``theta`` of shape (K, D) holds K independent chains, ``dirs`` of
shape (K, q, D) holds q directions per chain, and every data argument carries one slice per evaluation, so one call
of :func:`zo_two_point` evaluates all ``2 K q`` perturbed points at once. Each batched kernel has a plain reference
of the same signature that loops over chains, directions and samples one at a time.

The policy is a linear softmax: ``theta`` of length ``D = p * c`` is a (p, c) weight matrix, prompt features ``x``
(length p) give logits ``x @ W`` over c answers.

Kernels and their references (same signatures):

* :func:`target_ce` / :func:`target_ce_ref`: soft-target cross-entropy of each parameter vector on its own minibatch;
* :func:`sampled_reward` / :func:`sampled_reward_ref`: mean 0/1 reward of answers sampled by inverse CDF from given
  uniforms;
* :func:`zo_two_point` / :func:`zo_two_point_ref`: the two-point estimate over chains and directions.
"""
from __future__ import annotations

import math

import numpy as np
import torch

FloatT = (torch.float32, torch.float64)


def _check_float_tensor(x, name: str, min_ndim: int = 1) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FloatT:
        raise TypeError(f"{name} must be float32 or float64, got {x.dtype}")
    if x.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} axes, got shape {tuple(x.shape)}")
    if x.numel() and not _finite(x):
        raise ValueError(f"{name} must be finite")


def _finite(x: torch.Tensor) -> bool:
    # one reduction instead of an elementwise mask: aminmax propagates NaN, and +-inf show up as the extremes
    lo, hi = torch.aminmax(x)
    return bool(torch.isfinite(lo) & torch.isfinite(hi))


def _weights(theta: torch.Tensor, p: int, c: int) -> torch.Tensor:
    return theta.reshape(*theta.shape[:-1], p, c)


def _check_policy_args(theta, X, n_answers):
    _check_float_tensor(theta, "theta")
    _check_float_tensor(X, "X", 2)
    if X.dtype != theta.dtype:
        raise TypeError(f"X must have theta's dtype {theta.dtype}, got {X.dtype}")
    if isinstance(n_answers, bool) or not isinstance(n_answers, int) or n_answers < 2:
        raise ValueError(f"n_answers must be an integer >= 2, got {n_answers!r}")
    if X.ndim - 1 != theta.ndim:
        raise ValueError(f"X must have one more axis than theta (a minibatch per parameter vector), got "
                         f"X {tuple(X.shape)} and theta {tuple(theta.shape)}")
    p = X.shape[-1]
    if theta.shape[-1] != p * n_answers:
        raise ValueError(f"theta's last axis must be p * n_answers = {p} * {n_answers}, got {theta.shape[-1]}")
    if X.shape[-2] == 0:
        raise ValueError("X must hold at least one sample (its axis -2 is empty)")
    return p


def policy_logits(theta: torch.Tensor, X: torch.Tensor, n_answers: int) -> torch.Tensor:
    """Logits ``X @ W`` of the linear softmax policy, W = theta viewed as (p, n_answers).

    ``theta``: (..., p * n_answers); ``X``: (..., B, p) with the same leading axes; returns (..., B, n_answers).
    """
    p = _check_policy_args(theta, X, n_answers)
    return X @ _weights(theta, p, n_answers)


def target_ce(theta: torch.Tensor, X: torch.Tensor, T: torch.Tensor, n_answers: int) -> torch.Tensor:
    """Soft-target cross-entropy ``mean_b [ -sum_a T[b, a] log softmax(x_b W)_a ]`` per parameter vector.

    ``theta``: (..., p * n_answers); ``X``: (..., B, p); ``T``: (..., B, n_answers) nonnegative targets (one-hot
    labels for supervised learning, Boltzmann weights of offline samples for targeted SFT, signed advantages for a
    GRPO surrogate: rows need not sum to one). Returns (...,), one loss per parameter vector, each on its own
    minibatch. Batched matrix products over all leading axes at once.
    """
    _check_float_tensor(T, "T", 2)
    logits = policy_logits(theta, X, n_answers)
    if T.shape != logits.shape:
        raise ValueError(f"T must have shape {tuple(logits.shape)}, got {tuple(T.shape)}")
    return -(T * torch.log_softmax(logits, dim=-1)).sum(-1).mean(-1)


def target_ce_ref(theta: torch.Tensor, X: torch.Tensor, T: torch.Tensor, n_answers: int) -> torch.Tensor:
    """Reference for :func:`target_ce`: one parameter vector and one sample at a time, log-sum-exp by hand."""
    _check_float_tensor(T, "T", 2)
    p = _check_policy_args(theta, X, n_answers)
    if T.shape != (*X.shape[:-1], n_answers):
        raise ValueError(f"T must have shape {(*X.shape[:-1], n_answers)}, got {tuple(T.shape)}")
    lead = theta.shape[:-1]
    out = torch.zeros(lead, dtype=theta.dtype)
    for k in np.ndindex(*lead):
        W = theta[k].reshape(p, n_answers)
        total = 0.0
        for b in range(X.shape[-2]):
            z = X[k][b] @ W
            lse = z.max() + torch.log(torch.exp(z - z.max()).sum())
            total += float(-(T[k][b] * (z - lse)).sum())
        out[k] = total / X.shape[-2]
    return out


def _check_reward_args(theta, X, y, uniforms, n_answers):
    p = _check_policy_args(theta, X, n_answers)
    if not isinstance(y, torch.Tensor) or y.dtype not in (torch.int64, torch.int32):
        raise TypeError("y must be an integer torch.Tensor of correct answers")
    if y.shape != X.shape[:-1]:
        raise ValueError(f"y must have shape {tuple(X.shape[:-1])}, got {tuple(y.shape)}")
    if y.numel():
        y_lo, y_hi = torch.aminmax(y)
        if int(y_lo) < 0 or int(y_hi) >= n_answers:
            raise ValueError(f"y must lie in [0, {n_answers})")
    if not isinstance(uniforms, torch.Tensor) or uniforms.dtype not in FloatT or uniforms.ndim < 2:
        _check_float_tensor(uniforms, "uniforms", 2)
    if uniforms.shape[:-1] != X.shape[:-1] or uniforms.shape[-1] == 0:
        raise ValueError(f"uniforms must have shape {(*X.shape[:-1], 'G')} with G >= 1, got {tuple(uniforms.shape)}")
    u_lo, u_hi = torch.aminmax(uniforms)
    if not bool((u_lo >= 0) & (u_hi < 1)):  # also false for NaN
        raise ValueError("uniforms must lie in [0, 1) (and be finite)")
    return p


def sample_answers(theta: torch.Tensor, X: torch.Tensor, uniforms: torch.Tensor, n_answers: int) -> torch.Tensor:
    """Answers drawn from the policy by inverse CDF: answer ``a`` of sample b is the first index where the
    cumulative softmax exceeds ``uniforms[..., b, j]``. Returns int64 of the shape of ``uniforms`` (..., B, G)."""
    logits = policy_logits(theta, X, n_answers)
    cdf = torch.softmax(logits, dim=-1).cumsum(-1)
    cdf = cdf.contiguous()
    a = torch.searchsorted(cdf, uniforms.to(cdf.dtype).contiguous(), right=True)
    return a.clamp_(max=n_answers - 1)


def sampled_reward(theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor, uniforms: torch.Tensor,
                   n_answers: int) -> torch.Tensor:
    """Mean 0/1 verifier reward of G sampled answers per prompt: shape (...,), one value per parameter vector.

    ``theta``: (..., p * n_answers); ``X``: (..., B, p) prompts; ``y``: (..., B) correct answers; ``uniforms``:
    (..., B, G) in [0, 1), the rollouts' randomness (fresh uniforms for each side of a mismatched pair).
    Its expectation over the uniforms is the mean probability of the correct answer.
    """
    p = _check_reward_args(theta, X, y, uniforms, n_answers)
    # the answer drawn by inverse CDF (as in sample_answers) is y exactly when cdf[y - 1] <= u < cdf[y], with
    # cdf[-1] = 0 and no upper limit for the last answer (sample_answers clamps there)
    cdf = torch.softmax(X @ _weights(theta, p, n_answers), dim=-1).cumsum(-1)
    yi = y.long().unsqueeze(-1)
    lo = torch.where(yi > 0, cdf.gather(-1, (yi - 1).clamp_min(0)), torch.zeros((), dtype=cdf.dtype))
    hi = torch.where(yi < n_answers - 1, cdf.gather(-1, yi), torch.full((), math.inf, dtype=cdf.dtype))
    u = uniforms.to(cdf.dtype)
    return ((u >= lo) & (u < hi)).to(theta.dtype).mean((-1, -2))


def sampled_reward_ref(theta: torch.Tensor, X: torch.Tensor, y: torch.Tensor, uniforms: torch.Tensor,
                       n_answers: int) -> torch.Tensor:
    """Reference for :func:`sampled_reward`: one rollout at a time, walking the cumulative probabilities."""
    p = _check_reward_args(theta, X, y, uniforms, n_answers)
    lead = theta.shape[:-1]
    out = torch.zeros(lead, dtype=theta.dtype)
    B, G = uniforms.shape[-2:]
    for k in np.ndindex(*lead):
        W = theta[k].reshape(p, n_answers)
        hits = 0
        for b in range(B):
            probs = torch.softmax(X[k][b] @ W, dim=-1).tolist()
            for j in range(G):
                u, acc, ans = float(uniforms[k][b, j]), 0.0, n_answers - 1
                for a, pa in enumerate(probs):
                    acc += pa
                    if u < acc:
                        ans = a
                        break
                hits += int(ans == int(y[k][b]))
        out[k] = hits / (B * G)
    return out


def _check_zo_args(theta, dirs, mu):
    _check_float_tensor(theta, "theta", 2)
    _check_float_tensor(dirs, "dirs", 3)
    if theta.ndim != 2:
        raise ValueError(f"theta must have shape (K, D), got {tuple(theta.shape)}")
    if dirs.ndim != 3 or dirs.shape[0] != theta.shape[0] or dirs.shape[2] != theta.shape[1]:
        raise ValueError(f"dirs must have shape (K, q, D) = ({theta.shape[0]}, q, {theta.shape[1]}), "
                         f"got {tuple(dirs.shape)}")
    if dirs.dtype != theta.dtype:
        raise TypeError(f"dirs must have theta's dtype {theta.dtype}, got {dirs.dtype}")
    if dirs.shape[1] == 0:
        raise ValueError("dirs must hold at least one direction per chain (q >= 1)")
    if isinstance(mu, bool) or not isinstance(mu, (int, float)) or not (mu > 0) or not math.isfinite(mu):
        raise ValueError(f"mu must be a positive finite number, got {mu!r}")


def zo_two_point(f, theta: torch.Tensor, dirs: torch.Tensor, mu: float, data_plus: tuple, data_minus: tuple):
    """Two-point ZO estimates for K chains and q directions each, all ``2 K q`` evaluations in two batched calls.

    ``f(points, *data) -> values``: the stochastic oracle, batched over leading axes (``points`` (K, q, D), each
    data tensor (K, q, ...), values (K, q)); :func:`target_ce` and :func:`sampled_reward` (with ``n_answers``
    bound) are such oracles. ``theta``: (K, D); ``dirs``: (K, q, D); ``data_plus`` / ``data_minus``: tuples of
    tensors with leading axes (K, q), the data seen at ``theta + mu u`` and ``theta - mu u``. Pass the same tuple
    for a matched estimate, independent draws for a mismatched one.

    Returns ``(grad, proj)``: ``grad`` (K, D) the mean over the q directions of ``proj * u``, and ``proj`` (K, q)
    the projected differences ``[F(theta + mu u; xi_plus) - F(theta - mu u; xi_minus)] / (2 mu)``.
    """
    _check_zo_args(theta, dirs, mu)
    base = theta.unsqueeze(1)
    f_plus = f(base + mu * dirs, *data_plus)
    f_minus = f(base - mu * dirs, *data_minus)
    if f_plus.shape != dirs.shape[:2] or f_minus.shape != dirs.shape[:2]:
        raise ValueError(f"f must return one value per (chain, direction), shape {tuple(dirs.shape[:2])}; got "
                         f"{tuple(f_plus.shape)} and {tuple(f_minus.shape)}")
    proj = (f_plus - f_minus) / (2 * mu)
    return (proj.unsqueeze(-1) * dirs).mean(1), proj


def zo_two_point_ref(f, theta: torch.Tensor, dirs: torch.Tensor, mu: float, data_plus: tuple, data_minus: tuple):
    """Reference for :func:`zo_two_point`: a loop over chains and directions, one pair of evaluations at a time
    (the per-sample loop a MeZO-style trainer runs), each on its own slice of the data."""
    _check_zo_args(theta, dirs, mu)
    K, q, D = dirs.shape
    proj = torch.zeros((K, q), dtype=theta.dtype)
    grad = torch.zeros((K, D), dtype=theta.dtype)
    for k in range(K):
        for j in range(q):
            u = dirs[k, j]
            fp = f(theta[k] + mu * u, *(d[k, j] for d in data_plus))
            fm = f(theta[k] - mu * u, *(d[k, j] for d in data_minus))
            proj[k, j] = (fp - fm) / (2 * mu)
            grad[k] += proj[k, j] * u / q
    return grad, proj


# ------------------------------------------------------------------------------------------------ closed forms


def quadratic_second_moment(grad_sq: float, d: int, sigma: float, mu: float, matched: bool) -> float:
    """``E ||g_hat||^2`` of the Gaussian two-point estimator on ``f(x) = ||x||^2 / 2`` with additive oracle noise
    ``sigma xi`` (xi standard normal): ``(d + 2) ||grad||^2``, plus ``d sigma^2 / (2 mu^2)`` when mismatched.

    Derivation: ``f(x + mu u) - f(x - mu u) = 2 mu x.u`` exactly, so ``g_hat = (x.u) u + sigma (xi1 - xi2) u / (2
    mu)``; ``E (x.u)^2 ||u||^2 = (d + 2) ||x||^2`` and ``E (xi1 - xi2)^2 = 2``, the cross term has mean zero.
    """
    if d < 1 or sigma < 0 or mu <= 0 or grad_sq < 0:
        raise ValueError("quadratic_second_moment: need d >= 1, sigma >= 0, mu > 0, grad_sq >= 0")
    return (d + 2) * grad_sq + (0.0 if matched else d * sigma**2 / (2 * mu**2))


def quadratic_zo_oracle(points: torch.Tensor, noise: torch.Tensor, sigma: float) -> torch.Tensor:
    """The noisy quadratic oracle ``F(x; xi) = ||x||^2 / 2 + sigma xi``, batched: points (..., d), noise (...)."""
    return 0.5 * (points**2).sum(-1) + sigma * noise


def quadratic_floor(d: int, sigma: float, mu: float, lr: float) -> float:
    """Stationary ``E ||x||^2`` (= ``E ||grad f||^2``) of mismatched ZO-SGD ``x <- x - lr g_hat`` on the noisy
    quadratic, one Gaussian direction per step: ``lr d sigma^2 / (2 mu^2 (2 - lr (d + 2)))``. The matched chain has
    floor 0 (it contracts to the minimum). Needs ``lr (d + 2) < 2``.

    From ``E||x'||^2 = (1 - 2 lr + lr^2 (d + 2)) ||x||^2 + lr^2 d sigma^2 / (2 mu^2)`` at its fixed point.
    """
    if lr <= 0 or lr * (d + 2) >= 2:
        raise ValueError(f"lr must lie in (0, 2 / (d + 2)) = (0, {2 / (d + 2):.4g}), got {lr}")
    return lr * d * sigma**2 / (2 * mu**2 * (2 - lr * (d + 2)))


# ----------------------------------------------------------------------------------------------------- registry


def _ce_inputs(rng, size):
    K, B, p, c = 3, size, 4, 5
    g = lambda *s: torch.tensor(rng.normal(size=s), dtype=torch.float64)
    return {"theta": g(K, p * c), "X": g(K, B, p), "T": torch.tensor(rng.uniform(size=(K, B, c))), "n_answers": c}


def _reward_inputs(rng, size):
    K, B, p, c, G = 2, size, 3, 4, 6
    g = lambda *s: torch.tensor(rng.normal(size=s), dtype=torch.float64)
    return {"theta": g(K, p * c), "X": g(K, B, p), "y": torch.tensor(rng.integers(0, c, size=(K, B))),
            "uniforms": torch.tensor(rng.uniform(size=(K, B, G))), "n_answers": c}


def _ce_oracle(points, X, T):
    return target_ce(points, X, T, 3)


def _zo_inputs(rng, size):
    K, q, B, p, c = 2, size, 4, 2, 3
    g = lambda *s: torch.tensor(rng.normal(size=s), dtype=torch.float64)
    plus = (g(K, q, B, p), torch.tensor(rng.uniform(size=(K, q, B, c))))
    minus = (g(K, q, B, p), torch.tensor(rng.uniform(size=(K, q, B, c))))
    return {"f": _ce_oracle, "theta": g(K, p * c), "dirs": g(K, q, p * c), "mu": 1e-2,
            "data_plus": plus, "data_minus": minus}


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    return [
        Kernel("zeroth_order.target_ce", target_ce, target_ce_ref, _ce_inputs,
               Contract(args=(Arg("theta", ndim=2), Arg("X", ndim=3, same_dtype_as="theta"), Arg("T", ndim=3)),
                        empty="error", shapes="theta: (K, p*c); X: (K, B, p); T: (K, B, c); B >= 1"),
               tol={"float64": (1e-10, 1e-12), "float32": (1e-4, 1e-5)}, benchmark="target_ce (batched)",
               oracle="torch.nn.functional.cross_entropy with probability targets"),
        Kernel("zeroth_order.sampled_reward", sampled_reward, sampled_reward_ref, _reward_inputs,
               Contract(args=(Arg("theta", ndim=2), Arg("X", ndim=2 + 1, same_dtype_as="theta"),
                              Arg("uniforms", ndim=3, low=0.0, high=0.999999)), empty="error",
                        shapes="theta: (K, p*c); X: (K, B, p); y: (K, B); uniforms: (K, B, G) in [0, 1)"),
               tol={"float64": (0, 0)}, benchmark="sampled_reward (batched)",
               oracle="mean over many uniforms -> mean probability of the correct answer"),
        Kernel("zeroth_order.zo_two_point", zo_two_point, zo_two_point_ref, _zo_inputs,
               Contract(args=(Arg("theta", ("float64",), ndim=2), Arg("dirs", ("float64",), ndim=3)), empty="error",
                        shapes="theta: (K, D); dirs: (K, q, D), q >= 1; data tensors (K, q, ...)"),
               tol={"float64": (1e-9, 1e-11)}, benchmark="zo_two_point (batched)",
               oracle="closed-form second moment on the noisy quadratic"),
    ]


KERNELS = _registry()
"""Batched zeroth-order kernels of the part "Learning dynamics"."""

"""GRPO with binary rewards on a tabular policy: the mixed-group gate, group advantages, training, schedules.

Symbols follow the GRPO group-size paper (seed 001_cb5e7db22dc91288, abstract line 25): a prompt with pass rate
``p`` gets ``G`` rollouts with rewards ``r_j`` in {0, 1}; the group carries a learning signal only when it is
*mixed* (at least one success and one failure), which happens with probability ``P_mix(p, G)``; ``p_c`` is the pass
rate where ``P_mix`` crosses 1/2, close to ``ln 2 / G``.

The policy is tabular, not a language model: prompt ``i`` has one logit ``theta[i]`` and answers correctly with
probability ``sigmoid(theta[i])``. Its GRPO update therefore has a closed form (:func:`group_logit_grad`), which the
fast step uses and the Torch reference (:func:`grpo_step_ref`) checks by autograd of the surrogate loss.

Kernels and their references (same signatures):

* :func:`sample_rewards` (vectorised NumPy) / :func:`sample_rewards_ref` (one draw at a time);
* :func:`grpo_step` (closed form, NumPy) / :func:`grpo_step_ref` (Torch autograd of the surrogate).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.optimize import brentq
from scipy.special import gammaln

LN2 = math.log(2.0)
NORMS = ("std", "none", "batch")


# ----------------------------------------------------------------------------------------------------------------
# The gate


def pass_rate(theta) -> np.ndarray:
    """The tabular policy's pass rate ``p = sigmoid(theta)``, elementwise."""
    return 1.0 / (1.0 + np.exp(-np.asarray(theta, dtype=np.float64)))


def _check_group_size(G, name: str = "G", min_value: int = 1) -> int:
    if isinstance(G, bool) or not isinstance(G, (int, np.integer)) or G < min_value:
        raise ValueError(f"{name} must be an integer >= {min_value}, got {G!r}")
    return int(G)


def mixed_group_prob(p, G: int) -> np.ndarray:
    """``P_mix(p, G) = 1 - p^G - (1-p)^G``: probability that G Bernoulli(p) rollouts hold a success and a failure.

    ``p``: array-like of pass rates in [0, 1], any shape; returns float64 of the same shape, in [0, 1]. Computed as
    ``-expm1(G log1p(-p)) - p^G`` (``1 - (1-p)^G`` without cancellation, so small ``p`` keeps its relative
    precision: P_mix ~ G p); ``G = 1`` gives exactly 0.
    """
    G = _check_group_size(G)
    p = _check_pass_rates(p)
    if G == 1:
        return np.zeros_like(p)
    with np.errstate(divide="ignore"):
        # 1 - (1-p)^G = -expm1(G log1p(-p)); log1p(-1) = -inf covers p = 1
        at_least_one = -np.expm1(G * np.log1p(-p))
    # clip: rounding could leave -1e-17 near p = 1
    return np.clip(at_least_one - p**G, 0.0, 1.0)


def _check_pass_rates(p) -> np.ndarray:
    p = np.asarray(p)
    if np.iscomplexobj(p) or p.dtype == np.bool_ or not np.issubdtype(p.dtype, np.number):
        raise TypeError(f"p must be a real array of pass rates, got dtype {p.dtype}")
    p = p.astype(np.float64)
    if np.any((p < 0) | (p > 1)) or np.any(np.isnan(p)):
        raise ValueError("p must lie in [0, 1]")
    return p


def mixed_group_prob_ref(p, G: int) -> np.ndarray:
    """Reference for :func:`mixed_group_prob` from the binomial law: ``1 - P(K = 0) - P(K = G)``, K ~ Bin(G, p)."""
    from scipy.stats import binom  # imported here: scipy.stats costs about a second to import

    G = _check_group_size(G)
    p = _check_pass_rates(p)
    return 1.0 - binom.pmf(0, G, p) - binom.pmf(G, G, p)


def threshold_pass_rate(G: int) -> float:
    """Exact ``p_c(G)``: the pass rate in (0, 1/2] where ``P_mix(p, G) = 1/2`` (root of a monotone function).

    Needs ``G >= 2`` (one rollout is never mixed). The paper's approximation is ``ln 2 / G`` from
    ``P_mix ~ 1 - exp(-p G)`` for small p.
    """
    G = _check_group_size(G, min_value=2)
    if G == 2:
        return 0.5  # P_mix(p, 2) = 2p(1-p) touches 1/2 only at p = 1/2
    return float(brentq(lambda p: mixed_group_prob(p, G) - 0.5, 1e-12, 0.5, xtol=1e-15, rtol=1e-14))


# ----------------------------------------------------------------------------------------------------------------
# Group advantages and the GRPO update


def _check_rewards(rewards, name: str = "rewards") -> None:
    if rewards.ndim != 2:
        raise ValueError(f"{name} must have shape (n_groups, G), got shape {tuple(rewards.shape)}")
    if rewards.shape[1] < 2:
        raise ValueError(f"{name}: a group needs G >= 2 rollouts for a group std, got G = {rewards.shape[1]}")


def grpo_advantages(rewards: torch.Tensor, norm: str = "std", eps: float = 1e-4) -> torch.Tensor:
    """Group-relative advantages ``A_j``, shape (n_groups, G) like ``rewards``.

    ``norm="std"``: ``(r_j - mean_g r) / (std_g r + eps)`` with the unbiased std, as TRL's ``GRPOTrainer`` with
    ``scale_rewards``; ``"none"``: ``r_j - mean_g r`` (Dr. GRPO); ``"batch"``: ``r_j - mean over the whole batch``
    (REINFORCE with a batch-mean baseline, no groups: the control that has no gate).
    """
    _check_rewards(rewards)
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if norm == "batch":
        return rewards - rewards.mean()
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if norm == "none":
        return centred
    denom = rewards.std(dim=1, keepdim=True) + eps
    # an all-same group has centred = 0 and, with eps = 0, denom = 0: its advantages are 0 (as group_logit_grad)
    return centred / torch.where(denom > 0, denom, torch.ones_like(denom))


def group_logit_grad(rewards: np.ndarray, p: np.ndarray, norm: str = "std", eps: float = 1e-4) -> np.ndarray:
    """Closed form of ``d/dtheta sum_j A_j log pi(r_j)`` for each group, shape (n_groups,).

    ``rewards``: (n_groups, G) in {0, 1}; ``p``: (n_groups,) pass rate of each group's prompt. With ``q = k/G`` the
    group's success fraction and ``d log pi(r)/dtheta = r - p``, ``sum_j A_j (r_j - p) = sum_j A_j r_j`` when the
    advantages sum to zero, which gives ``G q (1 - q) / (s + eps)`` (``"std"``, s the unbiased group std) or
    ``G q (1 - q)`` (``"none"``): it does not depend on p, and it is exactly 0 for an all-fail or all-pass group.
    ``"batch"`` uses the batch-mean baseline ``b`` and does depend on p: ``k (1 - b)(1 - p) + (G - k) b p``.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    _check_rewards(rewards)
    p = np.asarray(p, dtype=np.float64)
    if p.shape != rewards.shape[:1]:
        raise ValueError(f"p must have shape ({rewards.shape[0]},), got {p.shape}")
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    return _grad_from_counts(rewards.sum(axis=1), rewards.shape[1], p, norm, eps)


def _grad_from_counts(k: np.ndarray, G: int, p: np.ndarray, norm: str, eps: float) -> np.ndarray:
    """:func:`group_logit_grad` from the success counts ``k`` (n_groups,) of groups of size G (binary rewards)."""
    if norm == "batch":
        b = k.sum() / (k.size * G)
        return k * (1 - b) * (1 - p) + (G - k) * b * p
    # sum_j (r_j - mean)^2 = G q (1 - q) = k (G - k) / G for rewards in {0, 1}
    sq = k * (G - k) / G
    if norm == "none":
        return sq
    # unbiased std: s^2 = G q (1 - q) / (G - 1); all-same groups (sq = 0) give 0 even when eps = 0
    s = np.sqrt(sq / (G - 1))
    return np.divide(sq, s + eps, out=np.zeros_like(sq), where=sq > 0)


def _check_theta_idx(theta, idx) -> tuple[np.ndarray, np.ndarray]:
    """theta as a 1-D float64 array of finite logits and idx as 1-D integer prompt ids inside it."""
    theta = np.asarray(theta)
    if np.iscomplexobj(theta) or theta.dtype == np.bool_ or not np.issubdtype(theta.dtype, np.number):
        raise TypeError(f"theta must be a real array of logits, got dtype {theta.dtype}")
    theta = theta.astype(np.float64)
    if theta.ndim != 1:
        raise ValueError(f"theta must be 1-D (one logit per prompt), got shape {theta.shape}")
    if not np.all(np.isfinite(theta)):
        raise ValueError("theta must be finite (logits)")
    idx = np.asarray(idx)
    if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"idx must be a 1-D integer array, got shape {idx.shape} dtype {idx.dtype}")
    if idx.size and (idx.min() < 0 or idx.max() >= theta.size):
        raise ValueError(f"idx must lie in [0, {theta.size}), got range [{idx.min()}, {idx.max()}]")
    return theta, idx


def _check_step_args(theta, idx, rewards, lr):
    theta, idx = _check_theta_idx(theta, idx)
    rewards = np.asarray(rewards)
    if np.iscomplexobj(rewards) or not np.issubdtype(rewards.dtype, np.number):
        raise TypeError(f"rewards must be a real array, got dtype {rewards.dtype}")
    rewards = rewards.astype(np.float64)
    _check_rewards(rewards)
    if not np.all((rewards == 0) | (rewards == 1)):
        raise ValueError("rewards must be binary (0 or 1): the closed-form step assumes a verifier's rewards")
    if rewards.shape[0] != idx.size:
        raise ValueError(f"rewards has {rewards.shape[0]} groups but idx names {idx.size} prompts")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    return theta, idx, rewards


def grpo_step(theta: np.ndarray, idx: np.ndarray, rewards: np.ndarray, lr: float, norm: str = "std",
              eps: float = 1e-4) -> np.ndarray:
    """One GRPO step (SGD) on the tabular policy; returns the new logits (a copy), shape (n_prompts,).

    ``theta``: (n_prompts,) logits; ``idx``: (n_groups,) prompt of each group; ``rewards``: (n_groups, G). The loss
    is TRL's mean over every rollout in the step, ``L = -(1/(n_groups G)) sum_g sum_j A_gj log pi(r_gj)``, one
    on-policy step (importance ratio 1, so clipping never acts).
    """
    theta, idx, rewards = _check_step_args(theta, idx, rewards, lr)
    p = pass_rate(theta[idx])
    grad = group_logit_grad(rewards, p, norm, eps)
    # theta_i <- theta_i + lr * (1/N) sum over the groups of prompt i of the closed-form gradient (N rollouts)
    return theta + np.bincount(idx, weights=lr * grad / rewards.size, minlength=theta.size)


def grpo_step_ref(theta: np.ndarray, idx: np.ndarray, rewards: np.ndarray, lr: float, norm: str = "std",
                  eps: float = 1e-4) -> np.ndarray:
    """Reference for :func:`grpo_step`: Torch autograd of the surrogate loss with :func:`grpo_advantages`."""
    theta, idx, rewards = _check_step_args(theta, idx, rewards, lr)
    th = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
    r = torch.tensor(rewards, dtype=torch.float64)
    logit = th[torch.as_tensor(idx)][:, None]
    # log pi(r) = r log sigmoid(theta) + (1 - r) log sigmoid(-theta)
    logp = r * torch.nn.functional.logsigmoid(logit) + (1 - r) * torch.nn.functional.logsigmoid(-logit)
    adv = grpo_advantages(r, norm, eps)
    loss = -(adv * logp).sum() / r.numel()
    loss.backward()
    return (th - lr * th.grad).detach().numpy()


# ----------------------------------------------------------------------------------------------------------------
# Rollouts


def _check_sample_args(theta, idx, G):
    G = _check_group_size(G)
    theta, idx = _check_theta_idx(theta, idx)
    return theta, idx, G


def sample_rewards(theta: np.ndarray, idx: np.ndarray, G: int, rng: np.random.Generator) -> np.ndarray:
    """Binary verifier rewards of G rollouts for each prompt in ``idx``: shape (len(idx), G), float64 in {0, 1}.

    Rollout j of group g succeeds when ``u_gj < sigmoid(theta[idx[g]])``, u uniform from ``rng`` in row-major
    order (so :func:`sample_rewards_ref` draws the same numbers from the same generator).
    """
    theta, idx, G = _check_sample_args(theta, idx, G)
    p = pass_rate(theta[idx])
    return (rng.random((idx.size, G)) < p[:, None]).astype(np.float64)


def sample_rewards_ref(theta: np.ndarray, idx: np.ndarray, G: int, rng: np.random.Generator) -> np.ndarray:
    """Reference for :func:`sample_rewards`: one uniform draw and one comparison per rollout, in plain Python."""
    theta, idx, G = _check_sample_args(theta, idx, G)
    out = np.zeros((idx.size, G))
    for g, i in enumerate(idx):
        p = 1.0 / (1.0 + math.exp(-theta[i]))
        for j in range(G):
            out[g, j] = 1.0 if rng.random() < p else 0.0
    return out


# ----------------------------------------------------------------------------------------------------------------
# Group-size schedules. Each is a function of the run's state returning the G for the next step.


@dataclass
class TraceState:
    """What a schedule may look at: the step, rollouts used so far, the current G (0 before the first step), and
    per-prompt trace counts.

    ``succ`` and ``trials`` are (n_prompts,) success and rollout counts, halved at each new visit of a prompt so
    that they describe the recent policy; ``p_hat`` is the Jeffreys estimate ``(succ + 1/2) / (trials + 1)``.
    """

    step: int
    used: int
    budget: int
    G: int
    succ: np.ndarray
    trials: np.ndarray

    @property
    def p_hat(self) -> np.ndarray:
        return (self.succ + 0.5) / (self.trials + 1.0)


@dataclass(frozen=True)
class FixedG:
    """The same G at every step."""

    G: int

    def __call__(self, s: TraceState) -> int:
        return self.G


@dataclass(frozen=True)
class TwoPhase:
    """``G1`` for the first ``switch_at`` fraction of the rollout budget, ``G2`` after (for a hindsight search)."""

    G1: int
    G2: int
    switch_at: float

    def __call__(self, s: TraceState) -> int:
        return self.G1 if s.used < self.switch_at * s.budget else self.G2


@dataclass(frozen=True)
class FrontierTracking:
    """Move ``p_c = ln 2 / G`` with the frontier: our reading of the paper's schedule.

    Every ``every`` steps, take the ``quantile`` of ``p_hat`` over the prompts not yet solved (``p_hat < 1/2``)
    as the frontier ``p_f`` and use the smallest G in ``G_list`` with ``ln 2 / G <= p_f``; G never decreases.
    """

    G_list: tuple
    quantile: float = 0.25
    every: int = 10

    def __call__(self, s: TraceState) -> int:
        if s.G == 0:
            return self.G_list[0]
        if s.step % self.every or s.trials.min() == 0:
            return s.G
        unsolved = s.p_hat[s.p_hat < 0.5]
        if unsolved.size == 0:
            return s.G
        p_front = np.quantile(unsolved, self.quantile)
        fits = [G for G in self.G_list if LN2 / G <= p_front]
        return max(s.G, fits[0] if fits else self.G_list[-1])


def binomial_pmf(k: np.ndarray, G: int, p: np.ndarray) -> np.ndarray:
    """``P(K = k)`` for K ~ Bin(G, p), broadcasting ``k`` against ``p``; p must lie strictly inside (0, 1)."""
    # log C(G, k) + k log p + (G - k) log(1 - p)
    log_choose = gammaln(G + 1) - gammaln(k + 1) - gammaln(G - k + 1)
    return np.exp(log_choose + k * np.log(p) + (G - k) * np.log1p(-p))


def expected_gain_per_rollout(p: np.ndarray, G: int, step_size: float) -> float:
    """Mean over prompts of the expected pass-rate gain of one GRPO visit with G rollouts, divided by G.

    ``p``: (n_prompts,) pass rates strictly inside (0, 1); ``step_size`` = lr / rollouts_per_step. One visit with k
    successes moves the logit by ``step_size * group_logit_grad`` (std norm); the expectation over k ~ Bin(G, p) is
    exact.
    """
    G = _check_group_size(G, min_value=2)
    p = np.asarray(p, dtype=np.float64)
    if np.any((p <= 0) | (p >= 1)):
        raise ValueError("p must lie strictly inside (0, 1)")
    k = np.arange(G + 1)
    rewards = (np.arange(G)[None, :] < k[:, None]).astype(np.float64)  # row k: k successes
    grad = group_logit_grad(rewards, np.zeros(G + 1))
    theta = np.log(p) - np.log1p(-p)
    gain = pass_rate(theta[:, None] + step_size * grad[None, :]) - p[:, None]
    return float((binomial_pmf(k[None, :], G, p[:, None]) * gain).sum(axis=1).mean() / G)


@dataclass(frozen=True)
class YieldSwitch:
    """Frontier-aware switch (the card's suggestion): go from G to the next size in ``G_list`` when the predicted
    pass-rate gain per rollout there exceeds that at G, both from the trace estimates ``p_hat`` (summarised by 256 of
    their quantiles, to keep the check cheap). Checked every ``every`` steps; G never decreases.
    """

    G_list: tuple
    step_size: float
    every: int = 10

    def __call__(self, s: TraceState) -> int:
        if s.G == 0:
            return self.G_list[0]
        if s.step % self.every or s.trials.min() == 0 or s.G == self.G_list[-1]:
            return s.G
        nxt = self.G_list[self.G_list.index(s.G) + 1]
        p = np.quantile(s.p_hat, (np.arange(256) + 0.5) / 256)
        better = expected_gain_per_rollout(p, nxt, self.step_size) > expected_gain_per_rollout(p, s.G, self.step_size)
        return nxt if better else s.G


# ----------------------------------------------------------------------------------------------------------------
# Training


@dataclass
class GRPORun:
    """A finished run. Per step: ``used`` (rollouts so far), ``acc`` (mean pass rate after the step), ``G``.
    Per visit (one group of one prompt): ``visit_prompt``, ``visit_p`` (pass rate before), ``visit_k``
    (successes), ``visit_G``, ``visit_delta`` (the change of that prompt's logit from that group)."""

    theta: np.ndarray
    used: np.ndarray
    acc: np.ndarray
    G: np.ndarray
    visit_prompt: np.ndarray
    visit_p: np.ndarray
    visit_k: np.ndarray
    visit_G: np.ndarray
    visit_delta: np.ndarray
    switches: list = field(default_factory=list)


def train_grpo(theta0: np.ndarray, budget: int, rollouts_per_step: int, lr: float, rng: np.random.Generator,
               schedule, norm: str = "std", eps: float = 1e-4) -> GRPORun:
    """Tabular GRPO until ``budget`` rollouts are spent; ``schedule(TraceState) -> G`` picks G at every step.

    Each step draws ``rollouts_per_step // G`` prompts in epoch order (a fresh permutation of all prompts when the
    previous one runs out), samples G rollouts each as :func:`sample_rewards` does and applies the update of
    :func:`grpo_step` (the tests check both against the loop's per-visit log).
    ``theta0``: (n_prompts,) initial logits. Returns a :class:`GRPORun`.
    """
    theta = np.array(theta0, dtype=np.float64)
    if theta.ndim != 1 or theta.size == 0:
        raise ValueError(f"theta0 must be a non-empty 1-D array, got shape {theta.shape}")
    budget = _check_group_size(budget, "budget")
    rollouts_per_step = _check_group_size(rollouts_per_step, "rollouts_per_step", min_value=2)
    if budget < rollouts_per_step:
        raise ValueError(f"budget ({budget}) must be >= rollouts_per_step ({rollouts_per_step})")
    n = theta.size
    succ, trials = np.zeros(n), np.zeros(n)
    order, pos, used, step, G = rng.permutation(n), 0, 0, 0, None
    acc = float(pass_rate(theta).mean())
    log_used, log_acc, log_G, visits, switches = [], [], [], [], []
    while used + rollouts_per_step <= budget:
        state = TraceState(step, used, budget, G if G is not None else 0, succ, trials)
        new_G = _check_group_size(schedule(state), "schedule(...)", min_value=2)
        if G is not None and new_G != G:
            switches.append((used, new_G))
        G = new_G
        m = min(rollouts_per_step // G, n)
        if m == 0:
            raise ValueError(f"rollouts_per_step ({rollouts_per_step}) is smaller than G ({G})")
        if pos + m > n:
            order, pos = rng.permutation(n), 0
        idx = order[pos:pos + m]  # distinct prompts, so the update below needs no scatter-add
        pos += m
        p = pass_rate(theta[idx])
        # the bodies of sample_rewards and grpo_step, without their checks and on success counts only (this loop
        # runs ~10^3 times per training run; the tests replay it with the kernels themselves)
        k = np.count_nonzero(rng.random((m, G)) < p[:, None], axis=1).astype(np.float64)
        delta = lr * _grad_from_counts(k, G, p, norm, eps) / (m * G)
        theta[idx] += delta
        visits.append((idx, p, k, np.full(m, G), delta))
        succ[idx], trials[idx] = 0.5 * succ[idx] + k, 0.5 * trials[idx] + G
        used += m * G
        step += 1
        # mean pass rate, updated only where the logits moved
        acc += (pass_rate(theta[idx]) - p).sum() / n
        log_used.append(used)
        log_acc.append(acc)
        log_G.append(G)
    cols = [np.concatenate(c) for c in zip(*visits)]
    return GRPORun(theta, np.array(log_used), np.array(log_acc), np.array(log_G), *cols, switches=switches)


def train_many(theta0: np.ndarray, schedules: dict, budget: int, rollouts_per_step: int, lr: float, seed: int,
               norm: str = "std") -> dict:
    """:func:`train_grpo` for every schedule in ``schedules`` (name -> schedule) from the same ``theta0``, each with
    a fresh generator from ``seed`` (common random numbers: differences between schedules are less noisy)."""
    return {name: train_grpo(theta0, budget, rollouts_per_step, lr, np.random.default_rng(seed), sch, norm)
            for name, sch in schedules.items()}


# ----------------------------------------------------------------------------------------------------------------
# Traces and fits


def trace_mixed_rates(traces: np.ndarray, G: int) -> tuple[np.ndarray, np.ndarray]:
    """Empirical mixed-group rate per prompt from rollout traces, and the binomial prediction from the same trace.

    ``traces``: (n_prompts, n_rollouts) in {0, 1}. The trace is cut into ``n_rollouts // G`` disjoint groups of G
    (leftover rollouts dropped); returns ``(empirical, predicted)``, each (n_prompts,), where predicted is
    ``P_mix(p_hat, G)`` with ``p_hat`` the trace's success fraction.
    """
    traces = np.asarray(traces)
    if traces.ndim != 2:
        raise ValueError(f"traces must have shape (n_prompts, n_rollouts), got {traces.shape}")
    G = _check_group_size(G, min_value=2)
    n, t = traces.shape
    if G > t:
        raise ValueError(f"G ({G}) exceeds the trace length ({t})")
    groups = traces[:, : (t // G) * G].reshape(n, t // G, G).sum(axis=2)
    empirical = ((groups > 0) & (groups < G)).mean(axis=1)
    return empirical, mixed_group_prob(traces.mean(axis=1), G)


def binned_abs_gap(x: np.ndarray, a: np.ndarray, b: np.ndarray, edges: np.ndarray) -> float:
    """Count-weighted mean over bins of x of ``|mean(a) - mean(b)|`` within each bin; empty bins are skipped."""
    x, a, b = (np.asarray(v, dtype=np.float64) for v in (x, a, b))
    if not (x.shape == a.shape == b.shape) or x.ndim != 1:
        raise ValueError(f"x, a, b must be 1-D of one length, got {x.shape}, {a.shape}, {b.shape}")
    which = np.digitize(x, edges) - 1
    gaps, weights = [], []
    for j in range(len(edges) - 1):
        m = which == j
        if m.any():
            gaps.append(abs(a[m].mean() - b[m].mean()))
            weights.append(m.sum())
    if not gaps:
        raise ValueError("no value of x falls inside edges")
    return float(np.average(gaps, weights=weights))


def binned_r2(x: np.ndarray, y: np.ndarray, f: np.ndarray, edges: np.ndarray):
    """Binned R^2 of ``y`` against the shape ``a * f`` with one fitted scale ``a``.

    Bins by ``x`` with ``edges``; within each non-empty bin takes the means ``xbar``, ``ybar``, ``fbar``; fits
    ``a = <fbar, ybar> / <fbar, fbar>`` (least squares through the origin); returns
    ``(R^2, a, xbar, ybar, fbar)`` with ``R^2 = 1 - sum (ybar - a fbar)^2 / sum (ybar - mean ybar)^2``.
    """
    x, y, f = (np.asarray(v, dtype=np.float64) for v in (x, y, f))
    if not (x.shape == y.shape == f.shape) or x.ndim != 1:
        raise ValueError(f"x, y, f must be 1-D of one length, got {x.shape}, {y.shape}, {f.shape}")
    which = np.digitize(x, edges) - 1
    keep = [j for j in range(len(edges) - 1) if (which == j).any()]
    if len(keep) < 2:
        raise ValueError("binned_r2 needs at least two non-empty bins")
    xbar = np.array([x[which == j].mean() for j in keep])
    ybar = np.array([y[which == j].mean() for j in keep])
    fbar = np.array([f[which == j].mean() for j in keep])
    a = float(fbar @ ybar / (fbar @ fbar))
    r2 = 1.0 - float(((ybar - a * fbar) ** 2).sum() / ((ybar - ybar.mean()) ** 2).sum())
    return r2, a, xbar, ybar, fbar



# ----------------------------------------------------------------------------------------------------- registry

def _p_inputs(rng, size):
    return {"p": rng.uniform(0, 1, size=size), "G": 8}


def _step_inputs(rng, size):
    n = 4
    return {"theta": rng.normal(size=n), "idx": rng.integers(0, n, size=size),
            "rewards": (rng.random((size, 6)) < 0.5).astype(np.float64), "lr": 0.5}


def _sample_inputs(rng, size):
    n = 4
    return {"theta": rng.normal(size=n), "idx": rng.integers(0, n, size=size), "G": 5,
            "rng": np.random.default_rng(int(rng.integers(1 << 30)))}


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    return [
        Kernel("grpo.mixed_group_prob", mixed_group_prob, mixed_group_prob_ref, _p_inputs,
               Contract(args=(Arg("p", ("float64",), low=0.0, high=1.0),), empty="value",
                        empty_value=lambda kw: np.zeros(0), shapes="p: any shape; G >= 1"),
               tol={"float64": (1e-12, 1e-15)}, oracle="scipy.stats.binom pmf; exact fractions"),
        Kernel("grpo.grpo_step", grpo_step, grpo_step_ref, _step_inputs,
               Contract(args=(Arg("theta", ("float64",), 1), Arg("rewards", ("float64",), 2)), empty="value",
                        empty_value=lambda kw: kw["theta"], shapes="theta: (n_prompts,); idx: (n_groups,); "
                        "rewards: (n_groups, G), G >= 2"),
               tol={"float64": (1e-12, 1e-14)}, oracle="Torch autograd of TRL's surrogate loss"),
        Kernel("grpo.sample_rewards", sample_rewards, sample_rewards_ref, _sample_inputs,
               Contract(args=(Arg("theta", ("float64",), 1),), empty="value",
                        empty_value=lambda kw: np.zeros((0, kw["G"])), shapes="theta: (n,); idx: (m,) in [0, n)"),
               tol={"float64": (0, 0)}, oracle="one Bernoulli draw at a time"),
    ]


KERNELS = _registry()

"""Zeroth-order and first-order training of a linear softmax policy on digits, with matched or mismatched data.

The task: a prompt is a digit image (its first principal components plus a constant), the policy answers one of 10
classes, and a verifier gives reward 1 for the true class. Four ways of turning that into training signal, each with
a first-order (autograd) and a zeroth-order (two-point, :func:`~paperkit.learning_dynamics.zeroth_order.zo_two_point`)
update:

* ``"bolt"``: Boltzmann targeted SFT, our reading of BOLT: answers sampled once from the initial policy form a fixed
  offline set; each sample gets weight ``exp(r / beta)`` (normalised over the whole set) and the loss is the
  weighted cross-entropy on a minibatch. ZO uses one minibatch for both evaluations (matched);
* ``"bolt_mis"``: the same loss, but the minus evaluation sees a second, independent minibatch (mismatched);
* ``"grpo"``: on-policy sampled rewards. First order: the GRPO surrogate with group-normalised advantages on fresh
  rollouts. Zeroth order: the mean sampled reward, with fresh rollouts at ``theta + mu u`` and at ``theta - mu u``
  (mismatched, as on-policy RL induces);
* ``"grpo_fixed"``: the GRPO surrogate on one set of rollouts drawn at ``theta``, evaluated at both perturbed points
  (matched; first order it is ``"grpo"``);
* ``"grpo_crn"``: the mean sampled reward of ``"grpo"``, but both perturbed points sample their rollouts from the
  same uniforms (common random numbers: the same prompts and the same rollout randomness on both sides, so only
  answers whose inverse-CDF draw crosses a boundary between ``theta - mu u`` and ``theta + mu u`` differ; first
  order it is ``"grpo"``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from paperkit.learning_dynamics import zeroth_order as zo

METHODS = ("bolt", "bolt_mis", "grpo", "grpo_fixed", "grpo_crn")


@dataclass
class DigitsTask:
    """Features ``Z`` (n, p) float64 (PCA components scaled to unit variance on the training rows, plus a
    constant), labels ``y`` (n,) int64, index tensors ``train`` and ``test``, and ``n_answers`` = 10."""

    Z: torch.Tensor
    y: torch.Tensor
    train: torch.Tensor
    test: torch.Tensor
    n_answers: int = 10

    @property
    def dim(self) -> int:
        """Number of policy parameters, ``p * n_answers``."""
        return self.Z.shape[1] * self.n_answers


def digits_task(X: np.ndarray, y: np.ndarray, n_components: int, n_train: int, rng: np.random.Generator):
    """Split ``X`` (n, 64) / ``y`` (n,) at random into ``n_train`` training rows and the rest for testing, and
    project on the first ``n_components`` principal components of the training rows (scikit-learn's PCA)."""
    from sklearn.decomposition import PCA

    if not 1 <= n_components <= X.shape[1]:
        raise ValueError(f"n_components must lie in [1, {X.shape[1]}], got {n_components}")
    if not 10 <= n_train < len(y):
        raise ValueError(f"n_train must lie in [10, {len(y)}), got {n_train}")
    perm = rng.permutation(len(y))
    tr, te = perm[:n_train], perm[n_train:]
    Z = PCA(n_components, random_state=0).fit(X[tr]).transform(X)
    Z = Z / Z[tr].std(axis=0)
    Z = np.hstack([Z, np.ones((len(y), 1))])
    return DigitsTask(torch.tensor(Z), torch.tensor(y, dtype=torch.int64), torch.tensor(tr), torch.tensor(te))


def accuracy(task: DigitsTask, theta: torch.Tensor) -> torch.Tensor:
    """Greedy test accuracy of each parameter vector, theta (K, D) -> (K,)."""
    K = theta.shape[0]
    W = theta.reshape(K, task.Z.shape[1], task.n_answers)
    return ((task.Z[task.test] @ W).argmax(-1) == task.y[task.test]).double().mean(-1)


def boltzmann_targets(task: DigitsTask, theta0: torch.Tensor, n_samples: int, beta: float, gen: torch.Generator):
    """The offline set of targeted SFT: ``n_samples`` answers per training prompt from the policy ``theta0`` (D,),
    weights ``exp(r / beta)`` normalised to mean one over the set, summed into soft targets (n_train, n_answers).
    Returns ``(T, correct_share)``."""
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    Xtr, ytr = task.Z[task.train], task.y[task.train]
    U = torch.rand(len(ytr), n_samples, generator=gen, dtype=torch.float64)
    a = zo.sample_answers(theta0, Xtr, U, task.n_answers)
    r = (a == ytr[:, None]).double()
    w = torch.exp(r / beta)
    w = w / w.mean()
    T = torch.zeros(len(ytr), task.n_answers, dtype=torch.float64).scatter_add_(1, a, w) / n_samples
    return T, float(r.mean())


def grpo_targets(task: DigitsTask, theta: torch.Tensor, idx: torch.Tensor, G: int, gen: torch.Generator):
    """GRPO surrogate as soft targets: G rollouts per prompt from ``theta`` (K, D) for prompts ``idx`` (K, B);
    advantages ``(r - mean) / (std + 1e-4)`` within each group; returns T (K, B, n_answers) with
    ``T[k, b, a] = sum_j A_kbj [a_kbj = a] / G``, so that :func:`~paperkit.learning_dynamics.zeroth_order.target_ce`
    is the surrogate loss ``-mean A log pi(a)``."""
    Xb, yb = task.Z[task.train][idx], task.y[task.train][idx]
    U = torch.rand(*idx.shape, G, generator=gen, dtype=torch.float64)
    a = zo.sample_answers(theta, Xb, U, task.n_answers)
    r = (a == yb[..., None]).double()
    A = (r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-4)
    return torch.zeros(*idx.shape, task.n_answers, dtype=torch.float64).scatter_add_(-1, a, A) / G


@dataclass
class PolicyRun:
    """Test accuracy of each chain at ``steps_logged`` (n_log,) in ``acc`` (n_log, K), the final parameters, and
    the count of oracle evaluations (loss or reward evaluations of one minibatch at one parameter vector)."""

    steps_logged: np.ndarray
    acc: np.ndarray
    theta: torch.Tensor
    evaluations: int


def train_policy(task: DigitsTask, method: str, order: str, theta0: torch.Tensor, steps: int, batch: int,
                 lr: float, gen: torch.Generator, rng: np.random.Generator, T_off: torch.Tensor | None = None,
                 G: int = 8, mu: float = 1e-3, n_dirs: int = 16, clip: float = 5.0, log_every: int = 50):
    """Train K chains (``theta0`` (K, D)) for ``steps`` SGD steps with ``method`` (see :data:`METHODS`) and
    ``order`` ``"fo"`` (autograd) or ``"zo"`` (two-point, ``n_dirs`` Gaussian directions averaged per step, the
    estimate's norm clipped at ``clip`` per chain). Losses are minimised; the ZO reward of ``"grpo"`` and
    ``"grpo_crn"`` is maximised.
    Minibatches of ``batch`` prompts come from ``rng``, rollouts and directions from ``gen``."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if order not in ("fo", "zo"):
        raise ValueError(f"order must be 'fo' or 'zo', got {order!r}")
    if method.startswith("bolt") and T_off is None:
        raise ValueError("T_off (the offline targets) is needed for the bolt methods")
    if steps < 1 or batch < 1 or lr <= 0:
        raise ValueError("steps, batch and lr must be positive")
    K, D = theta0.shape
    c, ntr = task.n_answers, len(task.train)
    Xtr, ytr = task.Z[task.train], task.y[task.train]
    ce = lambda pts, Xb, Tb: zo.target_ce(pts, Xb, Tb, c)
    reward = lambda pts, Xb, yb, Ub: zo.sampled_reward(pts, Xb, yb, Ub, c)
    rep = lambda *ts: tuple(t.unsqueeze(1).expand(t.shape[0], n_dirs, *t.shape[1:]) for t in ts)
    th, log_s, log_a, evals = theta0.clone(), [0], [accuracy(task, theta0).numpy()], 0
    for s in range(1, steps + 1):
        idx = torch.tensor(rng.integers(0, ntr, size=(K, batch)))
        if order == "fo":
            T = T_off[idx] if method.startswith("bolt") else grpo_targets(task, th, idx, G, gen)
            t = th.clone().requires_grad_(True)
            g, = torch.autograd.grad(ce(t, Xtr[idx], T).sum(), t)
            th, evals = th - lr * g, evals + K
        else:
            dirs = torch.randn(K, n_dirs, D, generator=gen, dtype=torch.float64)
            if method == "bolt":
                plus = minus = rep(Xtr[idx], T_off[idx])
            elif method == "bolt_mis":
                idx2 = torch.tensor(rng.integers(0, ntr, size=(K, batch)))
                plus, minus = rep(Xtr[idx], T_off[idx]), rep(Xtr[idx2], T_off[idx2])
            elif method == "grpo_fixed":
                plus = minus = rep(Xtr[idx], grpo_targets(task, th, idx, G, gen))
            if method in ("grpo", "grpo_crn"):
                Xb, yb = rep(Xtr[idx], ytr[idx])
                u1 = torch.rand(K, n_dirs, batch, G, generator=gen, dtype=torch.float64)
                u2 = u1 if method == "grpo_crn" else torch.rand(K, n_dirs, batch, G, generator=gen, dtype=torch.float64)
                g = -zo.zo_two_point(reward, th, dirs, mu, (Xb, yb, u1), (Xb, yb, u2))[0]
            else:
                g = zo.zo_two_point(ce, th, dirs, mu, plus, minus)[0]
            g = g * torch.clamp(clip / g.norm(dim=-1, keepdim=True).clamp_min(1e-300), max=1.0)
            th, evals = th - lr * g, evals + 2 * K * n_dirs
        if s % log_every == 0 or s == steps:
            log_s.append(s)
            log_a.append(accuracy(task, th).numpy())
    return PolicyRun(np.array(log_s), np.array(log_a), th, evals)


def fo_warm_start(task: DigitsTask, steps: int, lr: float) -> torch.Tensor:
    """Full-batch gradient descent on the supervised cross-entropy from zero: a point near stationarity (D,)."""
    Xtr = task.Z[task.train][None]
    Ytr = torch.nn.functional.one_hot(task.y[task.train], task.n_answers).double()[None]
    th = torch.zeros(1, task.dim, dtype=torch.float64)
    for _ in range(steps):
        t = th.clone().requires_grad_(True)
        g, = torch.autograd.grad(zo.target_ce(t, Xtr, Ytr, task.n_answers).sum(), t)
        th = th - lr * g
    return th[0]


def zo_sgd_floors(task: DigitsTask, theta_start: torch.Tensor, mus, replicas: int, steps: int, batch: int,
                  lr: float, gen: torch.Generator, rng: np.random.Generator, record_every: int = 20):
    """Plain ZO-SGD (one direction per step) on the supervised cross-entropy from ``theta_start`` (D,), one chain
    per (matched or mismatched, mu, replica), all chains batched. Returns ``(matched, mismatched)``, each
    (len(mus),): the mean over replicas and over the second half of the run of the full-batch ``||grad f||^2``."""
    mus = [float(m) for m in mus]
    cfg = [(m, mm) for mm in (True, False) for m in mus for _ in range(replicas)]
    K, c = len(cfg), task.n_answers
    mu_t = torch.tensor([m for m, _ in cfg], dtype=torch.float64)
    matched = torch.tensor([mm for _, mm in cfg])
    Xtr = task.Z[task.train]
    Ytr = torch.nn.functional.one_hot(task.y[task.train], c).double()
    ntr = len(task.train)
    th = theta_start.expand(K, -1).clone()
    rec = []
    for s in range(steps):
        i1 = torch.tensor(rng.integers(0, ntr, size=(K, 1, batch)))
        i2 = torch.where(matched[:, None, None], i1, torch.tensor(rng.integers(0, ntr, size=(K, 1, batch))))
        u = torch.randn(K, 1, task.dim, generator=gen, dtype=torch.float64)
        # zo_two_point takes one mu; the chains differ in mu, so the same two evaluations are written out here
        fp = zo.target_ce(th[:, None] + mu_t[:, None, None] * u, Xtr[i1], Ytr[i1], c)
        fm = zo.target_ce(th[:, None] - mu_t[:, None, None] * u, Xtr[i2], Ytr[i2], c)
        th = th - lr * (((fp - fm) / (2 * mu_t[:, None]))[..., None] * u)[:, 0]
        if s >= steps // 2 and s % record_every == 0:
            t = th.clone().requires_grad_(True)
            L = zo.target_ce(t, Xtr.expand(K, -1, -1), Ytr.expand(K, -1, -1), c)
            g, = torch.autograd.grad(L.sum(), t)
            rec.append((g**2).sum(-1))
    floors = torch.stack(rec).mean(0).reshape(2, len(mus), replicas).mean(-1).numpy()
    return floors[0], floors[1]

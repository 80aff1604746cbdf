"""Looped transformers trained with a fixed, a sampled or a learned (REINFORCE) number of loops.

The model is the book's :class:`~paperkit.nn.tiny_transformer.TinyTransformer` with one shared block looped
``T`` times and the input embedding re-injected before every loop. For an input of size ``n`` (the task's length
parameter) the training schedules are:

* ``fixed`` (F): ``T = n``, the loop count tied to the length;
* ``sampled`` (S): ``T ~ U{n, ..., 2n}``, drawn per sample;
* ``rl`` (R): a halting head reads the state after each loop ``k`` in ``n..2n`` and halts there with probability
  ``p_k``; the halting loop is sampled from that policy, the model is trained at the halting loop, and the head by
  REINFORCE on ``reward = correct - lambda * T / n`` with a running-mean baseline.

Evaluation reads the state after *every* loop of one forward pass (``return_states=True``) through
``model.readout``, so accuracy at all inference loop counts ``1..K`` costs ``K`` block applications instead of the
``K (K + 1) / 2`` of re-running the model once per loop count (:func:`per_loop_predictions_reference`).

Shapes: tokens, targets, mask (batch, L); per-loop accuracies (K,); per-loop predictions (K, batch, L).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from paperkit.data import algo_tasks
from paperkit.nn.tiny_transformer import TinyConfig, TinyTransformer
from paperkit.training import AdamCosine

TASKS = ("dyck1", "copy", "binary_add")
SCHEMES = ("fixed", "sampled", "rl")
VOCAB = {"dyck1": 2, "copy": 9, "binary_add": 4}


def task_batch(task: str, rng: np.random.Generator, n: int, size: int, device: str | torch.device = "cpu"):
    """A batch of ``task`` at length parameter ``size`` as torch tensors ``(tokens, targets, mask)``, each (n, L).

    ``size`` is the string length for ``dyck1``, the number of copied symbols for ``copy`` (L = 2 size + 1) and
    the number of bits per operand for ``binary_add`` (L = 3 size + 3).
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if task == "dyck1":
        arrays = algo_tasks.dyck1_task(rng, n, size)
    elif task == "copy":
        arrays = algo_tasks.copy_task(rng, n, size)
    else:
        arrays = algo_tasks.binary_add_task(rng, n, size)
    return tuple(torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in arrays)


def make_model(task: str, d_model: int, gen: torch.Generator, device: str | torch.device = "cpu",
               n_heads: int = 2, max_len: int = 128) -> TinyTransformer:
    """One shared pre-LN block, NoPE, causal, input re-injection; weights drawn from ``gen`` (not global state)."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    cfg = TinyConfig(vocab=VOCAB[task], d_model=d_model, n_heads=n_heads, n_layers=1, max_len=max_len, pos="none",
                     causal=True, reinject=True)
    return TinyTransformer.seeded(cfg, gen).to(device)


def loop_counts(scheme: str, n: int, batch: int, gen: torch.Generator, per_sample: bool = False) -> torch.Tensor:
    """Training loop counts (batch,) int64: ``n`` for ``fixed``; uniform on ``{n..2n}`` for ``sampled``.

    ``sampled`` draws one count for the whole batch (a step then costs T block applications on average 1.5 n),
    or one per sample with ``per_sample`` (the masked loop then runs max_b T_b, about 2 n, for every sample).
    """
    if n < 1 or batch < 1:
        raise ValueError(f"n and batch must be >= 1, got n={n}, batch={batch}")
    if scheme == "fixed":
        return torch.full((batch,), n, dtype=torch.int64)
    if scheme == "sampled":
        return torch.randint(n, 2 * n + 1, (batch,) if per_sample else (1,), generator=gen).expand(batch)
    raise ValueError(f"scheme must be 'fixed' or 'sampled' here (rl uses train_rl_halting), got {scheme!r}")


def all_correct(pred: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """True where every scored position of a sequence is predicted exactly; pred (..., batch, L) -> (..., batch)."""
    return ((pred == targets) | ~mask).all(-1)


def sequence_correct(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """1.0 where every scored position of a sequence is predicted exactly, else 0.0; (batch, L, V) -> (batch,)."""
    return all_correct(logits.argmax(-1), targets, mask).float()


def masked_ce(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, balance: bool = False) -> torch.Tensor:
    """Per-sequence mean cross-entropy over scored positions; (batch, L, V) -> (batch,).

    ``balance``: weight each scored position by 1 / (V' * share of its target class in the batch), V' the number
    of classes present, so that every class carries the same total weight (Dyck-1's rare "balanced" label would
    otherwise leave the model on the plateau of always answering "unbalanced").
    """
    ce = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    w = mask.float()
    if balance:
        counts = torch.bincount(targets[mask], minlength=logits.shape[-1]).float()
        present = (counts > 0).sum()
        w = w * (mask.sum() / (present * counts.clamp(min=1)))[targets]
    return (ce * w).sum(1) / mask.sum(1).clamp(min=1)


def train_looped(model: TinyTransformer, task: str, scheme: str, steps: int, batch: int, train_len: tuple[int, int],
                 lr: float, rng: np.random.Generator, gen: torch.Generator,
                 plateau: tuple[int, float] | None = None) -> np.ndarray | None:
    """Train ``model`` with the ``fixed`` or ``sampled`` loop schedule; returns the loss per step (steps,).

    Every step draws one length ``n`` uniformly from ``train_len`` (inclusive), a batch of that length from ``rng``
    and per-sample loop counts from ``gen`` (:func:`loop_counts`); :class:`~paperkit.training.AdamCosine` at
    learning rate ``lr``.
    ``plateau=(step, level)``: give up and return None if the mean loss of the 20 steps before ``step`` is above
    ``level`` (the run is stuck on the plateau of the trivial solution).
    """
    if steps < 1 or batch < 1 or lr <= 0:
        raise ValueError(f"steps, batch and lr must be positive, got {steps}, {batch}, {lr}")
    lo, hi = train_len
    if not 1 <= lo <= hi:
        raise ValueError(f"train_len must be (lo, hi) with 1 <= lo <= hi, got {train_len}")
    dev = next(model.parameters()).device
    opt = AdamCosine(model.parameters(), lr, steps)
    losses = np.empty(steps)
    for step in range(steps):
        n = int(rng.integers(lo, hi + 1))
        x, y, m = task_batch(task, rng, batch, n, dev)
        T = loop_counts(scheme, n, batch, gen).to(dev)
        losses[step] = opt.step(masked_ce(model(x, n_loops=T), y, m, balance=task == "dyck1").mean())
        if plateau is not None and step + 1 == plateau[0] and losses[max(0, step - 19):step + 1].mean() > plateau[1]:
            return None
    return losses


@torch.no_grad()
def per_loop_predictions(model: TinyTransformer, tokens: torch.Tensor, max_loops: int) -> torch.Tensor:
    """Predicted tokens after each loop 1..max_loops from ONE forward pass; (max_loops, batch, L) int64."""
    if max_loops < 1:
        raise ValueError(f"max_loops must be >= 1, got {max_loops}")
    _, states = model(tokens, n_loops=max_loops, return_states=True)
    return torch.stack([model.readout(h).argmax(-1) for h in states])


@torch.no_grad()
def per_loop_predictions_reference(model: TinyTransformer, tokens: torch.Tensor, max_loops: int) -> torch.Tensor:
    """Same as :func:`per_loop_predictions` by re-running the model once per loop count (K (K + 1) / 2 blocks)."""
    if max_loops < 1:
        raise ValueError(f"max_loops must be >= 1, got {max_loops}")
    return torch.stack([model(tokens, n_loops=k).argmax(-1) for k in range(1, max_loops + 1)])


class HaltingHead(nn.Module):
    """Halting logit per sample and loop from the mean-pooled (detached) state: z_k = w . LN(mean_t h_k[t]) + b.

    ``init_bias`` sets the starting halt probability sigmoid(b) per loop.
    """

    def __init__(self, d_model: int, gen: torch.Generator, init_bias: float = -1.5):
        super().__init__()
        self.ln = nn.LayerNorm(d_model)
        self.lin = nn.Linear(d_model, 1)
        with torch.no_grad():
            self.lin.weight.copy_(0.01 * torch.randn(self.lin.weight.shape, generator=gen))
            self.lin.bias.fill_(init_bias)

    def forward(self, states: list[torch.Tensor]) -> torch.Tensor:
        """Halting logits (batch, K) for a list of K states (batch, L, d); the states are detached."""
        pooled = torch.stack([h.detach().mean(1) for h in states], dim=1)
        return self.lin(self.ln(pooled)).squeeze(-1)


def halting_distribution(logits: torch.Tensor) -> torch.Tensor:
    """Probability of halting at each of K candidate loops; (batch, K) logits -> (batch, K), rows sum to 1.

    With p_k = sigmoid(z_k) the policy halts at candidate k with probability::

        pi_k = p_k * prod_{j<k} (1 - p_j)  (k < K),    pi_K = prod_{j<K} (1 - p_j)   (forced halt at the last).
    """
    logp_halt = F.logsigmoid(logits)
    logp_go = F.logsigmoid(-logits)
    # log prod_{j<k}(1 - p_j): exclusive cumulative sum of log(1 - p_j)
    cum_go = torch.cumsum(logp_go, dim=1) - logp_go
    log_pi = torch.cat([cum_go[:, :-1] + logp_halt[:, :-1], cum_go[:, -1:]], dim=1)
    return log_pi.exp()


def halting_distribution_reference(logits: torch.Tensor) -> torch.Tensor:
    """:func:`halting_distribution` by an explicit loop over candidates (the plain reference)."""
    p = torch.sigmoid(logits)
    b, K = p.shape
    pi = torch.zeros_like(p)
    alive = torch.ones(b, dtype=p.dtype)
    for k in range(K):
        pi[:, k] = alive * (p[:, k] if k < K - 1 else 1.0)
        alive = alive * (1 - p[:, k])
    return pi


def train_rl_halting(model: TinyTransformer, head: HaltingHead, task: str, steps: int, batch: int,
                     train_len: tuple[int, int], lr: float, lam: float, rng: np.random.Generator,
                     gen: torch.Generator) -> dict:
    """Train the looped model and its halting head jointly (scheme R); returns per-step logs.

    Per step: length ``n`` from ``train_len``; one forward pass with ``2n`` loops keeps every state; the head gives
    halting logits at loops ``n..2n`` (n + 1 candidates); a halting loop ``T`` per sample is sampled from
    :func:`halting_distribution` with ``gen``. The model gets the cross-entropy of the readout at loop ``T``; the
    head gets REINFORCE with ``R = correct(T) - lam * T / n`` and a running-mean baseline ``b``:
    ``loss_head = -(R - b) log pi_T``. Logs: loss, mean reward, mean T / n.
    """
    if steps < 1 or batch < 1 or lr <= 0 or lam < 0:
        raise ValueError(f"steps, batch, lr must be positive and lam >= 0, got {steps}, {batch}, {lr}, {lam}")
    lo, hi = train_len
    if not 1 <= lo <= hi:
        raise ValueError(f"train_len must be (lo, hi) with 1 <= lo <= hi, got {train_len}")
    dev = next(model.parameters()).device
    opt = AdamCosine(list(model.parameters()) + list(head.parameters()), lr, steps, clip_params=model.parameters())
    logs = {k: np.empty(steps) for k in ("loss", "reward", "loops_over_n")}
    baseline = 0.0
    for step in range(steps):
        n = int(rng.integers(lo, hi + 1))
        x, y, m = task_batch(task, rng, batch, n, dev)
        _, states = model(x, n_loops=2 * n, return_states=True)
        cand = states[n - 1:]  # states after loops n..2n
        pi = halting_distribution(head(cand))
        idx = torch.multinomial(pi.detach().cpu(), 1, generator=gen).squeeze(1).to(dev)  # candidate index per sample
        h = torch.stack(cand, dim=1)[torch.arange(batch, device=dev), idx]  # (batch, L, d)
        logits = model.readout(h)
        ce = masked_ce(logits, y, m, balance=task == "dyck1")
        T = (idx + n).float()
        # R = correct - lambda * T / n
        reward = sequence_correct(logits.detach(), y, m) - lam * T / n
        logp = torch.log(pi[torch.arange(batch, device=dev), idx] + 1e-12)
        opt.step(ce.mean() - ((reward - baseline) * logp).mean())
        baseline = 0.9 * baseline + 0.1 * reward.mean().item()
        logs["loss"][step], logs["reward"][step] = ce.mean().item(), reward.mean().item()
        logs["loops_over_n"][step] = (T / n).mean().item()
    return logs


@torch.no_grad()
def policy_halting_loops(model: TinyTransformer, head: HaltingHead, tokens: torch.Tensor, n: int) -> torch.Tensor:
    """Greedy inference loop count per sample (batch,): the most probable candidate in ``n..2n`` under the policy."""
    _, states = model(tokens, n_loops=2 * n, return_states=True)
    return halting_distribution(head(states[n - 1:])).argmax(1) + n


def block_applications(max_loops: int, one_pass: bool) -> int:
    """Block applications to read accuracy at loops 1..K: K in one pass, K (K + 1) / 2 re-running per count."""
    return max_loops if one_pass else max_loops * (max_loops + 1) // 2


class BlockCounter:
    """Counts applications of a model's blocks while active (a forward hook on each block).

    Example::

        with BlockCounter(model) as c:
            model(tokens, n_loops=5)
        c.calls  # 5 for a one-block model
    """

    def __init__(self, model: TinyTransformer):
        self.model, self.calls, self._hooks = model, 0, []

    def _hook(self, module, inputs, output) -> None:
        self.calls += 1

    def __enter__(self) -> "BlockCounter":
        self._hooks = [blk.register_forward_hook(self._hook) for blk in self.model.blocks]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._hooks:
            h.remove()


def loop_window_stats(pred: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, n: int,
                      halt: torch.Tensor | None = None) -> dict:
    """Accuracy and stability of per-loop predictions (K, batch, L) over the window of loop counts ``n..2n``.

    Returns ``acc_at_n`` (sequence accuracy at T = n), ``acc_halt`` (at the per-sample loops ``halt`` (batch,),
    T = n when None), ``std_window`` (standard deviation over T in n..2n of the sequence accuracy),
    ``stable_frac`` (share of sequences whose prediction is identical at every T in the window) and
    ``stable_wrong_frac`` (share of the sequences wrong at ``halt`` whose prediction is identical across the window:
    a locked-in wrong computation; NaN when none is wrong).
    """
    if pred.shape[0] < 2 * n:
        raise ValueError(f"pred must hold at least 2n = {2 * n} loops, got {pred.shape[0]}")
    correct = all_correct(pred, targets, mask)  # (K, batch)
    win = pred[n - 1:2 * n]
    same = ((win == win[:1]) | ~mask).all(-1).all(0)  # (batch,)
    T = torch.full((pred.shape[1],), n) if halt is None else halt.cpu()
    ok_halt = correct[T - 1, torch.arange(pred.shape[1])]
    wrong = ~ok_halt
    return {"acc_at_n": correct[n - 1].float().mean().item(), "acc_halt": ok_halt.float().mean().item(),
            "std_window": correct[n - 1:2 * n].float().mean(1).std(unbiased=False).item(),
            "stable_frac": same.float().mean().item(),
            "stable_wrong_frac": (same & wrong).float().sum().item() / wrong.sum().item() if wrong.any()
            else float("nan")}


@torch.no_grad()
def training_length_accuracy(model: TinyTransformer, task: str, lengths, n_samples: int,
                             rng: np.random.Generator) -> float:
    """Sequence accuracy with as many loops as the length, averaged over ``lengths``, on ``n_samples`` fresh
    samples per length drawn from ``rng``.

    The run-selection criterion of :func:`train_and_evaluate`: ``rng`` is the training data stream, so the
    evaluation sets are never looked at when a run is kept or restarted.
    """
    dev = next(model.parameters()).device
    accs = []
    for size in lengths:
        x, y, m = task_batch(task, rng, n_samples, int(size), dev)
        accs.append(sequence_correct(model(x, n_loops=int(size)), y, m).mean().item())
    return float(np.mean(accs))


def train_and_evaluate(task: str, scheme: str, *, d_model: int, steps: int, batch: int, lr: float,
                       train_len: tuple[int, int], id_lengths, test_lengths, n_eval: int, seed: int,
                       device: str | torch.device = "cpu", lam: float = 0.05, max_restarts: int = 0,
                       plateau_level: float = 0.15, id_target: float | None = None) -> dict:
    """Train one run of ``scheme`` (``fixed``, ``sampled`` or ``rl``) from ``seed`` and evaluate it.

    Training data, loop draws and initial weights come from generators seeded by ``seed`` (the evaluation sets
    from a separate stream, identical for every scheme at the same ``seed``). A ``fixed`` or ``sampled`` run whose
    mean loss is still above ``plateau_level`` at 60% of ``steps`` is abandoned and restarted from a new seed, at most
    ``max_restarts`` times (the last try always runs to the end); with ``id_target``, so is a finished run whose
    :func:`training_length_accuracy` (fresh samples from the training stream, never the evaluation sets) is below
    it: the paper's claims are about runs that solve the training lengths. Returns ``curve`` (training loss per step),
    ``restarts`` (abandoned tries), ``acc`` ({n: per-loop sequence accuracy (2n,)}) and ``stats``
    ({n: :func:`loop_window_stats`}) for every length in ``id_lengths`` and ``test_lengths``; for ``rl`` the
    statistics use the policy's greedy halting loop.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    if max_restarts < 0:
        raise ValueError(f"max_restarts must be >= 0, got {max_restarts}")
    eval_rng = np.random.default_rng([seed, 1])
    head, curve, restarts = None, None, 0
    while curve is None:
        data_rng = np.random.default_rng([seed, 0, restarts])
        gen = torch.Generator().manual_seed(seed + 7919 * restarts)
        model = make_model(task, d_model, gen, device)
        if scheme == "rl":
            head = HaltingHead(d_model, gen).to(device)
            curve = train_rl_halting(model, head, task, steps, batch, train_len, lr, lam, data_rng, gen)["loss"]
        else:
            last = restarts >= max_restarts
            check = None if last else (int(0.6 * steps), plateau_level)
            curve = train_looped(model, task, scheme, steps, batch, train_len, lr, data_rng, gen, plateau=check)
            if (curve is not None and not last and id_target is not None
                    and training_length_accuracy(model, task, id_lengths, n_eval, data_rng) < id_target):
                curve = None
            restarts += curve is None
    model.eval()
    acc, stats = {}, {}
    for n in sorted(set(id_lengths) | set(test_lengths)):
        x, y, m = task_batch(task, eval_rng, n_eval, int(n), device)
        pred = per_loop_predictions(model, x, 2 * int(n))
        halt = None if head is None else policy_halting_loops(model, head, x, int(n))
        acc[n] = all_correct(pred, y, m).float().mean(-1).cpu().numpy()
        stats[n] = loop_window_stats(pred.cpu(), y.cpu(), m.cpu(), int(n), halt)
    return {"curve": curve, "restarts": restarts, "acc": acc, "stats": stats}


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Contract, Kernel

    def inputs(rng, size):
        return {"logits": torch.from_numpy(rng.normal(size=(max(size, 1), 5)))}

    return [Kernel("looped_halting.halting_distribution", halting_distribution, halting_distribution_reference,
                   inputs, Contract(empty="value", shapes="logits: (batch, K)"), tol={"float64": (1e-12, 1e-14)},
                   oracle="rows sum to 1")]


KERNELS = _registry()

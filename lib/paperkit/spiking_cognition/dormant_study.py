"""The dormant-spiking-neuron chapter's experiment: a two-hidden-layer LIF network on real MNIST digits, trained by
backpropagation through time with and without the dormant gate, its counted energy, static neuron pruning at
matched energy, and the firing statistics of deeply inhibited neurons.

Network (our miniature): rate-coded input ``x`` (T, B, D) of 0/1 spikes, ``I1 = x W1^T + b1`` -> LIF (H) ->
``I2 = s1 W2^T + b2`` -> LIF (H) -> readout ``logits = mean_t (s2_t W3^T + b3)`` (a non-spiking integrator of 10
units). The gate, the LIF equations and the energy count are in :mod:`paperkit.spiking_cognition.lif_torch`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from paperkit.spiking_cognition.lif_torch import E_AC_PJ, E_MAC_PJ, lif_layer, snn_energy


def mnist_14x14(X: np.ndarray) -> np.ndarray:
    """(n, 784) pixel values 0-255 -> (n, 196) intensities in [0, 1], by 2x2 average pooling of the 28x28 images."""
    return (X.reshape(-1, 14, 2, 14, 2).mean((2, 4)) / 255.0).reshape(-1, 196).astype(np.float32)


def rate_code(p: torch.Tensor, T: int, gen: torch.Generator, draws: int = 1) -> torch.Tensor:
    """Bernoulli rate code: (B, D) intensities in [0, 1] -> (T, B, D) 0/1 spikes. ``draws > 1`` ORs independent
    draws (firing probability ``1 - (1 - p)^draws``): a denser code of the same images."""
    q = 1.0 - (1.0 - p.clamp(0, 1)) ** draws
    return (torch.rand((T,) + tuple(p.shape), generator=gen) < q).to(p.dtype)


class LIFNet(torch.nn.Module):
    """D -> H -> H -> 10 LIF network; ``theta_d`` = inf is the plain LIF, finite values switch the gate on.
    ``mask1``, ``mask2`` (H,) 0/1 buffers remove hidden neurons (static pruning)."""

    def __init__(self, D: int, H: int, gen: torch.Generator, beta: float = 0.9, thr: float = 1.0,
                 theta_d: float = math.inf, slope: float = 25.0):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = (torch.nn.Linear(a, b) for a, b in ((D, H), (H, H), (H, 10)))
        with torch.no_grad():
            for fc in (self.fc1, self.fc2, self.fc3):
                bound = 1.0 / math.sqrt(fc.in_features)
                fc.weight.copy_((torch.rand(fc.weight.shape, generator=gen) * 2 - 1) * bound)
                fc.bias.copy_((torch.rand(fc.bias.shape, generator=gen) * 2 - 1) * bound)
        self.beta, self.thr, self.theta_d, self.slope = beta, thr, theta_d, slope
        self.register_buffer("mask1", torch.ones(H))
        self.register_buffer("mask2", torch.ones(H))

    def forward(self, x: torch.Tensor, theta_d: float | None = None) -> dict:
        """``x`` (T, B, D) spikes -> dict of ``logits`` (B, 10) and per layer ``s``, ``u``, ``a`` (T, B, H)."""
        th = self.theta_d if theta_d is None else theta_d
        kw = dict(beta=self.beta, thr=self.thr, theta_d=th, slope=self.slope)
        s1, u1, a1 = lif_layer(self.fc1(x), **kw)
        s1, a1 = s1 * self.mask1, a1 * self.mask1
        s2, u2, a2 = lif_layer(self.fc2(s1), **kw)
        s2, a2 = s2 * self.mask2, a2 * self.mask2
        logits = self.fc3(s2).mean(0)
        return {"logits": logits, "s": (s1, s2), "u": (u1, u2), "a": (a1, a2)}


@dataclass
class Trained:
    net: LIFNet
    losses: list


def train(net: LIFNet, X: torch.Tensor, y: torch.Tensor, T: int, epochs: int, gen: torch.Generator,
          lam: float = 0.0, lr: float = 2e-3, batch: int = 128, lam_rate: float = 0.0) -> Trained:
    """Adam on cross-entropy ``+ lam * (awake fraction of hidden neuron-steps) + lam_rate * (mean firing rate of
    the two hidden layers)`` by BPTT through the surrogate gradients (the awake term has a gradient only when the
    gate is on; the rate term is the usual activity penalty). ``X`` (n, D) intensities, ``y`` (n,)."""
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    n = X.shape[0]
    losses = []
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, batch):
            idx = perm[i:i + batch]
            out = net(rate_code(X[idx], T, gen))
            live = float(net.mask1.sum() + net.mask2.sum())
            awake = (out["a"][0].sum() + out["a"][1].sum()) / (out["a"][0].shape[0] * len(idx) * live)
            loss = F.cross_entropy(out["logits"], y[idx]) + lam * awake
            if lam_rate:
                loss = loss + lam_rate * 0.5 * (out["s"][0].mean() + out["s"][1].mean())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    return Trained(net, losses)


@torch.no_grad()
def evaluate(net: LIFNet, X: torch.Tensor, y: torch.Tensor, T: int, gen: torch.Generator, theta_d=None,
             draws: int = 1, gate_cost: bool | None = None) -> dict:
    """Accuracy and counted energy per sample on (X, y). ``theta_d`` overrides the net's gate (``math.inf``: off;
    a finite value on a plain-trained net: the gate added after training). ``draws``: input code density (see
    :func:`rate_code`). Energy (pJ per sample): SOPs at E_AC, membrane updates at E_MAC, plus one E_AC compare per
    awake neuron-step when the gate is on; the 10 readout units count one update per step each."""
    th = net.theta_d if theta_d is None else theta_d
    gated = math.isfinite(th) if gate_cost is None else gate_cost
    x = rate_code(X, T, gen, draws)
    out = net(x, theta_d=th)
    B = X.shape[0]
    (s1, s2), (a1, a2) = out["s"], out["a"]
    c1 = (net.fc1.weight != 0).T.double().numpy() * net.mask1.numpy()[None, :]
    c2 = (net.fc2.weight != 0).T.double().numpy() * net.mask1.numpy()[:, None] * net.mask2.numpy()[None, :]
    c3 = (net.fc3.weight != 0).T.double().numpy() * net.mask2.numpy()[:, None]
    eg = E_AC_PJ if gated else 0.0
    e1 = snn_energy(x.numpy(), a1.numpy(), c1, e_gate=eg)
    e2 = snn_energy(s1.numpy(), a2.numpy(), c2, e_gate=eg)
    e3 = snn_energy(s2.numpy(), np.ones((x.shape[0], B, 10)), c3)
    sop = e1["sop"] + e2["sop"] + e3["sop"]
    upd = e1["upd"] + e2["upd"] + e3["upd"]
    live = float(net.mask1.sum() + net.mask2.sum())
    return {"acc": float((out["logits"].argmax(1) == y).float().mean()),
            "energy": (e1["energy_pj"] + e2["energy_pj"] + e3["energy_pj"]) / B,
            "sop": sop / B, "upd": upd / B,
            "awake": float((a1.sum() + a2.sum()) / (x.shape[0] * B * live)),
            "rate": float((s1.sum() + s2.sum()) / (x.shape[0] * B * live)),
            "input_density": float(x.mean()), "out": out}


def inhibition_stats(u: torch.Tensor, s: torch.Tensor, theta_d: float) -> dict:
    """Deep inhibition and later firing in a plain network's hidden layer: ``u``, ``s`` (T, B, N).

    ``deep`` = share of neuron-steps with ``u_t < -theta_d``; ``p_later_*`` = probability that the neuron fires at
    some step ``t' > t`` of the same window, given its state at ``t`` (steps ``t < T`` only): ``deep``
    (``u_t < -theta_d``), ``mild`` (``-theta_d <= u_t < 0``) and ``all`` neuron-steps."""
    T = u.shape[0]
    # later[t] = 1 if any spike in t+1..T-1
    rev = torch.flip(torch.cummax(torch.flip(s, [0]), 0).values, [0])
    later = torch.zeros_like(s)
    later[:-1] = rev[1:]
    uu, ll = u[:-1], later[:-1]
    deep, mild = uu < -theta_d, (uu >= -theta_d) & (uu < 0)
    pick = lambda m: float(ll[m].mean()) if bool(m.any()) else float("nan")
    return {"deep": float((u < -theta_d).double().mean()), "p_later_deep": pick(deep), "p_later_mild": pick(mild),
            "p_later_all": float(ll.mean()), "T": T}


def magnitude_prune(net: LIFNet, frac: float) -> LIFNet:
    """Static pruning: remove the fraction ``frac`` of each hidden layer's neurons with the smallest outgoing weight
    norm ``||W_out[:, j]||_2`` (masks set to 0, weights kept). Returns a pruned copy."""
    import copy

    p = copy.deepcopy(net)
    for mask, w in ((p.mask1, p.fc2.weight), (p.mask2, p.fc3.weight)):
        k = int(round(frac * mask.numel()))
        mask.fill_(1.0)
        if k > 0:
            mask[torch.argsort(w.detach().norm(dim=0))[:k]] = 0.0
    return p


def prune_to_energy(net: LIFNet, target: float, X: torch.Tensor, y: torch.Tensor, T: int, seed: int,
                    iters: int = 7) -> tuple[LIFNet, float]:
    """Bisect the pruned fraction so that the pruned plain network's energy per sample is at most ``target``
    (measured on ``X`` with a fixed input code); returns the pruned copy and the fraction."""
    lo, hi = 0.0, 0.98
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        e = evaluate(magnitude_prune(net, mid), X, y, T, torch.Generator().manual_seed(seed))["energy"]
        lo, hi = (lo, mid) if e <= target else (mid, hi)
    return magnitude_prune(net, hi), hi


def event_driven_saving(x: torch.Tensor, conn: np.ndarray) -> float:
    """The input-driven alternative: a neuron updates only at steps where at least one spike reaches it (its leak
    can be applied lazily). ``x`` (T, B, M) presynaptic spikes, ``conn`` (M, N). Returns the share of neuron-step
    updates it skips."""
    hit = (x.double().numpy() @ conn) > 0
    return float(1.0 - hit.mean())


THETA_GRID = (0.1, 0.25, 0.5, 0.75, 1.0, 1.5)


def instance_share(a: tuple, lo: float = 0.05, hi: float = 0.95) -> dict:
    """Instance-level dormancy of hidden layers with awake masks ``a`` ((T, B, N) each): per neuron the share of
    inputs for which it is dormant at the last step; ``varies`` = share of neurons with that share in (lo, hi)
    (asleep for some inputs, awake for others), ``always`` = share dormant for at least ``hi`` of the inputs."""
    f = torch.cat([(x[-1] == 0).double().mean(0) for x in a])
    return {"varies": float(((f > lo) & (f < hi)).double().mean()), "always": float((f >= hi).double().mean())}


def _scalars(ev: dict) -> dict:
    return {k: v for k, v in ev.items() if k != "out"}


def run_seed(X: torch.Tensor, y: torch.Tensor, seed: int, T: int = 8, H: int = 128, epochs: int = 5,
             theta_d: float = 0.5, lam: float = 0.02, n_test: int = 1000, finetune: int = 1,
             lam_rate: float = 0.12) -> dict:
    """One seed of the chapter: split (X, y) into train/test (the last ``n_test`` of a seeded permutation), train the
    plain LIF and the gated network (same initial weights and batches), then measure on the test set: plain, plain
    with the gate added after training, gated network, static magnitude pruning of the plain network at the gated
    network's energy (then fine-tuned ``finetune`` epochs), both networks with a denser input code, and the
    input-driven (event-driven) update saving, and a plain network trained with the firing-rate penalty ``lam_rate``
    (same initial weights and batches). Returns scalars plus the plain/gated test-set states for figures."""
    g = torch.Generator().manual_seed(10_000 + seed)
    perm = torch.randperm(X.shape[0], generator=g)
    tr, te = perm[:-n_test], perm[-n_test:]
    Xtr, ytr, Xte, yte = X[tr], y[tr], X[te], y[te]
    gens = lambda k: torch.Generator().manual_seed(1000 * seed + k)
    init = LIFNet(X.shape[1], H, gens(1))
    plain = train(LIFNet(X.shape[1], H, gens(1)), Xtr, ytr, T, epochs, gens(2)).net
    dsn_t = train(LIFNet(X.shape[1], H, gens(1), theta_d=theta_d), Xtr, ytr, T, epochs, gens(2), lam=lam)
    dsn = dsn_t.net
    rate_net = train(LIFNet(X.shape[1], H, gens(1)), Xtr, ytr, T, epochs, gens(2), lam_rate=lam_rate).net
    ev = lambda net, **kw: evaluate(net, Xte, yte, T, gens(3), **kw)
    e_plain, e_dsn = ev(plain), ev(dsn)
    e_post = ev(plain, theta_d=theta_d)
    e_rate = ev(rate_net)
    e_init = ev(init)
    # static pruning at matched energy: bisect the pruned share on a 300-digit subset, fine-tune, and correct the
    # target once for the rebound of the firing rate during fine-tuning (two rounds)
    target, sub = e_dsn["energy"], slice(0, 300)
    for _ in range(2 if finetune else 1):
        pruned, frac = prune_to_energy(plain, target, Xte[sub], yte[sub], T, 1000 * seed + 3, iters=6)
        e_pruned0 = ev(pruned)
        if finetune:
            pruned = train(pruned, Xtr, ytr, T, finetune, gens(4)).net
        e_pruned = ev(pruned)
        target *= e_dsn["energy"] / e_pruned["energy"]
    e_plain_dense, e_dsn_dense = ev(plain, draws=2), ev(dsn, draws=2)
    x_dense = rate_code(Xte, T, gens(3), 2)
    c1 = np.ones((X.shape[1], H))
    inh = [inhibition_stats(e_plain["out"]["u"][k], e_plain["out"]["s"][k], theta_d) for k in range(2)]
    inh_init = [inhibition_stats(e_init["out"]["u"][k], e_init["out"]["s"][k], theta_d) for k in range(2)]
    w = lambda key, st: float(np.mean([d[key] for d in st]))
    sweep = [[inhibition_stats(e_plain["out"]["u"][k], e_plain["out"]["s"][k], th) for k in range(2)]
             for th in THETA_GRID]
    return {
        "inst": instance_share(e_dsn["out"]["a"]), "inst_post": instance_share(e_post["out"]["a"]),
        "sweep_deep": [w("deep", st) for st in sweep], "sweep_p_later": [w("p_later_deep", st) for st in sweep],
        "seed": seed, "plain": _scalars(e_plain), "dsn": _scalars(e_dsn), "posthoc": _scalars(e_post),
        "pruned": _scalars(e_pruned), "pruned_before_ft": _scalars(e_pruned0), "prune_frac": frac,
        "plain_dense": _scalars(e_plain_dense), "dsn_dense": _scalars(e_dsn_dense),
        "rate_pen": _scalars(e_rate), "saving_rate": 1 - e_rate["energy"] / e_plain["energy"],
        "saving": 1 - e_dsn["energy"] / e_plain["energy"], "saving_post": 1 - e_post["energy"] / e_plain["energy"],
        "saving_dense": 1 - e_dsn_dense["energy"] / e_plain_dense["energy"],
        "event_saving": event_driven_saving(rate_code(Xte, T, gens(3)), c1),
        "event_saving_dense": event_driven_saving(x_dense, c1),
        "deep": w("deep", inh), "deep_init": w("deep", inh_init), "p_later_deep": w("p_later_deep", inh),
        "p_later_mild": w("p_later_mild", inh), "p_later_all": w("p_later_all", inh),
        "u_plain": e_plain["out"]["u"][0][:, :200].numpy(), "a_dsn": e_dsn["out"]["a"][0][:, :4].numpy(),
        "u_dsn": e_dsn["out"]["u"][0][:, :200].numpy(),
    }

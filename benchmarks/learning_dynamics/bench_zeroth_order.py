"""Speed of the batched zeroth-order kernels against their per-sample references and the loops a user would write."""
from __future__ import annotations

import torch

from paperkit.learning_dynamics import zeroth_order as zo
from paperkit.timing import speed_ratio


def _inputs(K, q, B, p, c, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    theta, dirs = r(K, p * c), r(K, q, p * c)
    X = r(K, q, B, p)
    T = torch.nn.functional.one_hot(torch.randint(0, c, (K, q, B), generator=g), c).double()
    return theta, dirs, X, T


def run(quick: bool) -> list[dict]:
    torch.set_num_threads(1)
    reps = 3 if quick else 7
    K, q, B, p, c = (2, 8, 16, 17, 10) if quick else (4, 16, 32, 17, 10)
    theta, dirs, X, T = _inputs(K, q, B, p, c)
    ce = lambda pts, Xb, Tb: zo.target_ce(pts, Xb, Tb, c)
    mu, rows = 1e-3, []
    shape = f"K={K} chains x q={q} directions, B={B}, d={p * c}"

    r = speed_ratio(lambda: zo.zo_two_point(ce, theta, dirs, mu, (X, T), (X, T)),
                    lambda: zo.zo_two_point_ref(ce, theta, dirs, mu, (X, T), (X, T)), repeats=reps)
    rows.append(dict(kernel="zo_two_point (batched)", baseline="zo_two_point_ref (per-direction loop)", ratio=r.ratio,
                     shape=shape, work=f"{2 * K * q} minibatch losses of {B} samples"))

    def mezo_style():
        # the MeZO pattern: one direction at a time, perturb, evaluate (batched over the minibatch), restore
        out = torch.zeros(K, q, dtype=torch.float64)
        for k in range(K):
            for j in range(q):
                w = theta[k].clone()
                w += mu * dirs[k, j]
                fp = torch.nn.functional.cross_entropy(X[k, j] @ w.reshape(p, c), T[k, j])
                w -= 2 * mu * dirs[k, j]
                fm = torch.nn.functional.cross_entropy(X[k, j] @ w.reshape(p, c), T[k, j])
                out[k, j] = (fp - fm) / (2 * mu)
        return out

    r = speed_ratio(lambda: zo.zo_two_point(ce, theta, dirs, mu, (X, T), (X, T)), mezo_style, repeats=reps)
    rows.append(dict(kernel="zo_two_point (batched)", baseline="MeZO-style loop with torch cross_entropy",
                     ratio=r.ratio, shape=shape, work=f"{2 * K * q} minibatch losses of {B} samples"))

    th_all = theta[:, None].expand(K, q, -1)
    r = speed_ratio(lambda: zo.target_ce(th_all, X, T, c), lambda: zo.target_ce_ref(th_all, X, T, c), repeats=reps)
    rows.append(dict(kernel="target_ce (batched)", baseline="target_ce_ref (per-sample loop)", ratio=r.ratio,
                     shape=shape, work=f"{K * q * B} sample losses"))

    G = 8
    y = T.argmax(-1)
    U = torch.rand(K, q, B, G, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    r = speed_ratio(lambda: zo.sampled_reward(th_all, X, y, U, c), lambda: zo.sampled_reward_ref(th_all, X, y, U, c),
                    repeats=reps)
    rows.append(dict(kernel="sampled_reward (batched)", baseline="sampled_reward_ref (per-rollout loop)",
                     ratio=r.ratio, shape=shape + f", G={G}", work=f"{K * q * B * G} sampled rollouts"))
    return rows


if __name__ == "__main__":
    for row in run(quick=False):
        print(row)

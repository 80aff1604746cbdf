"""A wrong simulator as a control variate for policy evaluation (our reading of simulation-aided control variates).

A finite MDP is three tables: ``P`` (S, A, S) transition probabilities ``P(s' | s, a)``, ``R`` (S, A, S) the reward
of the transition ``s, a -> s'``, and ``term`` (S,) the terminal states (an episode ends on entering one; their
value is 0). A stationary policy is ``pi`` (S, A). The real environment comes from gymnasium
(:func:`tables_from_gym` reads ``env.unwrapped.P``); the simulator is a perturbed copy (:func:`perturb`).

For one real episode ``s_0, a_0, s_1, ...`` of length ``tau`` (truncated at ``T`` steps) the kernels return

* the discounted return ``G = sum_t gamma^t R(s_t, a_t, s_{t+1})``;
* for each table ``f_k`` (S, A) of ``tables`` (K, S, A), the statistic ``C_k = sum_t gamma^t f_k(s_t, a_t)``.

With ``f(s, a) = Q_sim(s, a) - sum_b pi(b | s) Q_sim(s, b)`` (:func:`action_cv_table`) each term has mean zero given
``s_t`` whatever ``Q_sim`` is, because the actions are drawn from the known ``pi``: ``E_real[C] = 0`` under the
*real* environment for every simulator. The estimator ``G - beta C`` is then unbiased for ``V^pi(s_0)`` and at
``beta* = Cov(G, C) / Var(C)`` its variance is ``(1 - rho^2) Var(G)``, ``rho = corr(G, C)`` (:func:`return_moments`
gives ``rho`` exactly, by linear solves). With ``f = r_sim`` (the simulator's expected reward) the statistic is the
simulator's prediction along the real path; centred with the simulator's value ``V_sim(s_0)`` it has mean zero only
under the simulator, which is the wrong-mean control variate of the chapter.

Kernels (registered in ``KERNELS``): :func:`rollout` (Numba) / :func:`rollout_ref` (plain Python, the same random
stream: one splitmix64 stream per episode, so both give identical episodes).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from paperkit.arrays import real_array

_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_EPISODE = 0xD1B54A32D192ED03
_MASK = (1 << 64) - 1


# ---------------------------------------------------------------------------------------------------- tables

def tables_from_gym(env) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``(P, R, term, s0)`` from a gymnasium toy-text environment's ``env.unwrapped.P`` (dict ``s -> a -> list of
    (prob, s', reward, terminated)``). Terminal states are the targets of terminated transitions; ``s0`` is the
    state ``env.reset`` starts from (its initial distribution must be a point mass)."""
    u = env.unwrapped
    S, A = u.observation_space.n, u.action_space.n
    P, R = np.zeros((S, A, S)), np.zeros((S, A, S))
    term = np.zeros(S, dtype=bool)
    for s in range(S):
        for a in range(A):
            for p, s2, r, done in u.P[s][a]:
                P[s, a, s2] += p
                R[s, a, s2] = r   # gymnasium's toy-text rewards are a function of (s, a, s')
                if done:
                    term[s2] = True
    isd = getattr(u, "initial_state_distrib", None)
    if isd is None or np.count_nonzero(isd) != 1:
        raise ValueError("the environment must start from a single state")
    return P, R, term, int(np.argmax(isd))


def _check_mdp(P, R, term, pi):
    P = real_array(P, "P", 3)
    R = real_array(R, "R", 3)
    pi = real_array(pi, "pi", 2)
    term = np.asarray(term)
    if term.dtype != np.bool_:
        raise TypeError(f"term must be a bool array, got dtype {term.dtype}")
    if term.ndim != 1:
        raise ValueError(f"term must have 1 axis, got shape {term.shape}")
    S, A = P.shape[0], P.shape[1]
    if S == 0 or A == 0:
        raise ValueError(f"P must have at least one state and one action, got shape {P.shape}")
    if P.shape[2] != S or R.shape != P.shape:
        raise ValueError(f"P must be (S, A, S) and R the same shape, got P {P.shape} and R {R.shape}")
    if term.shape != (S,) or pi.shape != (S, A):
        raise ValueError(f"term must be (S,) and pi (S, A) for S, A = {S}, {A}; got {term.shape} and {pi.shape}")
    if (P < 0).any() or (P > 1).any() or not np.allclose(P.sum(2), 1.0, atol=1e-9):
        raise ValueError("P must hold probabilities in [0, 1] whose rows P[s, a, :] sum to 1")
    if (pi < 0).any() or (pi > 1).any() or not np.allclose(pi.sum(1), 1.0, atol=1e-9):
        raise ValueError("pi must hold probabilities in [0, 1] whose rows sum to 1")
    return P, R, term, pi


def perturb(P, R, term, eps: float, rng: np.random.Generator, alpha: float = 1.0, reward_sd: float = 0.5):
    """A wrong simulator of strength ``eps`` in [0, 1]: ``P_sim(.|s, a) = (1 - eps) P(.|s, a) + eps D_sa`` with
    ``D_sa ~ Dirichlet(alpha)`` over the neighbours of ``s`` (the states some action can reach from ``s``), and
    ``R_sim(s, a, .) = R(s, a, .) + eps * reward_sd * sigma_R * xi_sa``, ``xi_sa ~ N(0, 1)``, ``sigma_R`` the
    standard deviation of the rewards of the possible transitions. The terminal set is kept. The draws do not depend
    on ``eps``: with the same generator state a larger ``eps`` moves further along the same direction."""
    if not 0.0 <= eps <= 1.0:
        raise ValueError(f"eps must lie in [0, 1], got {eps}")
    S, A, _ = P.shape
    nb = P.sum(1) > 0
    D = rng.gamma(alpha, size=(S, A, S)) * nb[:, None, :]
    D /= D.sum(2, keepdims=True)
    sigma = float(np.std(R[P > 0])) or 1.0
    xi = rng.normal(size=(S, A, 1)) * sigma
    return (1.0 - eps) * P + eps * D, R + eps * reward_sd * xi


# ---------------------------------------------------------------------------------------------- exact values

def _p_pi(P, term, pi):
    """``P_pi[s, s'] = sum_a pi(a|s) P(s'|s, a)`` into non-terminal ``s'`` only, zero rows for terminal ``s``."""
    M = np.einsum("sa,sat->st", pi, P) * (~term)[None, :]
    M[term] = 0.0
    return M


def policy_eval(P, R, term, pi, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact ``V^pi`` (S,) and ``Q^pi`` (S, A) of the infinite-horizon discounted MDP by one linear solve,
    ``(I - gamma P_pi) V = r_pi``, with ``V = 0`` on terminal states (numpy.linalg.solve)."""
    P, R, term, pi = _check_mdp(P, R, term, pi)
    if not 0.0 <= gamma < 1.0:
        raise ValueError(f"gamma must lie in [0, 1), got {gamma}")
    rbar = (P * R).sum(2)
    r_pi = (pi * rbar).sum(1) * (~term)
    V = np.linalg.solve(np.eye(len(term)) - gamma * _p_pi(P, term, pi), r_pi)
    Q = rbar + gamma * P @ (V * (~term))
    Q[term] = 0.0
    return V, Q


def optimal_q(P, R, term, gamma: float, tol: float = 1e-12, max_iter: int = 100000) -> np.ndarray:
    """``Q*`` (S, A) by value iteration (used only to build a sensible stochastic policy)."""
    rbar = (P * R).sum(2)
    V = np.zeros(P.shape[0])
    for _ in range(max_iter):
        Q = rbar + gamma * P @ (V * (~term))
        V_new = np.where(term, 0.0, Q.max(1))
        if np.abs(V_new - V).max() < tol:
            break
        V = V_new
    Q[term] = 0.0
    return Q


def softmax_policy(Q, temperature: float) -> np.ndarray:
    """``pi(a|s) proportional to exp(Q(s, a) / temperature)`` (S, A)."""
    z = Q / temperature
    z = np.exp(z - z.max(1, keepdims=True))
    return z / z.sum(1, keepdims=True)


def action_cv_table(Q_sim, pi) -> np.ndarray:
    """``f(s, a) = Q_sim(s, a) - sum_b pi(b|s) Q_sim(s, b)`` (S, A): the per-step term of the control variate whose
    mean is zero under any environment (the actions come from the known ``pi``)."""
    return Q_sim - (pi * Q_sim).sum(1, keepdims=True)


def return_moments(P, R, term, pi, gamma: float, s0: int, tables) -> dict:
    """Exact first and second moments, from ``s0``, of ``G`` and of ``C_k = sum_t gamma^t f_k(s_t, a_t)`` for each
    table of ``tables`` (K, S, A), by linear solves of the second-moment Bellman equations (Sobel 1982):
    ``M_xy = E[x y + gamma x V_y(s') + gamma y V_x(s')] + gamma^2 P_pi M_xy``. Returns ``mean_G``, ``var_G``,
    ``mean_C`` (K,), ``var_C`` (K,), ``cov_GC`` (K,), ``rho`` (K,) and ``beta_star`` (K,) =
    ``Cov(G, C_k) / Var(C_k)``. Infinite horizon (the rollouts' truncation at ``T`` changes these by
    ``O(gamma^T)``)."""
    P, R, term, pi = _check_mdp(P, R, term, pi)
    tables = real_array(tables, "tables", 3)
    S = len(term)
    nt = (~term).astype(float)
    A_mat = np.eye(S) - gamma * _p_pi(P, term, pi)
    w = pi[:, :, None] * P * nt[:, None, None]          # weight of (s, a, s'), only from non-terminal s
    # per-step quantities x(s, a, s'): G's reward R, C_k's f_k(s, a)
    xs = [R] + [np.broadcast_to(f[:, :, None], P.shape) for f in tables]
    Vs = [np.linalg.solve(A_mat, (w * x).sum((1, 2))) for x in xs]
    M = {}
    for i, j in [(0, 0)] + [(0, k) for k in range(1, len(xs))] + [(k, k) for k in range(1, len(xs))]:
        xi, xj = xs[i], xs[j]
        rhs = (w * (xi * xj + gamma * xi * (Vs[j] * nt)[None, None, :]
                    + gamma * xj * (Vs[i] * nt)[None, None, :])).sum((1, 2))
        M[i, j] = np.linalg.solve(np.eye(S) - gamma ** 2 * _p_pi(P, term, pi), rhs)
    K = len(tables)
    mean_G, var_G = Vs[0][s0], M[0, 0][s0] - Vs[0][s0] ** 2
    mean_C = np.array([Vs[k][s0] for k in range(1, K + 1)])
    var_C = np.array([M[k, k][s0] - Vs[k][s0] ** 2 for k in range(1, K + 1)])
    cov = np.array([M[0, k][s0] - Vs[0][s0] * Vs[k][s0] for k in range(1, K + 1)])
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.where(var_C > 0, cov / np.sqrt(var_G * np.maximum(var_C, 1e-300)), 0.0)
        beta = np.where(var_C > 0, cov / np.maximum(var_C, 1e-300), 0.0)
    return {"mean_G": float(mean_G), "var_G": float(var_G), "mean_C": mean_C, "var_C": var_C, "cov_GC": cov,
            "rho": rho, "beta_star": beta}


# ---------------------------------------------------------------------------------------------------- rollouts

def _check_rollout(P, R, term, pi, s0, n, T, gamma, tables, seed):
    P, R, term, pi = _check_mdp(P, R, term, pi)
    tables = real_array(tables, "tables", 3)
    if tables.shape[1:] != pi.shape:
        raise ValueError(f"tables must be (K, S, A) with (S, A) = {pi.shape}, got {tables.shape}")
    for name, v, lo in (("s0", s0, 0), ("n", n, 0), ("T", T, 1), ("seed", seed, 0)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    if s0 >= len(term) or term[s0]:
        raise ValueError(f"s0 must be a non-terminal state below S = {len(term)}, got {s0}")
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must lie in [0, 1], got {gamma!r}")
    if seed >= 1 << 64:
        raise ValueError(f"seed must be below 2**64, got {seed}")
    return (np.ascontiguousarray(P, dtype=np.float64), np.ascontiguousarray(R, dtype=np.float64), term,
            np.ascontiguousarray(pi, dtype=np.float64), np.ascontiguousarray(tables, dtype=np.float64))


@njit(cache=True)
def _rollout_numba(cP, R, term, cpi, s0, n, T, gamma, tables, seed):
    S, A = cpi.shape
    K = tables.shape[0]
    G = np.zeros(n)
    C = np.zeros((n, K))
    steps = np.zeros(n, dtype=np.int64)
    g0, m1, m2 = np.uint64(_GOLDEN), np.uint64(_MIX1), np.uint64(_MIX2)
    for i in range(n):
        st = np.uint64(seed) + np.uint64(i) * np.uint64(_EPISODE)
        s = s0
        disc = 1.0
        t = 0
        while t < T:
            st = st + g0
            z = st
            z = (z ^ (z >> np.uint64(30))) * m1
            z = (z ^ (z >> np.uint64(27))) * m2
            z = z ^ (z >> np.uint64(31))
            u = float(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)
            a = A - 1
            for b in range(A):
                if u < cpi[s, b]:
                    a = b
                    break
            st = st + g0
            z = st
            z = (z ^ (z >> np.uint64(30))) * m1
            z = (z ^ (z >> np.uint64(27))) * m2
            z = z ^ (z >> np.uint64(31))
            u = float(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)
            s2 = S - 1
            for j in range(S):
                if u < cP[s, a, j]:
                    s2 = j
                    break
            G[i] += disc * R[s, a, s2]
            for k in range(K):
                C[i, k] += disc * tables[k, s, a]
            disc *= gamma
            t += 1
            s = s2
            if term[s]:
                break
        steps[i] = t
    return G, C, steps


def _cdf(p, axis):
    """Cumulative sums along the last axis (``axis`` names it for the reader) with every entry from the last
    positive probability on set to 2, so that every u in [0, 1) finds a bin and rounding never picks an outcome of
    probability zero."""
    c = np.cumsum(p, axis=axis)
    pos = p > 0
    last = p.shape[-1] - 1 - np.argmax(pos[..., ::-1], axis=-1)
    c[np.arange(p.shape[-1]) >= last[..., None]] = 2.0
    return c


def rollout(P, R, term, pi, s0: int, n: int, T: int, gamma: float, tables, seed: int):
    """``n`` episodes of ``pi`` in the MDP ``(P, R, term)`` from ``s0``, each at most ``T`` steps (Numba).

    Shapes: ``P, R`` (S, A, S); ``term`` (S,) bool; ``pi`` (S, A); ``tables`` (K, S, A), K >= 0. Returns
    ``G`` (n,) the discounted returns, ``C`` (n, K) the statistics ``sum_t gamma^t tables[k, s_t, a_t]``, and
    ``steps`` (n,) int64 the episode lengths. Episode ``i`` draws its uniforms from the splitmix64 stream started at
    ``seed + i * 0xD1B54A32D192ED03`` (two per step: the action, then the next state, each by inverse CDF), so
    :func:`rollout_ref` gives the same episodes."""
    P, R, term, pi, tables = _check_rollout(P, R, term, pi, s0, n, T, gamma, tables, seed)
    return _rollout_numba(_cdf(P, 2), R, term, _cdf(pi, 1), int(s0), int(n), int(T), float(gamma), tables,
                          int(seed))


def _splitmix(st: int) -> tuple[int, float]:
    st = (st + _GOLDEN) & _MASK
    z = st
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK
    z = z ^ (z >> 31)
    return st, (z >> 11) * (1.0 / 9007199254740992.0)


def rollout_ref(P, R, term, pi, s0: int, n: int, T: int, gamma: float, tables, seed: int):
    """Reference for :func:`rollout`: plain Python, one episode and one step at a time, the same random stream."""
    P, R, term, pi, tables = _check_rollout(P, R, term, pi, s0, n, T, gamma, tables, seed)
    cP, cpi = _cdf(P, 2), _cdf(pi, 1)
    S, A = pi.shape
    K = tables.shape[0]
    G, C, steps = np.zeros(n), np.zeros((n, K)), np.zeros(n, dtype=np.int64)
    for i in range(n):
        st = (int(seed) + i * _EPISODE) & _MASK
        s, disc, t = int(s0), 1.0, 0
        while t < T:
            st, u = _splitmix(st)
            a = next((b for b in range(A) if u < cpi[s, b]), A - 1)
            st, u = _splitmix(st)
            s2 = next((j for j in range(S) if u < cP[s, a, j]), S - 1)
            G[i] += disc * R[s, a, s2]
            for k in range(K):
                C[i, k] += disc * tables[k, s, a]
            disc *= gamma
            t += 1
            s = s2
            if term[s]:
                break
        steps[i] = t
    return G, C, steps


# ---------------------------------------------------------------------------------------------------- estimators

def cv_estimate(G, C, beta="loo"):
    """Control-variate estimates of ``E[G]`` from ``R`` independent batches: ``G`` (R, n), ``C`` (R, n) with
    ``E[C] = 0``. ``beta``: a number (fixed, e.g. the exact ``beta*``), ``"insample"`` (the least-squares slope of
    each batch, ``Cov(G, C) / Var(C)``) or ``"loo"`` (cross-fitted: episode ``i`` is corrected with the slope of the
    other ``n - 1`` episodes of its batch, which makes the estimate exactly unbiased). Returns (R,)."""
    G, C = np.atleast_2d(G), np.atleast_2d(C)
    n = G.shape[1]
    if not isinstance(beta, str):
        return (G - float(beta) * C).mean(1)
    if beta == "insample":
        gc, cc = G - G.mean(1, keepdims=True), C - C.mean(1, keepdims=True)
        den = (cc * cc).sum(1)
        b = np.where(den > 0, (gc * cc).sum(1) / np.where(den > 0, den, 1.0), 0.0)
        return G.mean(1) - b * C.mean(1)
    if beta != "loo":
        raise ValueError(f"beta must be a number, 'insample' or 'loo', got {beta!r}")
    if n < 3:
        raise ValueError(f"beta='loo' needs at least 3 episodes per batch, got {n}")
    sg, sc = G.sum(1, keepdims=True), C.sum(1, keepdims=True)
    sgc, scc = (G * C).sum(1, keepdims=True), (C * C).sum(1, keepdims=True)
    m = n - 1
    mg, mc = (sg - G) / m, (sc - C) / m
    cov = (sgc - G * C) / m - mg * mc
    var = (scc - C * C) / m - mc * mc
    b = np.where(var > 1e-300, cov / np.where(var > 1e-300, var, 1.0), 0.0)
    return (G - b * C).mean(1)


def shrink_mix(G, sim_mean, sim_var_of_mean=0.0):
    """The data-driven mixing estimator: ``w * sim_mean + (1 - w) * mean(G)`` per batch with the plug-in MSE
    weight ``w = v / (v + max(b^2 - v - u, 0))``, ``v = Var(G) / n`` (the real mean's variance), ``b`` the observed
    gap between the two means and ``u`` the variance of the simulated mean. ``G`` (R, n), ``sim_mean`` (R,)."""
    G = np.atleast_2d(G)
    v = G.var(1, ddof=1) / G.shape[1]
    gap = sim_mean - G.mean(1)
    b2 = np.maximum(gap ** 2 - v - sim_var_of_mean, 0.0)
    w = np.where(v + b2 > 0, v / np.where(v + b2 > 0, v + b2, 1.0), 1.0)
    return w * sim_mean + (1 - w) * G.mean(1)


def mean_ci(x, z: float = 1.96) -> tuple[float, float, float]:
    """Mean of ``x`` and its normal-approximation interval ``mean +- z sd / sqrt(len)``."""
    x = np.asarray(x, dtype=float)
    m, se = float(x.mean()), float(x.std(ddof=1)) / math.sqrt(len(x))
    return m, m - z * se, m + z * se


def paired_ratio_ci(x, y, z: float = 1.96) -> tuple[float, float, float]:
    """Ratio ``mean(x) / mean(y)`` of two positive quantities measured on the same batches (squared errors of two
    estimators, say; length R each), with a delta-method interval on its logarithm:
    ``se(log r) = sd(x / mean(x) - y / mean(y)) / sqrt(R)``. Returns ``(r, low, high)``."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    mx, my = x.mean(), y.mean()
    se = float(np.std(x / mx - y / my, ddof=1)) / math.sqrt(len(x))
    r = float(mx / my)
    return r, r * math.exp(-z * se), r * math.exp(z * se)


# ----------------------------------------------------------------------------------------------------- registry

def _mdp_inputs(rng, size):
    S, A = 5, 3
    P = rng.dirichlet(np.full(S, 0.7), size=(S, A))
    term = np.zeros(S, dtype=bool)
    term[-1] = True
    pi = rng.dirichlet(np.ones(A), size=S)
    return {"P": P, "R": rng.normal(size=(S, A, S)), "term": term, "pi": pi, "s0": 0, "n": size, "T": 30,
            "gamma": 0.9, "tables": rng.normal(size=(2, S, A)), "seed": int(rng.integers(1 << 62))}


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    return [
        Kernel("sim_cv.rollout", rollout, rollout_ref, _mdp_inputs,
               Contract(args=(Arg("P", ("float64",), 3, low=0.0, high=1.0), Arg("R", ("float64",), 3, scale=True),
                              Arg("term", ("bool",), 1), Arg("pi", ("float64",), 2, low=0.0, high=1.0),
                              Arg("tables", ("float64",), 3, scale=True)),
                        empty="value", empty_value=lambda kw: (np.zeros(0), np.zeros((0, 2)), np.zeros(0)),
                        shapes="P, R: (S, A, S); term: (S,) bool; pi: (S, A); tables: (K, S, A); n episodes"),
               tol={"float64": (1e-12, 1e-12)}, benchmark="sim_cv.rollout",
               oracle="gymnasium env.step rollouts (mean return within its interval) and the linear-solve value"),
    ]


KERNELS = _registry()

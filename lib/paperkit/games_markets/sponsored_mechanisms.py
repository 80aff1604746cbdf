"""Sponsored follow-up suggestions followed by an ad auction: joint VCG, modular designs, best-response dynamics.

The model (our reading of the setting). A user's query is ambiguous among ``n`` intents with prior ``q`` (n,).
The platform shows ``S`` suggestion slots with click-through rates ``theta`` (S,), non-increasing: a suggestion for
intent j in slot k is clicked by the user of intent j with probability ``theta[k]``, who then sees one ad for j.
Advertiser i has a value ``V[i, j] >= 0`` per click of its ad after intent j. An outcome is an ordered list of
shown intents and one ad winner per shown intent; its welfare is

    W = sum_k theta[k] q[j_k] V[w_k, j_k],        optimum: intents sorted by q_j max_i V[i, j], ads to the argmax.

* :func:`vcg_joint` / :func:`vcg_joint_ref`: one VCG mechanism over (suggestions shown, ad after each): the
  reported-welfare-maximising outcome and Clarke pivot payments (fast: sort; reference: enumerate every ordered
  list of intents and every ad assignment).
* :func:`modular_outcome` (Numba) / :func:`modular_outcome_ref` (plain Python): the two-stage modular design.
  Stage 1 sells the suggestion slots: every advertiser bids ``bid[i]`` on one intent ``intent[i]``; an intent's
  bid is its highest sponsor's; intents are ranked by bid (ties: lower index) and the top S are shown. Prices:
  ``rule=0`` next price (the sponsor in slot k pays theta[k] times the bid ranked k+1: second price for S = 1,
  GSP for S >= 2), ``rule=1`` first price (theta[k] times its own bid), ``rule=2`` a one-stage control: the
  sponsor buys the suggestion and the ad after it as one bundle at first price (no ad auction; an unsponsored
  slot gives no ad), ``rule=3`` joint VCG on the reports
  implied by the bids (report bid / (theta[0] q_j) on the one intent, zero elsewhere; used as the control game).
  Stage 2 at each shown intent is a second-price ad auction, bid truthfully (dominant there); with redistribution
  ``rho`` the suggestion's sponsor receives the share rho of that ad auction's revenue.
* :func:`best_response_dynamics` (Numba) / :func:`best_response_dynamics_ref` (plain loop): round-robin exact
  best responses over a finite strategy table; :func:`nash_gap` the largest gain of any unilateral deviation.
* :func:`misreport_gain` (vectorised NumPy) / :func:`misreport_gain_ref` (loop): the largest utility gain of one
  advertiser over a grid of report vectors, under VCG or under the joint allocation with per-stage second prices.

Bids are in units of expected value per query. The Numba kernels are serial (chapters share the machine's cores).
"""
from __future__ import annotations

import itertools

import numpy as np
from numba import njit

RULES = {"next-price": 0, "first-price": 1, "bundle-first-price": 2, "vcg": 3}
PAYMENTS = ("vcg", "per-stage", "first-price")
TIE = 1e-12


# ------------------------------------------------------------------------------------------------- validation

def _real(x, name, ndim):
    x = np.asarray(x)
    if np.iscomplexobj(x) or not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)) \
            or x.dtype == np.bool_:
        raise TypeError(f"{name} must be a real array, got dtype {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} axes, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} must be finite")
    if (x < 0).any():
        raise ValueError(f"{name} must be non-negative")
    return x.astype(np.float64)


def _check_instance(q, V, theta, vname="V"):
    q, V, theta = _real(q, "q", 1), _real(V, vname, 2), _real(theta, "theta", 1)
    if q.size < 1:
        raise ValueError("q must hold at least one intent")
    if V.shape[0] < 1 or V.shape[1] != q.size:
        raise ValueError(f"{vname} must be (N, n) with N >= 1 advertisers and n = len(q) = {q.size}, got {V.shape}")
    if not 1 <= theta.size <= q.size:
        raise ValueError(f"theta must hold 1..n = {q.size} slot click rates, got {theta.size}")
    if (np.diff(theta) > 0).any() or theta.max() > 1:
        raise ValueError("theta must be non-increasing click rates in [0, 1]")
    if np.abs(q.sum() - 1) > 1e-9:
        raise ValueError(f"q must sum to 1, got {q.sum()}")
    if max(q.max(), V.max()) > 1e150:
        raise ValueError(f"{vname} or q too large (values above 1e150 overflow the welfare)")
    return q, V, theta


def _check_rule(rule, rho):
    if rule not in RULES.values():
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if not (isinstance(rho, (int, float, np.floating)) and 0 <= rho <= 1):
        raise ValueError(f"rho must be a share in [0, 1], got {rho!r}")
    return int(rule), float(rho)


# ------------------------------------------------------------------------------------------------- instances

def random_instance(rng, n_intents=4, n_adv=5, slots=2, theta2=0.6):
    """q ~ Dirichlet(1), V ~ Exp(1) (n_adv, n_intents), theta = (1, theta2, theta2^2, ...)[:slots]."""
    if not 1 <= slots <= n_intents:
        raise ValueError(f"slots must be in [1, n_intents], got {slots}")
    return {"q": rng.dirichlet(np.ones(n_intents)), "V": rng.exponential(1.0, (n_adv, n_intents)),
            "theta": theta2 ** np.arange(slots, dtype=np.float64)}


def family_instance(M, slots=1, q_b=0.5, theta2=0.5, null=False):
    """The hard family: intent b (index 0) with two advertisers of value M each; the other intents a (one, or two
    when ``slots = 2``) each with one advertiser of value 1. ``null``: the second b advertiser values M/2.

    Advertisers: B1, B2, then A (or A1, A2). q_b on intent b, the rest split evenly over the a intents.
    """
    if M <= 0 or not 0 < q_b < 1 or slots not in (1, 2):
        raise ValueError(f"need M > 0, 0 < q_b < 1, slots in (1, 2); got M={M}, q_b={q_b}, slots={slots}")
    na = slots
    q = np.r_[q_b, np.full(na, (1 - q_b) / na)]
    V = np.zeros((2 + na, 1 + na))
    V[0, 0], V[1, 0] = M, (M / 2 if null else M)
    for k in range(na):
        V[2 + k, 1 + k] = 1.0
    return {"q": q, "V": V, "theta": theta2 ** np.arange(slots, dtype=np.float64)}


def optimal_welfare(q, V, theta) -> float:
    """Largest welfare over every outcome: the top-S intents by q_j max_i V[i, j] in order of that score."""
    q, V, theta = _check_instance(q, V, theta)
    s = np.sort(q * V.max(0))[::-1]
    return float(theta @ s[:theta.size])


def predicted_family_ratio(M, slots=1, q_b=0.5, theta2=0.5):
    """OPT / W of the equilibrium in which no b advertiser bids (the a intents fill the slots)."""
    inst = family_instance(M, slots, q_b, theta2)
    q, th = inst["q"], inst["theta"]
    return optimal_welfare(**inst) / float(th @ q[1:1 + slots])


# ------------------------------------------------------------------------------------------------- joint VCG

def _order(score, S):
    return np.lexsort((np.arange(score.size), -score))[:S]


def vcg_joint(q, R, theta, V=None):
    """Joint VCG on reports ``R`` (N, n): dict with ``order`` (S,) shown intents, ``winners`` (S,) ad winners,
    ``pay`` (N,) Clarke payments, ``util`` (N,) utilities under the true values ``V`` (default: R), ``welfare``
    (true welfare of the outcome). Ties: lower intent index, lower advertiser index."""
    q, R, theta = _check_instance(q, R, theta, "R")
    V = R if V is None else _check_instance(q, V, theta)[1]
    if V.shape != R.shape:
        raise ValueError(f"V must have the shape of R {R.shape}, got {V.shape}")
    S, N = theta.size, R.shape[0]
    top = R.max(0)
    order = _order(q * top, S)
    winners = R[:, order].argmax(0)
    W = float(theta @ (q[order] * top[order]))
    pay, util = np.zeros(N), np.zeros(N)
    for i in range(N):
        Ri = R.copy()
        Ri[i] = 0.0
        w_minus = float(theta @ np.sort(q * Ri.max(0))[::-1][:S])
        mine = winners == i
        own_rep = float(theta[mine] @ (q[order][mine] * R[i, order][mine]))
        pay[i] = w_minus - (W - own_rep)
        util[i] = float(theta[mine] @ (q[order][mine] * V[i, order][mine])) - pay[i]
    welfare = float(theta @ (q[order] * V[winners, order]))
    return {"order": order, "winners": winners, "pay": pay, "util": util, "welfare": welfare}


def _best_outcome_enum(q, R, theta, exclude=-1):
    """(welfare, order, winners) maximising reported welfare over every ordered intent list and ad assignment."""
    N, n = R.shape
    S = theta.size
    best = (-1.0, None, None)
    bidders = [i for i in range(N) if i != exclude]
    for order in itertools.permutations(range(n), S):
        for wins in itertools.product(bidders, repeat=S):
            w = sum(theta[k] * q[order[k]] * R[wins[k], order[k]] for k in range(S))
            if w > best[0] + TIE:
                best = (w, order, wins)
    return best


def vcg_joint_ref(q, R, theta, V=None):
    """Reference for :func:`vcg_joint`: enumerate every ordered intent list and ad assignment (and again without
    each advertiser for the Clarke pivot). Ties may differ from the fast version only in equal-welfare outcomes."""
    q, R, theta = _check_instance(q, R, theta, "R")
    V = R if V is None else _check_instance(q, V, theta)[1]
    if V.shape != R.shape:
        raise ValueError(f"V must have the shape of R {R.shape}, got {V.shape}")
    N, S = R.shape[0], theta.size
    W, order, wins = _best_outcome_enum(q, R, theta)
    pay, util = np.zeros(N), np.zeros(N)
    for i in range(N):
        w_minus = _best_outcome_enum(q, R, theta, exclude=i)[0] if N > 1 else 0.0
        own_rep = sum(theta[k] * q[order[k]] * R[i, order[k]] for k in range(S) if wins[k] == i)
        pay[i] = w_minus - (W - own_rep)
        util[i] = sum(theta[k] * q[order[k]] * V[i, order[k]] for k in range(S) if wins[k] == i) - pay[i]
    welfare = float(sum(theta[k] * q[order[k]] * V[wins[k], order[k]] for k in range(S)))
    return {"order": np.array(order), "winners": np.array(wins), "pay": pay, "util": util, "welfare": welfare}


# ------------------------------------------------------------------------------------------------- modular game

@njit(cache=True)
def _rank(beta):
    """Intents by bid, descending; ties to the lower index (insertion sort: n is small)."""
    n = beta.size
    idx = np.arange(n)
    for a in range(1, n):
        x = idx[a]
        b = a - 1
        while b >= 0 and (beta[idx[b]] < beta[x] or (beta[idx[b]] == beta[x] and idx[b] > x)):
            idx[b + 1] = idx[b]
            b -= 1
        idx[b + 1] = x
    return idx


@njit(cache=True)
def _top2(col, skip):
    """(winner, v1, v2) of a second-price auction on ``col``, bidder ``skip`` removed (-1: none)."""
    w, v1, v2 = -1, 0.0, 0.0
    for i in range(col.size):
        if i == skip:
            continue
        v = col[i]
        if w < 0 or v > v1:
            v2 = v1 if w >= 0 else v2
            w, v1 = i, v
        elif v > v2:
            v2 = v
    return w, v1, v2


@njit(cache=True)
def _vcg_opt(q, R, theta, skip):
    n, S = q.size, theta.size
    sc = np.empty(n)
    for j in range(n):
        sc[j] = q[j] * _top2(R[:, j], skip)[1]
    o = _rank(sc)
    tot = 0.0
    for k in range(S):
        tot += theta[k] * sc[o[k]]
    return tot


@njit(cache=True)
def _outcome(q, V, theta, rule, rho, intent, bid, util):
    """Fill ``util`` (N,) and return the true welfare of the modular (or control VCG) game at one profile."""
    N, n = V.shape
    S = theta.size
    util[:] = 0.0
    if rule == 3:
        R = np.zeros((N, n))
        for i in range(N):
            j = intent[i]
            if q[j] > 0 and theta[0] > 0:
                R[i, j] = bid[i] / (theta[0] * q[j])
        sc = np.empty(n)
        win = np.empty(n, np.int64)
        for j in range(n):
            w, v1, v2 = _top2(R[:, j], -1)
            sc[j], win[j] = q[j] * v1, w
        o = _rank(sc)
        Wrep, welfare = 0.0, 0.0
        for k in range(S):
            Wrep += theta[k] * sc[o[k]]
            welfare += theta[k] * q[o[k]] * V[win[o[k]], o[k]]
        for i in range(N):
            own_rep, own_true = 0.0, 0.0
            for k in range(S):
                j = o[k]
                if win[j] == i:
                    own_rep += theta[k] * q[j] * R[i, j]
                    own_true += theta[k] * q[j] * V[i, j]
            util[i] = own_true - (_vcg_opt(q, R, theta, i) - (Wrep - own_rep))
        return welfare
    beta = np.zeros(n)
    spons = np.full(n, -1, np.int64)
    for i in range(N):
        j = intent[i]
        if bid[i] > beta[j]:
            beta[j], spons[j] = bid[i], i
    o = _rank(beta)
    welfare = 0.0
    for k in range(S):
        j = o[k]
        s = spons[j]
        if rule == 2:
            if s >= 0:
                util[s] += theta[k] * (q[j] * V[s, j] - beta[j])
                welfare += theta[k] * q[j] * V[s, j]
            continue
        if s >= 0:
            if rule == 0:
                util[s] -= theta[k] * (beta[o[k + 1]] if k + 1 < n else 0.0)
            else:
                util[s] -= theta[k] * beta[j]
        w, v1, v2 = _top2(V[:, j], -1)
        mass = theta[k] * q[j]
        welfare += mass * v1
        if v1 > 0:
            util[w] += mass * (v1 - v2)
            if s >= 0:
                util[s] += rho * mass * v2
    return welfare


def _check_profile(q, V, theta, rule, rho, intent, bid):
    q, V, theta = _check_instance(q, V, theta)
    rule, rho = _check_rule(rule, rho)
    intent = np.asarray(intent)
    if intent.dtype.kind not in "iu" or intent.shape != (V.shape[0],):
        raise ValueError(f"intent must be an integer array of shape ({V.shape[0]},), got {intent.dtype} {intent.shape}")
    if intent.size and (intent.min() < 0 or intent.max() >= q.size):
        raise ValueError(f"intent must hold intent indices in [0, {q.size})")
    bid = _real(bid, "bid", 1)
    if bid.shape != (V.shape[0],):
        raise ValueError(f"bid must have shape ({V.shape[0]},), got {bid.shape}")
    return q, V, theta, rule, rho, intent.astype(np.int64), bid


def modular_outcome(q, V, theta, rule, rho, intent, bid):
    """(util (N,), welfare) of the modular game (or, ``rule=3``, the joint-VCG control game) at one profile."""
    q, V, theta, rule, rho, intent, bid = _check_profile(q, V, theta, rule, rho, intent, bid)
    util = np.empty(V.shape[0])
    w = _outcome(q, V, theta, rule, rho, intent, bid, util)
    return util, float(w)


def modular_outcome_ref(q, V, theta, rule, rho, intent, bid):
    """Reference for :func:`modular_outcome` in plain Python (for ``rule=3`` through :func:`vcg_joint_ref`)."""
    q, V, theta, rule, rho, intent, bid = _check_profile(q, V, theta, rule, rho, intent, bid)
    N, n = V.shape
    S = theta.size
    if rule == 3:
        R = np.zeros((N, n))
        for i in range(N):
            R[i, intent[i]] = bid[i] / (theta[0] * q[intent[i]]) if q[intent[i]] > 0 else 0.0
        out = vcg_joint(q, R, theta, V)
        return out["util"], out["welfare"]
    beta, spons = [0.0] * n, [-1] * n
    for i in range(N):
        if bid[i] > beta[intent[i]]:
            beta[intent[i]], spons[intent[i]] = float(bid[i]), i
    order = sorted(range(n), key=lambda j: (-beta[j], j))
    util, welfare = [0.0] * N, 0.0
    for k in range(S):
        j, s = order[k], spons[order[k]]
        if rule == 2:
            if s >= 0:
                util[s] += theta[k] * (q[j] * V[s, j] - beta[j])
                welfare += theta[k] * q[j] * V[s, j]
            continue
        if s >= 0:
            nxt = beta[order[k + 1]] if k + 1 < n else 0.0
            util[s] -= theta[k] * (nxt if rule == 0 else beta[j])
        col = sorted(((float(V[i, j]), -i) for i in range(N)), reverse=True)
        v1, w = col[0][0], -col[0][1]
        v2 = col[1][0] if N > 1 else 0.0
        mass = theta[k] * q[j]
        welfare += mass * v1
        if v1 > 0:
            util[w] += mass * (v1 - v2)
            if s >= 0:
                util[s] += rho * mass * v2
    return np.array(util), float(welfare)


# ------------------------------------------------------------------------------------------------- strategies

def bid_table(q, V, theta, levels):
    """Strategy table (N, n * levels): strategy j * levels + g is a bid of (g / (levels - 1)) theta[0] q_j V[i, j]
    on intent j: never more than the whole traffic of the suggestion would be worth to the bidder."""
    q, V, theta = _check_instance(q, V, theta)
    if isinstance(levels, bool) or not isinstance(levels, (int, np.integer)) or levels < 2:
        raise ValueError(f"levels must be an integer >= 2, got {levels!r}")
    g = np.linspace(0.0, 1.0, int(levels))
    return (theta[0] * q[None, :, None] * V[:, :, None] * g[None, None, :]).reshape(V.shape[0], -1)


@njit(cache=True)
def _brd(q, V, theta, rule, rho, table, levels, start, max_rounds, prof_out):
    N = V.shape[0]
    K = table.shape[1]
    prof = start.copy()
    intent = np.empty(N, np.int64)
    bid = np.empty(N)
    util = np.empty(N)
    for i in range(N):
        intent[i], bid[i] = prof[i] // levels, table[i, prof[i]]
    rounds = 0
    converged = False
    while rounds < max_rounds:
        rounds += 1
        changed = False
        for i in range(N):
            _outcome(q, V, theta, rule, rho, intent, bid, util)
            cur = util[i]
            best_s, best_u = prof[i], cur
            for s in range(K):
                intent[i], bid[i] = s // levels, table[i, s]
                _outcome(q, V, theta, rule, rho, intent, bid, util)
                if util[i] > best_u + TIE:
                    best_s, best_u = s, util[i]
            prof[i] = best_s
            intent[i], bid[i] = best_s // levels, table[i, best_s]
            if best_u > cur + TIE:
                changed = True
        if not changed:
            converged = True
            break
    prof_out[:] = prof
    return converged, rounds


def _check_brd(q, V, theta, rule, rho, table, start, max_rounds):
    q, V, theta = _check_instance(q, V, theta)
    rule, rho = _check_rule(rule, rho)
    table = _real(table, "table", 2)
    N, n = V.shape
    if table.shape[0] != N or table.shape[1] % n or table.shape[1] < n:
        raise ValueError(f"table must be (N, n * levels) with N = {N}, n = {n}, got {table.shape}")
    start = np.asarray(start)
    if start.dtype.kind not in "iu" or start.shape != (N,) or start.min() < 0 or start.max() >= table.shape[1]:
        raise ValueError(f"start must hold one strategy index in [0, {table.shape[1]}) per advertiser")
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, (int, np.integer)) or max_rounds < 1:
        raise ValueError(f"max_rounds must be a positive integer, got {max_rounds!r}")
    return q, V, theta, rule, rho, table, table.shape[1] // n, start.astype(np.int64), int(max_rounds)


def best_response_dynamics(q, V, theta, rule, rho, table, start, max_rounds=200):
    """Round-robin exact best responses (Numba): each advertiser in turn moves to its best strategy of ``table``
    (kept if no strategy gains more than 1e-12; else the first best). Returns (profile (N,), converged, rounds);
    a converged profile is a pure Nash equilibrium of the gridded game."""
    args = _check_brd(q, V, theta, rule, rho, table, start, max_rounds)
    prof = np.empty(args[1].shape[0], np.int64)
    conv, rounds = _brd(*args, prof)
    return prof, bool(conv), int(rounds)


def best_response_dynamics_ref(q, V, theta, rule, rho, table, start, max_rounds=200):
    """Reference for :func:`best_response_dynamics`: the same dynamics, a plain loop over
    :func:`modular_outcome_ref`."""
    q, V, theta, rule, rho, table, levels, start, max_rounds = _check_brd(q, V, theta, rule, rho, table, start,
                                                                          max_rounds)
    N, K = table.shape
    prof = [int(s) for s in start]

    def u(p, i):
        intent = np.array([s // levels for s in p], dtype=np.int64)
        bid = np.array([table[k, s] for k, s in enumerate(p)])
        return modular_outcome_ref(q, V, theta, rule, rho, intent, bid)[0][i]

    for rounds in range(1, max_rounds + 1):
        changed = False
        for i in range(N):
            cur = u(prof, i)
            best_s, best_u = prof[i], cur
            for s in range(K):
                us = u(prof[:i] + [s] + prof[i + 1:], i)
                if us > best_u + TIE:
                    best_s, best_u = s, us
            prof[i] = best_s
            changed |= best_u > cur + TIE
        if not changed:
            return np.array(prof, dtype=np.int64), True, rounds
    return np.array(prof, dtype=np.int64), False, max_rounds


def profile_outcome(q, V, theta, rule, rho, table, profile):
    """(util (N,), welfare) at a profile of strategy indices into ``table``."""
    args = _check_brd(q, V, theta, rule, rho, table, profile, 1)
    levels, prof = args[6], args[7]
    intent = prof // levels
    bid = args[5][np.arange(prof.size), prof]
    return modular_outcome(q, V, theta, rule, rho, intent, bid)


def nash_gap(q, V, theta, rule, rho, table, profile):
    """Largest utility gain of any advertiser from any unilateral switch to another strategy of ``table``
    (exhaustive; <= 1e-12 at a pure Nash equilibrium of the gridded game)."""
    args = _check_brd(q, V, theta, rule, rho, table, profile, 1)
    q, V, theta, rule, rho, table, levels, prof = args[:8]
    intent, bid = prof // levels, table[np.arange(prof.size), prof]
    util = np.empty(V.shape[0])
    _outcome(q, V, theta, rule, rho, intent, bid, util)
    base, gap = util.copy(), -np.inf
    for i in range(V.shape[0]):
        it, bd = intent.copy(), bid.copy()
        for s in range(table.shape[1]):
            it[i], bd[i] = s // levels, table[i, s]
            _outcome(q, V, theta, rule, rho, it, bd, util)
            gap = max(gap, util[i] - base[i])
    return float(gap)


# ------------------------------------------------------------------------------------------------- misreports

def _check_mis(q, V, theta, i, grid, payment):
    q, V, theta = _check_instance(q, V, theta)
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < V.shape[0]:
        raise ValueError(f"i must be an advertiser index in [0, {V.shape[0]}), got {i!r}")
    grid = _real(grid, "grid", 1)
    if grid.size < 1:
        raise ValueError("grid must hold at least one report level")
    if payment not in PAYMENTS:
        raise ValueError(f"payment must be one of {PAYMENTS}, got {payment!r}")
    return q, V, theta, int(i), grid


def misreport_gain(q, V, theta, i, grid, payment="vcg"):
    """Largest gain of advertiser ``i`` over truthful reporting, among every report vector whose entry for each
    intent is a ``grid`` level or its true value (vectorised over the (len(grid) + 1)^n reports).

    ``payment``: ``"vcg"`` (Clarke pivot), ``"per-stage"`` (the same welfare-maximising outcome, each ad winner
    paying the second-highest report at its intent, suggestions free), ``"first-price"`` (each winner pays its
    reported value of what it wins)."""
    q, V, theta, i, grid = _check_mis(q, V, theta, i, grid, payment)
    N, n = V.shape
    S = theta.size
    lv = [np.unique(np.r_[grid, V[i, j]]) for j in range(n)]
    rep = np.stack(np.meshgrid(*lv, indexing="ij"), -1).reshape(-1, n)          # (Rn, n)
    others = np.delete(V, i, axis=0)
    o1 = others.max(0) if N > 1 else np.zeros(n)
    o2 = np.sort(others, 0)[-2] if N > 2 else np.zeros(n)
    o_arg = np.delete(np.arange(N), i)[others.argmax(0)] if N > 1 else np.full(n, -1)
    # i wins intent j when its report beats the best other (ties: lower advertiser index)
    mine = (rep > o1) | ((rep == o1) & (i < o_arg))
    top = np.where(mine, rep, o1)
    sc = q * top
    order = np.argsort(-sc, axis=1, kind="stable")[:, :S]                       # ties to the lower intent
    rows = np.arange(rep.shape[0])[:, None]
    win_i = mine[rows, order]
    mass = theta[None, :] * q[order]
    val = (mass * V[i][order] * win_i).sum(1)
    if payment == "vcg":
        w_minus = float(theta @ np.sort(q * o1)[::-1][:S])
        others_at = (theta[None, :] * sc[rows, order]).sum(1) - (mass * rep[rows, order] * win_i).sum(1)
        pay = w_minus - others_at
    elif payment == "per-stage":
        pay = (mass * o1[order] * win_i).sum(1)
    else:
        pay = (mass * rep[rows, order] * win_i).sum(1)
    util = val - pay
    truth = np.all(rep == V[i][None], axis=1)
    return float(util.max() - util[truth][0])


def misreport_gain_ref(q, V, theta, i, grid, payment="vcg"):
    """Reference for :func:`misreport_gain`: a loop over the reports, outcomes from :func:`vcg_joint`."""
    q, V, theta, i, grid = _check_mis(q, V, theta, i, grid, payment)
    N, n = V.shape
    lv = [np.unique(np.r_[grid, V[i, j]]) for j in range(n)]

    def util(r):
        R = V.copy()
        R[i] = r
        out = vcg_joint(q, R, theta, V)
        if payment == "vcg":
            return out["util"][i]
        u = 0.0
        for k, (j, w) in enumerate(zip(out["order"], out["winners"])):
            if w == i:
                others = np.delete(R[:, j], i)
                price = others.max() if payment == "per-stage" and others.size else 0.0
                price = R[i, j] if payment == "first-price" else price
                u += theta[k] * q[j] * (V[i, j] - price)
        return u

    truth = util(V[i].copy())
    return float(max(util(np.array(r)) for r in itertools.product(*lv)) - truth)


# ------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    def inst(rng, size):
        n = max(size, 1) + 1
        d = random_instance(rng, n_intents=n, n_adv=max(size, 1) + 2, slots=min(2, n))
        if size == 0:
            d["V"] = np.zeros((0, n))
        return d

    def vcg_inputs(rng, size):
        d = inst(rng, size)
        return {"q": d["q"], "R": d["V"], "theta": d["theta"]}

    def game_inputs(rng, size):
        d = inst(rng, size)
        N, n = d["V"].shape
        return {**d, "rule": 0, "rho": 0.0, "intent": rng.integers(0, n, N),
                "bid": rng.random(N) * 0.5}

    def brd_inputs(rng, size):
        d = inst(rng, min(size, 3))
        tab = bid_table(d["q"], d["V"], d["theta"], 4) if d["V"].shape[0] else np.zeros((0, 4))
        return {**d, "rule": 1, "rho": 0.0, "table": tab,
                "start": rng.integers(0, max(tab.shape[1], 1), d["V"].shape[0])}

    def mis_inputs(rng, size):
        d = inst(rng, min(size, 2))
        return {**d, "i": 0, "grid": np.linspace(0, 3, 4), "payment": "per-stage"}

    inst_args = (Arg("q", ndim=1, low=0.0), Arg("theta", ndim=1, low=0.0, high=1.0))
    return [
        Kernel("sponsored_mechanisms.vcg_joint", vcg_joint, vcg_joint_ref, vcg_inputs,
               Contract(args=(Arg("R", ndim=2, low=0.0, scale=True),) + inst_args,
                        shapes="q: (n,), R: (N, n), theta: (S,) -> order, winners (S,), pay, util (N,), welfare"),
               tol={"float64": (1e-9, 1e-12)}, oracle="enumeration of every ordered intent list and ad assignment"),
        Kernel("sponsored_mechanisms.modular_outcome", modular_outcome, modular_outcome_ref, game_inputs,
               Contract(args=(Arg("V", ndim=2, low=0.0, scale=True), Arg("bid", ndim=1, low=0.0)) + inst_args,
                        shapes="q (n,), V (N, n), theta (S,), intent (N,), bid (N,) -> util (N,), welfare"),
               tol={"float64": (1e-9, 1e-12)}, oracle="hand-solved two-intent instances"),
        Kernel("sponsored_mechanisms.best_response_dynamics", best_response_dynamics, best_response_dynamics_ref,
               brd_inputs, Contract(args=(Arg("V", ndim=2, low=0.0), Arg("table", ndim=2, low=0.0)) + inst_args,
                                    shapes="V (N, n), table (N, n * levels), start (N,) -> profile (N,), flag, rounds"),
               tol={"float64": (0, 0)}, benchmark="best_response_dynamics (Numba)",
               oracle="nash_gap: exhaustive unilateral deviations"),
        Kernel("sponsored_mechanisms.misreport_gain", misreport_gain, misreport_gain_ref, mis_inputs,
               Contract(args=(Arg("V", ndim=2, low=0.0), Arg("grid", ndim=1, low=0.0)) + inst_args,
                        shapes="q (n,), V (N, n), theta (S,), grid (G,) -> float"),
               tol={"float64": (1e-9, 1e-12)}, benchmark="misreport_gain (vectorised)",
               oracle="VCG theorem: gain <= 0 under Clarke payments"),
    ]


KERNELS = _registry()


# ------------------------------------------------------------------------------------------------- all pure NE

@njit(cache=True)
def _payoff_tensor(q, V, theta, rule, rho, table, levels, U, Wel):
    N, K = table.shape
    P = U.shape[0]
    prof = np.zeros(N, np.int64)
    intent = np.empty(N, np.int64)
    bid = np.empty(N)
    util = np.empty(N)
    for p in range(P):
        r = p
        for i in range(N - 1, -1, -1):     # player 0 is the slowest digit (C order of the tensor)
            prof[i] = r % K
            r //= K
        for i in range(N):
            intent[i], bid[i] = prof[i] // levels, table[i, prof[i]]
        Wel[p] = _outcome(q, V, theta, rule, rho, intent, bid, util)
        U[p, :] = util


def pure_nash_welfare(q, V, theta, rule, rho, table, max_profiles=3_000_000):
    """Welfare of every pure Nash equilibrium of the gridded game, by the full payoff tensor (Numba) and an
    exhaustive unilateral-deviation test on it: float64 (E,). Refuses games above ``max_profiles`` profiles."""
    args = _check_brd(q, V, theta, rule, rho, table, np.zeros(np.asarray(V).shape[0], np.int64), 1)
    q, V, theta, rule, rho, table, levels = args[:7]
    N, K = table.shape
    if K ** N > max_profiles:
        raise ValueError(f"table gives {K}^{N} profiles, above max_profiles={max_profiles}")
    U, Wel = np.empty((K ** N, N)), np.empty(K ** N)
    _payoff_tensor(q, V, theta, rule, rho, table, levels, U, Wel)
    ok = np.ones(K ** N, dtype=bool)
    for i in range(N):
        Ui = U[:, i].reshape((K,) * N)
        ok &= (Ui >= Ui.max(axis=i, keepdims=True) - TIE).reshape(-1)
    return Wel[ok]

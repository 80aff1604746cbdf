"""A sum-of-squares lower bound as a differentiable convex layer, dense or clique-sparse (chordal).

For a polynomial f with coefficients c (one per monomial alpha) the layer computes

    gamma*(c) = max gamma  s.t.  f - gamma = sum_k m_k(x)^T Q_k m_k(x),  Q_k PSD,

where m_k are the monomials of degree <= d in the variables of clique k. One clique holding every variable is the
dense program; the cliques {x_i, x_{i+1}} of a chain are the sparse one (Waki et al. 2006, correlative sparsity).

Backward pass (our reading of the paper's Theorem): gamma* is the optimal value of a conic program whose data c
enter only the right-hand side of the coefficient-matching equalities, so by the envelope theorem
d gamma*/d c_alpha = y_alpha, the optimal dual (pseudo-moment) of the equality for monomial alpha. The gradient is
read off the same sparse program that was solved: no dense certificate and no dense KKT system is formed.

cvxpy + Clarabel solve the SDP; nothing here re-implements a conic solver. ``solve_ref`` has the same signature as
``solve`` and differentiates by central finite differences (re-solving the program), the reference for the tests.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import cvxpy as cp
import numpy as np
import scipy.sparse as sp


def monomial_basis(vars: list[int], n: int, deg: int) -> list[tuple[int, ...]]:
    """Exponent tuples (length ``n``) of all monomials of degree <= ``deg`` in the variables ``vars``."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if deg < 0:
        raise ValueError(f"deg must be >= 0, got {deg}")
    if any(v < 0 or v >= n for v in vars):
        raise ValueError(f"vars must lie in [0, {n}), got {vars}")
    out = []
    for d in range(deg + 1):
        for combo in itertools.combinations_with_replacement(sorted(vars), d):
            e = [0] * n
            for v in combo:
                e[v] += 1
            out.append(tuple(e))
    return out


def chain_cliques(n: int) -> list[list[int]]:
    """Cliques {i, i+1} of the chain graph on ``n`` variables (chordal; a single clique when n = 1)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return [[0]] if n == 1 else [[i, i + 1] for i in range(n - 1)]


def chain_poly(theta: np.ndarray) -> dict[tuple[int, ...], float]:
    """Coefficients of f_theta(x) = sum_i (x_i^2 - 1)^2 + sum_i theta_i x_i x_{i+1} + 1/2 sum_i x_i^2 x_{i+1}^2.

    ``theta`` has shape (n-1,); the polynomial has n variables. Returns {exponent tuple: coefficient}.
    """
    theta = np.asarray(theta, dtype=float)
    if theta.ndim != 1:
        raise ValueError(f"theta must be 1-D, got shape {theta.shape}")
    n = theta.size + 1
    f: dict[tuple[int, ...], float] = {}

    def add(e, v):
        f[tuple(e)] = f.get(tuple(e), 0.0) + float(v)

    for i in range(n):
        # (x_i^2 - 1)^2 = x_i^4 - 2 x_i^2 + 1
        e = [0] * n; e[i] = 4; add(e, 1.0)
        e = [0] * n; e[i] = 2; add(e, -2.0)
        add([0] * n, 1.0)
    for i in range(n - 1):
        e = [0] * n; e[i] = 1; e[i + 1] = 1; add(e, theta[i])
        e = [0] * n; e[i] = 2; e[i + 1] = 2; add(e, 0.5)
    return f


def chain_theta_index(n: int) -> list[tuple[int, ...]]:
    """Monomials x_i x_{i+1}, i = 0..n-2: the ones theta_i multiplies (so d gamma/d theta_i = grad at these)."""
    out = []
    for i in range(n - 1):
        e = [0] * n; e[i] = 1; e[i + 1] = 1
        out.append(tuple(e))
    return out


@dataclass
class SOSProgram:
    """A parametrised (DPP) cvxpy SOS program; build once with :func:`build`, then :func:`solve` many times.

    ``monos``: the M monomials the identity is matched on; ``index``: monomial -> row; ``block_sizes``: the PSD
    block sizes s_k; ``c``: the cvxpy Parameter of shape (M,) holding f's coefficients; ``match``: the vector
    equality constraint whose dual is the pseudo-moment vector y.
    """

    n: int
    monos: list
    index: dict
    block_sizes: list
    problem: cp.Problem
    c: cp.Parameter
    gamma: cp.Variable
    match: cp.Constraint

    @property
    def n_sdp_vars(self) -> int:
        """Scalar unknowns in the Gram matrices: sum_k s_k (s_k + 1) / 2 (the counted work)."""
        return int(sum(s * (s + 1) // 2 for s in self.block_sizes))

    def coeff_vector(self, poly: dict) -> np.ndarray:
        """f's coefficients as a length-M vector over ``monos``; a monomial outside the program raises."""
        v = np.zeros(len(self.monos))
        for e, val in poly.items():
            if len(e) != self.n:
                raise ValueError(f"poly: monomial {e} has {len(e)} exponents, program has n = {self.n}")
            if e not in self.index:
                raise ValueError(f"poly: monomial {e} is not representable by these cliques")
            v[self.index[e]] += val
        return v


def build(n: int, cliques: list[list[int]], half_deg: int = 2) -> SOSProgram:
    """The program max gamma s.t. f - gamma = sum_k m_k^T Q_k m_k with m_k the degree <= ``half_deg`` monomials."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not cliques:
        raise ValueError("cliques must be non-empty")
    if isinstance(half_deg, bool) or not isinstance(half_deg, (int, np.integer)) or half_deg < 1:
        raise ValueError(f"half_deg must be an integer >= 1 (degree-0 Gram blocks certify only constants), "
                         f"got {half_deg!r}")
    bases = [monomial_basis(k, n, half_deg) for k in cliques]
    monos = sorted({tuple(a + b for a, b in zip(u, w)) for B in bases for u in B for w in B})
    index = {e: i for i, e in enumerate(monos)}
    zero = tuple([0] * n)
    c = cp.Parameter(len(monos))
    gamma = cp.Variable()
    lhs = 0
    Qs = []
    for B in bases:
        s = len(B)
        rows = [index[tuple(a + b for a, b in zip(B[i], B[j]))] for j in range(s) for i in range(s)]
        # A_k vec(Q_k) collects entries Q_k[i, j] onto the monomial m_i m_j (column-major vec)
        A = sp.csr_matrix((np.ones(s * s), (rows, np.arange(s * s))), shape=(len(monos), s * s))
        Q = cp.Variable((s, s), PSD=True)
        Qs.append(Q)
        lhs = lhs + A @ cp.vec(Q, order="F")
    e0 = np.zeros(len(monos)); e0[index[zero]] = 1.0
    # coefficient matching: sum_k A_k vec(Q_k) + gamma e_0 = c
    match = lhs + gamma * e0 == c
    prob = cp.Problem(cp.Maximize(gamma), [match])
    return SOSProgram(n, monos, index, [len(B) for B in bases], prob, c, gamma, match)


class SOSError(RuntimeError):
    """The SOS program was not solved to optimality; ``status`` is the solver's (cvxpy's) status string."""

    def __init__(self, message: str, status: str = "solver_error"):
        super().__init__(message)
        self.status = status


def solve(prog: SOSProgram, poly: dict, solver: str = "CLARABEL") -> tuple[float, np.ndarray]:
    """gamma*(c) and its gradient d gamma*/d c (shape (M,), over ``prog.monos``) from the optimal dual.

    What the value guarantees: gamma* is the optimum of the SDP up to the solver's tolerance (Clarabel's default
    relative gap, ~1e-8), so it may sit ABOVE the true minimum of f by about that much relative to |f|'s scale; it
    is a lower bound on min f only up to that tolerance (subtract it when a rigorous bound is needed). Any status
    other than "optimal" raises :class:`SOSError` carrying the status, never returns numbers.

    The dual y of the matching equality is a pseudo-moment vector with y_0 = 1 (stationarity in gamma); its
    sign in cvxpy's convention is fixed by that normalisation, and the value is checked, not rescaled.
    """
    prog.c.value = prog.coeff_vector(poly)
    try:
        prog.problem.solve(solver=solver)
    except cp.error.SolverError as e:
        raise SOSError(f"SOS program: solver {solver} failed: {e}") from e
    status = prog.problem.status
    if status != "optimal":
        # "optimal_inaccurate" is what Clarabel reports when f - gamma has no SOS certificate for any gamma (f
        # unbounded below, or not representable): the numbers it returns certify nothing
        raise SOSError(f"SOS program not solved to optimality: status {status!r} (no SOS certificate found)",
                       status)
    y = np.asarray(prog.match.dual_value, dtype=float)
    y0 = y[prog.index[tuple([0] * prog.n)]]
    if abs(abs(y0) - 1.0) > 1e-4:
        raise RuntimeError(f"dual normalisation y_0 = {y0}, expected +-1")
    # d gamma*/d c = y (envelope theorem), with y oriented so that d gamma*/d c_0 = +1
    return float(prog.gamma.value), y * np.sign(y0)


def solve_ref(prog: SOSProgram, poly: dict, solver: str = "CLARABEL", h: float = 1e-4) -> tuple[float, np.ndarray]:
    """Reference for :func:`solve`: same output, gradient by central differences over f's support (0 elsewhere)."""
    if h <= 0:
        raise ValueError(f"h must be > 0, got {h}")
    g0, _ = solve(prog, poly, solver)
    grad = np.zeros(len(prog.monos))
    for e in poly:
        up, dn = dict(poly), dict(poly)
        up[e] += h; dn[e] -= h
        # d gamma/d c_e ~ (gamma(c + h e) - gamma(c - h e)) / 2h
        grad[prog.index[e]] = (solve(prog, up, solver)[0] - solve(prog, dn, solver)[0]) / (2 * h)
    return g0, grad


def theta_grad(prog: SOSProgram, grad: np.ndarray) -> np.ndarray:
    """d gamma*/d theta for :func:`chain_poly` (theta_i multiplies x_i x_{i+1}): shape (n-1,)."""
    return np.array([grad[prog.index[e]] for e in chain_theta_index(prog.n)])


def split_bound(theta: np.ndarray, solver: str = "CLARABEL") -> float:
    """The decomposition bound sum_k min f_k for :func:`chain_poly`, with f cut into clique pieces by a fixed split.

    f_k(x_i, x_{i+1}) = w_i (x_i^2 - 1)^2 + w_{i+1} (x_{i+1}^2 - 1)^2 + theta_i x_i x_{i+1} + 1/2 x_i^2 x_{i+1}^2, with
    w_j = 1 / (number of cliques holding x_j), so sum_k f_k = f; each min f_k is an exact two-variable SOS bound.
    A valid lower bound on min f, but the split of the shared terms is fixed instead of optimised (the clique-sparse
    SOS program chooses it through the overlapping coefficients): the naive sparse alternative.
    """
    theta = np.asarray(theta, dtype=float)
    if theta.ndim != 1 or theta.size < 1:
        raise ValueError(f"theta must be 1-D with at least one entry, got shape {theta.shape}")
    n = theta.size + 1
    w = np.full(n, 0.5); w[0] = w[-1] = 1.0
    if n == 2:
        w[:] = 1.0
    prog = build(2, [[0, 1]])
    total = 0.0
    for i in range(n - 1):
        a, b = w[i], w[i + 1]
        f = {(4, 0): a, (2, 0): -2 * a, (0, 4): b, (0, 2): -2 * b, (0, 0): a + b, (1, 1): theta[i], (2, 2): 0.5}
        total += solve(prog, f, solver)[0]
    return float(total)


def cycle_poly(theta: np.ndarray) -> dict[tuple[int, ...], float]:
    """:func:`chain_poly` closed into a cycle: the edge {x_{n-1}, x_0} gets theta_{n-1} x_{n-1} x_0 + 1/2 x_{n-1}^2 x_0^2.

    ``theta`` has shape (n,), n >= 3. The cycle graph is not chordal for n >= 4.
    """
    theta = np.asarray(theta, dtype=float)
    if theta.ndim != 1 or theta.size < 3:
        raise ValueError(f"theta must be 1-D with at least 3 entries, got shape {theta.shape}")
    n = theta.size
    f = chain_poly(theta[:-1])
    e = [0] * n; e[0] = 1; e[-1] = 1; f[tuple(e)] = float(theta[-1])
    e = [0] * n; e[0] = 2; e[-1] = 2; f[tuple(e)] = 0.5
    return f


def cycle_edge_cliques(n: int) -> list[list[int]]:
    """The edges {x_i, x_{i+1}} and {x_{n-1}, x_0} of a cycle: its maximal cliques, not a chordal decomposition."""
    if n < 3:
        raise ValueError(f"n must be >= 3, got {n}")
    return chain_cliques(n) + [[0, n - 1]]


def cycle_chordal_cliques(n: int) -> list[list[int]]:
    """Maximal cliques {x_0, x_i, x_{i+1}} of a chordal extension of the cycle (fan triangulation from x_0)."""
    if n < 3:
        raise ValueError(f"n must be >= 3, got {n}")
    return [[0, i, i + 1] for i in range(1, n - 1)]


def chain_value(x: np.ndarray, theta: np.ndarray) -> float:
    """f_theta(x) of :func:`chain_poly` evaluated directly; ``x`` shape (n,), ``theta`` shape (n-1,)."""
    x, theta = np.asarray(x, dtype=float), np.asarray(theta, dtype=float)
    if x.ndim != 1 or theta.shape != (x.size - 1,):
        raise ValueError(f"x must be 1-D of length len(theta) + 1, got x {x.shape}, theta {theta.shape}")
    return float(np.sum((x ** 2 - 1) ** 2) + theta @ (x[:-1] * x[1:]) + 0.5 * np.sum(x[:-1] ** 2 * x[1:] ** 2))


def chain_local_min(theta: np.ndarray, rng: np.random.Generator, starts: int = 20) -> float:
    """Smallest value of :func:`chain_value` over ``starts`` BFGS runs from x ~ U(-1.5, 1.5)^n: an upper estimate of
    min f_theta, so any SOS lower bound gamma satisfies gamma <= this value; equality means the relaxation is exact."""
    from scipy.optimize import minimize

    theta = np.asarray(theta, dtype=float)
    if theta.ndim != 1 or theta.size < 1:
        raise ValueError(f"theta must be 1-D with at least one entry, got shape {theta.shape}")
    if starts < 1:
        raise ValueError(f"starts must be >= 1, got {starts}")
    n = theta.size + 1
    return float(min(minimize(chain_value, rng.uniform(-1.5, 1.5, n), args=(theta,), method="BFGS").fun
                     for _ in range(starts)))


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Contract, Kernel

    def inputs(rng, size):
        # f = x^4 + x^2 + a x + b: min known in closed form, an SOS polynomial (univariate, nonnegative shift)
        return {"prog": build(1, [[0]]),
                "poly": {(4,): 1.0, (3,): 0.0, (2,): 1.0, (1,): float(rng.normal()), (0,): 0.5}}

    return [Kernel("sos.solve", solve, solve_ref, inputs, Contract(empty="value",
                   shapes="poly: {exponent tuple of length n: coefficient}, representable by the cliques"),
                   tol={"float64": (1e-3, 1e-4)}, benchmark="", oracle="grid minimum of the polynomial")]


KERNELS = _registry()

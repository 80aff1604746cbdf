"""A barrier (central-path) SOS layer with an implicit backward pass that keeps, or drops, the clique structure.

The layer of :mod:`paperkit.privacy_statistics.sos` (same monomials, same cliques) is solved here on the dual side,
over pseudo-moments y (one per monomial alpha, y_0 = 1), with the log-det barrier at a fixed parameter t:

    y_t(c) = argmin_y  t c^T y - sum_k log det M_k(y),      M_k(y) = [y_{m_i m_j}]_{ij}  (s_k x s_k),

the point an interior-point solver stops at. Its optimality conditions give a certificate: Q_k = M_k(y)^{-1} / t is
positive definite and f - gamma_t = sum_k m_k^T Q_k m_k holds exactly on every non-constant monomial, with
gamma_t = c_0 - g_0(y) / t and g_alpha(y) = sum_k tr(M_k^{-1} B_{k,alpha}) (B_{k,alpha}: the 0/1 pattern of alpha in
M_k). So gamma_t is an SOS lower bound, and gamma* - gamma_t <= sum_k s_k / t (the duality gap).

Backward pass (our reading of the paper's layer for losses that need the certificate): for a loss L(Q, gamma_t),
implicit differentiation of t c_F = g_F(y) (F: the monomials other than the constant) gives

    dL/dc_F = H^{-1} [ s_G - (dL/dgamma) H_{F,0} ],   dL/dc_0 = dL/dgamma,
    H_{alpha beta} = sum_k tr(M_k^{-1} B_{k,alpha} M_k^{-1} B_{k,beta}),   (s_G)_beta = sum_k tr(M_k^{-1} G_k M_k^{-1} B_{k,beta}),

with G_k = dL/dQ_k. H is the barrier Hessian (the Schur complement of an interior-point step): a sum of one small
dense block per clique, so for a chain it is banded with a bandwidth that does not grow with n. ``linalg="band"``
assembles H from the clique blocks and solves it with a banded Cholesky factorisation (the structure-preserving
backward); ``linalg="dense"`` forms the same H as a dense matrix and uses a dense Cholesky factorisation (a backward
that ignores the structure the forward solve had). On the dense program (one clique) both are dense.

``cert_grad_ref`` has the signature of ``cert_grad`` and differentiates by central differences (re-solving the
barrier problem), the reference of the tests; the barrier bound is tested against Clarabel's SDP optimum.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from paperkit.privacy_statistics import sos

LINALG = ("band", "dense")


@dataclass(frozen=True)
class _Group:
    """Blocks with the same local pattern: ``ids`` (K,), ``rows`` (K, s, s) global indices, ``loc`` (K, u) their
    local monomials, ``pos`` (s*s,) entry -> local monomial, ``order``/``starts``: entries grouped by monomial."""

    ids: np.ndarray
    rows: np.ndarray
    loc: np.ndarray
    pos: np.ndarray
    order: np.ndarray
    starts: np.ndarray


@dataclass(frozen=True)
class _Layout:
    """Where the entries of the clique blocks of H land (fixed by the cliques, computed once): ``h0``: entries
    of row 0 and their columns; ``keep``: entries in F x F; ``band``/``dense``: their flat positions in the banded
    upper storage (w+1, m-1) (``up`` selects the upper triangle) and in the dense (m-1, m-1) matrix."""

    h0: np.ndarray
    h0_cols: np.ndarray
    keep: np.ndarray
    up: np.ndarray
    band: np.ndarray
    dense: np.ndarray
    bandwidth: int


@dataclass(frozen=True)
class MomentBlocks:
    """The moment matrices of an SOS program. ``monos``: the m monomials (same order as :func:`sos.build`);
    ``rows[k]``: (s_k, s_k) indices into ``monos`` of the entries m_i m_j of block k; ``groups``: the blocks batched
    by local pattern (all chain cliques share one).
    """

    n: int
    monos: list
    index: dict
    rows: tuple
    groups: tuple
    layout: _Layout

    @property
    def m(self) -> int:
        return len(self.monos)

    @property
    def sizes(self) -> list[int]:
        return [r.shape[0] for r in self.rows]

    @property
    def zero(self) -> int:
        return self.index[tuple([0] * self.n)]

    def coeff_vector(self, poly: dict) -> np.ndarray:
        """f's coefficients as a length-m vector; a monomial outside the program or a non-finite value raises."""
        v = np.zeros(self.m)
        for e, val in poly.items():
            if len(e) != self.n or e not in self.index:
                raise ValueError(f"poly: monomial {e} is not representable by these cliques")
            if not np.isfinite(val):
                raise ValueError(f"poly: coefficient of {e} is not finite ({val})")
            v[self.index[e]] += val
        return v


def moment_blocks(n: int, cliques: list[list[int]], half_deg: int = 2) -> MomentBlocks:
    """Moment-matrix index patterns of the SOS program on ``cliques`` (one clique of all variables: dense)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not cliques:
        raise ValueError("cliques must be non-empty")
    if isinstance(half_deg, bool) or not isinstance(half_deg, (int, np.integer)) or half_deg < 1:
        raise ValueError(f"half_deg must be an integer >= 1, got {half_deg!r}")
    bases = [sos.monomial_basis(k, n, half_deg) for k in cliques]
    add = lambda u, w: tuple(a + b for a, b in zip(u, w))  # noqa: E731
    monos = sorted({add(u, w) for B in bases for u in B for w in B})
    index = {e: i for i, e in enumerate(monos)}
    rows = tuple(np.array([[index[add(u, w)] for w in B] for u in B]) for B in bases)
    by_key: dict = {}
    for k, r in enumerate(rows):
        loc, pos = np.unique(r.ravel(), return_inverse=True)
        by_key.setdefault((r.shape[0], tuple(pos)), []).append((k, loc))
    groups = []
    for (s, pos), members in by_key.items():
        pos = np.array(pos)
        order = np.argsort(pos, kind="stable")
        groups.append(_Group(np.array([k for k, _ in members]), np.stack([rows[k] for k, _ in members]),
                             np.stack([loc for _, loc in members]), pos, order,
                             np.r_[0, np.flatnonzero(np.diff(pos[order])) + 1]))
    return MomentBlocks(n, monos, index, rows, tuple(groups), _layout(groups, index[tuple([0] * n)], len(monos)))


def _layout(groups, z: int, m: int) -> _Layout:
    i = np.concatenate([np.repeat(g.loc, g.loc.shape[1], axis=1).ravel() for g in groups])
    j = np.concatenate([np.tile(g.loc, (1, g.loc.shape[1])).ravel() for g in groups])
    keep = (i != z) & (j != z)
    fi, fj = i[keep] - (i[keep] > z), j[keep] - (j[keep] > z)   # full index -> index in F
    w = int(np.abs(fi - fj).max()) if len(fi) else 0
    up = fi <= fj
    return _Layout(i == z, j[i == z], keep, up, (w + fi[up] - fj[up]) * (m - 1) + fj[up], fi * (m - 1) + fj, w)


def gaussian_moments(mb: MomentBlocks) -> np.ndarray:
    """Moments E[x^alpha] of x ~ N(0, I): a strictly feasible start (every M_k is a true moment matrix, PD)."""
    dfact = lambda a: 0.0 if a % 2 else float(np.prod(np.arange(a - 1, 0, -2)))  # noqa: E731  (a-1)!!, 0 if odd
    return np.array([np.prod([dfact(a) for a in e]) for e in mb.monos])


def _inverses(mb: MomentBlocks, y: np.ndarray):
    """(M^{-1} per group, stacked (K, s, s), and sum_k log det M_k), or None when some M_k(y) is not PD."""
    inv, logdet = [], 0.0
    for g in mb.groups:
        try:
            L = np.linalg.cholesky(y[g.rows])
        except np.linalg.LinAlgError:
            return None
        logdet += 2.0 * np.log(np.diagonal(L, axis1=1, axis2=2)).sum()
        Li = np.linalg.inv(L)
        inv.append(np.swapaxes(Li, 1, 2) @ Li)
    return inv, logdet


def _g(mb: MomentBlocks, inv) -> np.ndarray:
    """g_alpha = sum_k tr(W_k B_{k,alpha}) for per-group stacks W (K, s, s): W scattered onto the monomials."""
    return np.bincount(np.concatenate([g.rows.ravel() for g in mb.groups]),
                       weights=np.concatenate([W.ravel() for W in inv]), minlength=mb.m)


def _hessian_entries(mb: MomentBlocks, inv) -> np.ndarray:
    """Values of the clique blocks of the barrier Hessian H, in the order of ``mb.layout`` (overlaps not yet summed)."""
    V = []
    for g, W in zip(mb.groups, inv):
        K, s = W.shape[:2]
        T = (W[:, :, None, :, None] * W[:, None, :, None, :]).reshape(K, s * s, s * s)  # T[(a,b),(c,d)] = W_ac W_bd
        Z = np.add.reduceat(T[:, g.order], g.starts, axis=1)            # sum over the entries (a, b) of alpha
        Hk = np.add.reduceat(Z[:, :, g.order], g.starts, axis=2)        # ... and over (c, d) of beta
        V.append(Hk.ravel())
    return np.concatenate(V)


class _Solver:
    """Factorised H_FF (F = every monomial but the constant), banded or dense; ``solve(b)`` gives H_FF^{-1} b."""

    def __init__(self, mb: MomentBlocks, inv, linalg: str):
        if linalg not in LINALG:
            raise ValueError(f"linalg must be one of {LINALG}, got {linalg!r}")
        v, lay, m = _hessian_entries(mb, inv), mb.layout, mb.m - 1
        self.h0 = np.bincount(lay.h0_cols, weights=v[lay.h0], minlength=mb.m)   # row H_{0, .}
        v = v[lay.keep]
        self.linalg, self.bandwidth = linalg, lay.bandwidth
        # np.bincount sums the overlapping clique contributions into their places
        if linalg == "dense":
            H = np.bincount(lay.dense, weights=v, minlength=m * m).reshape(m, m)
            self.fac = sla.cho_factor(H, lower=False, check_finite=False)
        else:
            ab = np.bincount(lay.band, weights=v[lay.up], minlength=(lay.bandwidth + 1) * m).reshape(-1, m)
            self.fac = sla.cholesky_banded(ab, lower=False, check_finite=False)

    def solve(self, b: np.ndarray) -> np.ndarray:
        if self.linalg == "dense":
            return sla.cho_solve(self.fac, b, check_finite=False)
        return sla.cho_solve_banded((self.fac, False), b, check_finite=False)


@dataclass
class BarrierPoint:
    """The layer's output at parameter ``t``: pseudo-moments ``y`` (m,), certified bound ``gamma``, the inverses
    ``inv`` = M_k(y)^{-1} stacked per group of ``mb.groups`` (so Q_k = M_k^{-1} / t), and the Newton steps.
    ``Q`` lists the certificate's Gram matrices in block order."""

    y: np.ndarray
    t: float
    gamma: float
    inv: list
    newton_steps: int
    groups: tuple

    @property
    def Q(self) -> list[np.ndarray]:
        out = [None] * sum(len(g.ids) for g in self.groups)
        for g, W in zip(self.groups, self.inv):
            for k, w in zip(g.ids, W):
                out[k] = w / self.t
        return out


def _free(mb: MomentBlocks, v: np.ndarray) -> np.ndarray:
    return np.delete(v, mb.zero)


def barrier_solve(mb: MomentBlocks, c: np.ndarray, gap: float = 1e-4, linalg: str = "band",
                  y_init: np.ndarray | None = None, t_init: float | None = None, mu: float = 10.0,
                  max_newton: int = 400) -> BarrierPoint:
    """Follow the central path from t = ``t_init`` (1 by default) up to t = sum_k s_k / ``gap`` by damped Newton.

    ``c`` (m,): f's coefficients over ``mb.monos``. Returns the centred point at the final t (Newton decrement^2/2
    below 1e-14 there); raises RuntimeError if Newton does not converge in ``max_newton`` steps overall.
    """
    c = np.asarray(c, dtype=float)
    if c.shape != (mb.m,) or not np.all(np.isfinite(c)):
        raise ValueError(f"c must be a finite vector of length {mb.m}, got shape {c.shape}")
    if not gap > 0:
        raise ValueError(f"gap must be > 0, got {gap}")
    t_final = sum(mb.sizes) / gap
    y = gaussian_moments(mb) if y_init is None else np.array(y_init, dtype=float)
    t, steps = (1.0 if t_init is None else min(float(t_init), t_final)), 0
    cur = _inverses(mb, y)
    if cur is None:
        raise ValueError("y_init: some moment matrix M_k(y_init) is not positive definite")
    free = np.arange(mb.m) != mb.zero
    while True:
        final = t >= t_final
        polished = False
        while True:
            inv, logdet = cur
            grad = _free(mb, t * c - _g(mb, inv))
            dy = -_Solver(mb, inv, linalg).solve(grad)
            dec = -grad @ dy
            steps += 1
            if steps > max_newton:
                raise RuntimeError(f"barrier_solve: Newton did not converge in {max_newton} steps (t = {t:.3g})")
            if dec / 2 <= (1e-10 if final else 1e-3):
                if not final or polished:
                    break
                polished = True  # one more full step: quadratic convergence takes the decrement to roundoff
            step = 1.0
            phi = t * c @ y - logdet
            while True:  # backtracking: stay inside the cone and decrease phi (Armijo, 1/4; full step once tiny)
                y_new = y.copy(); y_new[free] += step * dy
                new = _inverses(mb, y_new)
                if new is not None and (dec < 1e-6 or t * c @ y_new - new[1] <= phi - 0.25 * step * dec):
                    break
                step *= 0.5
                if step < 1e-12:
                    raise RuntimeError("barrier_solve: line search failed")
            y, cur = y_new, new
        if t >= t_final:
            break
        t = min(t * mu, t_final)
    gamma = c[mb.zero] - _g(mb, cur[0])[mb.zero] / t
    return BarrierPoint(y, t, float(gamma), cur[0], steps, mb.groups)


def backward(mb: MomentBlocks, point: BarrierPoint, dL_dQ: list[np.ndarray], dL_dgamma: float,
             linalg: str = "band") -> np.ndarray:
    """dL/dc (m,) for a loss L(Q_1..Q_K, gamma_t) at ``point``, from dL/dQ_k (s_k x s_k) and dL/dgamma.

    Recomputes M_k^{-1} and H at ``point.y`` (nothing is reused from the forward solve) and solves one system with
    H_FF: banded (clique structure kept) or dense, per ``linalg``.
    """
    if len(dL_dQ) != len(mb.rows):
        raise ValueError(f"dL_dQ must hold one matrix per block ({len(mb.rows)}), got {len(dL_dQ)}")
    inv, _ = _inverses(mb, point.y)
    solver = _Solver(mb, inv, linalg)
    Gs = [np.stack([0.5 * (dL_dQ[k] + dL_dQ[k].T) for k in g.ids]) for g in mb.groups]
    sG = _g(mb, [W @ G @ W for W, G in zip(inv, Gs)])
    out = np.zeros(mb.m)
    out[np.arange(mb.m) != mb.zero] = solver.solve(_free(mb, sG - dL_dgamma * solver.h0))
    out[mb.zero] = dL_dgamma
    return out


def cert_loss(point: BarrierPoint, rho: float) -> tuple[float, list[np.ndarray], float]:
    """L = gamma_t - rho sum_k ||Q_k||_F^2 (bound minus certificate size) with dL/dQ_k and dL/dgamma."""
    Q = point.Q
    return (point.gamma - rho * sum(float((q * q).sum()) for q in Q), [-2.0 * rho * q for q in Q], 1.0)


def envelope_grad(mb: MomentBlocks, point: BarrierPoint, dL_dgamma: float) -> np.ndarray:
    """The scalar-loss read-off dL/dc = dL/dgamma * y: it ignores how the certificate Q moves with c."""
    return dL_dgamma * point.y


def backward_flops(mb: MomentBlocks, linalg: str) -> float:
    """Counted arithmetic of :func:`backward` (leading order): per block s^4 (the Kronecker block) + 2 s^4 + 2 u s^2
    (reducing it onto its u monomials) + 4 s^3 (inverse, s_G); then the Cholesky factorisation and two triangular
    solves of H_FF: dense (m-1)^3/3 + 2(m-1)^2, banded (m-1) w^2 + 4 (m-1) w with w the bandwidth."""
    blocks = 0.0
    for g in mb.groups:
        K, s, u = len(g.ids), g.rows.shape[1], g.loc.shape[1]
        blocks += K * (3.0 * s**4 + 2.0 * u * s**2 + 4.0 * s**3)
    m = mb.m - 1
    if linalg == "dense":
        return blocks + m**3 / 3 + 2.0 * m**2
    w = band_width(mb)
    return blocks + m * w**2 + 4.0 * m * w


def band_width(mb: MomentBlocks) -> int:
    """Bandwidth w of H_FF in the order of ``mb.monos`` (structural: which monomials share a clique)."""
    return mb.layout.bandwidth


def cert_grad(mb: MomentBlocks, poly: dict, rho: float = 0.05, gap: float = 1e-3,
              linalg: str = "band") -> tuple[float, np.ndarray]:
    """Forward (barrier solve) and backward of L = gamma_t - rho sum ||Q_k||^2: (L, dL/dc of shape (m,))."""
    if not rho >= 0:
        raise ValueError(f"rho must be >= 0, got {rho}")
    point = barrier_solve(mb, mb.coeff_vector(poly), gap, linalg)
    L, G, Lg = cert_loss(point, rho)
    return L, backward(mb, point, G, Lg, linalg)


def cert_grad_ref(mb: MomentBlocks, poly: dict, rho: float = 0.05, gap: float = 1e-3,
                  linalg: str = "band", h: float = 1e-5) -> tuple[float, np.ndarray]:
    """Reference for :func:`cert_grad`: dL/dc by central differences over every coefficient c_alpha, each side
    re-solved from the unperturbed central point at the final t (same t, so the same smooth map c -> L)."""
    if not rho >= 0:
        raise ValueError(f"rho must be >= 0, got {rho}")
    c = mb.coeff_vector(poly)
    point = barrier_solve(mb, c, gap, linalg)
    L = cert_loss(point, rho)[0]
    grad = np.zeros(mb.m)
    for i in range(mb.m):
        vals = []
        for sgn in (1.0, -1.0):
            cc = c.copy(); cc[i] += sgn * h
            p = barrier_solve(mb, cc, gap, linalg, y_init=point.y, t_init=point.t)
            vals.append(cert_loss(p, rho)[0])
        grad[i] = (vals[0] - vals[1]) / (2 * h)
    return L, grad


# ----------------------------------------------------------------------------------------------------- registry

def _registry():
    from paperkit.contracts import Contract, Kernel

    def inputs(rng, size):
        # a 3-variable chain polynomial of sos.chain_poly with random theta (size is not an axis here)
        return {"mb": moment_blocks(3, sos.chain_cliques(3)), "poly": sos.chain_poly(rng.uniform(-1, 1, 2)),
                "rho": 0.05, "gap": 1e-3}

    return [Kernel("sos_barrier.cert_grad", cert_grad, cert_grad_ref, inputs, Contract(empty="value",
                   shapes="poly: {exponent tuple of length n: coefficient}, representable by the cliques; "
                          "output (L, dL/dc of shape (m,))"),
                   tol={"float64": (1e-4, 1e-5)}, benchmark="",
                   oracle="Clarabel's SDP optimum (gamma* - gap <= gamma_t <= gamma*)")]


KERNELS = _registry()

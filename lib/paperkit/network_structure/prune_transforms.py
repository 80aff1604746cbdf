"""Pruning masks, counts of structured sparsity, and the fixed linear transforms that might turn one into the other.

Notation (a layer ``W`` of shape ``(n, m)``: ``n`` outputs, ``m`` inputs; ``x_j`` the j-th input feature over a
calibration batch):

* Wanda score ``S_ij = |W_ij| * ||x_j||_2``; the Wanda mask keeps, in every output row, the ``m - k`` entries of
  largest score with ``k = floor(sparsity * m)`` (:func:`wanda_mask`; magnitude pruning is ``||x_j|| = 1``).
* ``N:M`` mask: in each aligned group of ``M`` consecutive inputs of a row keep the ``N`` largest scores
  (:func:`nm_mask`).
* Structured sparsity of a matrix ``A`` (``n x m``): the share of its ``n + m`` rows and columns that are all zero,
  ``s(A) = (z_rows + z_cols) / (n + m)`` (:func:`zero_lines`, :func:`structured_share`); a softer share counts the
  lines one can drop at a relative Frobenius error ``tau`` (:func:`removable_share`).
* A transform ``A -> L A R`` with invertible ``L`` (``n x n``) and ``R`` (``m x m``): rank is preserved, so at most
  ``n - rank(A)`` rows and ``m - rank(A)`` columns can become zero; a permutation only moves zeros, so the number
  of zero lines is unchanged and, in a row with ``z_i`` zeros, at most ``floor(z_i / M)`` aligned groups of ``M``
  can be all zero whatever the column order (:func:`zero_groups`, :func:`zero_group_bound`).

Kernels (registered in ``KERNELS``, each with a loop reference of the same signature): :func:`wanda_mask`,
:func:`nm_mask`, :func:`removable_share`, :func:`mask_row_corr`.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.linalg import hadamard
from scipy.optimize import linear_sum_assignment

from paperkit.arrays import real_array


# ---------------------------------------------------------------------------------------------- input checks

def _check_w(W, act_norm):
    W = real_array(W, "W", 2)
    act_norm = real_array(act_norm, "act_norm", 1)
    if act_norm.shape[0] != W.shape[1]:
        raise ValueError(f"act_norm must have one entry per input column of W ({W.shape[1]}), got {act_norm.shape}")
    if (act_norm < 0).any():
        raise ValueError("act_norm must be non-negative (it is a norm)")
    if W.shape[0] == 0 or W.shape[1] == 0:
        raise ValueError(f"W must have at least one row and one column, got shape {W.shape}")
    return W, act_norm


def _check_sparsity(sparsity):
    if isinstance(sparsity, bool) or not isinstance(sparsity, (int, float)) or not 0 <= sparsity < 1:
        raise ValueError(f"sparsity must be a number in [0, 1), got {sparsity!r}")
    return float(sparsity)


def _check_bool_matrix(Z, name):
    Z = np.asarray(Z)
    if Z.dtype != bool:
        raise TypeError(f"{name} must be a boolean array, got dtype {Z.dtype}")
    if Z.ndim != 2:
        raise ValueError(f"{name} must have 2 axes, got shape {Z.shape}")
    return Z


# ---------------------------------------------------------------------------------------------- masks

def wanda_mask(W, act_norm, sparsity: float) -> np.ndarray:
    """Wanda keep-mask ``(n, m)`` bool: per output row, prune the ``floor(sparsity * m)`` entries of smallest score
    ``|W_ij| * act_norm_j`` (ties: the lower column index is pruned first). ``act_norm``: ``(m,)`` input norms
    ``||x_j||_2``; all ones gives per-row magnitude pruning."""
    W, act_norm = _check_w(W, act_norm)
    sparsity = _check_sparsity(sparsity)
    n, m = W.shape
    k = int(math.floor(sparsity * m))
    order = np.argsort(np.abs(W) * act_norm[None, :], axis=1, kind="stable")
    keep = np.ones((n, m), dtype=bool)
    np.put_along_axis(keep, order[:, :k], False, axis=1)
    return keep


def wanda_mask_ref(W, act_norm, sparsity: float) -> np.ndarray:
    """Reference for :func:`wanda_mask`: one row at a time, Python's sort on ``(score, column)``."""
    W, act_norm = _check_w(W, act_norm)
    sparsity = _check_sparsity(sparsity)
    n, m = W.shape
    k = int(math.floor(sparsity * m))
    keep = np.ones((n, m), dtype=bool)
    for i in range(n):
        score = [abs(float(W[i, j])) * float(act_norm[j]) for j in range(m)]
        for j in sorted(range(m), key=lambda j: (score[j], j))[:k]:
            keep[i, j] = False
    return keep


def nm_mask(W, act_norm, n_keep: int, group: int) -> np.ndarray:
    """``N:M`` keep-mask ``(n, m)`` bool with ``N = n_keep``, ``M = group``: in each aligned group of ``group``
    consecutive input columns of every row keep the ``n_keep`` largest Wanda scores (ties: lower index pruned
    first). ``m`` must be a multiple of ``group``."""
    W, act_norm = _check_w(W, act_norm)
    if not (isinstance(group, int) and isinstance(n_keep, int) and 0 <= n_keep <= group and group >= 1):
        raise ValueError(f"n_keep and group must be integers with 0 <= n_keep <= group, got {n_keep!r}, {group!r}")
    n, m = W.shape
    if m % group:
        raise ValueError(f"W must have a multiple of group = {group} columns, got {m}")
    s = (np.abs(W) * act_norm[None, :]).reshape(n, m // group, group)
    order = np.argsort(s, axis=2, kind="stable")
    keep = np.ones_like(s, dtype=bool)
    np.put_along_axis(keep, order[:, :, :group - n_keep], False, axis=2)
    return keep.reshape(n, m)


def nm_mask_ref(W, act_norm, n_keep: int, group: int) -> np.ndarray:
    """Reference for :func:`nm_mask`: one group at a time."""
    W, act_norm = _check_w(W, act_norm)
    if not (isinstance(group, int) and isinstance(n_keep, int) and 0 <= n_keep <= group and group >= 1):
        raise ValueError(f"n_keep and group must be integers with 0 <= n_keep <= group, got {n_keep!r}, {group!r}")
    n, m = W.shape
    if m % group:
        raise ValueError(f"W must have a multiple of group = {group} columns, got {m}")
    keep = np.ones((n, m), dtype=bool)
    for i in range(n):
        for g0 in range(0, m, group):
            cols = range(g0, g0 + group)
            score = {j: abs(float(W[i, j])) * float(act_norm[j]) for j in cols}
            for j in sorted(cols, key=lambda j: (score[j], j))[:group - n_keep]:
                keep[i, j] = False
    return keep


def line_mask(W, act_norm, sparsity: float, axis: int) -> np.ndarray:
    """Structured keep-mask: prune whole lines (``axis=0``: rows, ``axis=1``: columns), the
    ``floor(sparsity * count)`` lines with the smallest summed Wanda score."""
    W, act_norm = _check_w(W, act_norm)
    sparsity = _check_sparsity(sparsity)
    if axis not in (0, 1):
        raise ValueError(f"axis must be 0 or 1, got {axis!r}")
    score = (np.abs(W) * act_norm[None, :]).sum(1 - axis)
    k = int(math.floor(sparsity * W.shape[axis]))
    drop = np.argsort(score, kind="stable")[:k]
    keep = np.ones(W.shape, dtype=bool)
    if axis == 0:
        keep[drop, :] = False
    else:
        keep[:, drop] = False
    return keep


def group_mask(W, act_norm, sparsity: float, group: int) -> np.ndarray:
    """Block-structured keep-mask: columns form aligned groups of ``group``; in every row prune the
    ``floor(sparsity * m / group)`` groups of smallest summed Wanda score (1 x ``group`` blocks that share their
    columns across rows)."""
    W, act_norm = _check_w(W, act_norm)
    sparsity = _check_sparsity(sparsity)
    n, m = W.shape
    if m % group:
        raise ValueError(f"W must have a multiple of group = {group} columns, got {m}")
    gs = (np.abs(W) * act_norm[None, :]).reshape(n, m // group, group).sum(2)
    keep_g = wanda_mask(gs, np.ones(m // group), sparsity)
    return np.repeat(keep_g, group, axis=1)


# ---------------------------------------------------------------------------------------------- structure counts

def zero_lines(A, tol: float = 1e-9) -> tuple[int, int]:
    """``(rows, cols)``: how many rows and columns of ``A`` are zero, every entry at most ``tol * max|A|`` in
    absolute value (``tol`` absorbs the rounding of a transform; an all-zero ``A`` is all zero lines)."""
    A = real_array(A, "A", 2)
    small = np.abs(A) <= tol * float(np.abs(A).max(initial=0.0))
    return int(small.all(1).sum()), int(small.all(0).sum())


def structured_share(A, tol: float = 1e-9) -> float:
    """``s(A) = (zero rows + zero columns) / (n + m)``, zero lines by :func:`zero_lines`."""
    r, c = zero_lines(A, tol)
    return (r + c) / float(sum(np.shape(A)))


def _removable(sq_norms: np.ndarray, budget: float) -> int:
    c = np.cumsum(np.sort(sq_norms))
    return int(np.searchsorted(c, budget, side="right"))


def removable_share(A, tau: float) -> float:
    """Soft structured sparsity: rows removable (smallest squared norms first) while the dropped energy stays at most
    ``tau * ||A||_F^2``, plus columns removable the same way (each side on its own), over ``n + m``."""
    A = real_array(A, "A", 2)
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not 0 <= tau < 1:
        raise ValueError(f"tau must be a number in [0, 1), got {tau!r}")
    if A.size == 0:
        raise ValueError(f"A must be non-empty, got shape {A.shape}")
    scale = float(np.abs(A).max())
    B = A / scale if scale > 0 else A
    sq = B * B
    budget = tau * float(sq.sum())
    return (_removable(sq.sum(1), budget) + _removable(sq.sum(0), budget)) / float(sum(A.shape))


def removable_share_ref(A, tau: float) -> float:
    """Reference for :func:`removable_share`: drop lines one at a time in a Python loop."""
    A = real_array(A, "A", 2)
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not 0 <= tau < 1:
        raise ValueError(f"tau must be a number in [0, 1), got {tau!r}")
    if A.size == 0:
        raise ValueError(f"A must be non-empty, got shape {A.shape}")
    scale = float(np.abs(A).max())
    B = A / scale if scale > 0 else A
    total = float((B * B).sum())
    out = 0
    for norms in ([float(r @ r) for r in B], [float(c @ c) for c in B.T]):
        spent = 0.0
        for v in sorted(norms):
            if spent + v > tau * total:
                break
            spent += v
            out += 1
    return out / float(sum(A.shape))


def zero_groups(Z, group: int) -> int:
    """Number of aligned groups of ``group`` consecutive columns that are all zero in a row (``Z``: ``(n, m)``
    bool, True where the entry is zero; the last ``m mod group`` columns are ignored)."""
    Z = _check_bool_matrix(Z, "Z")
    n, m = Z.shape
    g = m // group
    return int(Z[:, :g * group].reshape(n, g, group).all(2).sum())


def zero_group_bound(Z, group: int) -> int:
    """``sum_i floor(z_i / group)``: no column order gives more all-zero aligned groups (``z_i`` zeros in row i)."""
    Z = _check_bool_matrix(Z, "Z")
    return int((Z.sum(1) // group).sum())


def _check_mask01(mask) -> np.ndarray:
    M = real_array(mask, "mask", 2)
    if ((M < 0) | (M > 1)).any():
        raise ValueError("mask must hold values in [0, 1] (a 0/1 mask)")
    return M.astype(np.float64)


def mask_row_corr(mask) -> float:
    """Mean absolute Pearson correlation between the rows of a 0/1 mask ``(n, m)``, over all pairs of rows that
    are not constant (NaN if fewer than two such rows). Computed from one Gram matrix."""
    M = _check_mask01(mask)
    C = M - M.mean(1, keepdims=True)
    nrm = np.sqrt((C * C).sum(1))
    C = C[nrm > 0] / nrm[nrm > 0, None]
    k = C.shape[0]
    if k < 2:
        return float("nan")
    G = np.abs(C @ C.T)
    return float((G.sum() - np.trace(G)) / (k * (k - 1)))


def mask_row_corr_ref(mask) -> float:
    """Reference for :func:`mask_row_corr`: ``numpy.corrcoef`` on each pair of rows."""
    M = _check_mask01(mask)
    rows = [r for r in M if r.std() > 0]
    vals = [abs(np.corrcoef(rows[a], rows[b])[0, 1]) for a in range(len(rows)) for b in range(len(rows)) if a != b]
    return float(np.mean(vals)) if vals else float("nan")


def effective_rank(A) -> float:
    """Entropy effective rank ``exp(-sum p_i log p_i)``, ``p_i = sigma_i / sum sigma`` (Roy and Vetterli)."""
    s = np.linalg.svd(real_array(A, "A", 2), compute_uv=False)
    p = s[s > 0] / s.sum()
    return float(np.exp(-(p * np.log(p)).sum()))


# ---------------------------------------------------------------------------------------------- transforms

def hungarian_group_perm(Z, group: int) -> np.ndarray:
    """Column permutation that gathers columns with common zeros into aligned groups of ``group`` (a power of 2).

    Our search, in rounds: units (first the single columns) are paired by a maximum-weight assignment
    (``scipy.optimize.linear_sum_assignment``) on the counts of rows in which both units are all zero, the diagonal
    forbidden; the assignment's cycles give the pairs (alternate edges; leftovers paired in order), and a pair is
    zero in a row when both members are. ``log2(group)`` rounds give units of ``group`` columns. Returns the
    permutation ``(m,)``: ``Z[:, perm]`` has the units in consecutive aligned blocks."""
    Z = _check_bool_matrix(Z, "Z")
    if group < 1 or group & (group - 1):
        raise ValueError(f"group must be a power of 2, got {group!r}")
    n, m = Z.shape
    if m % group:
        raise ValueError(f"Z must have a multiple of group = {group} columns, got {m}")
    units = [[j] for j in range(m)]
    prof = Z.T.astype(np.float64)                       # (units, n): 1 where the unit is zero in that row
    while len(units[0]) < group:
        k = len(units)
        w = prof @ prof.T
        np.fill_diagonal(w, -1.0)
        _, succ = linear_sum_assignment(-w)
        seen, pairs, left = np.zeros(k, dtype=bool), [], []
        for s in range(k):
            if seen[s]:
                continue
            cyc, u = [], s
            while not seen[u]:
                seen[u] = True
                cyc.append(u)
                u = succ[u]
            pairs += [(cyc[i], cyc[i + 1]) for i in range(0, len(cyc) - 1, 2)]
            if len(cyc) % 2:
                left.append(cyc[-1])
        pairs += [(left[i], left[i + 1]) for i in range(0, len(left), 2)]
        units = [units[a] + units[b] for a, b in pairs]
        prof = np.stack([prof[a] * prof[b] for a, b in pairs])
    return np.array([j for u in units for j in u])


def orthonormal_hadamard(n: int) -> np.ndarray:
    """``H / sqrt(n)`` for the Sylvester Hadamard matrix of order ``n`` (a power of 2; scipy.linalg.hadamard)."""
    return hadamard(n).astype(np.float64) / math.sqrt(n)


def block_hadamard(n: int) -> np.ndarray:
    """An orthonormal ``n x n`` Hadamard rotation for any ``n``: the direct sum of normalised Sylvester blocks, one
    per binary digit of ``n`` (``H_n / sqrt(n)`` itself when ``n`` is a power of 2)."""
    out = np.zeros((n, n))
    i = 0
    for k in reversed(range(max(n, 1).bit_length())):
        if n >> k & 1:
            out[i:i + (1 << k), i:i + (1 << k)] = orthonormal_hadamard(1 << k)
            i += 1 << k
    return out


def random_orthogonal(n: int, rng: np.random.Generator) -> np.ndarray:
    """A Haar-random orthogonal ``n x n`` matrix (QR of a Gaussian matrix with the signs of R's diagonal fixed;
    the law of ``scipy.stats.ortho_group``)."""
    q, r = np.linalg.qr(rng.normal(size=(n, n)))
    return q * np.sign(np.diag(r))[None, :]


def fixed_transforms(n: int, m: int, rng: np.random.Generator, input_basis: np.ndarray | None = None) -> dict:
    """The data-free transforms of one layer shape, drawn once so that a pruned and a dense matrix get the same:
    row and column permutations, random rotations of each side, Hadamard rotations of each side
    (:func:`block_hadamard`) and, when given, ``input_basis`` ``(m, m)`` (the principal axes of the inputs)."""
    out = {"perm_rows": rng.permutation(n), "perm_cols": rng.permutation(m),
           "rot_left": random_orthogonal(n, rng), "rot_right": random_orthogonal(m, rng),
           "had_left": block_hadamard(n), "had_right": block_hadamard(m)}
    if input_basis is not None:
        out["pca_right"] = np.asarray(input_basis, dtype=np.float64)
    return out


def apply_transforms(A, fixed: dict, group: int = 4) -> dict:
    """``name -> (L A R, side)`` for the family: permutations (random; sorted by zero count; our Hungarian column
    grouping), random and Hadamard rotations, the input principal axes, and decompositions computed from ``A``
    itself (left / right singular bases, ``U^T A`` and ``A V``; QR, ``Q^T A`` and ``A Q'`` from ``A^T = Q' R'``).
    ``side`` is ``"perm"``, ``"left"``, ``"right"`` or ``"both"``: the side whose lines the transform mixes."""
    A = real_array(A, "A", 2)
    Z = A == 0
    out = {"identity": (A, "perm"),
           "random permutation": (A[fixed["perm_rows"]][:, fixed["perm_cols"]], "perm"),
           "sort by zero count": (A[np.argsort(Z.sum(1), kind="stable")][:, np.argsort(Z.sum(0), kind="stable")],
                                  "perm")}
    if A.shape[1] % group == 0:
        out["Hungarian grouping"] = (A[:, hungarian_group_perm(Z, group)], "perm")
    out["rotation, left"] = (fixed["rot_left"] @ A, "left")
    out["rotation, right"] = (A @ fixed["rot_right"], "right")
    out["rotation, both"] = (fixed["rot_left"] @ A @ fixed["rot_right"], "both")
    out["Hadamard, left"] = (fixed["had_left"] @ A, "left")
    out["Hadamard, right"] = (A @ fixed["had_right"], "right")
    if "pca_right" in fixed:
        out["input PCA basis"] = (A @ fixed["pca_right"], "right")
    U, _, Vt = np.linalg.svd(A, full_matrices=True)
    out["SVD basis, left"] = (U.T @ A, "left")
    out["SVD basis, right"] = (A @ Vt.T, "right")
    Q, _ = np.linalg.qr(A, mode="complete")
    Qr, _ = np.linalg.qr(A.T, mode="complete")
    out["QR, left"] = (Q.T @ A, "left")
    out["QR, right"] = (A @ Qr, "right")
    return out


def rank_forced(shape: tuple[int, int], side: str, rank: int) -> int:
    """Zero lines any full-rank-``rank`` matrix can be given by a transform of ``side``: ``n - rank`` rows (left),
    ``m - rank`` columns (right), both (both), none for a permutation. The rank bound of the module docstring."""
    n, m = shape
    return {"perm": 0, "left": n - rank, "right": m - rank, "both": n + m - 2 * rank}[side]


# ----------------------------------------------------------------------------------------------------- registry

def _mask_inputs(rng, size):
    return {"W": rng.normal(size=(size, 8)), "act_norm": rng.uniform(0.1, 2.0, 8), "sparsity": 0.5}


def _nm_inputs(rng, size):
    return {"W": rng.normal(size=(size, 8)), "act_norm": rng.uniform(0.1, 2.0, 8), "n_keep": 2, "group": 4}


def _share_inputs(rng, size):
    return {"A": rng.normal(size=(size, 5)) * rng.uniform(0, 2, size=(1, 5)), "tau": 0.05}


def _corr_inputs(rng, size):
    return {"mask": (rng.random((size, 12)) < 0.5).astype(np.float64)}


def _registry():
    from paperkit.contracts import Arg, Contract, Kernel

    w = (Arg("W", ("float64", "float32"), 2), Arg("act_norm", ("float64", "float32"), 1, low=0.0))
    return [
        Kernel("prune_transforms.wanda_mask", wanda_mask, wanda_mask_ref, _mask_inputs,
               Contract(args=w, empty="error", shapes="W: (n, m); act_norm: (m,) >= 0; sparsity in [0, 1)"),
               tol={"float64": (0, 0), "float32": (0, 0)}, benchmark="prune_transforms.wanda_mask",
               oracle="the Wanda score |W| * ||x|| of locuslab/wanda; exact count of pruned entries per row"),
        Kernel("prune_transforms.nm_mask", nm_mask, nm_mask_ref, _nm_inputs,
               Contract(args=w, empty="error", shapes="W: (n, m) with m a multiple of group; act_norm: (m,)"),
               tol={"float64": (0, 0), "float32": (0, 0)}, benchmark="prune_transforms.nm_mask",
               oracle="exactly n_keep kept per group (counting identity)"),
        Kernel("prune_transforms.removable_share", removable_share, removable_share_ref, _share_inputs,
               Contract(args=(Arg("A", ("float64", "float32"), 2, scale=True),), empty="error",
                        shapes="A: (n, m); tau in [0, 1)"),
               tol={"float64": (1e-12, 1e-12), "float32": (1e-6, 1e-6)}, benchmark="prune_transforms.removable_share",
               oracle="SVD truncation: in the left singular basis the removable rows are the Eckart-Young tail"),
        Kernel("prune_transforms.mask_row_corr", mask_row_corr, mask_row_corr_ref, _corr_inputs,
               Contract(args=(Arg("mask", ("float64", "float32"), 2, low=0.0, high=1.0),), empty="value",
                        empty_value=None, shapes="mask: (n, m) of 0/1"),
               tol={"float64": (1e-10, 1e-12), "float32": (1e-5, 1e-6)}, benchmark="prune_transforms.mask_row_corr",
               oracle="numpy.corrcoef on each pair of rows"),
    ]


KERNELS = _registry()

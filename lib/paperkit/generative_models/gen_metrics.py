"""Sample-quality metrics for generators, computed on feature vectors: FID, kNN precision/recall, one-sided Chamfer.

* :func:`frechet_distance`: the Frechet (2-Wasserstein) distance between two Gaussians N(mu1, S1), N(mu2, S2),
  the quantity FID reports. The matrix square root goes through symmetric eigendecompositions (``eigh``), so it
  stays real and finite for singular covariances; :func:`frechet_distance_ref` is the pytorch-fid recipe
  (``scipy.linalg.sqrtm(S1 @ S2)``) with the same signature, kept as the oracle.
* :func:`knn_precision_recall`: improved precision/recall of Kynkaanniemi et al. (2019). Each real point carries a
  ball whose radius is the distance to its k-th nearest real neighbour; precision is the share of generated points
  inside some real ball, recall the share of real points inside some generated ball.
* :func:`chamfer_one_sided`: mean nearest-neighbour distance from one set to another. Gen -> real measures
  fidelity (are generated points near real data?), real -> gen measures coverage (is every real point near some
  generated one?). No k, no balls. This is our reading of the proposal; the paper may square or sum distances.

All point sets are (n, d) arrays of features; neighbour queries use :mod:`paperkit.geometry.knn`.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg

from paperkit.geometry.knn import check_point_sets, in_any_ball, knn_distances, knn_sq_distances


def _real(x, name: str) -> np.ndarray:
    x = np.asarray(x)
    if np.iscomplexobj(x) or x.dtype == np.bool_ or not np.issubdtype(x.dtype, np.number):
        raise TypeError(f"{name} must be a real array, got dtype {x.dtype}")
    return x.astype(np.float64)


def _check_gaussian(mu1, S1, mu2, S2) -> tuple[np.ndarray, ...]:
    mu1, mu2 = np.atleast_1d(_real(mu1, "mu1")), np.atleast_1d(_real(mu2, "mu2"))
    S1, S2 = np.atleast_2d(_real(S1, "S1")), np.atleast_2d(_real(S2, "S2"))
    d = mu1.shape[0]
    if d < 1:
        raise ValueError(f"mu1 must have at least one entry (d >= 1), got shape {mu1.shape}")
    for name, x, shape in (("mu1", mu1, (d,)), ("mu2", mu2, (d,)), ("S1", S1, (d, d)), ("S2", S2, (d, d))):
        if x.shape != shape:
            raise ValueError(f"{name} must have shape {shape}, got {x.shape}")
        if not np.all(np.isfinite(x)):
            raise ValueError(f"{name} contains NaN or inf")
    for name, S in (("S1", S1), ("S2", S2)):
        _check_psd(S, name)
    return mu1, S1, mu2, S2


# A covariance may miss symmetry and PSD by round-off: relative to its largest diagonal entry (or its norm)
_PSD_RTOL = 1e-8


def _check_psd(S: np.ndarray, name: str) -> None:
    """Refuse a covariance that is not symmetric or not positive semi-definite beyond round-off (one eigvalsh)."""
    scale = max(float(np.max(np.abs(S))), np.finfo(np.float64).tiny)
    if np.max(np.abs(S - S.T)) > _PSD_RTOL * scale:
        raise ValueError(f"{name} must be a symmetric covariance matrix")
    if np.linalg.eigvalsh((S + S.T) / 2)[0] < -_PSD_RTOL * scale * S.shape[0]:
        raise ValueError(f"{name} must be positive semi-definite (a covariance matrix)")


def sqrtm_psd(S) -> np.ndarray:
    """Symmetric square root of a symmetric positive semi-definite (d, d) matrix via ``eigh``.

    Round-off can make tiny eigenvalues negative; they are clipped to 0, so the result is real and PSD.
    """
    S = np.asarray(S, np.float64)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise ValueError(f"S must be a square matrix, got shape {S.shape}")
    w, V = np.linalg.eigh((S + S.T) / 2)
    return (V * np.sqrt(np.clip(w, 0.0, None))) @ V.T


def frechet_distance(mu1, S1, mu2, S2) -> float:
    """Squared Frechet distance between N(mu1, S1) and N(mu2, S2) (what FID reports); mu: (d,), S: (d, d) PSD.

    Uses tr((S1 S2)^{1/2}) = tr((S1^{1/2} S2 S1^{1/2})^{1/2}); the inner matrix is symmetric PSD, so both roots are
    symmetric eigendecompositions and singular covariances are handled without an epsilon offset.
    """
    mu1, S1, mu2, S2 = _check_gaussian(mu1, S1, mu2, S2)
    r1 = sqrtm_psd(S1)
    inner = r1 @ S2 @ r1
    w = np.linalg.eigvalsh((inner + inner.T) / 2)
    tr_covmean = np.sum(np.sqrt(np.clip(w, 0.0, None)))
    # d^2 = ||mu1 - mu2||^2 + tr(S1) + tr(S2) - 2 tr((S1 S2)^{1/2})
    d2 = np.sum((mu1 - mu2) ** 2) + np.trace(S1) + np.trace(S2) - 2.0 * tr_covmean
    return float(max(d2, 0.0))


def frechet_distance_ref(mu1, S1, mu2, S2) -> float:
    """Reference for :func:`frechet_distance` (same signature): pytorch-fid's ``calculate_frechet_distance``.

    ``scipy.linalg.sqrtm`` of the non-symmetric product S1 S2; if that is not finite, both covariances get 1e-6 on
    the diagonal; a small imaginary part from round-off is dropped.
    """
    mu1, S1, mu2, S2 = _check_gaussian(mu1, S1, mu2, S2)
    covmean = scipy.linalg.sqrtm(S1 @ S2)
    if not np.all(np.isfinite(covmean)):
        offset = np.eye(S1.shape[0]) * 1e-6
        covmean = scipy.linalg.sqrtm((S1 + offset) @ (S2 + offset))
    covmean = np.real(covmean)
    # d^2 = ||mu1 - mu2||^2 + tr(S1) + tr(S2) - 2 tr((S1 S2)^{1/2})
    return float(np.sum((mu1 - mu2) ** 2) + np.trace(S1) + np.trace(S2) - 2.0 * np.trace(covmean))


def gaussian_stats(X) -> tuple[np.ndarray, np.ndarray]:
    """Mean (d,) and unbiased covariance (d, d) of the rows of X (n, d), n >= 2: the two moments FID keeps."""
    X = np.asarray(X, np.float64)
    if X.ndim != 2 or X.shape[0] < 2:
        raise ValueError(f"X must be (n, d) with n >= 2, got shape {X.shape}")
    return X.mean(axis=0), np.cov(X, rowvar=False).reshape(X.shape[1], X.shape[1])


def fid(real, gen) -> float:
    """Frechet distance between Gaussians fitted to two feature sets (n, d) and (m, d): FID on given features."""
    return frechet_distance(*gaussian_stats(real), *gaussian_stats(gen))


def knn_radii(X, k: int) -> np.ndarray:
    """Radius of each point's kNN ball: distance to its k-th nearest neighbour in X (n, d), itself excluded."""
    dist, _ = knn_distances(X, X, k, exclude_self=True)
    return dist[:, k - 1]


def knn_precision_recall_ks(real, gen, ks) -> tuple[np.ndarray, np.ndarray]:
    """Improved precision and recall (Kynkaanniemi et al. 2019) of ``gen`` (m, d) against ``real`` (n, d), per k.

    precision_k = (1/m) sum_j 1[exists i: ||g_j - x_i|| <= NND_k(x_i)], recall_k the same with the roles swapped,
    where NND_k(x) is the distance from x to its k-th nearest neighbour in its own set (itself excluded).
    ``ks``: a sequence of positive ints; the neighbour search runs once at max(ks). Returns two arrays of len(ks).
    """
    ks = list(ks)
    if not ks or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 for k in ks):
        raise ValueError(f"ks must be a non-empty sequence of positive integers, got {ks!r}")
    ks = [int(k) for k in ks]
    # squared radii as computed, compared with squared distances: a point on a ball's boundary counts as inside
    sq_real, _ = knn_sq_distances(real, real, max(ks), exclude_self=True)
    sq_gen, _ = knn_sq_distances(gen, gen, max(ks), exclude_self=True)
    precision = np.array([in_any_ball(gen, real, radii_sq=sq_real[:, k - 1]).mean() for k in ks])
    recall = np.array([in_any_ball(real, gen, radii_sq=sq_gen[:, k - 1]).mean() for k in ks])
    return precision, recall


def knn_precision_recall(real, gen, k: int) -> tuple[float, float]:
    """Improved precision and recall at one k (see :func:`knn_precision_recall_ks`); returns two floats."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    precision, recall = knn_precision_recall_ks(real, gen, [k])
    return float(precision[0]), float(recall[0])


def chamfer_one_sided(A, B) -> float:
    """Mean distance from each row of A (n, d) to its nearest row of B (m, d): (1/n) sum_i min_j ||a_i - b_j||."""
    A, B = check_point_sets(A, B, "A", "B")
    for name, X in (("A", A), ("B", B)):
        if X.shape[0] == 0:
            raise ValueError(f"{name} is empty: the mean nearest-neighbour distance needs points in A and B")
    dist, _ = knn_distances(A, B, 1)
    return float(dist[:, 0].mean())


def chamfer_fidelity(real, gen) -> float:
    """Gen -> real one-sided Chamfer distance: large when generated points fall off the real data."""
    return chamfer_one_sided(gen, real)


def chamfer_coverage(real, gen) -> float:
    """Real -> gen one-sided Chamfer distance: large when part of the real data has no generated point near it."""
    return chamfer_one_sided(real, gen)


METRICS = ("FID", "precision", "recall", "Chamfer fidelity", "Chamfer coverage")


def evaluate(real, gen, k: int = 5) -> dict[str, float]:
    """All five metrics of ``gen`` (m, d) against ``real`` (n, d), keyed by the names in :data:`METRICS`.

    k is the kNN-ball neighbour count of precision/recall (5 is the default of the prdc package).
    """
    precision, recall = knn_precision_recall(real, gen, k)
    return {"FID": fid(real, gen), "precision": precision, "recall": recall,
            "Chamfer fidelity": chamfer_fidelity(real, gen), "Chamfer coverage": chamfer_coverage(real, gen)}


# ----------------------------------------------------------------------------------------------------- registry

def _gaussian_inputs(rng, size):
    d = size
    X, Y = rng.normal(size=(d + 3, d)), rng.normal(size=(d + 5, d))
    return {"mu1": rng.normal(size=d), "S1": X.T @ X / (d + 3), "mu2": rng.normal(size=d), "S2": Y.T @ Y / (d + 5)}


def _chamfer_inputs(rng, size):
    return {"A": rng.normal(size=(size, 3)), "B": rng.normal(size=(4, 3))}


def _chamfer_ref(A, B):
    """Closed form of :func:`chamfer_one_sided` with a dense distance matrix (the kNN reference, k = 1)."""
    from paperkit.geometry.knn import knn_distances_ref

    A, B = check_point_sets(A, B, "A", "B")
    for name, X in (("A", A), ("B", B)):
        if X.shape[0] == 0:
            raise ValueError(f"{name} is empty: the mean nearest-neighbour distance needs points in A and B")
    return float(knn_distances_ref(A, B, 1)[0][:, 0].mean())


def _registry():
    from paperkit.contracts import Arg as _Arg, Contract as _Contract, Kernel as _Kernel

    return [
    _Kernel("gen_metrics.frechet_distance", frechet_distance, frechet_distance_ref, _gaussian_inputs,
            _Contract(args=(_Arg("mu1", ("float64",), 1), _Arg("S1", ("float64",), 2),
                            _Arg("mu2", ("float64",), 1), _Arg("S2", ("float64",), 2)),
                      empty="error", shapes="mu1, mu2: (d,); S1, S2: (d, d) symmetric PSD"),
            tol={"float64": (1e-6, 1e-8)}, oracle="pytorch-fid's scipy.linalg.sqrtm recipe; closed form for "
            "commuting covariances"),
    _Kernel("gen_metrics.chamfer_one_sided", chamfer_one_sided, _chamfer_ref, _chamfer_inputs,
            _Contract(args=(_Arg("A", ndim=2, same_dtype_as="B", scale=True), _Arg("B", ndim=2, scale=True)),
                      empty="error", shapes="A: (n, d), B: (m, d)"),
            tol={"float64": (1e-12, 1e-12), "float32": (1e-6, 1e-6)}, oracle="dense distance matrix (k = 1)"),
    ]


KERNELS = _registry()

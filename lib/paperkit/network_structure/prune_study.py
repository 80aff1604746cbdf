"""The pruning-and-transform study of one trained network: a small MLP on real MNIST digits, its layers pruned by
Wanda and its rivals, every matrix passed through the transform family of
:mod:`paperkit.network_structure.prune_transforms`, and the structured sparsity counted before and after.

The network (our miniature of a transformer's feed-forward blocks): 16x16 digits (256 inputs) ->
``width`` -> 256 -> ``width`` -> 256 -> 10, ReLU between layers; the four hidden layers alternate between an
"up" shape ``(width, 256)`` and a "down" shape ``(256, width)``, as a feed-forward block's two matrices do.
"""
from __future__ import annotations

import numpy as np
import torch

from paperkit.network_structure import prune_transforms as pt
from paperkit.training import AdamCosine

MASKS = ("dense", "Wanda", "magnitude", "hidden lines", "hidden groups", "row-shuffled Wanda")
UNCUT = "Wanda, uncut"
"""A name :func:`layer_study` accepts in ``matrices`` beside :data:`MASKS`: the Wanda matrix as the mask leaves it,
its zero lines kept, against the whole dense layer (the paper's comparison, Delta on the pruned matrix)."""


def mnist16(X: np.ndarray) -> np.ndarray:
    """MNIST images ``(N, 784)`` with values 0-255 -> ``(N, 256)`` in [0, 1]: padded to 32x32, 2x2 average pooled."""
    imgs = np.pad(np.asarray(X, dtype=np.float64).reshape(-1, 28, 28) / 255.0, ((0, 0), (2, 2), (2, 2)))
    return imgs.reshape(-1, 16, 2, 16, 2).mean((2, 4)).reshape(-1, 256)


def train_mlp(X: np.ndarray, y: np.ndarray, width: int, tgen: torch.Generator, epochs: int = 12,
              batch: int = 128, lr: float = 2e-3) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Train the MLP of the module docstring by Adam (cosine schedule) on cross-entropy; returns the weights
    ``[(width, 256), (256, width), (width, 256), (256, width), (10, 256)]`` and biases as float64 arrays."""
    sizes = [X.shape[1], width, 256, width, 256, 10]
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        lin = torch.nn.Linear(a, b)
        with torch.no_grad():
            lin.weight.normal_(0.0, (2.0 / a) ** 0.5, generator=tgen)
            lin.bias.zero_()
        layers.append(lin)
    model = torch.nn.Sequential(*[m for lin in layers[:-1] for m in (lin, torch.nn.ReLU())], layers[-1])
    Xt, yt = torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.long)
    steps = epochs * ((len(X) + batch - 1) // batch)
    opt = AdamCosine(model.parameters(), lr=lr, steps=steps)
    for _ in range(epochs):
        order = torch.randperm(len(X), generator=tgen)
        for i in range(0, len(X), batch):
            idx = order[i:i + batch]
            opt.step(torch.nn.functional.cross_entropy(model(Xt[idx]), yt[idx]))
    return ([lin.weight.detach().double().numpy().copy() for lin in layers],
            [lin.bias.detach().double().numpy().copy() for lin in layers])


def layer_inputs(weights: list[np.ndarray], biases: list[np.ndarray], X: np.ndarray) -> list[np.ndarray]:
    """The input of every layer (``X`` itself, then the ReLU outputs) for the rows of ``X``."""
    h, out = X, []
    for k, (W, b) in enumerate(zip(weights, biases)):
        out.append(h)
        h = h @ W.T + b
        if k < len(weights) - 1:
            h = np.maximum(h, 0.0)
    return out


def accuracy(weights: list[np.ndarray], biases: list[np.ndarray], X: np.ndarray, y: np.ndarray) -> float:
    """Test accuracy of the MLP with the given (possibly pruned) weights."""
    h = X
    for k, (W, b) in enumerate(zip(weights, biases)):
        h = h @ W.T + b
        if k < len(weights) - 1:
            h = np.maximum(h, 0.0)
    return float((h.argmax(1) == y).mean())


def input_basis(X_in: np.ndarray) -> np.ndarray:
    """Principal axes ``(m, m)`` of a layer's inputs (eigenvectors of their covariance, largest first)."""
    C = np.cov(X_in, rowvar=False)
    _, vecs = np.linalg.eigh(C)
    return vecs[:, ::-1].copy()


def masked_matrices(W: np.ndarray, act_norm: np.ndarray, rng: np.random.Generator, sparsity: float,
                    group: int) -> dict[str, np.ndarray]:
    """The matrices the study compares, all at the same ``sparsity`` except the dense one:

    * ``dense``: ``W``; ``Wanda``, ``magnitude``: per-row unstructured masks;
    * ``hidden lines`` (a positive control): whole lines of the shorter side pruned (Wanda line score), then hidden
      by a random rotation of that side, so no line is zero any more but a singular basis can find them again;
    * ``hidden groups`` (a positive control): 1 x ``group`` blocks sharing their columns pruned per row
      (:func:`~paperkit.network_structure.prune_transforms.group_mask`), then hidden by a random column permutation;
    * ``row-shuffled Wanda`` (a null): each row of the Wanda mask permuted on its own (same zeros per row, no
      alignment between rows), applied to ``W``.
    """
    n, m = W.shape
    keep = pt.wanda_mask(W, act_norm, sparsity)
    out = {"dense": W, "Wanda": W * keep, "magnitude": W * pt.wanda_mask(W, np.ones(m), sparsity)}
    if m <= n:
        out["hidden lines"] = (W * pt.line_mask(W, act_norm, sparsity, axis=1)) @ pt.random_orthogonal(m, rng)
    else:
        out["hidden lines"] = pt.random_orthogonal(n, rng) @ (W * pt.line_mask(W, act_norm, sparsity, axis=0))
    out["hidden groups"] = (W * pt.group_mask(W, act_norm, sparsity, group))[:, rng.permutation(m)]
    shuffled = np.stack([row[rng.permutation(m)] for row in keep])
    out["row-shuffled Wanda"] = W * shuffled
    return out


def _family_rows(A: np.ndarray, fixed: dict, group: int, tau: float, tol: float) -> dict:
    """``transform -> dict`` of structure counts of ``T(A)`` for the family (see :func:`layer_study`)."""
    n, m = A.shape
    rank = int(np.linalg.matrix_rank(A, tol=1e-10 * float(np.abs(A).max()) * max(n, m)))
    base, base_soft = pt.structured_share(A, tol), pt.removable_share(A, tau)
    out = {}
    for tname, (B, side) in pt.apply_transforms(A, fixed, group).items():
        zr, zc = pt.zero_lines(B, tol)
        Z = B == 0
        soft = pt.removable_share(B, tau)
        out[tname] = {"side": side, "s": (zr + zc) / (n + m), "gain": (zr + zc) / (n + m) - base,
                      "s_soft": soft, "gain_soft": soft - base_soft, "zero_rows": zr, "zero_cols": zc,
                      "rank": rank, "forced": pt.rank_forced((n, m), side, rank),
                      "groups": pt.zero_groups(Z, group), "group_bound": pt.zero_group_bound(Z, group),
                      "zeros": int(Z.sum())}
    return out


def layer_study(W: np.ndarray, X_in: np.ndarray, rng: np.random.Generator, sparsity: float = 0.5, group: int = 4,
                tau: float = 0.01, tol: float = 1e-9, matrices: tuple = MASKS) -> dict:
    """Structure counts of one layer ``W`` ``(n, m)`` with calibration inputs ``X_in`` ``(N, m)``.

    Only the live inputs are studied: columns whose calibration norm ``||x_j||`` is zero (pixels that are blank in
    every image, ReLU units that never fire) are dropped first (``dead_inputs`` counts them, with up to
    ``group - 1`` of the faintest live inputs, so that the column count is a multiple of ``group``).

    For every matrix ``P`` of :func:`masked_matrices` the lines that are already zero in ``P`` are counted
    (``visible``, for every matrix of :data:`MASKS`: the share of rows and columns, structure the mask has before
    any transform) and removed, and the
    dense ``W`` is cut to the same lines (``D``); then every transform of
    :func:`~paperkit.network_structure.prune_transforms.apply_transforms` (its fixed transforms drawn once per
    matrix, the same for ``P`` and ``D``) is applied to both. Each row of ``rows`` holds, for one (matrix,
    transform): structured share ``s`` of ``T(P)`` (exact zero lines) and its ``gain`` over ``P``, the soft share
    ``s_soft`` (lines removable at relative Frobenius error ``tau``) and ``gain_soft``, the same four for ``T(D)``
    (``dense_*``), zero lines, rank, the rank-forced count (``dense_forced``: for the full-rank dense cut, which is
    zero exactly for the transforms that cannot create zero lines in a full-rank matrix), zero groups and their
    bound. ``matrices``: the subset of :data:`MASKS` to pass through the family, and :data:`UNCUT` for the Wanda
    matrix with its zero lines kept, against the whole dense layer."""
    act_norm = np.linalg.norm(X_in, axis=0)
    live = act_norm > 0
    extra = int(live.sum()) % group                   # keep a multiple of `group` columns: drop the faintest
    if extra:
        live[np.flatnonzero(live)[np.argsort(act_norm[live], kind="stable")[:extra]]] = False
    W, X_in, act_norm = W[:, live], X_in[:, live], act_norm[live]
    n, m = W.shape
    mats = masked_matrices(W, act_norm, rng, sparsity, group)
    rows, visible, shapes = [], {}, {}
    for name, P in mats.items():
        visible[name] = pt.structured_share(P, tol=0.0)
    for name in matrices:
        P = mats["Wanda" if name == UNCUT else name]
        r_keep, c_keep = np.abs(P).max(1) > 0, np.abs(P).max(0) > 0
        if name == UNCUT:
            r_keep, c_keep = np.ones(n, dtype=bool), np.ones(m, dtype=bool)
        elif name != "dense" and (~c_keep).sum() % group:            # drop whole groups of columns only
            c_keep[np.flatnonzero(c_keep)[:(c_keep.sum() % group)]] = False
        Pr, Dr = P[r_keep][:, c_keep], W[r_keep][:, c_keep]
        shapes[name] = Pr.shape
        fixed = pt.fixed_transforms(*Pr.shape, rng, input_basis(X_in[:, c_keep]))
        fp = _family_rows(Pr, fixed, group, tau, tol)
        fd = _family_rows(Dr, fixed, group, tau, tol) if name != "dense" else fp
        for tname, row in fp.items():
            d = fd[tname]
            rows.append({"matrix": name, "transform": tname, **row,
                         **{f"dense_{k}": d[k] for k in ("s", "gain", "s_soft", "gain_soft", "rank", "forced")}})
    keep = mats["Wanda"] != 0
    corr = {k: pt.mask_row_corr((mats[k] != 0).astype(np.float64))
            for k in ("Wanda", "magnitude", "row-shuffled Wanda", "hidden groups")}
    corr["Wanda, zero columns cut"] = pt.mask_row_corr(keep[:, keep.any(0)].astype(np.float64))
    erank = {k: pt.effective_rank(mats[k]) for k in ("dense", "Wanda", "magnitude", "hidden lines")}
    sv = {k: np.linalg.svd(mats[k], compute_uv=False) for k in ("dense", "Wanda", "hidden lines")}
    return {"rows": rows, "visible": visible, "shapes": shapes, "corr": corr, "erank": erank, "sv": sv,
            "shape": (n, m), "dead_inputs": int((~live).sum()), "keep": keep,
            "hidden_keep": mats["hidden groups"] != 0}


def prune_accuracy(weights, biases, X_cal, X_test, y_test, sparsity: float = 0.5) -> dict[str, float]:
    """Test accuracy with every hidden layer (all but the classifier) pruned the same way: dense, Wanda, magnitude,
    2:4 Wanda, and structured (the ``sparsity`` share of each layer's output units with the smallest Wanda score)."""
    ins = layer_inputs(weights, biases, X_cal)
    norms = [np.linalg.norm(x, axis=0) for x in ins]
    rules = {"dense": lambda W, a: np.ones(W.shape, dtype=bool),
             "Wanda": lambda W, a: pt.wanda_mask(W, a, sparsity),
             "magnitude": lambda W, a: pt.wanda_mask(W, np.ones(W.shape[1]), sparsity),
             "2:4 Wanda": lambda W, a: pt.nm_mask(W, a, 2, 4),
             "structured (output units)": lambda W, a: pt.line_mask(W, a, sparsity, axis=0)}
    out = {}
    for name, rule in rules.items():
        ws = [W * rule(W, a) for W, a in zip(weights[:-1], norms[:-1])] + [weights[-1]]
        out[name] = accuracy(ws, biases, X_test, y_test)
    return out


def network_study(X: np.ndarray, y: np.ndarray, rng: np.random.Generator, tgen: torch.Generator, width: int = 384,
                  epochs: int = 5, n_train: int = 4000, n_cal: int = 512, sparsity: float = 0.5, group: int = 4,
                  tau: float = 0.01, matrices: tuple = MASKS) -> dict:
    """Split ``X, y`` (``n_train`` rows for training, the rest for testing), train one MLP, measure the accuracy of
    each pruning rule (:func:`prune_accuracy`) and study its four hidden layers (:func:`layer_study`, calibration on
    ``n_cal`` training rows). Returns ``{"acc": ..., "layers": [...], "weights": ..., "biases": ...}``."""
    perm = rng.permutation(len(X))
    tr, te = perm[:n_train], perm[n_train:]
    weights, biases = train_mlp(X[tr], y[tr], width, tgen, epochs=epochs)
    cal = X[tr[:n_cal]]
    ins = layer_inputs(weights, biases, cal)
    layers = [layer_study(weights[k], ins[k], rng, sparsity, group, tau, matrices=matrices) for k in range(4)]
    return {"acc": prune_accuracy(weights, biases, cal, X[te], y[te], sparsity), "layers": layers,
            "weights": weights, "biases": biases}


def summarise(net: dict, group: int = 4) -> dict:
    """The numbers the chapter's checks read from one :func:`network_study`, maxima over the four layers:

    * ``e1``/``e1_ctrl``: largest gain of exact structured share over the matrix itself, over the transforms that
      cannot create zero lines in a full-rank matrix (``dense_forced == 0``), for Wanda / the hidden-lines control;
    * ``e2``/``e2_ctrl``: largest ``|s(T(P)) - s(T(D))|`` over every transform (pruned against its dense cut);
    * ``e3``/``e3_ctrl``: largest soft-share gain of ``T(P)`` minus that of ``T(D)``;
    * ``t1``: largest violation of the permutation identities (zero lines moved by a permutation, zero groups over
      their bound), every matrix; ``t1_ctrl``: largest change of the zero-line count by a non-permutation transform;
    * ``e2u``: largest ``Delta_T(P) - Delta_T(D)`` (gains over the matrix itself) for the uncut Wanda matrix against
      the whole dense layer (:data:`UNCUT`; ``nan`` if not studied), ``e2u_where`` its (layer, transform);
    * ``e3_null``: ``e3`` for the row-shuffled Wanda null;
    * ``block_gain``/``block_gain_null``: largest rise, by our Hungarian column grouping, of the share of the zeros
      that lie in aligned all-zero 1 x ``group`` blocks, Wanda (cut) / row-shuffled Wanda;
    * ``t2``/``t2_ctrl``/``t2_uncut``: largest rank deficit ``min(n, m) - rank`` of the Wanda / hidden-lines /
      uncut Wanda matrices;
    * ``bound``: largest excess of zero lines over the rank-forced count on the side a transform mixes (over the
      matrix's own count on a side it leaves unmixed), every matrix and transform;
    * ``corr_excess`` (and for the magnitude mask and the hidden-groups control): mean |row correlation| of the
      mask minus that of its row-shuffled null;
    * ``erank``/``erank_ctrl``: smallest effective rank of the Wanda matrix over the dense one's / largest for the
      hidden-lines control; ``erank_mag``: the smallest for the magnitude matrix;
    * ``group_recovery``: zero groups after our Hungarian search over their bound, hidden-groups control (min);
      ``group_gain``: Hungarian zero groups over the identity's, Wanda and row-shuffled Wanda (max).
    """
    out = {k: 0.0 for k in ("e1", "e1_ctrl", "e2", "e2_ctrl", "e3", "e3_ctrl", "t1", "t1_ctrl", "t2", "t2_ctrl",
                            "bound")}
    out.update(corr_excess=-1.0, corr_excess_mag=-1.0, corr_excess_ctrl=np.inf, group_recovery=np.inf,
               group_gain=0.0, group_gain_null=0.0, erank=np.inf, erank_ctrl=0.0, erank_mag=np.inf,
               e2u=-np.inf, e2u_where=None, t2_uncut=0.0, e3_null=0.0, block_gain=0.0, block_gain_null=0.0)
    for li, L in enumerate(net["layers"]):
        rows = L["rows"]
        by = {(r["matrix"], r["transform"]): r for r in rows}
        for r in rows:
            mat, key = r["matrix"], ("e1" if r["matrix"] == "Wanda" else "e1_ctrl")
            if mat in ("Wanda", "hidden lines"):
                if r["dense_forced"] == 0:
                    out[key] = max(out[key], r["gain"])
                k2 = "e2" if mat == "Wanda" else "e2_ctrl"
                out[k2] = max(out[k2], abs(r["s"] - r["dense_s"]))
                k3 = "e3" if mat == "Wanda" else "e3_ctrl"
                out[k3] = max(out[k3], r["gain_soft"] - r["dense_gain_soft"])
            if mat == UNCUT:
                d = r["gain"] - r["dense_gain"]
                if d > out["e2u"]:
                    out["e2u"], out["e2u_where"] = d, (li, r["transform"])
            elif mat == "row-shuffled Wanda":
                out["e3_null"] = max(out["e3_null"], r["gain_soft"] - r["dense_gain_soft"])
            ident = by[(mat, "identity")]
            moved = abs(r["zero_rows"] + r["zero_cols"] - ident["zero_rows"] - ident["zero_cols"])
            if r["side"] == "perm":
                out["t1"] = max(out["t1"], moved, r["groups"] - r["group_bound"])
            elif mat == "Wanda":
                out["t1_ctrl"] = max(out["t1_ctrl"], moved)
            # a mixed side holds at most the rank-forced count; an unmixed side keeps the zero lines it had
            out["bound"] = max(out["bound"],
                               r["zero_rows"] - (r["forced"] if r["side"] in ("left", "both") else ident["zero_rows"]),
                               r["zero_cols"] - (r["forced"] if r["side"] in ("right", "both") else ident["zero_cols"]))
        for mat, key in (("Wanda", "t2"), ("hidden lines", "t2_ctrl"), (UNCUT, "t2_uncut")):
            if (mat, "identity") not in by:
                continue
            r = by[(mat, "identity")]
            n, m = L["shapes"][mat]
            out[key] = max(out[key], min(n, m) - r["rank"])
        c = L["corr"]
        out["corr_excess"] = max(out["corr_excess"], c["Wanda"] - c["row-shuffled Wanda"])
        out["corr_excess_mag"] = max(out["corr_excess_mag"], c["magnitude"] - c["row-shuffled Wanda"])
        out["corr_excess_ctrl"] = min(out["corr_excess_ctrl"], c["hidden groups"] - c["row-shuffled Wanda"])
        hg = by[("hidden groups", "Hungarian grouping")]
        out["group_recovery"] = min(out["group_recovery"], hg["groups"] / max(hg["group_bound"], 1))
        for mat, key in (("Wanda", "group_gain"), ("row-shuffled Wanda", "group_gain_null")):
            out[key] = max(out[key], by[(mat, "Hungarian grouping")]["groups"] / max(by[(mat, "identity")]["groups"], 1))
        for mat, key in (("Wanda", "block_gain"), ("row-shuffled Wanda", "block_gain_null")):
            h, i0 = by[(mat, "Hungarian grouping")], by[(mat, "identity")]
            out[key] = max(out[key], group * (h["groups"] - i0["groups"]) / max(i0["zeros"], 1))
        out["erank"] = min(out["erank"], L["erank"]["Wanda"] / L["erank"]["dense"])
        out["erank_ctrl"] = max(out["erank_ctrl"], L["erank"]["hidden lines"] / L["erank"]["dense"])
        out["erank_mag"] = min(out["erank_mag"], L["erank"]["magnitude"] / L["erank"]["dense"])
    if out["e2u_where"] is None:
        out["e2u"] = float("nan")
    return out

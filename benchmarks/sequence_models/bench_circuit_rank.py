"""Vectorised (einsum) PC table and reshape-based separation rank versus their per-state references."""
import numpy as np

from paperkit.sequence_models.circuit_rank import (balanced_vtree, pc_joint_table, pc_joint_table_ref, separation_rank,
                                   separation_rank_ref)
from paperkit.timing import speed_ratio


def run(quick: bool) -> list[dict]:
    n, k = (8, 2) if quick else (10, 3)
    tree = balanced_vtree(range(n))
    r = speed_ratio(lambda: pc_joint_table(tree, n, k, np.random.default_rng(0)),
                    lambda: pc_joint_table_ref(tree, n, k, np.random.default_rng(0)), repeats=3 if quick else 5)
    P = pc_joint_table(tree, n, k, np.random.default_rng(0))
    split = tuple(range(0, n, 2))
    s = speed_ratio(lambda: separation_rank(P, split), lambda: separation_rank_ref(P, split), repeats=3 if quick else 5)
    return [
        {"kernel": "pc_joint_table", "baseline": "pc_joint_table_ref", "ratio": r.ratio, "shape": f"n={n},k={k}",
         "work": f"{2 ** n} joint states"},
        {"kernel": "separation_rank", "baseline": "separation_rank_ref", "ratio": s.ratio, "shape": f"n={n}",
         "work": f"{2 ** n} entries placed, one SVD"},
    ]

"""Looped transformer: reading the accuracy at every inference loop count from one pass (K block applications)
against re-running the model once per loop count (K (K + 1) / 2), and the per-sample masked loop against running
each sample alone."""
import numpy as np
import torch

from paperkit.sequence_models import looped_halting as lh
from paperkit.timing import speed_ratio


def run(quick: bool) -> list[dict]:
    n_seq, size, d = (16, 12, 32) if quick else (128, 24, 64)
    reps = 3 if quick else 7
    model = lh.make_model("dyck1", d, torch.Generator().manual_seed(0))
    x, _, _ = lh.task_batch("dyck1", np.random.default_rng(0), n_seq, size)
    K = 2 * size
    T = torch.randint(size, 2 * size + 1, (n_seq,), generator=torch.Generator().manual_seed(1))
    shape = f"B={n_seq} L={size} d={d} K={K}"
    with torch.no_grad():
        r_pass = speed_ratio(lambda: lh.per_loop_predictions(model, x, K),
                             lambda: lh.per_loop_predictions_reference(model, x, K), repeats=reps)
        r_mask = speed_ratio(lambda: model(x, n_loops=T),
                             lambda: [model(x[i:i + 1], n_loops=int(T[i])) for i in range(n_seq)], repeats=reps)
    return [
        {"kernel": "per_loop_predictions (one pass, readout per loop)",
         "baseline": "per_loop_predictions_reference (one run per loop count)", "ratio": r_pass.ratio,
         "shape": shape, "work": f"{lh.block_applications(K, True)} vs {lh.block_applications(K, False)} "
                                 "block applications (counted)"},
        {"kernel": "TinyTransformer per-sample loop counts (masked batch)",
         "baseline": "each sample run alone with its own loop count", "ratio": r_mask.ratio, "shape": shape,
         "work": f"{int(T.max())} batched vs {int(T.sum())} single-sample block applications"},
    ]


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)

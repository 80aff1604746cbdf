"""Scratchpad patching: the batched teacher-forced scratchpad pass (all K(P-1) scratchpads through the global blocks
under one block mask) against the per-offset reference loop, with the global steps each one performs counted."""
import torch

from paperkit.sequence_models import byte_patch as bp
from paperkit.timing import speed_ratio


def run(quick: bool) -> list[dict]:
    b, K, P, d = (1, 4, 8, 32) if quick else (2, 16, 8, 48)
    reps = 3 if quick else 5
    cfg = bp.PatchConfig(patch=P, d_model=d, n_heads=2, max_len=K * P)
    model = bp.PatchLM(cfg, torch.Generator().manual_seed(0)).eval()
    x = torch.randint(0, 256, (b, K * P), generator=torch.Generator().manual_seed(1))
    fired = torch.ones(b, K, P - 1, dtype=torch.bool)
    steps = bp.counts(fired, P, x.numel())["global_steps"]
    shape = f"batch={b} K={K} P={P} d={d} float32"
    with torch.no_grad():
        r_all = speed_ratio(lambda: model(x, fired), lambda: bp.score_ref(model, x, fired=fired), repeats=reps)
        r_tau = speed_ratio(lambda: bp.score(model, x, 7.9), lambda: bp.score_ref(model, x, tau=7.9), repeats=reps)
    return [
        {"kernel": "PatchLM forward, all scratchpads (one masked global pass)",
         "baseline": "score_ref (per-offset loop, shared causal blocks)", "ratio": r_all.ratio, "shape": shape,
         "work": f"{steps} global steps ({x.numel() // P} patch + {int(fired.sum())} scratchpad), "
                 f"{x.numel()} bytes"},
        {"kernel": "score (entropy trigger, batched)", "baseline": "score_ref (entropy trigger, per-offset loop)",
         "ratio": r_tau.ratio, "shape": shape, "work": "same fired set and counts in both (tested)"},
    ]


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)

"""MoE selective SSMs: the parameter-mixed design (one scan) against the separated design (E scans), both on the
Numba scan, each Torch design against its per-timestep reference loop, and one training step (forward and
backward) of the parameter-mixed design on the fused scan (compiled reverse scan) against the chunked Torch scan."""
import torch

from paperkit.sequence_models import moe_ssm
from paperkit.nn.selective_scan import selective_scan_fused, selective_scan_torch
from paperkit.timing import speed_ratio


def run(quick: bool) -> list[dict]:
    bsz, E, d, n, L = (2, 4, 16, 8, 128) if quick else (16, 8, 64, 16, 1024)
    reps = 3 if quick else 5
    g = torch.Generator().manual_seed(0)
    args = moe_ssm.random_moe_inputs(g, bsz, E, d, n, L, delta_spread=0.5, dtype=torch.float32)
    shape = f"B={bsz} E={E} D={d} N={n} L={L} float32"
    updates = bsz * d * L * n
    nb = moe_ssm.scan_numba_torch
    tt = lambda *a: selective_scan_torch(*a, chunk=64)  # noqa: E731
    with torch.no_grad():
        r_design = speed_ratio(lambda: moe_ssm.moe_param_ssm(*args, scan=nb),
                               lambda: moe_ssm.moe_separated_ssm(*args, scan=nb), repeats=reps)
        r_param = speed_ratio(lambda: moe_ssm.moe_param_ssm(*args, scan=tt),
                              lambda: moe_ssm.moe_param_ssm_ref(*args), repeats=reps)
        r_sep = speed_ratio(lambda: moe_ssm.moe_separated_ssm(*args, scan=tt),
                            lambda: moe_ssm.moe_separated_ssm_ref(*args), repeats=reps)
    leaves = [a.clone().requires_grad_(True) for a in args]

    def step(scan):
        return lambda: moe_ssm.moe_param_ssm(*leaves, scan=scan).square().sum().backward()

    r_train = speed_ratio(step(selective_scan_fused), step(tt), repeats=reps)
    return [
        {"kernel": "moe_param_ssm forward+backward (selective_scan_fused)",
         "baseline": "moe_param_ssm forward+backward (selective_scan_torch)", "ratio": r_train.ratio, "shape": shape,
         "work": f"{updates:.3g} state updates"},
        {"kernel": "moe_param_ssm (Numba scan, 1 scan)", "baseline": "moe_separated_ssm (Numba scan, E scans)",
         "ratio": r_design.ratio, "shape": shape,
         "work": f"{updates:.3g} vs {E * updates:.3g} state updates (counted)"},
        {"kernel": "moe_param_ssm (selective_scan_torch)", "baseline": "moe_param_ssm_ref (per-timestep loop)",
         "ratio": r_param.ratio, "shape": shape, "work": f"{updates:.3g} state updates"},
        {"kernel": "moe_separated_ssm (selective_scan_torch)", "baseline": "moe_separated_ssm_ref (per-timestep loop)",
         "ratio": r_sep.ratio, "shape": shape, "work": f"{E * updates:.3g} state updates"},
    ]


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)

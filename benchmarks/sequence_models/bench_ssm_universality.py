"""Clocked selective construction: the fused Numba scan-and-readout against the same construction run through the
shared Mamba-form scans (Torch oracle loop, Numba kernel; both store every state), and the LTI scan's states by
its own Numba multiply-add loop against a step-by-step NumPy loop and against this machine's limit for writing
the states: their bytes at the (read + write) bandwidth :func:`roofline.copy_bandwidth` of a copy far beyond
cache, measured in the same run (in quick mode the states fit in cache, so the ratio can exceed 1).
"""
import numpy as np
import roofline
import torch

from paperkit.sequence_models import ssm_universality as su
from paperkit.nn.selective_scan import selective_scan_numba
from paperkit.timing import speed_ratio


def run(quick: bool) -> list[dict]:
    bsz, m, T = (128, 8, 3) if quick else (512, 16, 3)
    x = np.random.default_rng(0).random((bsz, T))
    gates = su.hat_gates(x, m, 0.05, 1e-6)
    W = su.construction_weights(su.target_sinmax, m, T, 0.05)
    fast = lambda: su.clocked_scan_readout(gates, W)  # noqa: E731
    reps = 3 if quick else 5
    with torch.no_grad():
        r_ref = speed_ratio(fast, lambda: su.clocked_scan_readout_ref(gates, W), repeats=reps)
    r_nb = speed_ratio(fast, lambda: su.readout_via_selective_scan(gates, W, selective_scan_numba), repeats=reps)
    shape = f"batch={bsz} m={m} T={T} ({m**T} states) float64"
    work = f"{bsz * T * m**T:.3g} state updates"
    n_lti, N = (2000, 64) if quick else (20000, 256)
    xl = np.random.default_rng(1).random((n_lti, 8))
    decays = np.geomspace(0.05, 0.95, N)
    lti = lambda: su.lti_scan_states(xl, decays)  # noqa: E731
    r_lti = speed_ratio(lti, lambda: su.lti_scan_states_ref(xl, decays), repeats=reps)
    lti_bytes = n_lti * 8 * N * 8
    lti_shape = f"batch={n_lti} T=8 N={N} float64"
    lti_work = f"{n_lti * 8 * N:.3g} state updates (no exp: constant decays)"
    return [
        {"kernel": "clocked_scan_readout (fused Numba)",
         "baseline": "clocked_scan_readout_ref (shared selective_scan_ref, Torch loop)",
         "ratio": r_ref.ratio, "shape": shape, "work": work},
        {"kernel": "clocked_scan_readout (fused Numba)",
         "baseline": "readout_via_selective_scan (shared selective_scan_numba, all states stored)",
         "ratio": r_nb.ratio, "shape": shape, "work": work},
        {"kernel": "lti_scan_states (Numba multiply-add)", "baseline": "lti_scan_states_ref (NumPy loop)",
         "ratio": r_lti.ratio, "shape": lti_shape, "work": lti_work},
        roofline.limit_row("lti_scan_states (Numba multiply-add)", f"copy of the {lti_bytes / 1e6:.0f} MB of states",
                           roofline.best_time(lti, reps), lti_bytes / roofline.copy_bandwidth(), lti_shape,
                           lti_work),
    ]


if __name__ == "__main__":
    for row in run(quick=False):
        print(row)

"""Clocked selective construction: the fused Numba scan-and-readout against the same construction run through the
shared Mamba-form scans (Torch oracle loop, Numba kernel; both store every state), and the LTI scan's states by
the shared Numba kernel against a step-by-step NumPy loop."""
import numpy as np
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
    r_lti = speed_ratio(lambda: su.lti_scan_states(xl, decays), lambda: su.lti_scan_states_ref(xl, decays),
                        repeats=reps)
    return [
        {"kernel": "clocked_scan_readout (fused Numba)",
         "baseline": "clocked_scan_readout_ref (shared selective_scan_ref, Torch loop)",
         "ratio": r_ref.ratio, "shape": shape, "work": work},
        {"kernel": "clocked_scan_readout (fused Numba)",
         "baseline": "readout_via_selective_scan (shared selective_scan_numba, all states stored)",
         "ratio": r_nb.ratio, "shape": shape, "work": work},
        {"kernel": "lti_scan_states (shared selective_scan_numba)", "baseline": "lti_scan_states_ref (NumPy loop)",
         "ratio": r_lti.ratio, "shape": f"batch={n_lti} T=8 N={N} float64",
         "work": f"{n_lti * 8 * N:.3g} state updates (the shared kernel pays an exp per update)"},
    ]


if __name__ == "__main__":
    for row in run(quick=False):
        print(row)

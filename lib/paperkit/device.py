"""Torch devices and the one-time Torch set-up every chapter shares."""
from __future__ import annotations

import os

import torch


def available_devices() -> list[str]:
    """Device strings usable on this machine: always ``cpu``; ``cuda`` and ``cuda:N`` when CUDA is present; ``mps``."""
    out = ["cpu"]
    if torch.cuda.is_available():
        out += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        out.append("mps")
    return out


def setup_torch(device: str = "cpu") -> torch.device:
    """Return ``torch.device(device)`` after the settings every chapter wants.

    Flush-to-zero for denormals: small models with tiny weights otherwise run 15-30x slower on this CPU.
    Threads: ``PAPERKIT_THREADS`` (set to 1 by the runner when two chapters run at once), else at most 2, for
    Torch and for the BLAS under NumPy alike: on a shared two-core machine a second BLAS thread that waits for a
    busy core stalls small matrix products by 10x or more.

    Flush-to-zero also reaches NumPy's LAPACK: ``numpy.linalg.lstsq`` (SVD) may then fail to converge on exactly
    collinear columns; use ``scipy.linalg.lstsq(..., lapack_driver="gelsy")`` for such least-squares problems.
    """
    from threadpoolctl import threadpool_limits

    torch.set_flush_denormal(True)
    threads = int(os.environ.get("PAPERKIT_THREADS", "0")) or min(2, os.cpu_count() or 1)
    torch.set_num_threads(threads)
    threadpool_limits(threads, user_api="blas")
    return torch.device(device)

"""Torch devices and the one-time Torch set-up every chapter shares."""
from __future__ import annotations

import torch


def available_devices() -> list[str]:
    """Device strings usable on this machine: always ``cpu``; ``cuda`` and ``cuda:N`` when CUDA is present; ``mps``."""
    out = ["cpu"]
    if torch.cuda.is_available():
        out += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        out.append("mps")
    return out


def setup_torch(device: str = "cpu", threads: int = 1) -> torch.device:
    """Return ``torch.device(device)`` after the settings every chapter wants.

    Flush-to-zero for denormals: small models with tiny weights otherwise run 15-30x slower on this CPU.
    Threads: exactly ``threads`` (the book-wide parameter, default 1) for Torch, for the BLAS under NumPy and for
    Numba's parallel loops. A chapter's numbers depend on the thread count (Torch splits reductions by thread), so
    the count is a parameter with one default under every runner (make book, make test, papermill, nbmake), never
    read from the machine or the environment.

    Flush-to-zero also reaches NumPy's LAPACK: ``numpy.linalg.lstsq`` (SVD) may then fail to converge on exactly
    collinear columns; use ``scipy.linalg.lstsq(..., lapack_driver="gelsy")`` for such least-squares problems.
    """
    import numba
    from threadpoolctl import threadpool_limits

    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"setup_torch: threads must be a positive integer, got {threads!r}")
    torch.set_flush_denormal(True)
    torch.set_num_threads(threads)
    threadpool_limits(threads, user_api="blas")
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    return torch.device(device)

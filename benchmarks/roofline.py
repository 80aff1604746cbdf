"""This machine's limits for a kernel's work, measured in the same benchmark run: the roofline rows' baselines.

A benchmark row ``baseline = "machine limit: ..."`` compares the kernel with the time the machine needs at best for
the kernel's counted work on all cores: ``ratio = t_limit / t_kernel`` (1 = at the limit; 0.5 = within 2x). Three
rates, each measured once per process (first use) and shared by every benchmark module of one run:

* :func:`exp_rate_f32`: float32 ``exp`` evaluations per second over a large array on all cores, the best of NumPy's
  SIMD ``exp`` (one thread per core, chunks of the array; NumPy ufuncs release the GIL) and Numba ``prange`` over
  ``math.exp``;
* :func:`gemm_flops`: BLAS (``numpy.matmul``, all of OpenBLAS's threads) FLOP/s of a square float32 or float64
  matmul;
* :func:`copy_bandwidth`: bytes moved (read + write) per second by a ``prange`` copy of an array far beyond cache.

Each rate is the best of a few short repeats (a rate limit is a maximum; load from other processes only lowers it).
"""
from __future__ import annotations

import math
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
from threadpoolctl import threadpool_limits

_CACHE: dict = {}


def n_cores() -> int:
    return max(1, min(os.cpu_count() or 1, numba.config.NUMBA_NUM_THREADS))


def best_time(f, repeats: int = 5) -> float:
    """The fastest of ``repeats`` timed calls of ``f`` (after one untimed call): load from others only slows."""
    f()
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


@numba.njit(parallel=True, fastmath=True, cache=True)
def _prange_exp(a, out):
    for i in numba.prange(a.shape[0]):
        out[i] = math.exp(a[i])


@numba.njit(parallel=True, cache=True)
def _prange_copy(a, out):
    for i in numba.prange(a.shape[0]):
        out[i] = a[i]


def exp_rate_f32(n: int = 1 << 23) -> float:
    """float32 exp evaluations per second on all cores (best of NumPy SIMD exp in threads and Numba prange)."""
    if "exp" not in _CACHE:
        a = -np.random.default_rng(0).random(n, dtype=np.float32) * 4
        out = np.empty_like(a)
        p = n_cores()
        bounds = [(i * n // p, (i + 1) * n // p) for i in range(p)]
        with ThreadPoolExecutor(p) as pool:
            t_np = best_time(lambda: list(pool.map(lambda s: np.exp(a[s[0]:s[1]], out=out[s[0]:s[1]]), bounds)))
        t_nb = best_time(lambda: _prange_exp(a, out))
        _CACHE["exp"] = n / min(t_np, t_nb)
        _CACHE["exp_src"] = "NumPy SIMD exp, one thread per core" if t_np <= t_nb else "Numba prange math.exp"
    return _CACHE["exp"]


def gemm_flops(dtype=np.float32, n: int = 1024) -> float:
    """BLAS matmul FLOP/s (2 n^3 per product) of square ``dtype`` matrices, all BLAS threads."""
    key = ("gemm", np.dtype(dtype).name)
    if key not in _CACHE:
        rng = np.random.default_rng(0)
        a, b = rng.random((n, n)).astype(dtype), rng.random((n, n)).astype(dtype)
        out = np.empty((n, n), dtype=dtype)
        with threadpool_limits(n_cores(), user_api="blas"):  # all cores, even inside a caller's lower limit
            _CACHE[key] = 2.0 * n ** 3 / best_time(lambda: np.matmul(a, b, out=out))
    return _CACHE[key]


def copy_bandwidth(nbytes: int = 1 << 28) -> float:
    """Bytes per second (read + write) of a prange copy of ``nbytes`` (far beyond the last-level cache)."""
    if "bw" not in _CACHE:
        a = np.ones(nbytes // 8)
        out = np.empty_like(a)
        _CACHE["bw"] = 2.0 * nbytes / best_time(lambda: _prange_copy(a, out), repeats=3)
    return _CACHE["bw"]


def describe() -> str:
    """The measured rates, for a row's ``work`` text."""
    parts = []
    if "exp" in _CACHE:
        parts.append(f"exp {_CACHE['exp'] / 1e9:.2f} G/s f32 ({_CACHE['exp_src']})")
    for dt in ("float32", "float64"):
        if ("gemm", dt) in _CACHE:
            parts.append(f"{'s' if dt == 'float32' else 'd'}gemm {_CACHE[('gemm', dt)] / 1e9:.0f} GFLOP/s")
    if "bw" in _CACHE:
        parts.append(f"copy {_CACHE['bw'] / 1e9:.1f} GB/s")
    return f"{', '.join(parts)} on {n_cores()} cores"


def limit_row(kernel: str, what: str, t_kernel_s: float, t_limit_s: float, shape: str, work: str) -> dict:
    """A ``machine limit`` row (``vs = "limit"``): ratio = t_limit / t_kernel (1 = at the limit, 0.5 = within 2x
    of it). Both times should be best-of-repeats (:func:`best_time`): the limit is a maximum rate."""
    return {"kernel": kernel, "baseline": f"machine limit: {what}", "ratio": round(t_limit_s / t_kernel_s, 3),
            "shape": shape, "work": f"{work}; {describe()}", "t_kernel_s": t_kernel_s, "t_baseline_s": t_limit_s,
            "vs": "limit"}


if __name__ == "__main__":
    exp_rate_f32(), gemm_flops(np.float32), gemm_flops(np.float64), copy_bandwidth()
    print(describe())

"""A real byte corpus that every install has: the Python standard library's own source files."""
from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np


def stdlib_sources() -> list[Path]:
    """The standard library's top-level ``.py`` files and packages' files, sorted, tests and site-packages excluded."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"test", "tests", "idlelib", "site-packages", "lib2to3", "__pycache__"}
    return sorted(p for p in root.rglob("*.py") if not skip & set(p.relative_to(root).parts))


def byte_corpus_stdlib(max_bytes: int) -> np.ndarray:
    """The first ``max_bytes`` bytes of the concatenated standard-library sources, as a uint8 array.

    Deterministic for a given Python version (files in sorted order, separated by a newline).
    """
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
    chunks, total = [], 0
    for p in stdlib_sources():
        data = p.read_bytes() + b"\n"
        chunks.append(data)
        total += len(data)
        if total >= max_bytes:
            break
    return np.frombuffer(b"".join(chunks)[:max_bytes], dtype=np.uint8).copy()


def split(data: np.ndarray, val_fraction: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Contiguous train / validation split (the last ``val_fraction`` of the bytes for validation)."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    cut = int(len(data) * (1 - val_fraction))
    return data[:cut], data[cut:]

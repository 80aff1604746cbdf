"""Seeds: one integer in, explicit generators out."""
from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int) -> tuple[np.random.Generator, torch.Generator]:
    """Seed the global RNGs that third-party code may use and return fresh explicit generators.

    Our own code never draws from global state: it takes the returned ``numpy.random.Generator`` or
    ``torch.Generator`` as an argument. Global seeding only pins down libraries we do not control.
    """
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return np.random.default_rng(seed), torch.Generator().manual_seed(seed)


def spawn(rng: np.random.Generator, n: int) -> list[np.random.Generator]:
    """``n`` independent child generators of ``rng`` (for repeats that must not share a stream)."""
    return list(rng.spawn(n))

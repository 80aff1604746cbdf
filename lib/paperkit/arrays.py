"""Input checks shared by the NumPy kernels: one message for one mistake, naming the argument."""
from __future__ import annotations

import numpy as np


def real_array(x, name: str, ndim: int | None = None) -> np.ndarray:
    """``x`` as a NumPy array (not copied), after checking that it is real floating point, has ``ndim`` axes (any
    number when ``None``) and holds only finite values. Raises ``TypeError`` (dtype) or ``ValueError`` (axes,
    non-finite entries) with ``name`` in the message."""
    x = np.asarray(x)
    if np.iscomplexobj(x) or not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"{name} must be a real float array, got dtype {x.dtype}")
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} axes, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} must be finite")
    return x

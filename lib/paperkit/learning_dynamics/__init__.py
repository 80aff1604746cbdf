"""Kernels of the part "Learning dynamics" (``notebooks/learning-dynamics/``)."""

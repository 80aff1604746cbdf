"""Kernels of the part "Privacy, statistics and certificates" (``notebooks/privacy-statistics/``)."""

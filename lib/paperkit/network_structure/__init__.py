"""Kernels of the part "Inside trained networks" (``notebooks/network-structure/``)."""

"""Kernels of the part "Spiking and cognitive models" (``notebooks/spiking-cognition/``)."""

"""Kernels of the part "Generative models and evaluation" (``notebooks/generative-models/``)."""

"""Kernels of the part "Sequence models and attention" (``notebooks/sequence-models/``)."""

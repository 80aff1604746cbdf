"""Kernels of the part "Reinforcement learning and agents" (``notebooks/rl-agents/``)."""

"""Kernels of the part "Games, markets and mechanisms" (``notebooks/games-markets/``)."""

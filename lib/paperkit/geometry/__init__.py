"""Geometric building blocks shared across parts: nearest neighbours and ball membership."""

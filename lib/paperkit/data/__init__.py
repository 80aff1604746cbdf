"""Data shared across parts: real data sets that ship inside installed packages, and exact task generators.

Every loader returns arrays together with a :class:`~paperkit.data.datasets.Provenance` record (package, version,
file, licence, shape); :data:`~paperkit.data.datasets.LOADERS` lists them for the book's Data page.
"""

"""paperkit: the shared library of the Executable NeurIPS 2026 book.

The spine every chapter uses: :mod:`~paperkit.params` (validate parameters), :mod:`~paperkit.ledger` and
:mod:`~paperkit.claims` (check claims, write the record), :mod:`~paperkit.seeding`, :mod:`~paperkit.device`,
:mod:`~paperkit.plot`, :mod:`~paperkit.timing`, :mod:`~paperkit.provenance`. Kernels live in topic modules beside
them, each with a plain reference implementation of the same signature.
"""
__version__ = "0.1.0"

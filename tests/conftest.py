import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
# One thread per test worker: make test runs two workers on two cores.
os.environ.setdefault("PAPERKIT_THREADS", "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")


@pytest.fixture
def results_dir(tmp_path, monkeypatch):
    """A private ledger folder, so tests never touch _build/results."""
    d = tmp_path / "results"
    monkeypatch.setenv("PAPERKIT_RESULTS", str(d))
    return d

"""Every benchmark module runs (quick mode) and reports well-formed ratios."""
import math

import pytest

from pathlib import Path
import sys

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import run_benchmarks  # noqa: E402

MODULES = run_benchmarks.bench_modules()


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_benchmark_reports_ratios(path):
    rows = run_benchmarks.load(path).run(quick=True)
    assert rows
    for r in rows:
        assert run_benchmarks.KEYS <= r.keys()
        assert math.isfinite(r["ratio"]) and r["ratio"] > 0

"""Run every benchmarks/bench_*.py and report each kernel's speed as a ratio to its baseline.

Each module exposes ``run(quick: bool) -> list[dict]`` with keys ``kernel``, ``baseline``, ``ratio`` (baseline time
over kernel time, median of interleaved repeats; > 1 means the kernel is faster), ``shape`` and ``work``. Ratios, not
seconds: this machine is shared and noisy. Results go to _build/benchmarks.json and the status page shows them.

    python benchmarks/run_benchmarks.py [--quick]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
from paperkit.ledger import write_json_atomic  # noqa: E402
from paperkit.provenance import lib_hash  # noqa: E402

KEYS = {"kernel", "baseline", "ratio", "shape", "work"}


def bench_modules() -> list[Path]:
    return sorted((ROOT / "benchmarks").rglob("bench_*.py"))


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_all(quick: bool) -> list[dict]:
    rows = []
    for path in bench_modules():
        for row in load(path).run(quick=quick):
            missing = KEYS - row.keys()
            if missing:
                raise ValueError(f"{path.name}: benchmark row lacks {sorted(missing)}")
            rows.append({"module": path.stem, **row})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes and few repeats")
    args = ap.parse_args()
    rows = run_all(args.quick)
    print(f"{'kernel':40s} {'baseline':40s} {'ratio':>8s}  shape / work")
    for r in rows:
        print(f"{r['kernel']:40s} {r['baseline']:40s} {r['ratio']:8.2f}  {r['shape']} / {r['work']}")
    write_json_atomic(ROOT / "_build" / "benchmarks.json", {"quick": args.quick, "lib_hash": lib_hash(), "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Run every benchmarks/bench_*.py and report each kernel's speed as a ratio to its baseline.

Each module exposes ``run(quick: bool) -> list[dict]`` with keys ``kernel``, ``baseline``, ``ratio`` (baseline time
over kernel time, median of interleaved repeats; > 1 means the kernel is faster), ``shape`` and ``work``, and
optionally ``vs``, what the baseline is (:data:`VS`; default ``"reference"``): the kernel's own reference or an
in-house alternative, the maintained library a user would otherwise call for the same result, or this machine's
limit for the work (:mod:`roofline`, measured in the same run; ratio 1 = at the limit). A kernel (one kernel and
shape) thus states up to three ratios. Ratios, not seconds: this machine is shared and noisy. Results go to
_build/benchmarks.json and the registry page shows them, one line per kernel and shape.

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
VS = ("reference", "library", "limit")


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
            row = {"module": path.stem, **row, "vs": row.get("vs", "reference")}
            if row["vs"] not in VS:
                raise ValueError(f"{path.name}: vs must be one of {VS}, got {row['vs']!r}")
            rows.append(row)
    return rows


def by_kernel(rows: list[dict]) -> list[dict]:
    """One entry per (module, kernel, shape), in first-seen order, with its rows' ratios grouped by ``vs``."""
    out: dict = {}
    for r in rows:
        e = out.setdefault((r.get("module"), r["kernel"], r["shape"]),
                           {"kernel": r["kernel"], "shape": r["shape"], "work": r["work"], **{v: [] for v in VS}})
        e[r.get("vs", "reference")].append((r["baseline"], r["ratio"]))
    return list(out.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes and few repeats")
    args = ap.parse_args()
    rows = run_all(args.quick)
    print(f"{'kernel':48s} {'shape':36s} " + " ".join(f"{'vs ' + v:>12s}" for v in VS))
    for e in by_kernel(rows):
        cells = ["/".join(f"{x:.2f}" for _, x in e[v]) or "-" for v in VS]
        print(f"{e['kernel'][:48]:48s} {e['shape'][:36]:36s} " + " ".join(f"{c:>12s}" for c in cells))
    write_json_atomic(ROOT / "_build" / "benchmarks.json", {"quick": args.quick, "lib_hash": lib_hash(), "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())

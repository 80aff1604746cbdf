"""The Dask sweep (tools/sweep.py, a LocalCluster of two single-threaded workers) against a plain sequential
papermill loop over the same grid points of the fixture chapter, in a scratch copy of the book.

``ratio`` = loop time / sweep time (> 1: the sweep is faster; two workers on two cores bound it near 2). A second
row gives the Dask path's overhead per point: (sweep time on one worker - loop time) / points, as the ratio of the
loop's time per point to the sweep's time per point on one worker. One repeat each: every point is a whole kernel.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _scratch_book(tmp: Path) -> Path:
    b = tmp / "book"
    (b / "tools").mkdir(parents=True)
    for f in ("run_book.py", "sweep.py"):
        shutil.copy(ROOT / "tools" / f, b / "tools" / f)
    shutil.copytree(ROOT / "lib", b / "lib", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(ROOT / "requirements.txt", b / "requirements.txt")
    (b / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: notebooks/fix/chap\n")
    (b / "notebooks" / "fix").mkdir(parents=True)
    nb = (ROOT / "tests" / "fixtures" / "good_claims.ipynb").read_text().replace("fixture_good_claims", "chap")
    (b / "notebooks" / "fix" / "chap.ipynb").write_text(nb)
    return b


def _timed(cmd: list[str], env: dict, cwd: Path) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, capture_output=True, timeout=900)
    return time.perf_counter() - t


def run(quick: bool = True) -> list[dict]:
    n = 4 if quick else 8
    with tempfile.TemporaryDirectory() as d:
        book = _scratch_book(Path(d))
        env = dict(os.environ, PYTHONPATH=str(book / "lib"), PAPERKIT_RESULTS=str(Path(d) / "loop"))
        nb = book / "notebooks" / "fix" / "chap.ipynb"
        t_loop = sum(_timed([sys.executable, "-m", "papermill", str(nb), str(Path(d) / f"o{s}.ipynb"), "-p", "seed",
                             str(s), "-p", "strict", "False", "--no-progress-bar"], env, book) for s in range(n))
        sweep = [sys.executable, str(book / "tools" / "sweep.py"), "chap", "--seeds", f"0-{n - 1}"]
        t_two = _timed(sweep + ["--workers", "2"], env, book)
        shutil.rmtree(book / "_build" / "sweeps")
        t_one = _timed(sweep + ["--workers", "1"], env, book)
    shape = f"{n} points of the fixture chapter"
    return [
        {"kernel": "tools/sweep.py, 2 workers", "baseline": "sequential papermill loop", "ratio": t_loop / t_two,
         "shape": shape, "work": f"{n} papermill runs"},
        {"kernel": "tools/sweep.py, 1 worker", "baseline": "sequential papermill loop (overhead per point: "
         f"{(t_one - t_loop) / n:+.1f} s)", "ratio": t_loop / t_one, "shape": shape, "work": f"{n} papermill runs"},
    ]


if __name__ == "__main__":
    for row in run(quick="--full" not in sys.argv):
        print(row)

"""Run one chapter over a grid of seeds and parameters on Dask, one papermill run per point, resumable.

    python tools/sweep.py SLUG --seeds 0-9 [--params "scale=1,2" ...] [--scheduler tcp://HOST:8786] [--workers N]

Each grid point is a papermill run of the chapter in its own kernel (``strict=False``, so every verdict is recorded
and the run finishes), submitted as a Dask task. Its executed notebook, log and ledger record land in
``_build/sweeps/<slug>/<point>/``, written to a temporary folder and renamed into place, so a point is either
complete or absent. A point whose folder holds a result with the same cache key (notebook, parameters, the paperkit
modules the chapter imports, requirements) is skipped. Dask retries a task whose worker died on another worker. A
failing point is recorded as failed with its log; the others go on. The summary of all points (parameters, every
claim's measured value, threshold and verdict, run time, CPU time, peak memory, worker, lib hash) is written as
``summary.parquet`` and ``summary.csv`` beside them.

Bad input (an unknown chapter or parameter, a value the chapter's own declaration rejects, an empty grid, an
unreachable scheduler) is refused before any task starts, with one line.
"""
from __future__ import annotations

import argparse
import ast
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(1, str(ROOT / "lib"))
from run_book import cache_key, toc_notebooks  # noqa: E402

SWEEPS = ROOT / "_build" / "sweeps"
PUBLISHED = ROOT / "sweeps"  # committed summaries the Robustness page is built from


class SweepError(ValueError):
    """Bad input to a sweep; the message is the one line the user sees."""


def parse_seeds(text: str) -> list[int]:
    """``"0-9"``, ``"3"`` or ``"0,2,5-7"`` as a list of distinct non-negative seeds, in order."""
    out: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, _, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            raise SweepError(f"--seeds: {part!r} is not a seed or a range like 0-9") from None
        if a < 0 or b < a:
            raise SweepError(f"--seeds: {part!r} must be a non-negative seed or an increasing range")
        out += [s for s in range(a, b + 1) if s not in out]
    if not out:
        raise SweepError("--seeds: the grid is empty")
    return out


def parse_params(items: list[str]) -> dict[str, list]:
    """``["scale=1,2", "steps=100"]`` as ``{"scale": [1, 2], "steps": [100]}`` (values read as Python literals)."""
    grid: dict[str, list] = {}
    for item in items:
        name, eq, values = item.partition("=")
        name = name.strip()
        if not eq or not name.isidentifier():
            raise SweepError(f"--params: {item!r} must look like name=v1,v2")
        vals = []
        for v in filter(None, (x.strip() for x in values.split(","))):
            try:
                vals.append(ast.literal_eval(v))
            except (ValueError, SyntaxError):
                vals.append(v)
        if not vals:
            raise SweepError(f"--params: {name} has no values")
        if name in ("seed", "strict"):
            raise SweepError(f"--params: {name} is set by the sweep itself (use --seeds)")
        grid[name] = vals
    return grid


def chapter_path(slug: str) -> Path:
    for nb in toc_notebooks():
        if nb.stem == slug:
            return nb
    raise SweepError(f"unknown chapter {slug!r}; the book has: {sorted(p.stem for p in toc_notebooks())}")


def _validation_source(nb_path: Path) -> str:
    """The chapter's parameters cell and the part of its set-up cell that validates them (imports, the
    ``params.parse`` call and the ``ParameterError`` checks right after it), as source to execute."""
    nb = nbformat.read(nb_path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    i = next(i for i, c in enumerate(code) if "parameters" in c.metadata.get("tags", []))
    setup = ast.parse(code[i + 1].source)
    keep, seen_parse = [], False
    for node in setup.body:
        text = ast.get_source_segment(code[i + 1].source, node) or ""
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not seen_parse:
            keep.append(text)
        elif "params.parse(" in text and not seen_parse:
            keep.append(text)
            seen_parse = True
        elif seen_parse and isinstance(node, ast.If) and "ParameterError" in text:
            keep.append(text)
        elif seen_parse:
            break
    return code[i].source + "\n__OVERRIDES__\n" + "\n".join(keep)


def validate(nb_path: Path, points: list[dict]) -> None:
    """Run the chapter's own parameter validation once per distinct non-seed combination, in one subprocess."""
    combos = {json.dumps({k: v for k, v in p.items() if k != "seed"}, sort_keys=True) for p in points}
    src = _validation_source(ROOT / nb_path)
    script = ["import json, sys"]
    for combo in sorted(combos):
        overrides = "\n".join(f"{k} = {v!r}" for k, v in {"seed": 0, **json.loads(combo)}.items())
        script.append(f"exec({src.replace('__OVERRIDES__', overrides)!r}, {{}})")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "lib"))
    r = subprocess.run([sys.executable, "-c", "\n".join(script)], capture_output=True, text=True, env=env,
                       cwd=(ROOT / nb_path).parent, timeout=300)
    if r.returncode != 0:
        lines = [ln for ln in r.stderr.strip().splitlines() if "Error" in ln] or r.stderr.strip().splitlines()
        raise SweepError(f"{nb_path.stem}: {lines[-1] if lines else 'parameter validation failed'}")


def point_name(point: dict) -> str:
    return "_".join(f"{k}={v}" for k, v in point.items()).replace("/", "-").replace(" ", "")


def run_point(nb_rel: str, point: dict, key: str, out_dir: str, timeout_s: int) -> dict:
    """One papermill run of the chapter at ``point`` (on a worker); writes ``out_dir`` atomically, returns its row."""
    import socket

    nb = ROOT / nb_rel
    out = Path(out_dir)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    env = dict(os.environ, PAPERKIT_RESULTS=str(tmp), PYTHONUNBUFFERED="1", NUMBA_NUM_THREADS="1",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "papermill", str(nb), str(tmp / "executed.ipynb"), "--cwd", str(nb.parent),
           "--no-progress-bar", "--log-output", "-p", "strict", "False"]
    for k, v in point.items():
        cmd += ["-p", k, str(v)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        rc, log = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired:
        rc, log = -1, f"timed out after {timeout_s} s"
    (tmp / "log.txt").write_text(log)
    recs = sorted(tmp.glob(f"{nb.stem}*.json"))
    rec = json.loads(recs[0].read_text()) if rc == 0 and recs else None
    meta = {"point": point, "key": key, "status": "ok" if rec else "failed", "wall_s": time.perf_counter() - t0,
            "worker": f"{socket.gethostname()}:{os.getpid()}", "record": rec,
            "error": "" if rec else (log.strip().splitlines() or ["no output"])[-1][:300]}
    (tmp / "point.json").write_text(json.dumps(meta, indent=1))
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return meta


def summary_rows(slug: str, metas: list[dict]) -> list[dict]:
    """One row per (point, claim): the point's parameters, the claim's numbers and verdict, and the run's cost."""
    rows = []
    for m in metas:
        base = {**{f"param_{k}": v for k, v in m["point"].items()}, "point": point_name(m["point"]),
                "status": m["status"], "worker": m["worker"], "wall_s": round(m["wall_s"], 2)}
        rec = m["record"]
        if rec is None:
            rows.append({**base, "claim": "", "error": m["error"]})
            continue
        base.update(run_time_s=rec["run_time_s"], cpu_time_s=rec.get("cpu_time_s"),
                    peak_memory_mib=rec["peak_memory_mib"], lib_hash=rec["lib_hash"], error="")
        for c in rec["claims"]:
            rows.append({**base, "claim": c["id"], "kind": c["kind"], "measured": c["measured"],
                         "op": c.get("op", ""), "threshold": c["threshold"], "verdict": c["verdict"],
                         "expected": c["expect"], "as_expected": c.get("as_expected", True)})
    return rows


def write_summary(slug: str, metas: list[dict], folder: Path) -> Path:
    import pandas as pd

    df = pd.DataFrame(summary_rows(slug, metas))
    df.to_csv(folder / "summary.csv", index=False)
    df.to_parquet(folder / "summary.parquet", index=False)
    return folder / "summary.csv"


def chapter_key(nb: Path) -> str:
    """What a sweep's numbers depend on: the chapter's code cells, the paperkit modules it imports (through the
    import graph) and requirements.txt. Prose edits leave it unchanged, so they do not make a sweep stale."""
    import hashlib

    from run_book import LIB, chapter_modules

    h = hashlib.sha256()
    for cell in nbformat.read(ROOT / nb, as_version=4).cells:
        if cell.cell_type == "code":
            h.update(cell.source.encode() + b"\0")
    for f in chapter_modules(ROOT / nb):
        h.update(f.relative_to(LIB).as_posix().encode() + b"\0" + f.read_bytes())
    h.update((ROOT / "requirements.txt").read_bytes())
    return h.hexdigest()


def publish(slug: str, nb: Path, metas: list[dict], seeds: list[int], grid: dict) -> Path:
    """Write the small committed summary ``sweeps/<slug>.csv`` and its provenance ``sweeps/<slug>.json``."""
    import pandas as pd

    from paperkit.provenance import git_commit, lib_hash

    PUBLISHED.mkdir(exist_ok=True)
    cols = ["point", "status", "claim", "kind", "measured", "op", "threshold", "verdict", "expected", "cpu_time_s"]
    df = pd.DataFrame(summary_rows(slug, metas))
    df = df[[c for c in df.columns if c.startswith("param_")] + [c for c in cols if c in df.columns]]
    df.to_csv(PUBLISHED / f"{slug}.csv", index=False)
    prov = {"slug": slug, "notebook": nb.as_posix(), "seeds": seeds, "grid": grid, "points": len(metas),
            "failed_points": sum(m["status"] != "ok" for m in metas), "chapter_key": chapter_key(nb),
            "git_commit": git_commit(), "lib_hash": lib_hash(), "made_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (PUBLISHED / f"{slug}.json").write_text(json.dumps(prov, indent=1) + "\n")
    return PUBLISHED / f"{slug}.csv"


def plan(slug: str, seeds: list[int], grid: dict[str, list]) -> tuple[Path, list[dict]]:
    nb = chapter_path(slug)
    names = list(grid)
    points = [{"seed": s, **dict(zip(names, combo))}
              for combo in itertools.product(*(grid[n] for n in names)) for s in seeds]
    if not points:
        raise SweepError("the grid is empty")
    validate(nb, points)
    return nb, points


def connect(scheduler: str | None, workers: int):
    from distributed import Client, LocalCluster

    if scheduler:
        try:
            return Client(scheduler, timeout="10s"), None
        except (OSError, TimeoutError) as e:
            raise SweepError(f"--scheduler {scheduler}: unreachable ({type(e).__name__})") from None
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
    return Client(cluster), cluster


def sweep(slug: str, seeds: list[int], grid: dict[str, list], scheduler: str | None = None,
          workers: int | None = None, timeout_s: int = 900, out_root: Path = SWEEPS, say=print,
          publish_summary: bool = False) -> list[dict]:
    """Run the grid (skipping points already done with the same cache key) and write the summary; return the
    points' metadata in grid order."""
    nb, points = plan(slug, seeds, grid)
    client = cluster = None
    if scheduler:  # refuse an unreachable scheduler before anything runs, even when every point is done
        client, cluster = connect(scheduler, 0)
    folder = out_root / slug
    folder.mkdir(parents=True, exist_ok=True)
    todo, done = [], {}
    for p in points:
        key = cache_key(ROOT / nb, {**p, "strict": False})
        meta_file = folder / point_name(p) / "point.json"
        if meta_file.exists() and json.loads(meta_file.read_text()).get("key") == key:
            done[point_name(p)] = json.loads(meta_file.read_text())
        else:
            todo.append((p, key))
    say(f"{slug}: {len(points)} points, {len(done)} already done, {len(todo)} to run")
    if todo:
        from distributed import as_completed

        if client is None:
            client, cluster = connect(None, workers or os.cpu_count() or 1)
        try:
            if client.dashboard_link:
                say(f"dashboard: {client.dashboard_link}")
            futures = [client.submit(run_point, nb.as_posix(), p, key, str(folder / point_name(p)), timeout_s,
                                     key=f"{slug}-{point_name(p)}-{key[:8]}", pure=False) for p, key in todo]
            t0, n_ok, n_fail = time.perf_counter(), 0, 0
            for fut in as_completed(futures):
                meta = fut.result()
                done[point_name(meta["point"])] = meta
                n_ok += meta["status"] == "ok"
                n_fail += meta["status"] != "ok"
                n = n_ok + n_fail
                left = (time.perf_counter() - t0) / n * (len(todo) - n)
                say(f"  [{n}/{len(todo)}] {meta['status']:6s} {point_name(meta['point'])} "
                    f"({n_fail} failed, about {left:.0f} s left)" + (f": {meta['error']}" if meta["error"] else ""))
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    elif client is not None:
        client.close()
    # a worker killed mid-point leaves its half-written temporary folder behind; its task ran again elsewhere
    for stale in folder.glob(".*"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
    metas = [done[point_name(p)] for p in points]
    say(f"summary: {write_summary(slug, metas, folder).relative_to(ROOT) if folder.is_relative_to(ROOT) else folder}")
    if publish_summary:
        say(f"published: {publish(slug, nb, metas, seeds, grid).relative_to(ROOT)}")
    return metas


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("chapter", help="the chapter's slug")
    ap.add_argument("--seeds", default="0-9", help="seeds: 0-9, 3, or 0,2,5-7 (default 0-9)")
    ap.add_argument("--params", nargs="*", default=[], help='grid of other parameters: "scale=1,2" "steps=100"')
    ap.add_argument("--scheduler", default=None, help="address of a running Dask scheduler (default: a LocalCluster)")
    ap.add_argument("--workers", type=int, default=None, help="LocalCluster worker processes (default: one per core)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds before one point is stopped")
    ap.add_argument("--publish", action="store_true",
                    help="also write the committed summary sweeps/<slug>.csv (+ .json) for the Robustness page")
    args = ap.parse_args(argv)
    try:
        if args.workers is not None and args.workers < 1:
            raise SweepError(f"--workers must be >= 1, got {args.workers}")
        metas = sweep(args.chapter, parse_seeds(args.seeds), parse_params(args.params), args.scheduler,
                      args.workers, args.timeout, publish_summary=args.publish)
    except SweepError as e:
        print(f"sweep: {e}", file=sys.stderr)
        return 2
    return 0 if all(m["status"] == "ok" for m in metas) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Execute every chapter once with papermill, into _build/executed/, skipping chapters whose cache key is unchanged.

The cache key covers the notebook's cells, the parameters it runs with, a hash of lib/paperkit and the pinned
package versions (requirements.txt), so a library change re-runs every chapter while an untouched book re-runs
nothing. A failed run leaves the last good executed notebook and ledger record in place; its executed copy and log
are kept beside them as <slug>.failed.ipynb and <slug>.log.

    python tools/run_book.py [--jobs 2] [--force] [--only SLUG ...]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
from paperkit.provenance import lib_hash  # noqa: E402

BUILD = ROOT / "_build"
EXECUTED = BUILD / "executed"
RESULTS = BUILD / "results"


@dataclass
class Chapter:
    path: Path  # notebooks/<part>/<slug>.ipynb, relative to ROOT
    status: str = "pending"
    seconds: float = 0.0
    detail: str = ""
    record: dict = field(default_factory=dict)

    @property
    def slug(self) -> str:
        return self.path.stem

    @property
    def out(self) -> Path:
        return EXECUTED / self.path.relative_to("notebooks")


def toc_notebooks(root: Path = ROOT) -> list[Path]:
    """Every ``notebooks/...`` entry of ``_toc.yml``, in book order, as ``.ipynb`` paths relative to ``root``."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    found: list[Path] = []

    def walk(node):
        if isinstance(node, dict):
            f = node.get("file")
            if isinstance(f, str) and f.startswith("notebooks/"):
                found.append(Path(f if f.endswith(".ipynb") else f + ".ipynb"))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(toc)
    return found


def cache_key(nb_path: Path, parameters: dict, lib: str) -> str:
    """SHA-256 over every cell's type and source, the parameters, the paperkit hash and requirements.txt."""
    nb = nbformat.read(nb_path, as_version=4)
    h = hashlib.sha256()
    for cell in nb.cells:
        h.update(cell.cell_type.encode() + b"\0" + cell.source.encode() + b"\0")
        h.update(json.dumps(cell.metadata.get("tags", [])).encode())
    h.update(json.dumps(parameters, sort_keys=True).encode())
    h.update(lib.encode())
    h.update((ROOT / "requirements.txt").read_bytes())
    return h.hexdigest()


def hide_injected_parameters(nb_file: Path) -> None:
    """Tag papermill's ``injected-parameters`` cell ``remove-cell``: the provenance line already lists parameters."""
    nb = nbformat.read(nb_file, as_version=4)
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            cell.metadata["tags"] = tags + ["remove-cell"]
    nbformat.write(nb, nb_file)


def run_chapter(ch: Chapter, key: str, parameters: dict, threads_per_job: int, timeout_s: int) -> Chapter:
    ch.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = ch.out.with_name(f".{ch.slug}.running.ipynb")
    log = ch.out.with_suffix(".log")
    env = dict(os.environ, PAPERKIT_RESULTS=str(RESULTS), PAPERKIT_THREADS=str(threads_per_job),
               NUMBA_NUM_THREADS=str(threads_per_job), OMP_NUM_THREADS=str(threads_per_job),
               MKL_NUM_THREADS=str(threads_per_job), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "papermill", str(ROOT / ch.path), str(tmp), "--cwd", str((ROOT / ch.path).parent),
           "--no-progress-bar", "--log-output"]
    for k, v in parameters.items():
        cmd += ["-p", k, str(v)]
    record_file = RESULTS / f"{ch.slug}.json"
    before = record_file.stat().st_mtime if record_file.exists() else 0.0
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        rc, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        rc, output = -1, f"timed out after {timeout_s} s\n{e.stdout or ''}{e.stderr or ''}"
    ch.seconds = time.perf_counter() - t0
    log.write_text(output)
    wrote_record = record_file.exists() and record_file.stat().st_mtime > before
    if rc == 0 and wrote_record:
        hide_injected_parameters(tmp)
        os.replace(tmp, ch.out)
        ch.out.with_suffix(".key").write_text(key)
        ch.out.with_name(f"{ch.slug}.failed.ipynb").unlink(missing_ok=True)
        ch.status, ch.record = "ok", json.loads(record_file.read_text())
    else:
        if tmp.exists():
            os.replace(tmp, ch.out.with_name(f"{ch.slug}.failed.ipynb"))
        ch.status = "FAILED"
        ch.detail = last_error(output) if rc != 0 else "the notebook ran but wrote no ledger record (no ledger.finish())"
    return ch


def last_error(output: str) -> str:
    """The most telling line of a failed papermill run: the last exception line, else the last line."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ("Error" in ln or "Failed" in ln or "timed out" in ln) and not ln.startswith("File "):
            return ln[:300]
    return lines[-1][:300] if lines else "no output"


def summarise(chapters: list[Chapter]) -> str:
    rows = [f"{'chapter':55s} {'status':8s} {'time':>8s} {'claims (rep/not/fail)':>22s} {'peak MiB':>9s}"]
    for ch in chapters:
        claims = ch.record.get("claims", [])
        counts = "/".join(str(sum(c["verdict"] == v for c in claims))
                          for v in ("reproduced", "not reproduced", "failed")) if claims else "-"
        mem = f"{ch.record['peak_memory_mib']:.0f}" if ch.record else "-"
        rows.append(f"{str(ch.path.relative_to('notebooks').with_suffix('')):55s} {ch.status:8s} "
                    f"{ch.seconds:7.1f}s {counts:>22s} {mem:>9s}")
        if ch.detail:
            rows.append(f"    {ch.detail}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1, help="chapters run at once (one thread each when > 1)")
    ap.add_argument("--force", action="store_true", help="re-run chapters even when their cache key is unchanged")
    ap.add_argument("--only", nargs="*", default=None, help="run only these slugs")
    ap.add_argument("--timeout", type=int, default=900, help="seconds before a chapter is stopped")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs must be >= 1, got {args.jobs}")

    chapters = [Chapter(p) for p in toc_notebooks()]
    if args.only:
        unknown = set(args.only) - {c.slug for c in chapters}
        if unknown:
            ap.error(f"--only names unknown chapters {sorted(unknown)}")
        chapters = [c for c in chapters if c.slug in args.only]
    lib = lib_hash()
    parameters: dict = {}  # the book runs every chapter at its defaults
    todo = []
    for ch in chapters:
        key = cache_key(ROOT / ch.path, parameters, lib)
        keyfile, record = ch.out.with_suffix(".key"), RESULTS / f"{ch.slug}.json"
        if (not args.force and ch.out.exists() and record.exists() and keyfile.exists()
                and keyfile.read_text() == key):
            ch.status, ch.record, ch.detail = "cached", json.loads(record.read_text()), ""
        else:
            todo.append((ch, key))

    threads = 1 if args.jobs > 1 else min(2, os.cpu_count() or 1)
    print(f"{len(chapters)} chapters: {len(chapters) - len(todo)} unchanged (cached), {len(todo)} to run, "
          f"{args.jobs} at a time", flush=True)
    t_all = time.perf_counter()
    left = len(todo)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {}
        for ch, key in todo:
            print(f"  start  {ch.path}", flush=True)
            futures[pool.submit(run_chapter, ch, key, parameters, threads, args.timeout)] = ch
        for fut in as_completed(futures):
            ch = fut.result()
            left -= 1
            print(f"  {ch.status:6s} {ch.path} in {ch.seconds:.1f} s ({left} left)"
                  + (f": {ch.detail}" if ch.detail else ""), flush=True)
    print(f"\nexecuted {len(todo)} chapter(s) in {time.perf_counter() - t_all:.1f} s\n")
    print(summarise(chapters))
    failed = [c for c in chapters if c.status == "FAILED"]
    if failed:
        print(f"\n{len(failed)} chapter(s) failed; logs: " + ", ".join(
            str(c.out.with_suffix('.log').relative_to(ROOT)) for c in failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

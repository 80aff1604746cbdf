"""Execute every chapter once with papermill, into _build/executed/, skipping chapters whose cache key is unchanged.

The cache key covers the notebook's cells, the parameters it runs with, the paperkit modules the chapter imports
(transitively, read from the import graph) and the pinned package versions (requirements.txt), so a change to one
kernel re-runs the chapters that use it and no others, while an untouched book re-runs nothing. A failed run leaves the last good executed notebook and ledger record in place; its executed copy and log
are kept beside them as <slug>.failed.ipynb and <slug>.log.

    python tools/run_book.py [--jobs N (default: every core)] [--force] [--only SLUG ...]
"""
from __future__ import annotations

import argparse
import ast
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
from paperkit.provenance import lib_hash  # noqa: E402,F401  (build_site imports it from here)

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


LIB = ROOT / "lib"


def _imported_modules(source: str, package: str = "") -> set[str]:
    """Dotted names of the ``paperkit`` modules a piece of Python source imports (``from paperkit.x import y`` counts
    ``paperkit.x`` and, when it exists, ``paperkit.x.y``). Lines that IPython would treat as magics are skipped."""
    text = "\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!")))
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "paperkit"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "paperkit":
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def _module_file(dotted: str) -> Path | None:
    base = LIB / Path(*dotted.split("."))
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.exists():
            return cand
    return None


def chapter_modules(nb_path: Path) -> list[Path]:
    """Every paperkit source file a chapter depends on: what its cells import, closed under the modules' own
    imports, with each package's ``__init__.py`` on the way."""
    nb = nbformat.read(nb_path, as_version=4)
    todo = set().union(*(_imported_modules(c.source) for c in nb.cells if c.cell_type == "code")) | {"paperkit"}
    seen: dict[str, Path] = {}
    while todo:
        mod = todo.pop()
        f = _module_file(mod)
        if f is None or mod in seen:
            continue
        seen[mod] = f
        parts = mod.split(".")
        todo |= {".".join(parts[:i]) for i in range(1, len(parts))}
        todo |= _imported_modules(f.read_text()) - set(seen)
    return sorted(set(seen.values()))


def cache_key(nb_path: Path, parameters: dict) -> str:
    """SHA-256 over every cell's type, source and tags, the parameters, the bytes of every paperkit module the
    chapter imports (transitively) and requirements.txt."""
    nb = nbformat.read(nb_path, as_version=4)
    h = hashlib.sha256()
    for cell in nb.cells:
        h.update(cell.cell_type.encode() + b"\0" + cell.source.encode() + b"\0")
        h.update(json.dumps(cell.metadata.get("tags", [])).encode())
    h.update(json.dumps(parameters, sort_keys=True).encode())
    for f in chapter_modules(nb_path):
        h.update(f.relative_to(LIB).as_posix().encode() + b"\0" + f.read_bytes())
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


def run_chapter(ch: Chapter, key: str, parameters: dict, threads_per_job: int, timeout_s: int,
                say=print) -> Chapter:
    say(f"  start  {ch.path}")
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
    rows = [f"{'chapter':55s} {'status':8s} {'time':>8s} {'paper claims (rep/not/seed/reach)':>34s} {'peak MiB':>9s}"]
    for ch in chapters:
        claims = [c for c in ch.record.get("claims", []) if c["kind"] != "construction"]
        counts = "/".join(str(sum(c["verdict"] == v for c in claims))
                          for v in ("reproduced", "not reproduced", "seed-dependent", "out of reach")) if claims else "-"
        mem = f"{ch.record['peak_memory_mib']:.0f}" if ch.record else "-"
        rows.append(f"{str(ch.path.relative_to('notebooks').with_suffix('')):55s} {ch.status:8s} "
                    f"{ch.seconds:7.1f}s {counts:>34s} {mem:>9s}")
        if ch.detail:
            rows.append(f"    {ch.detail}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="chapters run at once (default: one per core); each computes with its own `threads` parameter")
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
    parameters: dict = {}  # the book runs every chapter at its defaults
    todo = []
    for ch in chapters:
        key = cache_key(ROOT / ch.path, parameters)
        keyfile, record = ch.out.with_suffix(".key"), RESULTS / f"{ch.slug}.json"
        if (not args.force and ch.out.exists() and record.exists() and keyfile.exists()
                and keyfile.read_text() == key):
            ch.status, ch.record, ch.detail = "cached", json.loads(record.read_text()), ""
        else:
            todo.append((ch, key))

    # Each chapter computes with its own `threads` parameter (default 1, the same under every runner); the caps
    # below only stop libraries from starting more threads than that at import.
    threads = 1
    print(f"{len(chapters)} chapters: {len(chapters) - len(todo)} unchanged (cached), {len(todo)} to run, "
          f"{args.jobs} at a time", flush=True)
    t_all = time.perf_counter()
    # expected seconds per chapter: its last recorded run (plus kernel start), else the mean of those known
    known = {ch.slug: json.loads((RESULTS / f"{ch.slug}.json").read_text()).get("run_time_s", 0) + 4.0
             for ch, _ in todo if (RESULTS / f"{ch.slug}.json").exists()}
    guess = sum(known.values()) / len(known) if known else 30.0
    remaining = {ch.slug: known.get(ch.slug, guess) for ch, _ in todo}
    left = len(todo)

    def eta() -> str:
        return f"about {sum(remaining.values()) / max(1, min(args.jobs, left or 1)):.0f} s left"

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_chapter, ch, key, parameters, threads, args.timeout,
                               lambda m: print(m, flush=True)): ch for ch, key in todo}
        for fut in as_completed(futures):
            ch = fut.result()
            left -= 1
            remaining.pop(ch.slug, None)
            print(f"  {ch.status:6s} {ch.path} in {ch.seconds:.1f} s; {time.perf_counter() - t_all:.0f} s elapsed, "
                  f"{left} left, {eta() if left else 'done'}" + (f": {ch.detail}" if ch.detail else ""), flush=True)
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

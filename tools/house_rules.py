"""The book's house rules for chapter notebooks, as functions the tests call (and a command: prints violations).

    python tools/house_rules.py            # the whole book; exit 1 if any rule is broken
    python tools/house_rules.py NB.ipynb   # one notebook
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from run_book import toc_notebooks  # noqa: E402

MAX_CELL_LINES = 60
NETWORK = re.compile(r"urlopen|urllib\.request|requests\.(get|post)|http\.client|socket\.create_connection|"
                     r"wget |curl |snapshot_download|from_pretrained|hf_hub_download|\.fetch_[a-z_]+\(")
INSTALL = re.compile(r"^\s*[!%]\s*(pip|conda|mamba|apt-get|uv)\b", re.M)
SIZE_KNOBS = re.compile(r"^\s*(scale|n|n_\w+|size|\w+_size|steps|budget|\w*_steps)\s*=", re.M)


def check_notebook(path: Path, require_ledger: bool = True) -> list[str]:
    """Every house rule ``path`` breaks, one message each (empty list: all hold)."""
    name = path.name
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as e:  # noqa: BLE001 - any parse failure is the message
        return [f"{name}: not a valid notebook ({e})"]
    out = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    if any(c.get("outputs") or c.get("execution_count") for c in code):
        out.append(f"{name}: outputs are committed (strip them; the book executes notebooks itself)")
    params = [i for i, c in enumerate(code) if "parameters" in c.metadata.get("tags", [])]
    if not params:
        out.append(f"{name}: no code cell tagged 'parameters'")
    else:
        src = code[params[0]].source
        for p in ("seed", "device"):
            if not re.search(rf"^\s*{p}\s*=", src, re.M):
                out.append(f"{name}: parameters cell has no '{p}'")
        if not SIZE_KNOBS.search(src):
            out.append(f"{name}: parameters cell has no size knob (scale, n_*, *_size, steps, budget)")
        nxt = code[params[0] + 1].source if params[0] + 1 < len(code) else ""
        if "params.parse(globals()" not in nxt:
            out.append(f"{name}: the cell after 'parameters' must validate them with params.parse(globals(), ...)")
    text = "\n".join(c.source for c in nb.cells)
    if not re.search(r"^#+ .*claim", "\n".join(c.source for c in nb.cells if c.cell_type == "markdown"), re.M | re.I):
        out.append(f"{name}: no 'claim' section heading (each chapter ends by checking its claims)")
    if require_ledger and (not code or "ledger.finish()" not in code[-1].source):
        out.append(f"{name}: the last code cell must call ledger.finish() (it writes the ledger record)")
    all_code = "\n".join(c.source for c in code)
    if INSTALL.search(all_code):
        out.append(f"{name}: installs packages at run time")
    if NETWORK.search(all_code):
        out.append(f"{name}: reaches the network at run time ({NETWORK.search(all_code).group(0).strip()})")
    if re.search(r"from myst_nb import glue", all_code):
        out.append(f"{name}: glue through paperkit.ledger.glue (myst-nb cannot format NumPy scalars' reprs)")
    long = [i for i, c in enumerate(code) if len(c.source.splitlines()) > MAX_CELL_LINES]
    if long:
        out.append(f"{name}: code cell(s) {long} over {MAX_CELL_LINES} lines: long code belongs in lib/")
    m = re.search(r"Ledger\(\s*['\"]([^'\"]+)['\"]\s*,\s*(?:['\"][^'\"]*['\"]|[^,]+)\s*,\s*['\"]([^'\"]+)['\"]", text)
    if require_ledger and (not m or (m.group(1), m.group(2)) != (path.stem, path.parent.name)):
        out.append(f"{name}: Ledger(...) must be created with slug {path.stem!r} and part {path.parent.name!r}")
    return out


# The library's layers: the spine (top-level modules), the shared building blocks by kind, one subpackage per part.
SHARED = ("nn", "data", "geometry")
IMPORT = re.compile(r"^\s*(?:from\s+(paperkit(?:\.\w+)*)\s+import\s+([\w ,]+)|import\s+(paperkit(?:\.\w+)*))", re.M)


def _layer(dotted: str, lib: Path) -> str:
    """``spine``, a shared subpackage's name or a part's name, for a dotted module under ``paperkit``."""
    parts = dotted.split(".")
    if len(parts) >= 2 and (lib / parts[1]).is_dir():
        return parts[1]
    return "spine"


def check_imports(root: Path = ROOT) -> list[str]:
    """The library's layering: the spine imports only the spine; a shared subpackage imports the spine and shared
    subpackages; a part's modules import the spine, the shared subpackages and their own part, nothing else."""
    lib = root / "lib" / "paperkit"
    out = []
    for f in sorted(lib.rglob("*.py")):
        rel = f.relative_to(lib.parent).with_suffix("").as_posix().replace("/", ".")
        own = _layer(rel, lib)
        for m in IMPORT.finditer(f.read_text()):
            target = m.group(1) or m.group(3)
            layers = {_layer(target, lib)}
            if m.group(1) == "paperkit":  # from paperkit import a, b: each name is a module or subpackage
                layers = {n.strip().split(" as ")[0] if (lib / n.strip().split(" as ")[0]).is_dir() else "spine"
                          for n in m.group(2).split(",") if n.strip()}
            for layer in layers:
                allowed = {"spine"} | (set(SHARED) if own != "spine" else set()) | {own}
                if layer not in allowed:
                    out.append(f"lib/{f.relative_to(lib.parent).as_posix()}: imports {target} ({layer}); "
                               f"a module of {own!r} may import only {sorted(allowed)} (move shared kernels to "
                               f"{'/'.join(SHARED)})")
    return out


def check_book(root: Path = ROOT) -> list[str]:
    """House rules over the whole book: the toc and the notebooks agree, and every chapter meets the rules."""
    out = []
    listed = {p.as_posix() for p in toc_notebooks(root)}
    present = {p.relative_to(root).as_posix() for p in (root / "notebooks").rglob("*.ipynb")
               if ".ipynb_checkpoints" not in p.parts}
    out += [f"{p}: not listed in _toc.yml" for p in sorted(present - listed)]
    out += [f"_toc.yml names {p}, which does not exist" for p in sorted(listed - present)]
    for p in sorted(present & listed):
        out += check_notebook(root / p)
    return out


if __name__ == "__main__":
    problems = [m for a in sys.argv[1:] for m in check_notebook(Path(a))] if sys.argv[1:] else check_book()
    print("\n".join(problems) if problems else "all house rules hold")
    sys.exit(1 if problems else 0)

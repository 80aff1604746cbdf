"""Where a result came from: repository root, git commit, a hash of the library, package versions."""
from __future__ import annotations

import hashlib
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGES = ("paperkit", "numpy", "scipy", "numba", "torch", "scikit-learn", "matplotlib", "papermill", "jupyter-book")


def repo_root() -> Path:
    """The book's root folder: the first of this package's grandparent and the working directory's ancestors that
    holds ``_toc.yml``; the working directory when none does (an installed copy used outside the book)."""
    here = Path(__file__).resolve().parents[2]
    for cand in [here, Path.cwd().resolve(), *Path.cwd().resolve().parents]:
        if (cand / "_toc.yml").exists():
            return cand
    return Path.cwd().resolve()


def lib_hash() -> str:
    """SHA-256 (first 16 hex digits) over the relative paths and bytes of every ``.py`` file in ``paperkit``."""
    pkg = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted(pkg.rglob("*.py")):
        h.update(f.relative_to(pkg).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def git_commit(root: Path | None = None) -> str:
    """``HEAD``'s hash, with ``+dirty`` when tracked files differ from it; ``unknown`` outside a git checkout."""
    root = root or repo_root()
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def package_versions() -> dict[str, str]:
    """Installed versions of the packages a result depends on (``absent`` for one not installed)."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out

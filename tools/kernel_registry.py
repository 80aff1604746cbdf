"""The registry of paperkit's hot kernels: every ``KERNELS`` list declared by a paperkit module, and a table of them.

``discover()`` imports every paperkit module (pkgutil.walk_packages) and collects their ``KERNELS``;
``registry_rows()`` gives one row per kernel for the book's registry page: its name, reference, oracle, the test
files that mention both the kernel and its reference, the chapters that import its module (directly or through
other paperkit modules), and its benchmark label. ``modules_with_reference()`` lists the modules that define a ``*_ref`` function (each must register one).
"""
from __future__ import annotations

import importlib
import json
import pkgutil
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _modules():
    import paperkit

    yield paperkit
    for info in pkgutil.walk_packages(paperkit.__path__, prefix="paperkit."):
        yield importlib.import_module(info.name)


def discover() -> list:
    """Every registered :class:`paperkit.contracts.Kernel`, in module order (each module's ``KERNELS``)."""
    out, seen = [], set()
    for mod in _modules():
        for k in getattr(mod, "KERNELS", ()):
            if k.name in seen:
                raise ValueError(f"kernel name {k.name!r} is registered twice")
            seen.add(k.name)
            out.append(k)
    return out


def modules_with_reference() -> dict[str, list[str]]:
    """Module name -> the names of the ``*_ref`` / ``*_reference`` functions it defines (not imports)."""
    out = {}
    for mod in _modules():
        refs = [n for n, v in vars(mod).items() if callable(v) and re.search(r"_ref(erence)?$", n)
                and getattr(v, "__module__", None) == mod.__name__]
        if refs:
            out[mod.__name__] = sorted(refs)
    return out


def _short(name: str) -> str:
    """``module.fn`` or ``fn`` -> ``fn`` (the name a test or notebook calls)."""
    return name.rsplit(".", 1)[-1]


def _texts(pattern: str) -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text(errors="replace") for p in sorted(ROOT.glob(pattern))}


def _notebook_code(path: str, text: str) -> str:
    try:
        cells = json.loads(text).get("cells", [])
    except ValueError:
        return text
    return "\n".join("".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code")


def _mentions(text: str, name: str) -> bool:
    return re.search(rf"\b{re.escape(name)}\b", text) is not None


def registry_rows() -> list[dict]:
    """One dict per registered kernel: ``name``, ``module``, ``reference``, ``oracle``, ``tests`` (files under
    tests/ naming both the kernel and its reference), ``chapters`` (the notebooks, relative to the book's root, that
    import its module), ``benchmark`` (the label of its benchmark rows) and ``shapes`` (the contract's shape relations)."""
    from run_book import chapter_modules, toc_notebooks

    tests = _texts("tests/**/*.py")
    # a chapter uses a kernel when it imports the kernel's module, directly or through another paperkit module
    imports = {nb: {f.relative_to(ROOT / "lib").with_suffix("").as_posix().replace("/", ".")
                    for f in chapter_modules(ROOT / nb)} for nb in toc_notebooks(ROOT)}
    rows = []
    for k in discover():
        fn_name = getattr(k.fn, "__name__", _short(k.name))
        ref = k.reference_name
        names = [fn_name] + ([ref] if ref else [])
        rows.append({
            "name": k.name,
            "module": getattr(k.fn, "__module__", ""),
            "reference": ref,
            "oracle": k.oracle,
            "tests": [p for p, t in tests.items() if all(_mentions(t, n) for n in names)],
            "chapters": sorted(nb.as_posix() for nb, mods in imports.items()
                               if getattr(k.fn, "__module__", "") in mods),
            "benchmark": k.benchmark,
            "shapes": k.contract.shapes,
        })
    return rows


if __name__ == "__main__":
    for row in registry_rows():
        print(row)

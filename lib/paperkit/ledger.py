"""The claim ledger: one JSON record per chapter run, written atomically.

Every chapter creates a :class:`Ledger` right after validating its parameters, adds each claim with
:meth:`Ledger.claim`, and ends with :meth:`Ledger.finish`, which writes ``<results>/<slug>.json`` and shows the
chapter's claim table and provenance line. ``<results>`` is ``$PAPERKIT_RESULTS`` or ``<book root>/_build/results``.

A claim that fails raises :class:`~paperkit.claims.ClaimFailed` at once (so papermill, nbmake and the book build
fail) after writing ``<slug>.failed.json`` beside the good record; the good record is never replaced by a failed run.
"""
from __future__ import annotations

import json
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from paperkit import provenance
from paperkit.claims import Claim, ClaimFailed, Control, decide, explain


def results_dir() -> Path:
    """``$PAPERKIT_RESULTS`` if set, else ``<book root>/_build/results``."""
    env = os.environ.get("PAPERKIT_RESULTS")
    return Path(env) if env else provenance.repo_root() / "_build" / "results"


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` through a temporary file and a rename, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=2, sort_keys=False, default=_jsonable)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _jsonable(x: Any) -> Any:
    if hasattr(x, "tolist"):  # numpy / torch arrays and scalars (a 0-d array's tolist() is its number)
        return x.tolist()
    if hasattr(x, "__dict__"):
        return vars(x)
    raise TypeError(f"cannot store {type(x).__name__} in a ledger record")


def peak_memory_mib() -> float:
    """Peak resident memory of this process so far, MiB (``ru_maxrss`` is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Ledger:
    """Collects a chapter's claims and writes its record.

    Parameters: ``slug`` (the notebook's file stem), ``title``, ``part`` (the folder under ``notebooks/``),
    ``params`` (the namespace :func:`paperkit.params.parse` returned; must contain ``seed``).
    """

    def __init__(self, slug: str, title: str, part: str, params: Any):
        self.slug, self.title, self.part = slug, title, part
        self.params = dict(vars(params))
        if "seed" not in self.params:
            raise ValueError("Ledger: params must include 'seed'")
        self.claims: list[Claim] = []
        self.notes: dict[str, Any] = {}
        self._t0 = time.perf_counter()

    def claim(self, id: str, text: str, *, kind: str, measured: float, op: str, threshold: float,
              metric: str = "", paper: float | str | None = None, control: Control | None = None,
              expect: str = "reproduced", reason: str = "") -> Claim:
        """Check one claim, record it, print its line, and raise :class:`ClaimFailed` if its verdict is ``failed``."""
        if any(c.id == id for c in self.claims):
            raise ValueError(f"claim id {id!r} used twice")
        c = decide(Claim(id=id, text=text, kind=kind, measured=measured, op=op, threshold=threshold, metric=metric,
                         paper=paper, control=control, expect=expect, reason=reason))
        self.claims.append(c)
        print(explain(c))
        if c.verdict == "failed":
            write_json_atomic(results_dir() / f"{self.slug}.failed.json", self.record(status="failed"))
            raise ClaimFailed(f"{self.slug}: {explain(c)}")
        return c

    def note(self, key: str, value: Any) -> None:
        """Keep a measured number (a timing ratio, a count) in the record beside the claims."""
        self.notes[key] = value

    def record(self, status: str = "ok") -> dict[str, Any]:
        """The JSON-ready record of this run so far."""
        return {
            "slug": self.slug,
            "title": self.title,
            "part": self.part,
            "status": status,
            "seed": self.params["seed"],
            "parameters": self.params,
            "claims": [c.as_dict() for c in self.claims],
            "notes": self.notes,
            "run_time_s": round(time.perf_counter() - self._t0, 2),
            "peak_memory_mib": round(peak_memory_mib(), 1),
            "versions": provenance.package_versions(),
            "git_commit": provenance.git_commit(),
            "lib_hash": provenance.lib_hash(),
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }

    def finish(self):
        """Write the record and return the chapter's claim table and provenance line as Markdown for display."""
        if not self.claims:
            raise ClaimFailed(f"{self.slug}: no claims were checked")
        rec = self.record()
        write_json_atomic(results_dir() / f"{self.slug}.json", rec)
        from IPython.display import Markdown

        return Markdown(claim_table(rec) + "\n\n" + provenance_line(rec))


def _fmt(x: Any) -> str:
    if x is None:
        return "not given"
    if isinstance(x, str):
        return x
    return f"{x:.4g}"


def claim_table(rec: dict[str, Any]) -> str:
    """A Markdown table of a record's claims: measured beside the check, the paper's number and the verdict."""
    rows = ["| claim | kind | measured | check | paper | negative control | verdict |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for c in rec["claims"]:
        ctl = "none"
        if c["control"] is not None:
            ctl = f"{_fmt(c['control']['measured'])} ({c['control']['what']}): " + (
                "rejected" if c["control_rejected"] else "not rejected")
        verdict = f"**{c['verdict']}**" + (f" ({c['reason']})" if c["verdict"] == "not reproduced" else "")
        metric = f" {c['metric']}" if c["metric"] else ""
        rows.append(f"| **{c['id']}** {c['text']} | {c['kind']} | {_fmt(c['measured'])}{metric} | "
                    f"{c['op']} {_fmt(c['threshold'])} | {_fmt(c['paper'])} | {ctl} | {verdict} |")
    return "\n".join(rows)


def provenance_line(rec: dict[str, Any]) -> str:
    """One line: commit, library hash, seed, parameters, run time, peak memory."""
    params = ", ".join(f"{k}={v!r}" for k, v in rec["parameters"].items())
    return (f"*Provenance:* commit `{rec['git_commit']}`, paperkit `{rec['lib_hash']}`, seed {rec['seed']}, "
            f"parameters ({params}); ran in {rec['run_time_s']:.1f} s, peak memory {rec['peak_memory_mib']:.0f} MiB.")


def glue(name: str, value: Any, display: bool = False) -> None:
    """Glue a measured number for ``{glue:text}`name:.3f``` in the chapter's prose (myst-nb); shown here if ``display``.

    NumPy and Torch scalars become Python numbers first: under NumPy 2 their repr (``np.float64(0.5)``) is what
    myst-nb would store, and its number formats cannot parse that.
    """
    from myst_nb import glue as _glue

    _glue(name, value.item() if hasattr(value, "item") and getattr(value, "ndim", 0) == 0 else value,
          display=display)

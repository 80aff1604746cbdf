"""The claim ledger: one JSON record per chapter run, written atomically.

Every chapter creates a :class:`Ledger` right after validating its parameters, adds each claim with
:meth:`Ledger.claim`, and ends with :meth:`Ledger.finish`, which writes ``<results>/<slug>.json`` and shows the
chapter's claim table and provenance line. ``<results>`` is ``$PAPERKIT_RESULTS`` or ``<book root>/_build/results``.

In strict mode (parameter ``strict``, default ``True``) a claim whose verdict is not the declared one, or a broken
construction check, raises :class:`~paperkit.claims.ClaimFailed` at once (so papermill, nbmake and the book build
fail) after writing ``<slug>.failed.json`` beside the good record; the good record is never replaced by a failed run.
With ``strict=False`` the verdict is recorded, flagged on the page, and the run goes on. The book's record
``<slug>.json`` is written only by a run at the chapter's defaults (the literals of its ``parameters`` cell; ``strict``
aside) whose every verdict came out as declared; any other run writes ``<slug>.explore.json``, never over the book's.

The claim table is HTML (myst-nb renders Markdown output with a renderer that has no tables): the paper's claims in
one group, construction checks in another, each row with the anchor ``claim-<id>`` for links.
"""
from __future__ import annotations

import ast
import html
import json
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from paperkit import provenance
from paperkit.claims import CONSTRUCTION, OUT_OF_REACH, Claim, ClaimFailed, Control, decide, explain


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


def notebook_defaults(part: str, slug: str) -> dict[str, Any] | None:
    """The literal assignments of the ``parameters`` cell of ``notebooks/<part>/<slug>.ipynb``, or ``None`` when the
    notebook is not in this book (a fixture, a copy run elsewhere) or has no such cell."""
    nb = provenance.repo_root() / "notebooks" / part / f"{slug}.ipynb"
    if not nb.exists():
        return None
    for cell in json.loads(nb.read_text())["cells"]:
        if cell["cell_type"] == "code" and "parameters" in cell.get("metadata", {}).get("tags", []):
            tree = ast.parse("".join(cell["source"]))
            return {t.id: ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                    for t in node.targets if isinstance(t, ast.Name)}
    return None


def at_defaults(params: dict[str, Any], defaults: dict[str, Any] | None) -> bool:
    """Whether a run's parameters equal the notebook's defaults (``strict`` aside; the book's ``threads`` defaults to
    1 when the cell does not set it). Unknown defaults (``None``) count as defaults."""
    if defaults is None:
        return True
    full = {"threads": 1, **defaults}
    return all(params.get(k) == v for k, v in full.items() if k != "strict")


def cpu_seconds() -> float:
    """User plus system CPU time of this process so far (all its threads), seconds."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


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
        values = dict(vars(params))
        self.spec = values.pop("_spec", None)
        self.params = values
        if "seed" not in self.params:
            raise ValueError("Ledger: params must include 'seed'")
        self.strict = bool(self.params.get("strict", True))
        self.claims: list[Claim] = []
        self.notes: dict[str, Any] = {}
        self.ladder: list[dict[str, str]] = []
        self._t0 = time.perf_counter()
        self._cpu0 = cpu_seconds()

    def claim(self, id: str, text: str, *, kind: str, measured: float | None = None, op: str, threshold: float,
              metric: str = "", source: str = "", paper: float | str | None = None, control: Control | None = None,
              expect: str = "reproduced", reason: str = "", per_seed: Any = None) -> Claim:
        """Check one claim (see :class:`~paperkit.claims.Claim`), record it and print its line.

        Strict mode raises :class:`ClaimFailed` when the verdict is not the declared one or a construction check
        broke; otherwise the claim is recorded as unexpected and the run goes on.
        """
        c = decide(Claim(id=id, text=text, kind=kind, measured=measured, op=op, threshold=threshold, metric=metric,
                         source=source, paper=paper, control=control, expect=expect, reason=reason,
                         per_seed=per_seed))
        return self._add(c)

    def construction(self, id: str, text: str, *, measured: float, op: str, threshold: float, metric: str = "",
                     control: Control | None = None) -> Claim:
        """A check of our own code or of an identity true by construction: shown apart, never a reproduction."""
        return self.claim(id, text, kind=CONSTRUCTION, measured=measured, op=op, threshold=threshold,
                          metric=metric, control=control)

    def out_of_reach(self, id: str, text: str, reason: str) -> Claim:
        """A claim of the abstract this miniature cannot test, with the reason; counted in the headline as such."""
        return self._add(decide(Claim(id=id, text=text, kind=OUT_OF_REACH, reason=reason)))

    def _add(self, c: Claim) -> Claim:
        if any(x.id == c.id for x in self.claims):
            raise ValueError(f"claim id {c.id!r} used twice")
        self.claims.append(c)
        print(explain(c))
        if not c.as_expected and self.strict:
            write_json_atomic(results_dir() / f"{self.slug}.failed.json", self.record(status="failed"))
            raise ClaimFailed(f"{self.slug}: {explain(c)} (run with -p strict False to record it and go on)")
        return c

    def scale_ladder(self, *rows: tuple[str, str, str]) -> None:
        """Declare the chapter's larger runs for its run box: ``(label, papermill arguments, cost note)`` each, e.g.
        ``("larger CPU run", "-p scale 4", "about 4 min here")``."""
        self.ladder = [{"label": a, "args": b, "cost": c} for a, b, c in rows]

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
            "parameter_spec": self.spec,
            "strict": self.strict,
            "claims": [c.as_dict() for c in self.claims],
            "unexpected": [c.id for c in self.claims if not c.as_expected],
            "notes": self.notes,
            "scale_ladder": self.ladder,
            "run_time_s": round(time.perf_counter() - self._t0, 2),
            "cpu_time_s": round(cpu_seconds() - self._cpu0, 2),
            "peak_memory_mib": round(peak_memory_mib(), 1),
            "versions": provenance.package_versions(),
            "git_commit": provenance.git_commit(),
            "lib_hash": provenance.lib_hash(),
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }

    def finish(self):
        """Write the record and return the chapter's claim table and provenance line as HTML for display.

        The book's record ``<slug>.json`` is written only by a run at the notebook's defaults whose every verdict
        came out as declared; a run at other parameters, or a non-strict run with surprises, writes
        ``<slug>.explore.json`` instead.
        """
        if not any(c.kind != OUT_OF_REACH for c in self.claims):
            raise ClaimFailed(f"{self.slug}: no claims were checked")
        rec = self.record()
        book = not rec["unexpected"] and at_defaults(self.params, notebook_defaults(self.part, self.slug))
        name = f"{self.slug}.json" if book else f"{self.slug}.explore.json"
        write_json_atomic(results_dir() / name, rec)
        from IPython.display import HTML

        return HTML(claim_tables_html(rec) + provenance_html(rec))


def _fmt(x: Any) -> str:
    if x is None:
        return "not given"
    if isinstance(x, str):
        return x
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(f"{v:.3g}" for v in x) + "]"
    return f"{x:.4g}"


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


HEAD = ("claim", "kind", "measured", "check", "threshold from", "paper", "negative control", "verdict")


def _control_cell(c: dict[str, Any]) -> str:
    if c.get("control") is None:
        return "none"
    return (f"{_e(_fmt(c['control']['measured']))} ({_e(c['control']['what'])}): "
            + ("rejected" if c["control_rejected"] else "<b>not rejected</b>"))


def _verdict_cell(c: dict[str, Any]) -> str:
    v = f'<b class="verdict verdict-{c["verdict"].replace(" ", "-")}">{_e(c["verdict"])}</b>'
    if c.get("share") is not None:
        v += f" (passes at {c['share']:.0%} of {len(c['per_seed'])} seeds)"
    if c["verdict"] in ("not reproduced", "seed-dependent", "out of reach") and c.get("reason"):
        v += f"<br><small>{_e(c['reason'])}</small>"
    if not c.get("as_expected", True):
        v += f"<br><b>unexpected</b>: the chapter declares <i>{_e(c['expect'])}</i> at its defaults"
    return v


def _row(c: dict[str, Any]) -> str:
    head = f'<tr id="claim-{_e(c["id"])}"><td><b>{_e(c["id"])}</b> {_e(c["text"])}</td><td>{_e(c["kind"])}</td>'
    if c["kind"] == OUT_OF_REACH:
        return head + f'<td colspan="5">not tested</td><td>{_verdict_cell(c)}</td></tr>'
    metric = f"<br><small>{_e(c['metric'])}</small>" if c.get("metric") else ""
    source = _e(c.get("source") or "") if c["kind"] != CONSTRUCTION else "our code"
    return (head + f"<td>{_e(_fmt(c['measured']))}{metric}</td><td>{_e(c['op'])} {_e(_fmt(c['threshold']))}</td>"
            f"<td>{source}</td><td>{_e(_fmt(c['paper'])) if c['kind'] != CONSTRUCTION else ''}</td>"
            f"<td>{_control_cell(c)}</td><td>{_verdict_cell(c)}</td></tr>")


def claim_tables_html(rec: dict[str, Any]) -> str:
    """The record's claims as one HTML table in two groups: the paper's claims (out-of-reach ones included), then
    the construction checks (our code and identities true by construction), which are never counted."""
    paper = [c for c in rec["claims"] if c["kind"] != CONSTRUCTION]
    built = [c for c in rec["claims"] if c["kind"] == CONSTRUCTION]
    th = "".join(f"<th>{h}</th>" for h in HEAD)
    groups = []
    for title, rows, cls in (("The paper's claims", paper, "claims-paper"),
                             ("Construction checks: our code against its reference and identities true by "
                              "construction; shown apart, not counted as reproductions", built, "claims-construction")):
        if rows:
            groups.append(f'<tbody class="{cls}"><tr class="claim-group"><th colspan="{len(HEAD)}">{_e(title)}'
                          f"</th></tr>{''.join(_row(c) for c in rows)}</tbody>")
    return (f'<table class="claim-table"><caption>Claim check: verdicts of this run</caption><thead><tr>{th}</tr>'
            f"</thead>{''.join(groups)}</table>")


def headline(rec: dict[str, Any]) -> dict[str, int]:
    """Counts of the paper's claims by verdict (construction checks are not counted)."""
    out = {v: 0 for v in ("reproduced", "not reproduced", "seed-dependent", "inconclusive", "out of reach")}
    for c in rec["claims"]:
        if c["kind"] != CONSTRUCTION:
            out[c["verdict"]] = out.get(c["verdict"], 0) + 1
    return out


def provenance_html(rec: dict[str, Any]) -> str:
    """One line: commit, library hash, seed, parameters, run time, CPU time, peak memory."""
    params = ", ".join(f"{k}={v!r}" for k, v in rec["parameters"].items())
    return (f"<p><i>Provenance:</i> commit <code>{_e(rec['git_commit'])}</code>, paperkit "
            f"<code>{_e(rec['lib_hash'])}</code>, seed {_e(rec['seed'])}, parameters ({_e(params)}); ran in "
            f"{rec['run_time_s']:.1f} s wall, {rec.get('cpu_time_s', float('nan')):.1f} CPU-s, peak memory "
            f"{rec['peak_memory_mib']:.0f} MiB.</p>")


def glue(name: str, value: Any, display: bool = False) -> None:
    """Glue a measured number for ``{glue:text}`name:.3f``` in the chapter's prose (myst-nb); shown here if ``display``.

    NumPy and Torch scalars become Python numbers first: under NumPy 2 their repr (``np.float64(0.5)``) is what
    myst-nb would store, and its number formats cannot parse that.
    """
    from myst_nb import glue as _glue

    _glue(name, value.item() if hasattr(value, "item") and getattr(value, "ndim", 0) == 0 else value,
          display=display)

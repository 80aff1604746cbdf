"""Render the book into _build/html from the chapters tools/run_book.py executed.

It stages the book's sources in _build/src (the config, the toc, book/, the Sphinx extension, and the *executed*
copy of every chapter with its generated run box), writes the generated pages there (status, data, kernel
registry) from the ledger records, the data loaders and the kernel registry, and runs jupyter-book with its own
execution off and Sphinx warnings as errors. Nothing in the repository is modified.
"""
from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from run_book import EXECUTED, RESULTS, lib_hash, toc_notebooks  # noqa: E402

SRC = ROOT / "_build" / "src"
PAPER_VERDICTS = ("reproduced", "seed-dependent", "not reproduced", "inconclusive", "out of reach")
VERDICT_COLORS = {"reproduced": "#009E73", "seed-dependent": "#E69F00", "not reproduced": "#D55E00",
                  "inconclusive": "#CC79A7", "out of reach": "#999999"}


def stage() -> list[dict]:
    """Copy the book's sources and executed chapters into _build/src; return the chapters' records in book order."""
    if SRC.exists():
        shutil.rmtree(SRC)
    SRC.mkdir(parents=True)
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy2(ROOT / name, SRC / name)
    shutil.copytree(ROOT / "book", SRC / "book")
    shutil.copytree(ROOT / "tools" / "sphinx_ext", SRC / "tools" / "sphinx_ext")
    shutil.copytree(ROOT / "_static", SRC / "_static")
    (SRC / ".staged").write_text("staged by tools/build_site.py from the executed chapters\n")
    records, missing = [], []
    for nb in toc_notebooks():
        executed = EXECUTED / nb.relative_to("notebooks")
        record = RESULTS / f"{nb.stem}.json"
        if not executed.exists() or not record.exists():
            missing.append(str(nb))
            continue
        rec = json.loads(record.read_text())
        if (rec["slug"], rec["part"]) != (nb.stem, nb.parent.name):
            sys.exit(f"build_site: {nb} wrote a record for slug={rec['slug']!r} part={rec['part']!r}; "
                     f"the Ledger must be given slug={nb.stem!r} and part={nb.parent.name!r}")
        (SRC / nb).parent.mkdir(parents=True, exist_ok=True)
        staged = nbformat.read(executed, as_version=4)
        add_run_box(staged, nb, rec)
        collapse_long_code(staged)
        nbformat.write(staged, SRC / nb)
        clean = SRC / "_downloads_src" / nb.parent.name / nb.name
        clean.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / nb, clean)
        records.append(rec)
    if missing:
        sys.exit(f"build_site: no executed copy or ledger record for {missing}; run tools/run_book.py first")
    apply_sweeps(records)
    (SRC / "book" / "status.md").write_text(status_page(records))
    status_figure(records, SRC / "book" / "status_verdicts.png")
    (SRC / "book" / "data.md").write_text(data_page())
    (SRC / "book" / "registry.md").write_text(registry_page())
    (SRC / "book" / "robustness.md").write_text(robustness_page(records, SRC / "book"))
    return records


def _fmt_default(v) -> str:
    return repr(v) if not isinstance(v, float) else f"{v:g}"


def run_box(nb: Path, rec: dict) -> str:
    """The "Run it yourself" box of a chapter page: its parameters (from the chapter's own declaration, as recorded
    by the ledger), the papermill and nbmake commands, the scale ladder with measured cost, the notebook download."""
    spec = rec.get("parameter_spec")
    if not spec:
        sys.exit(f"build_site: {nb} recorded no parameter declaration; its set-up cell must call params.parse")
    rows = "".join(
        f"<tr><td><code>{html.escape(p['name'])}</code>{' (book-wide)' if p['book'] else ''}</td>"
        f"<td><code>{html.escape(_fmt_default(p['default']))}</code></td><td>{html.escape(p['allowed'])}</td>"
        f"<td>{html.escape(p['help'] or '')}</td></tr>" for p in spec)
    ladder = [("defaults (this page)", "", f"{rec['run_time_s']:.0f} s wall, {rec.get('cpu_time_s', 0):.0f} CPU-s, "
               f"peak {rec['peak_memory_mib']:.0f} MiB, measured when the book was built")]
    ladder += [(r["label"], r["args"], r["cost"]) for r in rec.get("scale_ladder", [])]
    ladder_rows = "".join(f"<tr><td>{html.escape(a)}</td><td><code>{html.escape(b) or '(none)'}</code></td>"
                          f"<td>{html.escape(c)}</td></tr>" for a, b, c in ladder)
    rel = nb.as_posix()
    return "\n".join([
        ":::{admonition} Run it yourself",
        ":class: tip runbox",
        "",
        f'<table class="runbox-params"><caption>Parameters of this chapter</caption><thead><tr><th>parameter</th>'
        f"<th>default</th><th>allowed</th><th>meaning</th></tr></thead><tbody>{rows}</tbody></table>",
        "",
        "Re-run at other parameters (a verdict that differs from the declared one stops the run unless you add "
        "`-p strict False`), or run the chapter as a test at its defaults:",
        "",
        "```bash",
        f".venv/bin/papermill {rel} /tmp/{nb.stem}.ipynb -p seed 1 -p strict False",
        f".venv/bin/pytest --nbmake {rel}",
        "```",
        "",
        f'<table class="runbox-ladder"><caption>Scale ladder</caption><thead><tr><th>run</th><th>papermill '
        f"arguments</th><th>cost</th></tr></thead><tbody>{ladder_rows}</tbody></table>",
        "",
        f"{{download}}`Download the notebook <../../_downloads_src/{nb.parent.name}/{nb.name}>`",
        ":::",
    ])


LONG_CELL_LINES = 20


def collapse_long_code(staged) -> None:
    """Tag code cells longer than LONG_CELL_LINES lines ``hide-input``: the page shows their output and a toggle."""
    for c in staged.cells:
        tags = c.metadata.get("tags", [])
        if (c.cell_type == "code" and len(c.source.splitlines()) > LONG_CELL_LINES
                and not {"hide-input", "remove-input", "remove-cell", "parameters"} & set(tags)):
            c.metadata["tags"] = tags + ["hide-input"]


def add_run_box(staged, nb: Path, rec: dict) -> None:
    """Insert the run box right after the chapter's title cell (the first markdown cell)."""
    first_md = next(i for i, c in enumerate(staged.cells) if c.cell_type == "markdown")
    staged.cells.insert(first_md + 1, nbformat.v4.new_markdown_cell(run_box(nb, rec)))


def paper_claims(rec: dict) -> list[dict]:
    """The record's paper claims (construction checks left out; out-of-reach ones kept)."""
    return [c for c in rec["claims"] if c["kind"] != "construction"]


def apply_sweeps(records: list[dict]) -> None:
    """Decide each paper claim's book verdict from the committed sweep summary where one exists and is fresh.

    A claim measured at every point of a chapter's sweep (seeds 0-9 at least) is *reproduced* when it reproduced at
    every point, *seed-dependent* when at some, and keeps its own verdict when at none. Without a fresh sweep the
    verdict is the one of the book's own run. ``sweep_share`` and ``sweep_points`` are added for the status page.
    """
    import pandas as pd
    from sweep import PUBLISHED, chapter_key

    for r in records:
        csv, prov_file = PUBLISHED / f"{r['slug']}.csv", PUBLISHED / f"{r['slug']}.json"
        fresh = csv.exists() and prov_file.exists()
        if fresh:
            prov = json.loads(prov_file.read_text())
            fresh = (ROOT / prov["notebook"]).exists() and chapter_key(Path(prov["notebook"])) == prov["chapter_key"]
        df = pd.read_csv(csv) if fresh else None
        r["sweep"] = "fresh" if fresh else ("stale" if csv.exists() else "none")
        for c in r["claims"]:
            c["book_verdict"], c["sweep_share"], c["sweep_points"] = c["verdict"], None, 0
            if df is None or c["kind"] in ("construction", "out of reach"):
                continue
            d = df[df["claim"] == c["id"]]
            if d.empty:
                continue
            share = float((d["verdict"] == "reproduced").mean())
            c["sweep_share"], c["sweep_points"] = share, len(d)
            if share == 1.0:
                c["book_verdict"] = "reproduced"
            elif share > 0:
                c["book_verdict"] = "seed-dependent"


def status_figure(records: list[dict], out: Path) -> None:
    """Horizontal stacked bars: each chapter's paper claims by verdict."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sys.path.insert(0, str(ROOT / "lib"))
    from paperkit import plot

    plot.use_book_style()
    fig, axes = plot.panels(1, width=7.0, height=0.28 * len(records) + 1.2)
    ax = axes[0]
    left = [0] * len(records)
    for v in PAPER_VERDICTS:
        n = [sum(c["book_verdict"] == v for c in paper_claims(r)) for r in records]
        ax.barh(range(len(records)), n, left=left, color=VERDICT_COLORS[v], label=v)
        left = [a + b for a, b in zip(left, n)]
    ax.set_yticks(range(len(records)), [r["slug"] for r in records], fontsize=7.5)
    ax.invert_yaxis()
    ax.set(xlabel="paper claims (count; construction checks not counted)")
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=len(PAPER_VERDICTS), fontsize=7.5, frameon=False)
    fig.savefig(out)
    plt.close(fig)


def status_page(records: list[dict]) -> str:
    """The status page's Markdown: totals, the figure, every paper claim with a link to its row, the environment."""
    paper = [c for r in records for c in paper_claims(r)]
    n_built = sum(c["kind"] == "construction" for r in records for c in r["claims"])
    counts = {v: sum(c["book_verdict"] == v for c in paper) for v in PAPER_VERDICTS}
    swept = sum(r["sweep"] == "fresh" for r in records)
    cpu = sum(r.get("cpu_time_s", 0) for r in records)
    lines = [
        "# Status of every claim",
        "",
        f"Generated by `tools/build_site.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} from the "
        "ledger records the chapters wrote when they were executed for this build.",
        "",
        f"**{len(records)} chapters, {len(paper)} claims of the papers: "
        + ", ".join(f"{n} {v}" for v, n in counts.items()) + f".** Besides these, {n_built} construction checks "
        "(our code against its reference, identities true by construction) passed; they are not counted. "
        "A claim is *seed-dependent* when it was measured over a declared set of seeds and passed at some of them "
        "only (the share is given); *inconclusive* when its negative control passed the check too. "
        f"For the {swept} chapters with a fresh sweep on the [robustness page](robustness.md), the verdict is decided "
        "over the sweep's seeds: a claim that reproduced at the chapter's defaults but not at every seed of its sweep "
        "counts as seed-dependent.",
        "",
        "![Paper claims of each chapter by verdict](status_verdicts.png)",
        "",
        f"Every chapter at its defaults: {sum(r['run_time_s'] for r in records):.0f} s of wall time and "
        f"{cpu:.0f} CPU-seconds in all (without kernel start-up); each chapter's share is in its row below.",
        "",
    ]
    for r in records:
        pc = paper_claims(r)
        head = ", ".join(f"{sum(c['book_verdict'] == v for c in pc)} {v}" for v in PAPER_VERDICTS
                         if any(c["book_verdict"] == v for c in pc))
        head += {"fresh": " (decided over its sweep)", "stale": " (its sweep is stale: verdicts of this run)",
                 "none": " (not swept yet: verdicts of this run)"}[r["sweep"]]
        share = 100 * r.get("cpu_time_s", 0) / cpu if cpu else 0
        href = f"../notebooks/{r['part']}/{r['slug']}.html"
        lines += [f"## {r['title']}", "",
                  f"<p><a href=\"{href}\">{html.escape(r['slug'])}</a>: {head}. Ran in {r['run_time_s']:.1f} s "
                  f"wall, {r.get('cpu_time_s', 0):.1f} CPU-s ({share:.0f}% of the book), peak "
                  f"{r['peak_memory_mib']:.0f} MiB.</p>", ""]
        rows = []
        for c in pc:
            if c["kind"] == "out of reach":
                measured = "not tested"
            else:
                measured = f"{c['measured']:.3g} {c['op']} {c['threshold']:.3g}"
                if c.get("share") is not None:
                    measured += f"; passes at {c['share']:.0%} of {len(c['per_seed'])} seeds"
            sweep = (f"{c['sweep_share']:.0%} of {c['sweep_points']} points" if c["sweep_share"] is not None
                     else "")
            rows.append(f"<tr><td><a href=\"{href}#claim-{html.escape(c['id'])}\">{html.escape(c['id'])}</a></td>"
                        f"<td>{html.escape(c['text'])}</td><td>{html.escape(c['book_verdict'])}</td>"
                        f"<td>{html.escape(c['verdict'])}</td><td>{html.escape(sweep)}</td>"
                        f"<td>{html.escape(measured)}</td></tr>")
        lines += ['<table class="status-claims"><thead><tr><th>claim</th><th>what it says</th><th>verdict</th>'
                  "<th>at the defaults</th><th>reproduced over the sweep</th><th>measured, check (defaults)</th></tr>"
                  f"</thead><tbody>{''.join(rows)}</tbody></table>", ""]
    env = records[0] if records else {"versions": {}, "git_commit": "?", "lib_hash": "?"}
    lines += ["## Environment", "",
              f"Commit `{env['git_commit']}`, paperkit hash `{env['lib_hash']}`. Packages: "
              + ", ".join(f"{k} {v}" for k, v in env["versions"].items()) + ". Kernel speeds are on the "
              "[kernel registry](registry.md) page."]
    return "\n".join(lines) + "\n"


def _chapters_mentioning(pattern: str) -> list[Path]:
    rx = re.compile(pattern)
    return [nb for nb in toc_notebooks() if rx.search((ROOT / nb).read_text())]


def _chapter_links(nbs: list[Path]) -> str:
    return ", ".join(f"[{nb.stem}](../{nb.with_suffix('').as_posix()}.ipynb)" for nb in nbs) or "none yet"


def data_page() -> str:
    """The Data page: every real data set a loader in paperkit.data.datasets reads, and the chapters that use it."""
    sys.path.insert(0, str(ROOT / "lib"))
    from paperkit.data import datasets

    lines = ["# Data", "", "Every real data set in the book ships inside a pinned package: nothing is downloaded. "
             "Each has one loader in `paperkit.data.datasets`, which returns arrays and a provenance record. "
             "Generated by `tools/build_site.py`.", "",
             "| data set | loader | package (version) | file | licence | shape | chapters |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, (fn, call) in datasets.LOADERS.items():
        prov = fn(200_000)[-1] if name == "stdlib_bytes" else fn()[-1]
        users = _chapters_mentioning(rf"\b{name}\(")
        lines.append(f"| {prov.name}: {prov.description} | `{call}` | {prov.package} {prov.version} | "
                     f"`{prov.file}` | {prov.licence} | {prov.shape} | {_chapter_links(users)} |")
    return "\n".join(lines) + "\n"


def robustness_page(records: list[dict], out_dir: Path) -> str:
    """The Robustness page, from the committed sweep summaries ``sweeps/<slug>.csv``: per chapter and claim, the
    share of grid points at which it reproduced, min / median / max of its measured value beside the threshold, and
    a figure of the value across seeds and sizes with the threshold drawn. Stale rows are marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    sys.path.insert(0, str(ROOT / "lib"))
    from paperkit import plot
    from sweep import PUBLISHED, chapter_key

    plot.use_book_style()
    lines = ["# Robustness across seeds and sizes", "",
             "Each chapter run over a grid of seeds (and sizes where a chapter has a cheap second one) by "
             "`make sweep` (`tools/sweep.py`, on Dask), at `strict=False` so that every verdict is recorded. The "
             "summaries are committed in `sweeps/` with their provenance. A claim *holds at* the share of grid "
             "points where it reproduced (a construction check: where it passed). A chapter whose notebook or "
             "imported library modules changed since its sweep is marked **stale**. Generated by "
             "`tools/build_site.py`.", ""]
    missing = []
    for r in records:
        csv, prov_file = PUBLISHED / f"{r['slug']}.csv", PUBLISHED / f"{r['slug']}.json"
        if not csv.exists() or not prov_file.exists():
            missing.append(r["slug"])
            continue
        prov = json.loads(prov_file.read_text())
        df = pd.read_csv(csv)
        nb = Path(prov["notebook"])
        stale = not (ROOT / nb).exists() or chapter_key(nb) != prov["chapter_key"]
        params = [c for c in df.columns if c.startswith("param_")]
        lines += [f"## {r['title']}", "",
                  f"<p><a href=\"../notebooks/{r['part']}/{r['slug']}.html\">{html.escape(r['slug'])}</a>: "
                  f"{prov['points']} points (seeds {prov['seeds'][0]}-{prov['seeds'][-1]}"
                  + (f", {', '.join(f'{k} in {v}' for k, v in prov['grid'].items())}" if prov["grid"] else "")
                  + f"), {prov['failed_points']} failed; swept at commit <code>{html.escape(prov['git_commit'])}"
                  f"</code>" + (" <b>(stale: the chapter or its library modules changed since)</b>" if stale else "")
                  + ".</p>", ""]
        claims = [c for c in df["claim"].dropna().unique()]
        rows = []
        for cid in claims:
            d = df[df["claim"] == cid]
            kind = d["kind"].iloc[0]
            if kind == "out of reach":
                continue
            good = "passed" if kind == "construction" else "reproduced"
            share = (d["verdict"] == good).mean()
            m = d["measured"].astype(float)
            rows.append(f'<tr id="{html.escape(r["slug"])}-{html.escape(str(cid))}"><td>{html.escape(str(cid))}'
                        f"</td><td>{html.escape(kind)}</td><td>{share:.0%}</td><td>{m.min():.3g} / {m.median():.3g}"
                        f" / {m.max():.3g}</td><td>{html.escape(str(d['op'].iloc[0]))} {d['threshold'].iloc[0]:.3g}"
                        f"</td><td>{html.escape(', '.join(sorted(set(d['verdict']))))}</td></tr>")
        lines += ['<table class="robustness"><thead><tr><th>claim</th><th>kind</th><th>holds at</th><th>measured '
                  "min / median / max</th><th>check</th><th>verdicts seen</th></tr></thead>"
                  f"<tbody>{''.join(rows)}</tbody></table>", ""]
        shown = [c for c in claims if df[df["claim"] == c]["kind"].iloc[0] in ("theorem", "empirical")]
        if shown:
            ncol = min(4, len(shown))
            nrow = -(-len(shown) // ncol)
            fig, axes = plot.panels(ncol, nrow, width=1.8, height=1.5)
            size = next((p for p in params if p != "param_seed"), None)
            for ax, cid in zip(axes, shown):
                d = df[df["claim"] == cid]
                groups = [(None, d)] if size is None else list(d.groupby(size))
                for val, g in groups:
                    ax.plot(g["param_seed"], g["measured"], "o", ms=3,
                            label=None if size is None else f"{size[6:]}={val}")
                ax.axhline(d["threshold"].iloc[0], color="k", lw=0.8, ls="--")
                ax.set_title(str(cid), fontsize=8)
                ax.set_xlabel("seed", fontsize=7)
                ax.tick_params(labelsize=6)
            for ax in axes[len(shown):]:
                ax.axis("off")
            if size is not None:
                axes[0].legend(fontsize=6)
            name = f"robustness_{r['slug']}.png"
            fig.savefig(out_dir / name)
            plt.close(fig)
            lines += [f"![measured value of each paper claim against the seed, threshold dashed]({name})", "",
                      f"**Figure.** {r['slug']}: each paper claim's measured value at every grid point (dots; one "
                      "colour per size where the grid has one) and its threshold (dashed).", ""]
    if missing:
        lines += ["## Not swept yet", "", ", ".join(missing) + ".", ""]
    return "\n".join(lines) + "\n"


def registry_page() -> str:
    """The kernel registry: each kernel, its reference, its tests, the chapters using it, its benchmark ratios."""
    bench = ROOT / "_build" / "benchmarks.json"
    b = json.loads(bench.read_text()) if bench.exists() else None
    lines = ["# Kernel registry", "",
             "Every registered kernel of `paperkit` with its plain reference implementation, the tests that compare "
             "them (and the trusted library or closed form it is also checked against), the chapters that call it, "
             "and its latest benchmark. Every kernel is also checked by the one generic contract suite "
             "(`tests/contracts`). Generated by `tools/build_site.py`.", ""]
    try:
        import kernel_registry
        rows = kernel_registry.registry_rows()
    except ImportError:
        rows = []
    if rows:
        lines += ["| kernel | reference | also checked against | tests | chapters | benchmark |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for r in rows:
            ratios = [x for x in (b["rows"] if b else []) if r.get("benchmark") and x["kernel"] == r["benchmark"]]
            bench_txt = "; ".join(f"{x['ratio']:.2f}x vs {x['baseline']}" for x in ratios) or "none"
            chapters = ", ".join(f"[{Path(c).stem}](../{Path(c).with_suffix('').as_posix()}.ipynb)"
                                 for c in r.get("chapters", [])) or "none"
            lines.append(f"| `{r['name']}` | `{r.get('reference') or 'none'}` | {r.get('oracle') or 'none'} | "
                         f"{', '.join('`' + t + '`' for t in r.get('tests', [])) or 'none'} | {chapters} | "
                         f"{bench_txt} |")
    if b is not None:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from run_benchmarks import by_kernel
        lines += ["", "## Kernel speed", "",
                  "Each kernel's speed as ratios (baseline time over kernel time, median of interleaved repeats in "
                  "one run; above 1 means the kernel is faster) against up to three baselines: its own reference "
                  "(or an in-house alternative), the maintained library a user would otherwise call, and this "
                  "machine's limit for the same work measured in the same run (`benchmarks/roofline.py`: 1 = at "
                  "the limit, 0.5 = within 2x of it), from `make bench`"
                  + (" in quick mode (small sizes)" if b["quick"] else "")
                  + ("" if b["lib_hash"] == lib_hash() else " (measured on an older version of the library)")
                  + ".", "", "| kernel | shape | vs own reference | vs library | vs machine limit | work |",
                  "| --- | --- | --- | --- | --- | --- |"]
        cell = lambda xs: "; ".join(f"{x:.2f}x ({name})" for name, x in xs) or "none"  # noqa: E731
        lines += [f"| `{e['kernel']}` | {e['shape']} | {cell(e['reference'])} | {cell(e['library'])} | "
                  f"{cell(e['limit'])} | {e['work']} |" for e in by_kernel(b["rows"])]
    return "\n".join(lines) + "\n"


def main() -> int:
    records = stage()
    print(f"staged {len(records)} executed chapters in {SRC.relative_to(ROOT)}", flush=True)
    html = ROOT / "_build" / "html"
    if html.exists():
        shutil.rmtree(html)
    cmd = [str(Path(sys.executable).parent / "jupyter-book"), "build", str(SRC), "--path-output", str(ROOT),
           "-W", "--keep-going"]
    t0 = time.perf_counter()
    rc = subprocess.run(cmd).returncode
    print(f"jupyter-book finished in {time.perf_counter() - t0:.1f} s with exit code {rc}")
    return rc


if __name__ == "__main__":
    sys.exit(main())

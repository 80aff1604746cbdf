"""Checks of the built book (run by `make test` after tools/run_book.py and tools/build_site.py).

The ledger has a record with a verdict for every claim of every chapter; the site loads nothing from outside; a
headless Chromium opens the index, the status page and every chapter, and sees rendered math, loaded figures and
a sidebar listing every chapter.
"""
import json
import re
import shutil
from pathlib import Path

import pytest

from run_book import toc_notebooks

pytestmark = pytest.mark.book

ROOT = Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
CHAPTERS = toc_notebooks()
EXTERNAL_ATTR = re.compile(r"<(script|link|img|iframe|source|video|audio|embed)\b[^>]*\b(src|href)=[\"']((https?:)?//[^\"']+)",
                           re.I)
EXTERNAL_CSS = re.compile(r"(@import\s+url\(|url\()\s*[\"']?((https?:)?//[^\"')]+)", re.I)


@pytest.mark.parametrize("nb", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_each_chapter_has_a_record_with_verdicts(nb):
    rec = json.loads((ROOT / "_build" / "results" / f"{nb.stem}.json").read_text())
    assert rec["status"] == "ok" and rec["slug"] == nb.stem and rec["part"] == nb.parent.name
    paper = [c for c in rec["claims"] if c["kind"] in ("theorem", "empirical")]
    out_of_reach = [c for c in rec["claims"] if c["kind"] == "out of reach"]
    # a chapter checks at least one claim of its paper, or says for every claim which parameter decides it (a claim
    # that needs more runs than the default budget allows is out of reach at defaults, decided at -p n_seeds 8)
    assert paper or (out_of_reach and all(re.search(r"-p \w+|\b\w+=\w+", c["reason"]) for c in out_of_reach)), \
        "a chapter checks at least one claim of its paper, or names for each the parameter that decides it"
    assert rec["unexpected"] == [] and rec["strict"] is True
    assert all(c["verdict"] in ("reproduced", "not reproduced", "seed-dependent") for c in paper)
    assert all(c["verdict"] == "passed" for c in rec["claims"] if c["kind"] == "construction")
    assert all(c["reason"] for c in rec["claims"] if c["verdict"] in ("not reproduced", "seed-dependent", "out of reach"))
    assert all(c["source"].split(":")[0] in ("paper", "theorem", "baseline", "ours") for c in paper)
    assert {"seed", "device", "strict", "threads"} <= rec["parameters"].keys()
    assert rec["parameters"]["threads"] == 1 and rec["parameters"]["strict"] is True, "the book runs at defaults"
    assert all(p["help"] for p in rec["parameter_spec"]), "every parameter has a one-line meaning"
    # the budget every chapter keeps at its defaults: 60 CPU-seconds measured alone. On this machine's two
    # hyperthreads other load inflates CPU time by up to a quarter (swimba_moe_ssm: 56.2 alone, 69.9-73.4 beside
    # other work), so the test allows that much; a chapter over 60 alone is over budget whatever this test says.
    assert rec["cpu_time_s"] <= 60 * 1.25, f"{nb.stem} used {rec['cpu_time_s']} CPU-s at its defaults (60 + load)"
    assert rec["peak_memory_mib"] < 2048, f"{nb.stem} peaked at {rec['peak_memory_mib']} MiB (limit 2 GiB)"


def test_site_has_every_page():
    for page in ["index.html", "book/intro.html", "book/status.html", "book/api.html", "book/how-to-run.html",
                 "book/data.html", "book/registry.html",
                 *[nb.with_suffix(".html").as_posix() for nb in CHAPTERS]]:
        assert (HTML / page).exists(), page
    status = (HTML / "book" / "status.html").read_text()
    for nb in CHAPTERS:
        assert nb.stem in status
    assert "paperkit.ledger.Ledger" in (HTML / "book" / "api.html").read_text(), "autodoc rendered the API"


def test_site_loads_nothing_from_outside():
    offenders = []
    for f in HTML.rglob("*.html"):
        offenders += [f"{f.relative_to(HTML)}: {m.group(3)}" for m in EXTERNAL_ATTR.finditer(f.read_text())]
    for f in HTML.rglob("*.css"):
        offenders += [f"{f.relative_to(HTML)}: {m.group(2)}" for m in EXTERNAL_CSS.finditer(f.read_text())]
    assert offenders == []
    assert (HTML / "_static" / "mathjax" / "tex-chtml.js").exists(), "MathJax is served from the site"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    webdriver = pytest.importorskip("selenium.webdriver")
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        pytest.fail("Chromium is missing: `make browser-deps` installs Debian's chromium and chromium-driver")
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for flag in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--allow-file-access-from-files", f"--user-data-dir={tmp_path_factory.mktemp('chrome')}",
                 "--window-size=1400,1000"]:
        opts.add_argument(flag)
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    drv = webdriver.Chrome(options=opts, service=service)
    drv.set_page_load_timeout(60)
    yield drv
    drv.quit()


def open_page(drv, rel):
    drv.get((HTML / rel).as_uri())
    # wait until MathJax (when the page loads it) has typeset, and every image has finished loading
    drv.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const t0 = Date.now();
        (function poll() {
          const imgs = [...document.images].every(i => i.complete);
          const mj = !window.MathJax || (MathJax.startup && MathJax.startup.promise);
          if (imgs && mj) { (window.MathJax ? MathJax.startup.promise : Promise.resolve()).then(() => done(true)); }
          else if (Date.now() - t0 > 20000) { done(false); } else { setTimeout(poll, 100); }
        })();""")


def resources_loaded(drv):
    return drv.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")


def test_browser_index_and_sidebar(browser):
    from selenium.webdriver.support.ui import WebDriverWait

    # index.html is jupyter-book's redirect to the intro page: wait until the browser has followed it
    browser.get((HTML / "index.html").as_uri())
    WebDriverWait(browser, 20).until(lambda d: d.current_url.endswith("book/intro.html"))
    open_page(browser, "book/intro.html")
    links = browser.execute_script(
        "return [...document.querySelectorAll('.bd-sidebar a, nav.bd-links a')].map(a => a.getAttribute('href'))")
    for nb in CHAPTERS:
        assert any(nb.stem in (h or "") for h in links), f"sidebar lacks {nb.stem}"
    assert all(u.startswith("file:") for u in resources_loaded(browser))


def test_browser_status_page(browser):
    open_page(browser, "book/status.html")
    info = browser.execute_script("""return {
        rows: document.querySelectorAll('table.status-claims tbody tr').length,
        links: [...document.querySelectorAll('table.status-claims a')].map(a => a.getAttribute('href')),
        figure: [...document.querySelectorAll('article img')].map(i => i.naturalWidth)}""")
    records = [json.loads((ROOT / "_build" / "results" / f"{nb.stem}.json").read_text()) for nb in CHAPTERS]
    paper = [(r, c) for r in records for c in r["claims"] if c["kind"] != "construction"]
    assert info["rows"] == len(paper), "one row per paper claim"
    for r, c in paper:
        assert f"../notebooks/{r['part']}/{r['slug']}.html#claim-{c['id']}" in info["links"]
    assert info["figure"] and all(w > 0 for w in info["figure"]), "the summary figure loaded"


def test_browser_data_and_registry_pages(browser):
    open_page(browser, "book/data.html")
    data_rows = browser.execute_script("return document.querySelectorAll('article table tbody tr').length")
    assert data_rows >= 3
    open_page(browser, "book/registry.html")
    text = browser.execute_script("return document.querySelector('article').innerText")
    assert "Kernel speed" in text and "selective_scan" in text


WORKING_NOTES = re.compile(r"\bcards?\b|Claim\(id=|benchmarks/bench_|tests/test_|\bthe default now\b", re.I)


@pytest.mark.parametrize("nb", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_browser_chapter_math_and_figures(browser, nb):
    open_page(browser, nb.with_suffix(".html").as_posix())
    info = browser.execute_script("""return {
        imgs: [...document.querySelectorAll('article img')].map(i => [i.src, i.naturalWidth]),
        math: document.querySelectorAll('mjx-container').length,
        raw_tex: document.querySelectorAll('.math:not(:has(mjx-container))').length,
        errors: document.querySelectorAll('mjx-merror').length}""")
    assert len(info["imgs"]) >= 1, "a chapter has at least one figure"
    rec = json.loads((ROOT / "_build" / "results" / f"{nb.stem}.json").read_text())
    seen = browser.execute_script("""return {
        claim_rows: [...document.querySelectorAll('table.claim-table tbody tr[id^="claim-"]')].map(r => r.id),
        pipes: [...document.querySelectorAll('article p')].filter(p => p.innerText.trim().startsWith('|')).length,
        runbox: [...document.querySelectorAll('table.runbox-params tbody tr td:first-child code')].map(c => c.innerText),
        ladder: document.querySelectorAll('table.runbox-ladder tbody tr').length,
        download: [...document.querySelectorAll('.runbox a')].filter(a => (a.getAttribute('href') || '').endsWith('.ipynb')).length,
        text: document.querySelector('article').innerText}""")
    assert seen["claim_rows"] == [f"claim-{c['id']}" for c in rec["claims"] if c["kind"] != "construction"] + \
        [f"claim-{c['id']}" for c in rec["claims"] if c["kind"] == "construction"], "one table row per ledger claim"
    assert seen["pipes"] == 0, "no paragraph of raw pipe-table text"
    assert seen["runbox"] == [p["name"] for p in rec["parameter_spec"]], "the run box lists every parameter"
    assert seen["ladder"] >= 1 and seen["download"] == 1
    assert not WORKING_NOTES.findall(seen["text"]), WORKING_NOTES.findall(seen["text"])
    assert all(w > 0 for _, w in info["imgs"]), f"figures that did not load: {info['imgs']}"
    assert info["math"] >= 1 and info["raw_tex"] == 0 and info["errors"] == 0, info
    assert all(u.startswith("file:") for u in resources_loaded(browser))


def test_a_training_chapter_gives_identical_numbers_under_both_runners(tmp_path):
    """make test ran every chapter two at a time with one-thread caps; a reader's papermill (or make book with
    JOBS=1) runs with the machine's thread caps. The chapter computes with its own `threads` parameter either way,
    so every measured value must be identical."""
    import os
    import subprocess
    import sys

    slug = "attention_sinks_diagonal"   # trains a small Torch model: reductions that would split by thread
    nb = next(p for p in CHAPTERS if p.stem == slug)
    book = json.loads((ROOT / "_build" / "results" / f"{slug}.json").read_text())
    env = dict(os.environ, PAPERKIT_RESULTS=str(tmp_path), NUMBA_NUM_THREADS="2", OMP_NUM_THREADS="2",
               MKL_NUM_THREADS="2", PAPERKIT_THREADS="2")
    r = subprocess.run([sys.executable, "-m", "papermill", str(ROOT / nb), str(tmp_path / "out.ipynb"), "--cwd",
                        str((ROOT / nb).parent), "--no-progress-bar"], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    other = json.loads((tmp_path / f"{slug}.json").read_text())
    assert [(c["id"], c["measured"], c["verdict"]) for c in other["claims"]] == \
        [(c["id"], c["measured"], c["verdict"]) for c in book["claims"]]

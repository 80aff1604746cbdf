"""The harness catches what it must: cells that raise, failing claims, bad parameters; both papermill and nbmake
paths work; a failed run never replaces a good executed notebook or ledger record; unchanged chapters are cached."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
PY = sys.executable


def papermill(nb, out, results, *params, cwd=None):
    cmd = [PY, "-m", "papermill", str(nb), str(out), "--no-progress-bar"]
    for k, v in params:
        cmd += ["-p", k, str(v)]
    env = dict(os.environ, PAPERKIT_RESULTS=str(results))
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def test_papermill_path_writes_a_record(tmp_path):
    r = papermill(FIX / "good_claims.ipynb", tmp_path / "out.ipynb", tmp_path / "res", ("seed", 3))
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads((tmp_path / "res" / "fixture_good_claims.json").read_text())
    assert rec["seed"] == 3 and [c["verdict"] for c in rec["claims"]] == ["reproduced", "not reproduced"]


@pytest.mark.parametrize("fixture, message", [
    ("raises.ipynb", "this fixture raises on purpose"),
    ("failing_claim.ipynb", "ClaimFailed"),
])
def test_papermill_fails_on_broken_notebooks(tmp_path, fixture, message):
    r = papermill(FIX / fixture, tmp_path / "out.ipynb", tmp_path / "res")
    assert r.returncode != 0 and message in r.stderr + r.stdout


def chapter_and_size_knob():
    """The book's first chapter and the name of its size knob (read from its parameters cell)."""
    import nbformat
    from house_rules import SIZE_KNOBS
    from run_book import toc_notebooks
    nb_path = ROOT / toc_notebooks()[0]
    cell = next(c for c in nbformat.read(nb_path, as_version=4).cells if "parameters" in c.metadata.get("tags", []))
    return nb_path, SIZE_KNOBS.search(cell.source).group(1)


CHAPTER, SIZE = chapter_and_size_knob()


@pytest.mark.parametrize("name, value, message", [
    ("bogus", 1, "unknown parameter(s) ['bogus']; this chapter accepts: ["),
    ("seed", "abc", "parameter 'seed' must be an integer, got 'abc'"),
    ("seed", -3, "parameter 'seed' must be >= 0, got -3"),
    (SIZE, -1, f"parameter '{SIZE}' must be >= "),
    ("device", "cuda:99", "parameter 'device'='cuda:99' is not available on this machine; allowed: ['cpu'"),
])
def test_bad_parameters_stop_a_chapter_with_a_message(tmp_path, name, value, message):
    r = papermill(CHAPTER, tmp_path / "out.ipynb", tmp_path / "res", (name, value), cwd=CHAPTER.parent)
    assert r.returncode != 0 and message in r.stderr + r.stdout, (r.stderr + r.stdout)[-3000:]
    assert not (tmp_path / "res").exists(), "a run stopped by bad parameters writes no ledger record"


def test_nbmake_path(tmp_path):
    for nb in ("good_claims.ipynb", "failing_claim.ipynb"):
        shutil.copy(FIX / nb, tmp_path / nb)
    env = dict(os.environ, PAPERKIT_RESULTS=str(tmp_path / "res"))
    run = lambda nb: subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbmake", nb],
                                    cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    good, bad = run("good_claims.ipynb"), run("failing_claim.ipynb")
    assert good.returncode == 0, good.stdout[-2000:]
    assert bad.returncode != 0 and "ClaimFailed" in bad.stdout


def make_book(tmp_path, notebook):
    """A minimal book in tmp_path with one chapter, plus a copy of the tools, to run tools/run_book.py in."""
    book = tmp_path / "book"
    (book / "tools").mkdir(parents=True)
    for f in ("run_book.py",):
        shutil.copy(ROOT / "tools" / f, book / "tools" / f)
    shutil.copytree(ROOT / "lib", book / "lib")
    shutil.copy(ROOT / "requirements.txt", book / "requirements.txt")
    (book / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: notebooks/fix/chap\n")
    (book / "notebooks" / "fix").mkdir(parents=True)
    shutil.copy(notebook, book / "notebooks" / "fix" / "chap.ipynb")
    return book


def run_book(book):
    return subprocess.run([PY, str(book / "tools" / "run_book.py")], capture_output=True, text=True, timeout=300)


def test_run_book_caches_and_never_replaces_good_results(tmp_path):
    good = (FIX / "good_claims.ipynb").read_text().replace("fixture_good_claims", "chap")
    (tmp_path / "good.ipynb").write_text(good)
    book = make_book(tmp_path, tmp_path / "good.ipynb")
    first = run_book(book)
    assert first.returncode == 0, first.stdout + first.stderr
    executed, record = book / "_build/executed/fix/chap.ipynb", book / "_build/results/chap.json"
    assert executed.exists() and record.exists() and "1 to run" in first.stdout
    second = run_book(book)
    assert second.returncode == 0 and "0 to run" in second.stdout and "cached" in second.stdout

    # the same chapter now fails a claim: exit 1, the good notebook and record stay, the failure is kept beside
    good_nb, good_rec = executed.read_bytes(), record.read_bytes()
    bad = (FIX / "failing_claim.ipynb").read_text().replace("fixture_failing_claim", "chap")
    (book / "notebooks/fix/chap.ipynb").write_text(bad)
    third = run_book(book)
    assert third.returncode == 1 and "FAILED" in third.stdout and "ClaimFailed" in third.stdout
    assert executed.read_bytes() == good_nb and record.read_bytes() == good_rec
    assert (book / "_build/executed/fix/chap.failed.ipynb").exists()
    assert (book / "_build/results/chap.failed.json").exists()
    assert "ClaimFailed" in (book / "_build/executed/fix/chap.log").read_text()

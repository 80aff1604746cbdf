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
    assert rec["seed"] == 3
    assert [c["verdict"] for c in rec["claims"]] == ["reproduced", "not reproduced", "passed", "out of reach"]
    assert rec["unexpected"] == [] and rec["strict"] is True and rec["cpu_time_s"] > 0
    assert [p["name"] for p in rec["parameter_spec"]] == ["seed", "scale", "device", "strict", "threads"]
    assert rec["parameter_spec"][0]["help"] == "seed of the draws"


def test_non_strict_run_records_an_unexpected_verdict_and_finishes(tmp_path):
    res = tmp_path / "res"
    strict = papermill(FIX / "failing_claim.ipynb", tmp_path / "a.ipynb", res)
    assert strict.returncode != 0 and "strict False" in strict.stderr + strict.stdout
    loose = papermill(FIX / "failing_claim.ipynb", tmp_path / "b.ipynb", res, ("strict", False))
    assert loose.returncode == 0, loose.stderr[-2000:]
    rec = json.loads((res / "fixture_failing_claim.explore.json").read_text())
    assert rec["unexpected"] == ["C1"] and rec["claims"][0]["verdict"] == "not reproduced"
    assert not (res / "fixture_failing_claim.json").exists(), "an exploring run never writes the book's record"


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


def make_book(tmp_path, notebook, extra: dict | None = None):
    """A minimal book in tmp_path with one chapter (plus ``extra``: name -> notebook path), and a copy of the tools
    and the library, to run tools/run_book.py in."""
    book = tmp_path / "book"
    (book / "tools").mkdir(parents=True)
    for f in ("run_book.py",):
        shutil.copy(ROOT / "tools" / f, book / "tools" / f)
    shutil.copytree(ROOT / "lib", book / "lib", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(ROOT / "requirements.txt", book / "requirements.txt")
    chapters = {"chap": notebook, **(extra or {})}
    (book / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n"
                                   + "".join(f"  - file: notebooks/fix/{n}\n" for n in chapters))
    (book / "notebooks" / "fix").mkdir(parents=True)
    for name, nb in chapters.items():
        shutil.copy(nb, book / "notebooks" / "fix" / f"{name}.ipynb")
    return book


def run_book(book):
    env = dict(os.environ, PYTHONPATH=str(book / "lib"))  # the scratch book's own copy of paperkit
    return subprocess.run([PY, str(book / "tools" / "run_book.py"), "--jobs", "1"], capture_output=True, text=True,
                          timeout=300, env=env)


def test_cache_reruns_only_the_chapters_that_import_a_changed_module(tmp_path):
    import nbformat
    plain = (FIX / "good_claims.ipynb").read_text()
    paths = {}
    for name, extra_import in [("chap", ""), ("uses_knn", "from paperkit.geometry import knn\n"),
                               ("uses_grpo", "from paperkit.learning_dynamics import grpo\n")]:
        nb = nbformat.reads(plain.replace("fixture_good_claims", name), as_version=4)
        nb.cells[2].source = extra_import + nb.cells[2].source
        paths[name] = tmp_path / f"{name}.ipynb"
        nbformat.write(nb, paths[name])
    book = make_book(tmp_path, paths.pop("chap"), extra=paths)
    first = run_book(book)
    assert first.returncode == 0 and "3 to run" in first.stdout, first.stdout + first.stderr
    knn_py = book / "lib" / "paperkit" / "geometry" / "knn.py"
    knn_py.write_text(knn_py.read_text() + "\n# touched\n")
    second = run_book(book)
    assert second.returncode == 0 and "2 unchanged (cached), 1 to run" in second.stdout, second.stdout
    assert "start  notebooks/fix/uses_knn.ipynb" in second.stdout
    ledger_py = book / "lib" / "paperkit" / "ledger.py"   # the spine: every chapter imports it
    ledger_py.write_text(ledger_py.read_text() + "\n# touched\n")
    third = run_book(book)
    assert third.returncode == 0 and "0 unchanged (cached), 3 to run" in third.stdout, third.stdout


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
    assert third.returncode == 1 and "FAILED" in third.stdout and "ClaimFailed" in third.stdout, third.stdout
    assert executed.read_bytes() == good_nb and record.read_bytes() == good_rec
    assert (book / "_build/executed/fix/chap.failed.ipynb").exists()
    assert (book / "_build/results/chap.failed.json").exists()
    assert "ClaimFailed" in (book / "_build/executed/fix/chap.log").read_text()

"""The house rules hold for the book, and the checker catches notebooks that break them on purpose."""
import re
from pathlib import Path

import yaml

from house_rules import check_book, check_imports, check_notebook

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"


def test_the_book_meets_every_house_rule():
    assert check_book() == []


def test_checker_flags_network_access_and_installs():
    msgs = "\n".join(check_notebook(FIX / "network_access.ipynb"))
    assert "reaches the network" in msgs and "installs packages" in msgs
    assert "must validate them with params.parse" in msgs and "ledger.finish()" in msgs


def test_checker_accepts_the_good_fixture_apart_from_its_location():
    msgs = check_notebook(FIX / "good_claims.ipynb")
    # the fixture lives in tests/fixtures, so only the slug/part rule can object
    assert all("Ledger(...) must be created" in m for m in msgs), msgs


def test_checker_flags_committed_outputs_and_long_cells(tmp_path):
    import nbformat
    nb = nbformat.read(FIX / "good_claims.ipynb", as_version=4)
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", text="hi")]
    nb.cells[4].source = "\n".join(f"x{i} = {i}" for i in range(70))
    p = tmp_path / "nb.ipynb"
    nbformat.write(nb, p)
    msgs = "\n".join(check_notebook(p, require_ledger=False))
    assert "outputs are committed" in msgs and "over 60 lines" in msgs


def test_requirements_are_pinned_and_environment_yml_points_at_them():
    reqs = [ln for ln in (ROOT / "requirements.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[A-Za-z0-9_.+\-]+", r) for r in reqs), "every package pinned"
    assert "torch==2.13.0" in reqs
    for pkg in ("jupyter-book", "papermill", "nbclient", "nbmake", "numba", "numpy", "matplotlib"):
        assert any(r.lower().startswith(pkg + "==") for r in reqs), pkg
    jb = next(r for r in reqs if r.startswith("jupyter-book=="))
    assert jb.split("==")[1].startswith("1."), "Jupyter Book must stay on 1.x"
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    assert "python=3.11" in deps and "pip" in deps
    pip_section = next(d["pip"] for d in deps if isinstance(d, dict))
    assert "-r requirements.txt" in pip_section


def test_ci_runs_make_test_and_readme_documents_both_commands():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make book" in readme and "make test" in readme and "papermill" in readme and "--nbmake" in readme


def test_config_keeps_execution_off_and_toc_only():
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert cfg["only_build_toc_files"] is True
    assert cfg["execute"]["execute_notebooks"] == "off"
    assert "sphinx-mathjax-offline" in cfg["sphinx"]["extra_extensions"]


def test_api_page_documents_every_paperkit_module():
    api = (ROOT / "book" / "api.md").read_text()
    lib = ROOT / "lib"
    modules = sorted(p.relative_to(lib).with_suffix("").as_posix().replace("/", ".")
                     for p in (lib / "paperkit").rglob("*.py") if p.stem != "__init__")
    assert len(modules) > 30
    assert [m for m in modules if f"automodule:: {m}\n" not in api] == []


def test_library_layers_hold():
    assert check_imports() == []


def test_layer_check_catches_a_part_importing_another_part(tmp_path):
    lib = tmp_path / "lib" / "paperkit"
    for pkg in ("nn", "data", "geometry", "part_a", "part_b"):
        (lib / pkg).mkdir(parents=True)
        (lib / pkg / "__init__.py").write_text("")
    (lib / "claims.py").write_text("from paperkit.nn import net\n")          # spine must not import shared
    (lib / "nn" / "net.py").write_text("from paperkit import claims\n")      # fine
    (lib / "part_a" / "k.py").write_text("from paperkit.part_b import other\nfrom paperkit.nn import net\n")
    (lib / "part_b" / "other.py").write_text("from paperkit import part_a, params\n")
    msgs = "\n".join(check_imports(tmp_path))
    assert "claims.py: imports paperkit.nn" in msgs
    assert "part_a/k.py: imports paperkit.part_b" in msgs
    assert "part_b/other.py: imports paperkit (part_a)" in msgs
    assert "net.py" not in msgs and msgs.count("\n") == 2

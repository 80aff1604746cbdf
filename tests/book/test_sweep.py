"""tools/sweep.py on a real Dask LocalCluster with two worker processes, over a fixture chapter in a scratch book:
every point once, resumption, a killed worker, and bad input refused before any task starts."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


@pytest.fixture
def book(tmp_path):
    b = tmp_path / "book"
    (b / "tools").mkdir(parents=True)
    for f in ("run_book.py", "sweep.py"):
        shutil.copy(ROOT / "tools" / f, b / "tools" / f)
    shutil.copytree(ROOT / "lib", b / "lib", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(ROOT / "requirements.txt", b / "requirements.txt")
    (b / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: notebooks/fix/chap\n")
    (b / "notebooks" / "fix").mkdir(parents=True)
    nb = (ROOT / "tests" / "fixtures" / "good_claims.ipynb").read_text().replace("fixture_good_claims", "chap")
    (b / "notebooks" / "fix" / "chap.ipynb").write_text(nb)
    return b


def sweep_cli(book, *args):
    env = dict(os.environ, PYTHONPATH=str(book / "lib"))
    return subprocess.run([PY, str(book / "tools" / "sweep.py"), "chap", *args], capture_output=True, text=True,
                          env=env, cwd=book, timeout=600)


def points(book):
    return sorted(p.name for p in (book / "_build" / "sweeps" / "chap").iterdir() if p.is_dir())


def test_sweep_runs_every_point_once_and_resumes(book):
    r = sweep_cli(book, "--seeds", "0-2", "--params", "scale=1,2", "--workers", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "6 points, 0 already done, 6 to run" in r.stdout
    assert points(book) == [f"seed={s}_scale={c}" for s in range(3) for c in (1, 2)]
    import pandas as pd
    df = pd.read_csv(book / "_build" / "sweeps" / "chap" / "summary.csv")
    assert len(df) == 6 * 4 and set(df["claim"]) == {"C1", "C2", "K1", "O1"}, "one row per point and claim"
    assert set(df["verdict"]) == {"reproduced", "not reproduced", "passed", "out of reach"}
    assert len(pd.read_parquet(book / "_build" / "sweeps" / "chap" / "summary.parquet")) == len(df)
    # a rerun skips everything; an interrupted sweep (one point missing) runs only that point
    again = sweep_cli(book, "--seeds", "0-2", "--params", "scale=1,2", "--workers", "2")
    assert "6 already done, 0 to run" in again.stdout, again.stdout
    shutil.rmtree(book / "_build" / "sweeps" / "chap" / "seed=1_scale=2")
    resumed = sweep_cli(book, "--seeds", "0-2", "--params", "scale=1,2", "--workers", "2")
    assert resumed.returncode == 0 and "5 already done, 1 to run" in resumed.stdout, resumed.stdout
    assert len(points(book)) == 6


@pytest.mark.parametrize("args, message", [
    (["--params", "bogus=1"], "unknown parameter(s) ['bogus']"),
    (["--params", "scale=-1"], "parameter 'scale' must be >= 0.01, got -1.0"),
    (["--seeds", ","], "the grid is empty"),
    (["--seeds", "5-2"], "increasing range"),
    (["--params", "scale="], "scale has no values"),
    (["--scheduler", "tcp://127.0.0.1:9"], "unreachable"),
])
def test_bad_input_is_refused_before_any_task(book, args, message):
    r = sweep_cli(book, "--seeds", "0", *args) if "--seeds" not in args else sweep_cli(book, *args)
    assert r.returncode == 2 and message in r.stderr, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, "one line"
    assert not (book / "_build" / "sweeps" / "chap").exists() or not points(book)


def test_unknown_chapter(book):
    env = dict(os.environ, PYTHONPATH=str(book / "lib"))
    r = subprocess.run([PY, str(book / "tools" / "sweep.py"), "nochap"], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "unknown chapter 'nochap'" in r.stderr


KILL_DRIVER = """
import json, os, signal, sys, threading, time
from distributed import Client, LocalCluster
if __name__ == "__main__":
    sys.path.insert(0, sys.argv[1])
    import sweep
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("metas", sweep.sweep(
        "chap", [0, 1, 2, 3, 4, 5], {}, scheduler=cluster.scheduler_address, say=lambda m: None)))
    t.start()
    deadline = time.time() + 120
    while time.time() < deadline and not any(client.processing().values()):
        time.sleep(0.2)
    time.sleep(1.0)
    victim = next(iter(client.run(os.getpid).values()))
    os.kill(victim, signal.SIGKILL)
    t.join(timeout=500)
    print(json.dumps({"killed": victim, "metas": out.get("metas")}))
    client.close()
    cluster.close()
"""


def test_a_killed_worker_loses_no_point(book):
    driver = book / "kill_driver.py"
    driver.write_text(KILL_DRIVER)
    env = dict(os.environ, PYTHONPATH=str(book / "lib"))
    r = subprocess.run([PY, str(driver), str(book / "tools")], capture_output=True, text=True, env=env, cwd=book,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    metas = res["metas"]
    assert [m["point"]["seed"] for m in metas] == [0, 1, 2, 3, 4, 5] and all(m["status"] == "ok" for m in metas)
    assert points(book) == [f"seed={s}" for s in range(6)], "every point present exactly once"
    assert not [p for p in (book / "_build" / "sweeps" / "chap").iterdir() if p.name.startswith(".")], \
        "the killed run's temporary folder is cleaned up"
    for m in metas:
        rec = json.loads((book / "_build" / "sweeps" / "chap" / f"seed={m['point']['seed']}" / "point.json").read_text())
        assert rec["record"]["seed"] == m["point"]["seed"]

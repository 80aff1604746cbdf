import json

import numpy as np
import pytest

from paperkit import params
from paperkit.claims import Claim, ClaimFailed, Control, decide
from paperkit.ledger import Ledger, claim_tables_html, headline, write_json_atomic


def make(**kw):
    base = dict(id="C1", text="t", kind="empirical", measured=2.0, op=">=", threshold=1.0, source="paper: 1.0")
    return decide(Claim(**{**base, **kw}))


@pytest.mark.parametrize("op, measured, passed", [(">=", 1.0, True), (">", 1.0, False), ("<=", 1.0, True),
                                                  ("<", 0.5, True), ("==", 1.0, True), ("==", 1.1, False)])
def test_comparisons(op, measured, passed):
    c = make(op=op, measured=measured, threshold=1.0)
    assert c.passed is passed and c.verdict == ("reproduced" if passed else "not reproduced")
    assert c.as_expected is passed


def test_a_control_that_passes_makes_the_claim_inconclusive():
    assert make(control=Control(0.5, "ingredient removed")).verdict == "reproduced"
    c = make(control=Control(1.5, "ingredient removed"))
    assert c.passed and c.control_rejected is False and c.verdict == "inconclusive" and not c.as_expected


def test_per_seed_controls_must_all_be_rejected():
    assert make(control=Control(np.array([0.1, 0.2]), "naive")).control_rejected is True
    assert make(control=Control([0.1, 1.2], "naive")).verdict == "inconclusive"


def test_declared_not_reproduced_and_surprises():
    c = make(measured=0.1, expect="not reproduced", reason="too small a model")
    assert c.verdict == "not reproduced" and c.as_expected
    surprise = make(measured=3.0, expect="not reproduced", reason="r")
    assert surprise.verdict == "reproduced" and not surprise.as_expected


def test_seed_dependent_verdict_from_per_seed_values():
    c = make(per_seed=[0.5, 2.0, 3.0], measured=None, expect="seed-dependent", reason="flips")
    assert c.verdict == "seed-dependent" and c.share == pytest.approx(2 / 3) and c.measured == 2.0 and c.as_expected
    assert make(per_seed=[2.0, 3.0], measured=None).verdict == "reproduced"
    assert make(per_seed=[0.0, 0.5], measured=None).verdict == "not reproduced"
    # a claim declared reproduced that passes at only some seeds is not reproduced at the book's standard
    assert not make(per_seed=[0.0, 2.0], measured=None).as_expected


def test_construction_checks_are_not_paper_claims():
    c = make(kind="construction", source="")
    assert c.verdict == "passed" and not c.counts
    broken = make(kind="construction", source="", measured=0.0)
    assert broken.verdict == "broken" and not broken.as_expected
    with pytest.raises(ValueError, match="must pass"):
        make(kind="construction", expect="not reproduced", reason="r")


def test_out_of_reach_needs_a_reason_and_no_measurement():
    c = decide(Claim(id="O1", text="LLMs", kind="out of reach", reason="no LLM here"))
    assert c.verdict == "out of reach" and c.counts and c.as_expected
    with pytest.raises(ValueError, match="needs a reason"):
        Claim(id="O1", text="LLMs", kind="out of reach")
    with pytest.raises(ValueError, match="no measurement"):
        Claim(id="O1", text="LLMs", kind="out of reach", reason="r", measured=1.0)


@pytest.mark.parametrize("kw, msg", [({"kind": "hunch"}, "kind"), ({"op": "~"}, "op"),
                                     ({"expect": "not reproduced"}, "needs a reason"),
                                     ({"expect": "seed-dependent", "reason": "r"}, "per_seed"),
                                     ({"measured": float("nan")}, "NaN"), ({"measured": "high"}, "number"),
                                     ({"source": ""}, "where the threshold comes from"),
                                     ({"source": "gut: feeling"}, "where the threshold comes from"),
                                     ({"source": "ours: x"}, "margin over seeds"),
                                     ({"per_seed": [1.0], "measured": None}, "at least 2 seeds"),
                                     ({"id": "C 1"}, "without spaces")])
def test_bad_claims_are_rejected(kw, msg):
    with pytest.raises(ValueError, match=msg):
        make(**kw)


def cfg(seed=0, **extra):
    return params.parse({"seed": seed, **extra}, {"seed": params.Int(min=0, help="seed")})


def test_finish_writes_record_and_html_tables(results_dir):
    led = Ledger("demo", "Demo", "part", cfg(4))
    led.claim("C1", "two beats one", kind="theorem", measured=2, op=">", threshold=1, paper=2.5,
              source="theorem: arithmetic", control=Control(0.0, "nothing"))
    led.construction("K1", "kernel equals reference", measured=0.0, op="<", threshold=1e-9)
    led.out_of_reach("O1", "holds for LLMs", "no LLM on a CPU")
    led.scale_ladder(("larger CPU run", "-p scale 4", "about 1 min here"))
    out = led.finish()
    rec = json.loads((results_dir / "demo.json").read_text())
    assert rec["seed"] == 4 and rec["claims"][0]["verdict"] == "reproduced" and rec["status"] == "ok"
    assert {"run_time_s", "cpu_time_s", "peak_memory_mib", "versions", "git_commit", "lib_hash"} <= rec.keys()
    assert rec["parameter_spec"][0] == {"name": "seed", "default": 4, "allowed": "integer >= 0", "help": "seed",
                                        "book": False}
    assert rec["scale_ladder"] == [{"label": "larger CPU run", "args": "-p scale 4", "cost": "about 1 min here"}]
    assert "_spec" not in rec["parameters"] and rec["parameters"]["threads"] == 1
    assert out.data.count("<table") == 1 and out.data.count("<tbody") == 2 and '<tr id="claim-C1">' in out.data and '<tr id="claim-K1">' in out.data
    assert out.data.index("claim-O1") < out.data.index("claim-K1"), "construction checks come in their own table"
    assert "2.5" in out.data and "seed 4" in out.data and "|" not in out.data.replace("&#x27;", "")
    assert headline(rec) == {"reproduced": 1, "not reproduced": 0, "seed-dependent": 0, "inconclusive": 0,
                             "out of reach": 1}


def test_table_escapes_html_and_shows_reasons():
    rec = {"claims": [make(measured=0.1, expect="not reproduced", reason="tiny <model>", text="a < b").as_dict()]}
    html = claim_tables_html(rec)
    assert "tiny &lt;model&gt;" in html and "a &lt; b" in html and "not reproduced" in html


def test_unexpected_verdict_raises_in_strict_mode_and_keeps_the_good_record(results_dir):
    good = Ledger("demo", "Demo", "part", cfg())
    good.claim("C1", "ok", kind="theorem", measured=2, op=">", threshold=1, source="theorem: t")
    good.finish()
    before = (results_dir / "demo.json").read_text()
    bad = Ledger("demo", "Demo", "part", cfg(1))
    with pytest.raises(ClaimFailed, match=r"C1: 0 > 1 -> not reproduced; UNEXPECTED"):
        bad.claim("C1", "ok", kind="theorem", measured=0, op=">", threshold=1, source="theorem: t")
    assert (results_dir / "demo.json").read_text() == before
    assert json.loads((results_dir / "demo.failed.json").read_text())["status"] == "failed"


def test_non_strict_records_surprises_and_never_writes_the_book_record(results_dir):
    led = Ledger("demo", "Demo", "part", cfg(2, strict=False))
    c = led.claim("C1", "ok", kind="theorem", measured=0, op=">", threshold=1, source="theorem: t")
    assert c.verdict == "not reproduced" and not c.as_expected
    led.construction("K1", "broken on purpose", measured=1, op="<", threshold=0)
    out = led.finish()
    rec = json.loads((results_dir / "demo.explore.json").read_text())
    assert rec["unexpected"] == ["C1", "K1"] and not (results_dir / "demo.json").exists()
    assert out.data.count("unexpected") == 2


def test_finish_without_claims_fails(results_dir):
    with pytest.raises(ClaimFailed, match="no claims"):
        Ledger("demo", "Demo", "part", cfg()).finish()
    led = Ledger("demo", "Demo", "part", cfg())
    led.out_of_reach("O1", "x", "no way")
    with pytest.raises(ClaimFailed, match="no claims"):
        led.finish()


def test_atomic_write_leaves_old_file_on_error(tmp_path):
    f = tmp_path / "r.json"
    write_json_atomic(f, {"a": 1})
    with pytest.raises(TypeError):
        write_json_atomic(f, {"a": object()})
    assert json.loads(f.read_text()) == {"a": 1} and list(tmp_path.iterdir()) == [f]


def test_notes_accept_numpy_arrays_and_scalars(results_dir):
    led = Ledger("demo", "Demo", "part", cfg())
    led.note("curve", np.arange(3.0))
    led.note("value", np.float64(0.5))
    led.claim("C1", "ok", kind="theorem", measured=np.float32(2), op=">", threshold=1, source="theorem: t")
    led.finish()
    rec = json.loads((results_dir / "demo.json").read_text())
    assert rec["notes"] == {"curve": [0.0, 1.0, 2.0], "value": 0.5}


def test_a_run_away_from_the_notebook_defaults_never_writes_the_book_record(results_dir, tmp_path, monkeypatch):
    book = tmp_path / "book"
    (book / "notebooks" / "part").mkdir(parents=True)
    (book / "_toc.yml").write_text("format: jb-book\n")
    cell = {"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": ["seed = 0\n", "n = 3  # size\n"]}
    (book / "notebooks" / "part" / "demo.ipynb").write_text(json.dumps({"cells": [cell]}))
    monkeypatch.chdir(book)
    monkeypatch.setattr("paperkit.provenance.repo_root", lambda: book)
    spec = {"seed": params.Int(min=0, help="seed"), "n": params.Int(min=1, help="size")}
    for values, name in [({"seed": 0, "n": 3}, "demo.json"), ({"seed": 0, "n": 4}, "demo.explore.json"),
                         ({"seed": 0, "n": 3, "threads": 2}, "demo.explore.json"),
                         ({"seed": 0, "n": 3, "strict": False}, "demo.json")]:
        for f in results_dir.glob("*.json"):
            f.unlink()
        led = Ledger("demo", "Demo", "part", params.parse(values, spec))
        led.claim("C1", "ok", kind="theorem", measured=2, op=">", threshold=1, source="theorem: t")
        led.finish()
        assert sorted(f.name for f in results_dir.glob("*.json")) == [name], values

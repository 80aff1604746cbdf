import json

import pytest

from paperkit import params
from paperkit.claims import Claim, ClaimFailed, Control, decide
from paperkit.ledger import Ledger, claim_table, write_json_atomic


def make(**kw):
    base = dict(id="C1", text="t", kind="empirical", measured=2.0, op=">=", threshold=1.0)
    return decide(Claim(**{**base, **kw}))


@pytest.mark.parametrize("op, measured, passed", [(">=", 1.0, True), (">", 1.0, False), ("<=", 1.0, True),
                                                  ("<", 0.5, True), ("==", 1.0, True), ("==", 1.1, False)])
def test_comparisons(op, measured, passed):
    c = make(op=op, measured=measured, threshold=1.0)
    assert c.passed is passed and c.verdict == ("reproduced" if passed else "failed")


def test_control_must_be_rejected():
    assert make(control=Control(0.5, "ingredient removed")).verdict == "reproduced"
    c = make(control=Control(1.5, "ingredient removed"))
    assert c.passed and c.control_rejected is False and c.verdict == "failed"


def test_declared_not_reproduced():
    c = make(measured=0.1, expect="not reproduced", reason="too small a model")
    assert c.verdict == "not reproduced"
    assert make(measured=3.0, expect="not reproduced", reason="r").verdict == "reproduced"


@pytest.mark.parametrize("kw, msg", [({"kind": "hunch"}, "kind"), ({"op": "~"}, "op"),
                                     ({"expect": "not reproduced"}, "needs a reason"),
                                     ({"measured": float("nan")}, "NaN"), ({"measured": "high"}, "number")])
def test_bad_claims_are_rejected(kw, msg):
    with pytest.raises(ValueError, match=msg):
        make(**kw)


def cfg(seed=0):
    return params.parse({"seed": seed}, {"seed": params.Int(min=0)})


def test_finish_writes_record_and_table(results_dir):
    led = Ledger("demo", "Demo", "part", cfg(4))
    led.claim("C1", "two beats one", kind="theorem", measured=2, op=">", threshold=1, paper=2.5,
              control=Control(0.0, "nothing"))
    md = led.finish()
    rec = json.loads((results_dir / "demo.json").read_text())
    assert rec["seed"] == 4 and rec["claims"][0]["verdict"] == "reproduced" and rec["status"] == "ok"
    assert {"run_time_s", "peak_memory_mib", "versions", "git_commit", "lib_hash"} <= rec.keys()
    assert "| **C1** two beats one" in md.data and "2.5" in md.data and "seed 4" in md.data


def test_failed_claim_raises_and_keeps_the_good_record(results_dir):
    good = Ledger("demo", "Demo", "part", cfg())
    good.claim("C1", "ok", kind="theorem", measured=2, op=">", threshold=1)
    good.finish()
    before = (results_dir / "demo.json").read_text()
    bad = Ledger("demo", "Demo", "part", cfg(1))
    with pytest.raises(ClaimFailed, match="C1: 0 > 1 -> failed"):
        bad.claim("C1", "ok", kind="theorem", measured=0, op=">", threshold=1)
    assert (results_dir / "demo.json").read_text() == before
    assert json.loads((results_dir / "demo.failed.json").read_text())["status"] == "failed"


def test_finish_without_claims_fails(results_dir):
    with pytest.raises(ClaimFailed, match="no claims"):
        Ledger("demo", "Demo", "part", cfg()).finish()


def test_atomic_write_leaves_old_file_on_error(tmp_path):
    f = tmp_path / "r.json"
    write_json_atomic(f, {"a": 1})
    with pytest.raises(TypeError):
        write_json_atomic(f, {"a": object()})
    assert json.loads(f.read_text()) == {"a": 1} and list(tmp_path.iterdir()) == [f]


def test_claim_table_marks_not_reproduced():
    rec = {"claims": [make(measured=0.1, expect="not reproduced", reason="tiny").as_dict()]}
    assert "**not reproduced** (tiny)" in claim_table(rec)


def test_notes_accept_numpy_arrays_and_scalars(results_dir):
    import numpy as np
    led = Ledger("demo", "Demo", "part", cfg())
    led.note("curve", np.arange(3.0))
    led.note("value", np.float64(0.5))
    led.claim("C1", "ok", kind="theorem", measured=np.float32(2), op=">", threshold=1)
    led.finish()
    rec = json.loads((results_dir / "demo.json").read_text())
    assert rec["notes"] == {"curve": [0.0, 1.0, 2.0], "value": 0.5}

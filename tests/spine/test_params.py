import pytest

from paperkit import params
from paperkit.params import ParameterError

SPEC = {"seed": params.Int(min=0), "scale": params.Float(min=0.1, max=10), "device": params.Device(),
        "mode": params.Choice(("a", "b"))}
GOOD = {"seed": 3, "scale": 2, "device": "cpu", "mode": "a"}


def test_good_parameters_pass_and_are_converted():
    cfg = params.parse(dict(GOOD, np=__import__("numpy"), _hidden=1, In=[], Out={}), SPEC)
    assert cfg.seed == 3 and cfg.scale == 2.0 and isinstance(cfg.scale, float) and cfg.device == "cpu"


def test_imported_functions_and_classes_are_not_parameters():
    assert params.parse(dict(GOOD, parse=params.parse, Int=params.Int), SPEC).mode == "a"


@pytest.mark.parametrize("bad, message", [
    ({"bogus": 1}, r"unknown parameter\(s\) \['bogus'\]; this chapter accepts: \['device', 'mode', 'scale', 'seed', 'strict', 'threads'\]"),
    ({"seed": 1.5}, r"parameter 'seed' must be an integer, got 1.5"),
    ({"seed": True}, r"parameter 'seed' must be an integer"),
    ({"seed": "0"}, r"parameter 'seed' must be an integer"),
    ({"seed": -1}, r"parameter 'seed' must be >= 0, got -1"),
    ({"scale": -2.0}, r"parameter 'scale' must be >= 0.1, got -2.0"),
    ({"scale": 1e9}, r"parameter 'scale' must be <= 10"),
    ({"scale": float("nan")}, r"parameter 'scale' must be a number, got NaN"),
    ({"scale": "big"}, r"parameter 'scale' must be a number"),
    ({"device": "cuda:7"}, r"parameter 'device'='cuda:7' is not available on this machine; allowed: \["),
    ({"device": 0}, r"parameter 'device' must be a device string"),
    ({"mode": "c"}, r"parameter 'mode' must be one of \['a', 'b'\], got 'c'"),
])
def test_bad_parameters_fail_naming_the_parameter(bad, message):
    with pytest.raises(ParameterError, match=message):
        params.parse(dict(GOOD, **bad), SPEC)


def test_missing_parameter_is_reported():
    with pytest.raises(ParameterError, match=r"\['mode'\] missing"):
        params.parse({k: v for k, v in GOOD.items() if k != "mode"}, SPEC)


LIST_SPEC = {"sizes": params.List(params.Int(min=1, max=100), min_len=2, max_len=4, increasing=True),
             "scales": params.List(params.Float(min=0.0))}


def test_list_items_are_checked_and_converted():
    cfg = params.parse({"sizes": (2, 8, 32), "scales": [1, 0.5]}, LIST_SPEC)
    assert cfg.sizes == [2, 8, 32] and cfg.scales == [1.0, 0.5] and all(isinstance(s, float) for s in cfg.scales)


@pytest.mark.parametrize("bad, message", [
    ({"sizes": 8}, r"parameter 'sizes' must be a list, got 8"),
    ({"sizes": "8,16"}, r"parameter 'sizes' must be a list"),
    ({"sizes": [8]}, r"parameter 'sizes' must have 2 to 4 items, got 1"),
    ({"sizes": [1, 2, 3, 4, 5]}, r"parameter 'sizes' must have 2 to 4 items, got 5"),
    ({"sizes": [8, 8]}, r"parameter 'sizes' must be strictly increasing"),
    ({"sizes": [8, 1000]}, r"parameter 'sizes\[1\]' must be <= 100, got 1000"),
    ({"sizes": [8, 9.5]}, r"parameter 'sizes\[1\]' must be an integer"),
    ({"scales": [1.0, -1.0]}, r"parameter 'scales\[1\]' must be >= 0.0"),
    ({"scales": []}, r"parameter 'scales' must have 1 to 64 items, got 0"),
])
def test_bad_lists_fail_naming_the_item(bad, message):
    with pytest.raises(ParameterError, match=message):
        params.parse(dict({"sizes": [2, 8], "scales": [1.0]}, **bad), LIST_SPEC)


def test_book_parameters_have_defaults_and_are_checked():
    spec = {"seed": params.Int(min=0, help="seed")}
    cfg = params.parse({"seed": 1}, spec)
    assert cfg.strict is True and cfg.threads == 1
    assert [r["name"] for r in cfg._spec] == ["seed", "strict", "threads"] and cfg._spec[0]["help"] == "seed"
    assert params.parse({"seed": 1, "strict": False, "threads": 2}, spec).threads == 2
    with pytest.raises(ParameterError, match="parameter 'strict' must be True or False, got 'no'"):
        params.parse({"seed": 1, "strict": "no"}, spec)
    with pytest.raises(ParameterError, match="parameter 'threads' must be >= 1, got 0"):
        params.parse({"seed": 1, "threads": 0}, spec)


def test_rules_describe_what_they_allow():
    assert params.Int(min=0).describe() == "integer >= 0"
    assert params.Float(min=0.1, max=5).describe() == "number in [0.1, 5]"
    assert params.Choice(("a", "b")).describe() == "one of 'a', 'b'"
    assert params.List(params.Int(min=1), min_len=2, increasing=True).describe() == \
        "list of 2-64 items, strictly increasing, each integer >= 1"

"""One generic suite over every registered kernel (scikit-learn's check_estimator style).

Each kernel module declares ``KERNELS`` (see :mod:`paperkit.contracts`); tools/kernel_registry.py discovers them.
"""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch

from kernel_registry import discover, modules_with_reference

KERNELS = discover()
IDS = [k.name for k in KERNELS]
ERRORS = (ValueError, TypeError)


def _dtype_name(x) -> str:
    return str(x.dtype).replace("torch.", "")


def _is_array(x) -> bool:
    return isinstance(x, (np.ndarray, torch.Tensor))


def _cast(x, dtype: str):
    if isinstance(x, torch.Tensor):
        return x.to(getattr(torch, dtype))
    return np.asarray(x).astype(dtype)


def _copy(x):
    return x.clone() if isinstance(x, torch.Tensor) else np.array(x, copy=True)


def _inputs(kernel, size, seed=0, dtype=None):
    kw = kernel.make_inputs(np.random.default_rng(seed), size)
    if dtype is not None:
        for a in kernel.contract.args:
            x = kw.get(a.name)
            if _is_array(x) and _dtype_name(x).startswith("float") and dtype in a.dtypes:
                kw[a.name] = _cast(x, dtype)
    return kw


def _flatten(out):
    """A kernel's output as a list of float64 arrays (tuples, dataclasses and dicts of arrays)."""
    if isinstance(out, dict):
        return [v for k in sorted(out) for v in _flatten(out[k])]
    if isinstance(out, (tuple, list)):
        return [v for o in out for v in _flatten(o)]
    if hasattr(out, "__dataclass_fields__"):
        return [v for f in out.__dataclass_fields__ for v in _flatten(getattr(out, f))]
    if isinstance(out, torch.Tensor):
        return [out.detach().to(torch.float64).numpy()]
    if isinstance(out, int) and not isinstance(out, bool):
        return [np.array(out, dtype=object)]  # big integers (group elements) compare exactly
    return [np.asarray(out, dtype=np.float64)]


def _assert_close(a, b, tol):
    rtol, atol = tol
    fa, fb = _flatten(a), _flatten(b)
    assert len(fa) == len(fb)
    for x, y in zip(fa, fb):
        if x.dtype == object:
            assert x == y
        else:
            np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


def _names(msg: str, names) -> bool:
    return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", msg) for n in names)


def _expect_error(kernel, kw, names, exc=ERRORS):
    """Both the kernel and its reference refuse ``kw`` with ``exc`` naming one of ``names``."""
    for f in (kernel.fn, kernel.reference):
        if f is None:
            continue
        with pytest.raises(exc) as info, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f(**kw)
        assert _names(str(info.value), names), f"{f.__name__}: error {info.value!r} does not name {names}"


def _array_args(kernel, kw):
    return [a for a in kernel.contract.args if _is_array(kw.get(a.name))]


def _set_first(x, value):
    x = _copy(x)
    x.reshape(-1)[0] = value
    return x


# --------------------------------------------------------------------------------------------------- registry

def test_registry_is_not_empty_and_names_are_unique():
    assert len(KERNELS) >= 10
    assert len(set(IDS)) == len(IDS)


def test_every_module_with_a_reference_registers_a_kernel():
    registered = {k.fn.__module__ for k in KERNELS}
    missing = sorted(set(modules_with_reference()) - registered)
    assert not missing, f"modules with a *_ref function but no KERNELS entry: {missing}"


def test_every_declared_argument_exists():
    for k in KERNELS:
        kw = k.make_inputs(np.random.default_rng(0), 3)
        for a in k.contract.args:
            assert a.name in kw, f"{k.name}: contract argument {a.name} not among the inputs"


# --------------------------------------------------------------------------------------------------- checks

@pytest.mark.parametrize("kernel", KERNELS, ids=IDS)
def test_agrees_with_reference(kernel):
    if kernel.reference is None:
        pytest.skip("no reference")
    for dtype, tol in kernel.tol.items():
        for seed in (0, 1):
            kw = _inputs(kernel, 7, seed, dtype)
            _assert_close(kernel.fn(**kw), kernel.reference(**_inputs(kernel, 7, seed, dtype)), tol)


@pytest.mark.parametrize("kernel", KERNELS, ids=IDS)
def test_empty_input(kernel):
    c = kernel.contract
    kw = _inputs(kernel, 0)
    if c.empty == "error":
        _expect_error(kernel, kw, [a.name for a in c.args] or list(kw))
        return
    out = kernel.fn(**kw)
    if c.empty_value is not None:
        _assert_close(out, c.empty_value(kw), (1e-12, 1e-12))
    if kernel.reference is not None:
        _assert_close(out, kernel.reference(**_inputs(kernel, 0)), kernel.tol.get("float64", (1e-12, 1e-12)))


@pytest.mark.parametrize("kernel", KERNELS, ids=IDS)
def test_size_one_input(kernel):
    kw = _inputs(kernel, 1)
    if not kernel.contract.size_one:
        _expect_error(kernel, kw, [a.name for a in kernel.contract.args] or list(kw))
        return
    out = kernel.fn(**kw)
    if kernel.reference is not None:
        _assert_close(out, kernel.reference(**_inputs(kernel, 1)), kernel.tol.get("float64", (1e-10, 1e-12)))


@pytest.mark.parametrize("kernel", KERNELS, ids=IDS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
def test_nonfinite_refused(kernel, bad):
    kw0 = _inputs(kernel, 5)
    for a in _array_args(kernel, kw0):
        if not a.finite or not _dtype_name(kw0[a.name]).startswith("float"):
            continue
        kw = _inputs(kernel, 5)
        kw[a.name] = _set_first(kw[a.name], bad)
        _expect_error(kernel, kw, [a.name], ValueError)


@pytest.mark.parametrize("kernel", KERNELS, ids=IDS)
def test_out_of_range_refused(kernel):
    kw0 = _inputs(kernel, 5)
    for a in _array_args(kernel, kw0):
        for bound, step in ((a.low, -1), (a.high, +1)):
            if bound is None:
                continue
            kw = _inputs(kernel, 5)
            x = kw[a.name]
            bad = bound + step * max(1.0, abs(bound)) * 0.5 if _dtype_name(x).startswith("float") else bound + step
            kw[a.name] = _set_first(x, bad)
            _expect_error(kernel, kw, [a.name], ValueError)


@pytest.mark.parametrize("kernel", KERNELS, ids=IDS)
def test_wrong_dtype_refused(kernel):
    kw0 = _inputs(kernel, 5)
    for a in _array_args(kernel, kw0):
        kw = _inputs(kernel, 5)
        x = kw[a.name]
        bad = "complex128" if isinstance(x, np.ndarray) else "complex64"
        if bad in a.dtypes:
            continue
        kw[a.name] = _cast(x, bad)
        _expect_error(kernel, kw, [a.name])


@pytest.mark.parametrize("kernel", KERNELS, ids=IDS)
def test_mismatched_dtypes_refused(kernel):
    kw0 = _inputs(kernel, 5)
    for a in _array_args(kernel, kw0):
        if a.same_dtype_as is None:
            continue
        for mine, other in (("float32", "float64"), ("float64", "float32")):
            kw = _inputs(kernel, 5, dtype=other)
            kw[a.name] = _cast(kw[a.name], mine)
            _expect_error(kernel, kw, [a.name, a.same_dtype_as])


@pytest.mark.parametrize("kernel", KERNELS, ids=IDS)
def test_wrong_shape_refused(kernel):
    kw0 = _inputs(kernel, 5)
    for a in _array_args(kernel, kw0):
        if a.ndim is None:
            continue
        kw = _inputs(kernel, 5)
        kw[a.name] = kw[a.name][..., None]
        _expect_error(kernel, kw, [a.name])


@pytest.mark.parametrize("kernel", KERNELS, ids=IDS)
def test_extreme_scale_is_finite_or_refused(kernel):
    kw0 = _inputs(kernel, 5)
    scaled = [a for a in _array_args(kernel, kw0) if a.scale]
    if not scaled:
        pytest.skip("no scale arguments")
    kw = _inputs(kernel, 5, dtype="float64")
    for a in scaled:
        kw[a.name] = _cast(kw[a.name], "float64") * 1e200
    for f in (kernel.fn, kernel.reference):
        if f is None:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)
                out = f(**kw)
        except ERRORS as e:
            assert _names(str(e), [a.name for a in scaled]), f"{f.__name__}: {e!r} names none of the scaled args"
            continue
        for x in _flatten(out):
            assert np.all(np.isfinite(x)), f"{f.__name__}: silent overflow at scale 1e200"

"""One contract for the library's hot kernels: what each accepts, what it computes, what it is checked against.

A kernel module declares its hot kernels (those with a reference implementation or a benchmark) in a module-level
list ``KERNELS = [Kernel(...), ...]``. One generic test suite (tests/contracts/test_kernel_contracts.py) runs the
same checks on every registered kernel, in the spirit of scikit-learn's ``check_estimator``:

* agreement with ``reference`` on random inputs from ``make_inputs(rng, size)`` at the tolerance ``tol[dtype]``;
* empty inputs (``size = 0``) and size-one inputs (``size = 1``): an error naming an argument, or the documented
  value;
* NaN and inf in every array argument whose contract requires finite values: a ``ValueError`` naming it;
* a dtype outside ``dtypes`` (complex, say) and two arguments of different float dtypes where ``same_dtype_as``
  asks for one: an error, never a silent cast;
* an extra axis on every array argument: an error naming it;
* values outside ``low``/``high``: a ``ValueError`` naming the argument;
* extreme scales (every ``scale`` argument multiplied by 1e200): a finite result or an error naming it, never a
  silent overflow.

Every error must be a ``ValueError`` or ``TypeError`` whose message names the offending argument. Discovery of the
registered kernels lives outside the library (tools/kernel_registry.py), so this module imports nothing of it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Arg:
    """One array argument of a kernel.

    ``dtypes``: the allowed dtype names (``"float32"``, ``"float64"``, ``"int64"``, ``"bool"``; NumPy or Torch).
    ``ndim``: its number of axes (None: any). ``finite``: NaN/inf must be refused. ``low``/``high``: the closed
    range of allowed values (None: unbounded). ``same_dtype_as``: another argument whose dtype it must share.
    ``scale``: multiplying it by 1e200 must give a finite result or a clear error (coordinates, scores).
    """

    name: str
    dtypes: tuple[str, ...] = ("float32", "float64")
    ndim: int | None = None
    finite: bool = True
    low: float | None = None
    high: float | None = None
    same_dtype_as: str | None = None
    scale: bool = False


@dataclass(frozen=True)
class Contract:
    """What a kernel accepts. ``args``: its array arguments (kernels on models or objects list none).

    ``empty``: what ``make_inputs(rng, 0)`` must give: ``"error"`` (a ValueError/TypeError naming an argument) or
    ``"value"`` (the documented result ``empty_value(inputs)``, compared at the float64 tolerance; or None to check
    only that the reference gives the same). ``size_one``: whether ``make_inputs(rng, 1)`` is valid input.
    ``shapes``: the shape relations, in words (for the registry page).
    """

    args: tuple[Arg, ...] = ()
    empty: str = "error"
    empty_value: Callable[[dict], Any] | None = None
    size_one: bool = True
    shapes: str = ""

    def __post_init__(self):
        if self.empty not in ("error", "value"):
            raise ValueError(f"Contract.empty must be 'error' or 'value', got {self.empty!r}")


@dataclass(frozen=True)
class Kernel:
    """A registered kernel: ``fn`` and its ``reference`` (same keyword arguments; None when there is none).

    ``make_inputs(rng, size) -> dict`` of keyword arguments, ``size`` the main axis (0 and 1 must be allowed
    values of ``size``). ``tol``: dtype name -> (rtol, atol) of the agreement check; float arguments of the inputs
    are cast to each dtype in turn (arguments whose ``Arg.dtypes`` do not hold it are left alone).
    ``benchmark``: the ``kernel`` label its benchmark rows use (empty: none). ``oracle``: a trusted library or
    closed form it is also tested against, in words.
    """

    name: str
    fn: Callable
    reference: Callable | None
    make_inputs: Callable
    contract: Contract = field(default_factory=Contract)
    tol: dict = field(default_factory=lambda: {"float64": (1e-10, 1e-12)})
    benchmark: str = ""
    oracle: str = ""

    @property
    def reference_name(self) -> str:
        return "" if self.reference is None else getattr(self.reference, "__name__", repr(self.reference))

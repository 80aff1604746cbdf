"""Validate a chapter's parameters the moment the notebook starts.

papermill injects whatever ``-p name value`` pairs it is given, even names the notebook never declared, and
never checks types. The cell right after a chapter's ``parameters`` cell therefore calls :func:`parse` on the
notebook's globals with a spec of every allowed parameter; anything unknown, mistyped, out of range or naming an
absent device fails at once with a message that names the parameter and what is allowed.

Example (the second code cell of every chapter)::

    cfg = paperkit.params.parse(globals(), {
        "seed": params.Int(min=0, help="seed of every generator in the chapter"),
        "scale": params.Float(min=0.05, max=50, help="multiplies every size below"),
        "device": params.Device(),
    })

Every rule takes ``help``, a one-line meaning; the chapter's run box on its page shows the rules as a table
(:func:`describe`). Two parameters are the book's own and every chapter accepts them without declaring them
(:data:`BOOK_PARAMETERS`): ``strict`` (``True``: an unexpected verdict stops the run, as in CI; ``False``: it is
recorded and shown, and the run goes on) and ``threads`` (the CPU threads the chapter computes with, Torch, BLAS
and Numba alike; fixed, so that a chapter's numbers do not depend on who runs it).
"""
from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, Mapping

# Names IPython puts into every kernel's namespace; they are not parameters.
_KERNEL_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "open"}
# papermill writes parameters as Python literals, so a parameter's value is always one of these.
_LITERAL_TYPES = (bool, int, float, complex, str, bytes, list, tuple, dict, set, type(None))


class ParameterError(ValueError):
    """A chapter parameter is unknown, of the wrong type, out of range, or names an absent device."""


@dataclass(frozen=True)
class Int:
    """An integer parameter in ``[min, max]``; bools are rejected even though Python counts them as ints."""

    min: int | None = None
    max: int | None = None
    help: str = ""

    def describe(self) -> str:
        return "integer" + _range_text(self.min, self.max)

    def check(self, name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ParameterError(f"parameter '{name}' must be an integer, got {value!r} ({type(value).__name__})")
        _check_range(name, value, self.min, self.max)
        return value


@dataclass(frozen=True)
class Float:
    """A real parameter in ``[min, max]``; integers are accepted and converted (papermill passes ``-p x 2`` as int)."""

    min: float | None = None
    max: float | None = None
    help: str = ""

    def describe(self) -> str:
        return "number" + _range_text(self.min, self.max)

    def check(self, name: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ParameterError(f"parameter '{name}' must be a number, got {value!r} ({type(value).__name__})")
        value = float(value)
        if value != value:
            raise ParameterError(f"parameter '{name}' must be a number, got NaN")
        _check_range(name, value, self.min, self.max)
        return value


@dataclass(frozen=True)
class Choice:
    """One of a fixed set of values."""

    values: tuple
    help: str = ""

    def describe(self) -> str:
        return "one of " + ", ".join(repr(v) for v in self.values)

    def check(self, name: str, value: Any) -> Any:
        if value not in self.values:
            raise ParameterError(f"parameter '{name}' must be one of {list(self.values)}, got {value!r}")
        return value


@dataclass(frozen=True)
class Device:
    """A torch device string that exists on this machine: ``cpu``, ``cuda``, ``cuda:N`` or ``mps``."""

    help: str = "where Torch computes: cpu, or cuda / cuda:N / mps where present"

    def describe(self) -> str:
        return "device: 'cpu', 'cuda', 'cuda:N' or 'mps' (must exist here)"

    def check(self, name: str, value: Any) -> str:
        from paperkit.device import available_devices

        allowed = available_devices()
        if not isinstance(value, str):
            raise ParameterError(f"parameter '{name}' must be a device string, one of {allowed}, got {value!r}")
        if value not in allowed:
            raise ParameterError(
                f"parameter '{name}'={value!r} is not available on this machine; allowed: {allowed}"
            )
        return value


@dataclass(frozen=True)
class List:
    """A list (or tuple) of ``min_len``..``max_len`` items, each checked by the rule ``item``.

    ``increasing=True`` also demands strictly increasing items (sweeps over sizes, group sizes, scales).
    Returns a plain list of the checked items (so ``Float`` items come back as floats). Example::

        "G_list": params.List(params.Int(min=8, max=1024), min_len=2, increasing=True)
    """

    item: Any
    min_len: int = 1
    max_len: int = 64
    increasing: bool = False
    help: str = ""

    def describe(self) -> str:
        inc = ", strictly increasing" if self.increasing else ""
        return f"list of {self.min_len}-{self.max_len} items{inc}, each {self.item.describe()}"

    def check(self, name: str, value: Any) -> list:
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ParameterError(f"parameter '{name}' must be a list, got {value!r} ({type(value).__name__})")
        if not self.min_len <= len(value) <= self.max_len:
            raise ParameterError(
                f"parameter '{name}' must have {self.min_len} to {self.max_len} items, got {len(value)}: {value!r}")
        out = [self.item.check(f"{name}[{i}]", v) for i, v in enumerate(value)]
        if self.increasing and any(b <= a for a, b in zip(out, out[1:])):
            raise ParameterError(f"parameter '{name}' must be strictly increasing, got {value!r}")
        return out


@dataclass(frozen=True)
class Bool:
    """``True`` or ``False`` (papermill passes ``-p strict False`` as a bool)."""

    help: str = ""

    def describe(self) -> str:
        return "True or False"

    def check(self, name: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise ParameterError(f"parameter '{name}' must be True or False, got {value!r} ({type(value).__name__})")
        return value


# Parameters every chapter accepts without declaring them: (rule, default).
BOOK_PARAMETERS = {
    "strict": (Bool(help="True: a verdict other than the declared one stops the run (CI, defaults); False: it is "
                         "recorded and shown, and the run finishes"), True),
    "threads": (Int(min=1, max=256, help="CPU threads for Torch, BLAS and Numba; the chapter's numbers are "
                                         "those of this count"), 1),
}


def _range_text(lo: float | None, hi: float | None) -> str:
    if lo is None and hi is None:
        return ""
    if hi is None:
        return f" >= {lo:g}"
    if lo is None:
        return f" <= {hi:g}"
    return f" in [{lo:g}, {hi:g}]"


def describe(spec: Mapping[str, Any], defaults: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per parameter (the chapter's, then the book's): name, default, allowed values, meaning."""
    rows = [{"name": k, "default": defaults.get(k), "allowed": rule.describe(), "help": rule.help, "book": False}
            for k, rule in spec.items()]
    rows += [{"name": k, "default": defaults.get(k, d), "allowed": rule.describe(), "help": rule.help, "book": True}
             for k, (rule, d) in BOOK_PARAMETERS.items() if k not in spec]
    return rows


def _check_range(name: str, value: float, lo: float | None, hi: float | None) -> None:
    if lo is not None and value < lo:
        raise ParameterError(f"parameter '{name}' must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise ParameterError(f"parameter '{name}' must be <= {hi}, got {value}")


def parse(namespace: Mapping[str, Any], spec: Mapping[str, Any]) -> types.SimpleNamespace:
    """Check the notebook's parameters against ``spec`` and return them as a read-only-by-convention namespace.

    ``namespace`` is the notebook's ``globals()`` right after the parameters (and papermill's injected) cell; every
    public name bound to a literal value (what papermill can inject) must be a key of ``spec``; imported modules,
    functions and classes are ignored. Each spec entry checks type and range.
    Raises :class:`ParameterError` naming the first offending parameter and the allowed values.
    """
    full = {**{k: r for k, (r, _) in BOOK_PARAMETERS.items()}, **spec}
    unknown = sorted(
        k
        for k, v in namespace.items()
        if not k.startswith("_") and k not in _KERNEL_NAMES and k not in full and isinstance(v, _LITERAL_TYPES)
    )
    if unknown:
        raise ParameterError(f"unknown parameter(s) {unknown}; this chapter accepts: {sorted(full)}")
    missing = sorted(k for k in spec if k not in namespace)
    if missing:
        raise ParameterError(f"parameter(s) {missing} missing from the parameters cell")
    values = {k: namespace[k] if k in namespace else BOOK_PARAMETERS[k][1] for k in full}
    cfg = types.SimpleNamespace(**{k: rule.check(k, values[k]) for k, rule in full.items()})
    # kept for the ledger's record and the run box; underscore names are not parameters
    cfg._spec = describe(spec, {k: values[k] for k in full})
    return cfg

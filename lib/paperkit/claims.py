"""A claim, the check that decides it, and its verdict.

A chapter states each of the paper's claims as a :class:`Claim`: our wording, whether it is a theorem or an
empirical statement, the measured value, a comparison with a threshold, and the paper's own number when the
abstract gives one. :func:`decide` turns it into a verdict:

* ``reproduced``: the check passes (and rejects the negative control, when there is one);
* ``not reproduced``: the check fails and the chapter said in advance that it would (``expect="not reproduced"``
  with a ``reason``); the run goes on and the ledger publishes the numbers;
* ``failed``: the check fails unexpectedly, or passes but also passes on the negative control (so it cannot tell
  the claim from its absence). :class:`~paperkit.ledger.Ledger` raises :class:`ClaimFailed` for these.
"""
from __future__ import annotations

import math
import operator
from dataclasses import asdict, dataclass, field
from typing import Any

OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}
KINDS = ("theorem", "empirical")
VERDICTS = ("reproduced", "not reproduced", "failed")


class ClaimFailed(AssertionError):
    """A claim's check failed and the chapter had not declared it ``not reproduced``."""


@dataclass(frozen=True)
class Control:
    """A negative control: the same metric with the paper's ingredient removed (or on null data).

    The check must reject it, otherwise the check could not have failed.
    """

    measured: float
    what: str


@dataclass
class Claim:
    """One claim and its check ``measured <op> threshold``.

    ``paper`` is the paper's number (a float, or a string such as ``"1.4-1.9 pp"``) or ``None`` when the abstract
    gives none. ``expect`` is ``"reproduced"`` or ``"not reproduced"``; the latter needs a ``reason``.
    """

    id: str
    text: str
    kind: str
    measured: float
    op: str
    threshold: float
    metric: str = ""
    paper: float | str | None = None
    control: Control | None = None
    expect: str = "reproduced"
    reason: str = ""
    verdict: str = field(default="", init=False)
    passed: bool = field(default=False, init=False)
    control_rejected: bool | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"claim {self.id}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.op not in OPS:
            raise ValueError(f"claim {self.id}: op must be one of {list(OPS)}, got {self.op!r}")
        if self.expect not in ("reproduced", "not reproduced"):
            raise ValueError(f"claim {self.id}: expect must be 'reproduced' or 'not reproduced', got {self.expect!r}")
        if self.expect == "not reproduced" and not self.reason:
            raise ValueError(f"claim {self.id}: expect='not reproduced' needs a reason")
        self.measured = _number(self.id, "measured", self.measured)
        self.threshold = _number(self.id, "threshold", self.threshold)
        if self.control is not None:
            self.control = Control(_number(self.id, "control", self.control.measured), self.control.what)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _number(cid: str, what: str, x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"claim {cid}: {what} must be a number, got {x!r}") from None
    if math.isnan(v):
        raise ValueError(f"claim {cid}: {what} is NaN")
    return v


def decide(claim: Claim) -> Claim:
    """Fill in ``passed``, ``control_rejected`` and ``verdict`` (see the module docstring) and return the claim."""
    check = OPS[claim.op]
    claim.passed = bool(check(claim.measured, claim.threshold))
    if claim.control is not None:
        claim.control_rejected = not check(claim.control.measured, claim.threshold)
    if claim.passed and claim.control_rejected is not False:
        claim.verdict = "reproduced"
    elif claim.passed:
        claim.verdict = "failed"
    elif claim.expect == "not reproduced":
        claim.verdict = "not reproduced"
    else:
        claim.verdict = "failed"
    return claim


def explain(claim: Claim) -> str:
    """One line saying what was checked and how it came out."""
    s = f"{claim.id}: {claim.measured:.4g} {claim.op} {claim.threshold:.4g} -> {claim.verdict}"
    if claim.control is not None:
        s += (f"; control ({claim.control.what}) {claim.control.measured:.4g} "
              f"{'rejected' if claim.control_rejected else 'NOT rejected: the check cannot tell them apart'}")
    if claim.verdict == "not reproduced":
        s += f"; reason: {claim.reason}"
    return s

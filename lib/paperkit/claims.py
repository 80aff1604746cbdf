"""A claim, the check that decides it, and its verdict.

A chapter states each check as a :class:`Claim`: our wording, its kind, the measured value, a comparison with a
threshold, where that threshold comes from, and the paper's own number when the abstract gives one.

Kinds (:data:`PAPER_KINDS` count as the paper's claims; :data:`CONSTRUCTION` does not):

* ``theorem`` / ``empirical``: a claim of the paper. It needs a ``source`` for its threshold (:data:`SOURCES`).
* ``construction``: a check of our own code or of an identity that holds because we built it so (a kernel
  against its reference, a counting identity, training sanity). Shown apart, never counted as a reproduction.
* ``out of reach``: a claim of the abstract the miniature cannot test (no measurement; the reason is the record).

:func:`decide` fills in the verdict (:data:`VERDICTS`):

* ``reproduced``: the check passes (at every seed, when measured over seeds) and rejects the negative control;
* ``not reproduced``: the check fails (at every seed);
* ``seed-dependent``: measured over a declared set of seeds (``per_seed``), it passes at some and fails at others;
  the share that passes is published;
* ``inconclusive``: the check passes but so does its negative control: it cannot tell the claim from its absence;
* ``passed`` / ``broken``: the outcome of a construction check (it must pass);
* ``out of reach``: not tested.

``expect`` is what the chapter declares in advance at its default parameters. A verdict that differs from it (or a
construction check that is broken, or an inconclusive one) is *unexpected*: in strict mode (the default, and what CI
runs) the :class:`~paperkit.ledger.Ledger` raises :class:`ClaimFailed`; with ``strict=False`` a reader exploring
other parameters gets the verdict recorded and shown, and the run finishes.
"""
from __future__ import annotations

import math
import operator
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}
PAPER_KINDS = ("theorem", "empirical")
CONSTRUCTION = "construction"
OUT_OF_REACH = "out of reach"
KINDS = PAPER_KINDS + (CONSTRUCTION, OUT_OF_REACH)
VERDICTS = ("reproduced", "not reproduced", "seed-dependent", "inconclusive", "passed", "broken", "out of reach")
EXPECTABLE = ("reproduced", "not reproduced", "seed-dependent")
# Where a threshold comes from, written "<source>: <detail>". "ours" needs the reason and the margin over seeds.
SOURCES = ("paper", "theorem", "baseline", "ours")


class ClaimFailed(AssertionError):
    """A claim came out other than the chapter declared (strict mode), or a construction check broke."""


@dataclass(frozen=True)
class Control:
    """A negative control: the same metric for a competing hypothesis (the method without the paper's ingredient,
    the naive procedure, a trivial estimator), measured in the same run. The check must reject it.

    ``measured`` is one number or, for a claim measured over seeds, one number per seed (every one must be rejected).
    """

    measured: float | tuple
    what: str


@dataclass
class Claim:
    """One check ``measured <op> threshold`` (see the module docstring for kinds, sources and verdicts).

    ``per_seed``: the same metric at each seed of a declared seed loop; then the verdict is decided from all of
    them, ``measured`` defaults to their median, and ``share`` is the fraction of seeds at which the check passes.
    """

    id: str
    text: str
    kind: str
    measured: float | None = None
    op: str = ""
    threshold: float | None = None
    metric: str = ""
    source: str = ""
    paper: float | str | None = None
    control: Control | None = None
    expect: str = "reproduced"
    reason: str = ""
    per_seed: tuple | None = None
    verdict: str = field(default="", init=False)
    passed: bool = field(default=False, init=False)
    share: float | None = field(default=None, init=False)
    control_rejected: bool | None = field(default=None, init=False)
    as_expected: bool = field(default=True, init=False)

    def __post_init__(self) -> None:
        cid = self.id
        if not isinstance(cid, str) or not cid.strip() or any(ch.isspace() for ch in cid):
            raise ValueError(f"claim id must be a non-empty string without spaces, got {cid!r}")
        if self.kind not in KINDS:
            raise ValueError(f"claim {cid}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == OUT_OF_REACH:
            if not self.reason:
                raise ValueError(f"claim {cid}: an out-of-reach claim needs a reason")
            if self.measured is not None or self.per_seed is not None:
                raise ValueError(f"claim {cid}: an out-of-reach claim has no measurement")
            self.expect = OUT_OF_REACH
            return
        if self.op not in OPS:
            raise ValueError(f"claim {cid}: op must be one of {list(OPS)}, got {self.op!r}")
        if self.kind == CONSTRUCTION:
            if self.expect != "reproduced":
                raise ValueError(f"claim {cid}: a construction check must pass; it cannot expect {self.expect!r}")
        else:
            if self.expect not in EXPECTABLE:
                raise ValueError(f"claim {cid}: expect must be one of {EXPECTABLE}, got {self.expect!r}")
            if self.expect != "reproduced" and not self.reason:
                raise ValueError(f"claim {cid}: expect={self.expect!r} needs a reason")
            _check_source(cid, self.source)
            if self.expect == "seed-dependent" and self.per_seed is None:
                raise ValueError(f"claim {cid}: expect='seed-dependent' needs a per_seed measurement")
        if self.per_seed is not None:
            vals = tuple(_number(cid, f"per_seed[{i}]", v) for i, v in enumerate(_flat(self.per_seed)))
            if len(vals) < 2:
                raise ValueError(f"claim {cid}: per_seed needs at least 2 seeds, got {len(vals)}")
            self.per_seed = vals
            if self.measured is None:
                self.measured = statistics.median(vals)
        if self.measured is None:
            raise ValueError(f"claim {cid}: measured is required")
        self.measured = _number(cid, "measured", self.measured)
        self.threshold = _number(cid, "threshold", self.threshold)
        if self.control is not None:
            cm = self.control.measured
            if isinstance(cm, (list, tuple)) or getattr(cm, "ndim", 0):
                cm = tuple(_number(cid, "control", v) for v in _flat(cm))
            else:
                cm = _number(cid, "control", cm)
            self.control = Control(cm, self.control.what)

    @property
    def counts(self) -> bool:
        """Whether this is one of the paper's claims (counted in headlines), not a construction check."""
        return self.kind in PAPER_KINDS or self.kind == OUT_OF_REACH

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def _ipython_display_(self) -> None:
        """Show nothing when a notebook cell ends with a claim: the ledger printed its line already, and the
        dataclass repr is not for the page."""


def _flat(x: Any) -> list:
    if hasattr(x, "tolist"):
        x = x.tolist()
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _check_source(cid: str, source: str) -> None:
    head, _, detail = str(source).partition(":")
    if head.strip() not in SOURCES:
        raise ValueError(f"claim {cid}: source must say where the threshold comes from, as '<kind>: <detail>' "
                         f"with kind one of {SOURCES}; got {source!r}")
    if head.strip() == "ours" and len(detail.strip()) < 10:
        raise ValueError(f"claim {cid}: a threshold of our own ('ours: ...') needs the reason and the margin over "
                         f"seeds, got {source!r}")


def _number(cid: str, what: str, x: Any) -> float:
    if isinstance(x, bool):
        return float(x)
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"claim {cid}: {what} must be a number, got {x!r}") from None
    if math.isnan(v):
        raise ValueError(f"claim {cid}: {what} is NaN")
    return v


def decide(claim: Claim) -> Claim:
    """Fill in ``passed``, ``share``, ``control_rejected``, ``verdict`` and ``as_expected``; return the claim."""
    if claim.kind == OUT_OF_REACH:
        claim.verdict, claim.as_expected = OUT_OF_REACH, True
        return claim
    check = OPS[claim.op]
    if claim.per_seed is not None:
        ok = [bool(check(v, claim.threshold)) for v in claim.per_seed]
        claim.share = sum(ok) / len(ok)
        claim.passed = all(ok)
        outcome = "reproduced" if claim.passed else "not reproduced" if not any(ok) else "seed-dependent"
    else:
        claim.passed = bool(check(claim.measured, claim.threshold))
        outcome = "reproduced" if claim.passed else "not reproduced"
    if claim.control is not None:
        cm = claim.control.measured
        cms = cm if isinstance(cm, tuple) else (cm,)
        claim.control_rejected = not any(check(v, claim.threshold) for v in cms)
    if claim.kind == CONSTRUCTION:
        good = claim.passed and claim.control_rejected is not False
        claim.verdict = "passed" if good else "broken"
        claim.as_expected = good
        return claim
    if outcome != "not reproduced" and claim.control_rejected is False:
        outcome = "inconclusive"
    claim.verdict = outcome
    claim.as_expected = outcome == claim.expect
    return claim


def explain(claim: Claim) -> str:
    """One line saying what was checked and how it came out."""
    if claim.kind == OUT_OF_REACH:
        return f"{claim.id}: out of reach: {claim.reason}"
    s = f"{claim.id}: {claim.measured:.4g} {claim.op} {claim.threshold:.4g} -> {claim.verdict}"
    if claim.share is not None:
        s += f" (passes at {claim.share:.0%} of {len(claim.per_seed)} seeds)"
    if claim.control is not None:
        cm = claim.control.measured
        shown = f"{cm:.4g}" if not isinstance(cm, tuple) else "[" + ", ".join(f"{v:.3g}" for v in cm) + "]"
        s += (f"; control ({claim.control.what}) {shown} "
              f"{'rejected' if claim.control_rejected else 'NOT rejected: the check cannot tell them apart'}")
    if claim.verdict in ("not reproduced", "seed-dependent") and claim.reason:
        s += f"; reason: {claim.reason}"
    if not claim.as_expected:
        s += f"; UNEXPECTED (declared {claim.expect!r})"
    return s

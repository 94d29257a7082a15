"""The values that cross layers: statuses, evidence, findings, check results.

Everything here is stdlib-only and frozen, so the gate, the report and the TUI
can share it without importing anything heavy.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class Status(str, enum.Enum):
    """The outcome of one check. A check that could not measure never says PASS."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    UNKNOWN = "unknown"
    TIMEOUT = "timeout"

    @property
    def rank(self) -> int:
        """Severity order used to pick the worst of several findings."""
        return _RANK[self]


_RANK = {
    Status.PASS: 0,
    Status.SKIP: 1,
    Status.WARN: 2,
    Status.UNKNOWN: 3,
    Status.TIMEOUT: 4,
    Status.FAIL: 5,
}


class Layer(str, enum.Enum):
    """The layers, in the order a broken job hits them."""

    NODE = "node"
    INTERCONNECT = "interconnect"
    SCOREP = "scorep"
    LAUNCHER = "launcher"
    SCRIPT = "script"
    TRAINER = "trainer"
    ARTIFACTS = "artifacts"


LAYER_ORDER = [layer.value for layer in Layer]


class Safety(str, enum.Enum):
    """How freely a remedy may be applied (ruff's fix safety)."""

    SAFE = "safe"
    UNSAFE = "unsafe"
    MANUAL = "manual"


class Phase(str, enum.Enum):
    """When `fix` plans a remedy, in this order. Each remedy plans on the draft the ones before it
    left, so a later phase sees the earlier ones' changes (the per-rank launch script carries the
    `--cuda` a flag remedy added). Within a phase, a remedy's `after` names the ones it must follow.
    """

    FLAGS = "flags"  # Score-P flags, its environment, trainer options: words on lines that exist
    LAUNCH = "launch"  # how the job starts: the per-rank launch, experiment folders, warm-up, nodes
    CODE = "code"  # the training script's code
    MANUAL = "manual"  # exact steps for the user; nothing is planned


@dataclass(frozen=True)
class Evidence:
    """One piece of proof: an exact line, value or measurement.

    `file`/`line` point at the source when there is one (1-based line).
    """

    text: str
    file: str | None = None
    line: int | None = None
    label: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "file": self.file, "line": self.line, "label": self.label}

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}: " if self.file and self.line else (f"{self.file}: " if self.file else "")
        label = f"{self.label}: " if self.label else ""
        return f"{where}{label}{self.text}"


@dataclass(frozen=True)
class Outcome:
    """What a check function returns: a finding without the check's identity.

    The runner stamps the check ID, layer and duration to make a `Finding`.
    `entities` names what the finding is about: {"gpu": 1}, {"pair": [0, 1]},
    {"host": "node07"}, {"rank": 3}, {"file": "train.py"}.
    """

    status: Status
    message: str
    evidence: tuple[Evidence, ...] = ()
    remedies: tuple[str, ...] = ()
    entities: Mapping[str, Any] = field(default_factory=dict)
    data: Mapping[str, Any] = field(default_factory=dict)


def _outcome(status: Status, message: str, evidence: Any = (), remedies: Any = (),
             entities: Mapping[str, Any] | None = None,
             data: Mapping[str, Any] | None = None) -> Outcome:
    if isinstance(evidence, (Evidence, str)):
        evidence = (evidence,)
    ev = tuple(e if isinstance(e, Evidence) else Evidence(str(e)) for e in evidence)
    rem = (remedies,) if isinstance(remedies, str) else tuple(remedies)
    return Outcome(status, message, ev, rem, dict(entities or {}), dict(data or {}))


def passed(message: str, evidence: Any = (), **kw: Any) -> Outcome:
    return _outcome(Status.PASS, message, evidence, **kw)


def warn(message: str, evidence: Any = (), remedies: Any = (), **kw: Any) -> Outcome:
    return _outcome(Status.WARN, message, evidence, remedies, **kw)


def fail(message: str, evidence: Any = (), remedies: Any = (), **kw: Any) -> Outcome:
    return _outcome(Status.FAIL, message, evidence, remedies, **kw)


def skip(message: str, evidence: Any = (), **kw: Any) -> Outcome:
    return _outcome(Status.SKIP, message, evidence, **kw)


def unknown(message: str, evidence: Any = (), remedies: Any = (), **kw: Any) -> Outcome:
    return _outcome(Status.UNKNOWN, message, evidence, remedies, **kw)


def timeout(message: str, evidence: Any = (), remedies: Any = (), **kw: Any) -> Outcome:
    return _outcome(Status.TIMEOUT, message, evidence, remedies, **kw)


@dataclass(frozen=True)
class Finding:
    """One stamped outcome of one check."""

    check_id: str
    layer: str
    status: Status
    message: str
    evidence: tuple[Evidence, ...] = ()
    remedies: tuple[str, ...] = ()
    entities: Mapping[str, Any] = field(default_factory=dict)
    data: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def stamp(cls, check_id: str, layer: str, outcome: Outcome) -> Finding:
        return cls(check_id, layer, outcome.status, outcome.message, outcome.evidence,
                   outcome.remedies, outcome.entities, outcome.data)


@dataclass(frozen=True)
class CheckResult:
    """All findings of one check in one run, summarised as the worst of them."""

    check_id: str
    layer: str
    title: str
    status: Status
    message: str
    findings: tuple[Finding, ...]
    duration_ms: float

    @property
    def evidence(self) -> tuple[Evidence, ...]:
        """The evidence of the findings that are not pass/skip (of all, when every one is)."""
        bad = [f for f in self.findings if f.status not in (Status.PASS, Status.SKIP)]
        return tuple(e for f in (bad or self.findings) for e in f.evidence)

    @property
    def remedies(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for f in self.findings:
            if f.status not in (Status.PASS, Status.SKIP):
                for r in f.remedies:
                    seen.setdefault(r, None)
        return tuple(seen)

    @property
    def entities(self) -> list[Mapping[str, Any]]:
        return [f.entities for f in self.findings if f.entities]

    @classmethod
    def from_findings(cls, check_id: str, layer: str, title: str,
                      findings: tuple[Finding, ...], duration_ms: float) -> CheckResult:
        worst = max(findings, key=lambda f: f.status.rank)
        bad = [f for f in findings if f.status == worst.status]
        message = worst.message if len(bad) == 1 else f"{worst.message} (and {len(bad) - 1} more)"
        return cls(check_id, layer, title, worst.status, message, findings, duration_ms)

"""Per-node histories from the verdicts: failing now, lemon nodes, flapping checks, the exclude list.

- failing now: the node's latest run failed (exit code 1), with the checks and their messages.
- lemon (Meta's "lemon nodes": the few that keep coming back): a node that failed on at least
  `LEMON_MIN_DAYS` different days and whose share of failing runs is at least `LEMON_RATIO`
  times the rest of the fleet's. One bad day is a failure, not a lemon.
- flapping: a check whose status changes at least `FLAP_MIN_CHANGES` times and once a day or
  more on average over the node's history (pass/warn/fail back and forth).
- exclude: the nodes failing now and the lemons, in Slurm's hostlist syntax.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from doctor.fleet.history import Verdict
from doctor.fleet.hostlist import compress

LEMON_MIN_DAYS = 3
LEMON_RATIO = 3.0
FLAP_MIN_CHANGES = 4
FLAP_PER_DAY = 1.0
DAY = 86400.0


@dataclass(frozen=True)
class Flap:
    node: str
    check: str
    changes: int
    per_day: float


@dataclass
class NodeHistory:
    """One node's runs, oldest first, and what they add up to."""

    node: str
    runs: list[Verdict] = field(default_factory=list)
    lemon_score: float = 0.0
    lemon: bool = False
    lemon_evidence: str = ""
    flapping: list[Flap] = field(default_factory=list)

    @property
    def failed(self) -> list[Verdict]:
        return [v for v in self.runs if v.failed]

    @property
    def current(self) -> Verdict:
        return self.runs[-1]

    @property
    def failed_days(self) -> int:
        return len({v.start.date() for v in self.failed})

    def failures_by_check(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for v in self.failed:
            for c in v.failing:
                out[c.id] = out.get(c.id, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))

    def statuses(self) -> dict[str, str]:
        """The current status of each check (the latest run's)."""
        return {c.id: c.status for c in self.current.checks}


def _flaps(node: NodeHistory) -> list[Flap]:
    series: dict[str, list[str]] = {}
    for v in node.runs:
        for c in v.checks:
            series.setdefault(c.id, []).append(c.status)
    span = (node.runs[-1].start - node.runs[0].start).total_seconds() / DAY
    days = max(1.0, span)
    out = []
    for check, states in series.items():
        changes = sum(1 for a, b in zip(states, states[1:], strict=False) if a != b)
        if changes >= FLAP_MIN_CHANGES and changes / days >= FLAP_PER_DAY:
            out.append(Flap(node.node, check, changes, round(changes / days, 2)))
    return out


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


@dataclass
class Fleet:
    """The whole view: every node's history, and the lists an admin acts on."""

    nodes: list[NodeHistory]
    runs: int
    failed: int

    @property
    def failing_now(self) -> list[NodeHistory]:
        return [n for n in self.nodes if n.current.failed]

    @property
    def lemons(self) -> list[NodeHistory]:
        return sorted((n for n in self.nodes if n.lemon), key=lambda n: -n.lemon_score)

    @property
    def flapping(self) -> list[Flap]:
        return [f for n in self.nodes for f in n.flapping]

    @property
    def exclude_nodes(self) -> list[str]:
        return sorted({n.node for n in self.failing_now} | {n.node for n in self.lemons})

    @property
    def exclude(self) -> str:
        return compress(self.exclude_nodes)

    @property
    def share(self) -> float:
        return self.failed / self.runs if self.runs else 0.0


def analyse(verdicts: Iterable[Verdict]) -> Fleet:
    by_node: dict[str, NodeHistory] = {}
    for v in verdicts:
        by_node.setdefault(v.host, NodeHistory(v.host)).runs.append(v)
    nodes = sorted(by_node.values(), key=lambda n: n.node)
    runs = sum(len(n.runs) for n in nodes)
    failed = 0
    for n in nodes:
        n.runs.sort(key=lambda v: v.start)
        failed += len(n.failed)
    for n in nodes:
        _score(n, runs, failed)
        n.flapping = _flaps(n)
    return Fleet(nodes, runs, failed)


def _score(node: NodeHistory, runs: int, failed: int) -> None:
    mine, total = len(node.failed), len(node.runs)
    if not mine:
        return
    rest_runs, rest_failed = runs - total, failed - mine
    share = mine / total
    rest = rest_failed / rest_runs if rest_runs else 0.0
    node.lemon_score = round(share / max(rest, 1 / max(runs, 1)), 1)
    days = node.failed_days
    node.lemon = days >= LEMON_MIN_DAYS and node.lemon_score >= LEMON_RATIO
    checks = ", ".join(f"{k} {n}" for k, n in node.failures_by_check().items())
    node.lemon_evidence = (f"failed {mine} of {total} runs ({_pct(share)}) on {days} "
                           f"{'day' if days == 1 else 'days'}; the rest of the fleet {_pct(rest)}: "
                           f"{node.lemon_score:g}x" + (f" ({checks})" if checks else ""))


def _when(t: datetime | None) -> str | None:
    return t.isoformat() if t is not None else None


def node_json(n: NodeHistory) -> dict[str, Any]:
    failed = n.failed
    cur = n.current
    return {
        "node": n.node,
        "runs": len(n.runs),
        "failed": len(failed),
        "failed_days": n.failed_days,
        "failures_by_check": n.failures_by_check(),
        "first_failure": _when(failed[0].start if failed else None),
        "last_failure": _when(failed[-1].start if failed else None),
        "current": {"status": cur.status, "exit_code": cur.exit_code, "start": cur.start.isoformat(),
                    "job": cur.job, "file": cur.file,
                    "failing": [{"check": c.id, "status": c.status, "message": c.message} for c in cur.failing]},
        "checks": n.statuses(),
        "lemon_score": n.lemon_score,
        "lemon": n.lemon,
        "lemon_evidence": n.lemon_evidence,
        "flapping": [{"check": f.check, "changes": f.changes, "per_day": f.per_day} for f in n.flapping],
    }


def fleet_json(fleet: Fleet) -> dict[str, Any]:
    return {
        "runs": fleet.runs,
        "failed_runs": fleet.failed,
        "fleet_failure_share": round(fleet.share, 4),
        "failing_now": [{"node": n.node, "since": n.current.start.isoformat(), "job": n.current.job,
                         "checks": [c.id for c in n.current.failing],
                         "message": n.current.failing[0].message if n.current.failing else ""}
                        for n in fleet.failing_now],
        "lemon": [{"node": n.node, "score": n.lemon_score, "evidence": n.lemon_evidence} for n in fleet.lemons],
        "flapping": [{"node": f.node, "check": f.check, "changes": f.changes, "per_day": f.per_day}
                     for f in fleet.flapping],
        "exclude": fleet.exclude,
        "exclude_nodes": fleet.exclude_nodes,
        "nodes": [node_json(n) for n in fleet.nodes],
    }

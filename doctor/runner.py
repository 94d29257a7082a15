"""The runner: gather facts in parallel within a budget, then run checks in dependency order.

A check whose dependency did not pass is skipped, saying which one and why.
A check whose fact probe failed says `timeout` or `unknown`, never `pass`.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from doctor import registry
from doctor.case import Case
from doctor.facts import Facts, ProbeFailure, provider_for
from doctor.model import CheckResult, Finding, Outcome, Status, skip, timeout, unknown
from doctor.registry import Check

BLOCKING = (Status.FAIL, Status.UNKNOWN, Status.TIMEOUT, Status.SKIP)


@dataclass(frozen=True)
class CheckStarted:
    check_id: str


@dataclass(frozen=True)
class CheckFinished:
    result: CheckResult


Event = CheckStarted | CheckFinished


@dataclass
class Run:
    """One run of a set of checks over a case."""

    case: Case
    results: list[CheckResult]
    started: dt.datetime
    duration_s: float
    playbook: str
    facts: Facts
    mode: str = "check"
    extra: dict[str, Any] = field(default_factory=dict)

    def result(self, check_id: str) -> CheckResult | None:
        return next((r for r in self.results if r.check_id == check_id), None)

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.results for f in r.findings]


def order_checks(ids: Sequence[str]) -> list[Check]:
    """The checks for `ids` plus their dependencies, dependencies first (stable)."""
    ordered: list[Check] = []
    seen: set[str] = set()

    def visit(cid: str, stack: tuple[str, ...]) -> None:
        if cid in seen:
            return
        if cid in stack:
            raise ValueError(f"dependency cycle: {' -> '.join(stack + (cid,))}")
        chk = registry.get_check(cid)
        for dep in chk.depends_on:
            if dep in registry.CHECKS:
                visit(dep, stack + (cid,))
        seen.add(cid)
        ordered.append(chk)

    for cid in ids:
        visit(cid, ())
    return ordered


def _evaluate(chk: Check, facts: Facts, done: dict[str, CheckResult]) -> tuple[Finding, ...]:
    for dep in chk.depends_on:
        res = done.get(dep)
        if res is not None and res.status in BLOCKING:
            return (Finding.stamp(chk.id, chk.layer, skip(
                f"skipped: depends on {dep}, which is {res.status.value} ({res.message})")),)
    if not chk.handles_failures:
        for name in chk.needs:
            value = facts.get(name)
            if isinstance(value, ProbeFailure):
                make = timeout if value.kind == "timeout" else unknown
                return (Finding.stamp(chk.id, chk.layer, make(str(value), entities={"probe": name})),)
    try:
        produced = chk.fn(facts)
    except Exception as exc:  # a check bug must not hide the other checks
        produced = unknown(f"internal error in {chk.id}: {type(exc).__name__}: {exc}")
    outcomes: Iterable[Outcome] = [produced] if isinstance(produced, Outcome) else list(produced)
    findings = tuple(Finding.stamp(chk.id, chk.layer, o) for o in outcomes)
    if not findings:
        findings = (Finding.stamp(chk.id, chk.layer, skip("nothing to check here")),)
    return findings


def run_checks(case: Case, check_ids: Sequence[str], budget_s: float = 60.0,
               on_event: Callable[[Event], None] | None = None, playbook: str = "",
               mode: str = "check", preset_facts: dict[str, Any] | None = None) -> Run:
    """Run `check_ids` (and their dependencies) over `case` within `budget_s` seconds."""
    registry.load_checks(check_ids)
    started = dt.datetime.now(dt.UTC)
    t0 = time.monotonic()
    checks = order_checks(check_ids)
    facts = Facts(case, t0 + budget_s, preset_facts)
    needed = list(dict.fromkeys(n for c in checks for n in c.needs))
    workers = max(1, min(len(needed), (os.cpu_count() or 2) * 2, 16))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="probe")
    try:
        for name in needed:  # start every eager probe at once; checks below wait on the ones they need
            prov = provider_for(name)
            if prov is None or prov.eager:
                pool.submit(facts.get, name)
        done: dict[str, CheckResult] = {}
        results: list[CheckResult] = []
        for chk in checks:
            if on_event:
                on_event(CheckStarted(chk.id))
            c0 = time.monotonic()
            findings = _evaluate(chk, facts, done)
            spent = sum(facts.durations_ms.get(n, 0.0) for n in chk.needs)
            res = CheckResult.from_findings(chk.id, chk.layer, chk.title, findings,
                                            (time.monotonic() - c0) * 1000 + spent)
            done[chk.id] = res
            results.append(res)
            if on_event:
                on_event(CheckFinished(res))
    finally:
        # Threads still inside a probe hold only subprocesses with their own limits.
        pool.shutdown(wait=False, cancel_futures=True)
    return Run(case, results, started, time.monotonic() - t0, playbook, facts, mode)

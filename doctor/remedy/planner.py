"""Findings in, a Plan out: which remedies answer them, and what each would change.

Remedies are planned by the phase each declares on `@remedy` (flag and
environment fixes first, then the launch, then code; see `doctor.model.Phase`),
each on the draft the ones before it left, so a later remedy sees the earlier
ones' changes: the per-rank launch script carries the `--cuda` that
`scorep-add-cuda` added. Nothing is written here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from doctor import registry
from doctor.case import Case
from doctor.model import Finding, Phase, Safety, Status
from doctor.remedy import journal
from doctor.remedy.draft import Draft, RemedyContext
from doctor.remedy.model import CannotPlan, FileTarget, Plan, RemedyPlan, sha256


def open_findings(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.status not in (Status.PASS, Status.SKIP)]


def remedies_for(findings: Iterable[Finding]) -> dict[str, list[Finding]]:
    """Remedy ID -> the findings that name it, in planning order."""
    named: dict[str, list[Finding]] = {}
    for f in open_findings(findings):
        for rid in f.remedies:
            named.setdefault(rid, []).append(f)
    return {rid: named[rid] for rid in planning_order(named)}


def planning_order(remedy_ids: Iterable[str]) -> list[str]:
    """The remedies by phase; within one, each after the ones it names in `after`, else as given.

    An ID no module registers goes last.
    """
    registry.load()
    ids = list(dict.fromkeys(remedy_ids))
    phases = list(Phase)

    def phase_of(rid: str) -> int:
        rem = registry.REMEDIES.get(rid)
        return phases.index(rem.phase) if rem is not None else len(phases)

    ordered: list[str] = []

    def place(rid: str) -> None:
        if rid in ordered:
            return
        rem = registry.REMEDIES.get(rid)
        for first in rem.after if rem is not None else ():
            if first in ids and first not in ordered and phase_of(first) == phase_of(rid):
                place(first)
        ordered.append(rid)

    for rid in sorted(ids, key=phase_of):
        place(rid)
    return ordered


def make_plan(case: Case, findings: Sequence[Finding], *, only: Sequence[str] = (),
              unsafe: bool = True, facts: Any = None, history: tuple[str, ...] | None = None) -> Plan:
    """Plan the remedies the findings name.

    `only` limits the plan to these remedy IDs; without `unsafe`, unsafe
    remedies are listed in `Plan.skipped` instead of being planned. Files the
    parsed job (`facts["job"]`) read are drafted from those bytes; `history`
    (`journal.history` taken before they were read; now, when not given) is what
    applying compares under the lock.
    """
    registry.load()
    root = case.root or Path.cwd()
    if history is None:
        history = journal.history(root)
    job = facts.get("job") if facts is not None else None
    draft = Draft(getattr(job, "reads", None))
    planned: list[RemedyPlan] = []
    skipped: list[RemedyPlan] = []
    for rid, found in remedies_for(findings).items():
        if only and rid not in only:
            continue
        rp = _plan_one(case, rid, tuple(found), tuple(findings), draft, facts, planned, unsafe)
        (skipped if rp.status == "skipped" else planned).append(rp)
    return Plan(root, tuple(planned), _targets(draft), tuple(skipped), history)


def _plan_one(case: Case, rid: str, found: tuple[Finding, ...], everything: tuple[Finding, ...],
              draft: Draft, facts: Any, planned: list[RemedyPlan], unsafe: bool) -> RemedyPlan:
    checks = tuple(dict.fromkeys(f.check_id for f in found))
    rem = registry.REMEDIES.get(rid)
    if rem is None:
        return RemedyPlan(rid, Safety.MANUAL, rid, checks, found, status="unknown",
                          note="no remedy of this ID is registered")
    base = RemedyPlan(rid, rem.safety, rem.title, checks, found, steps=rem.steps)
    if rem.safety == Safety.MANUAL or rem.plan is None:
        return _replace(base, status="manual")
    if rem.safety == Safety.UNSAFE and not unsafe:
        return _replace(base, status="skipped", note="unsafe: changes your code or how the job runs; add --unsafe to apply")
    ctx = RemedyContext(case, rid, found, everything, draft, facts,
                        tuple(p.remedy_id for p in planned if p.status == "ready"))
    snap = draft.snapshot()
    try:
        rem.plan(ctx)
    except CannotPlan as exc:
        draft.restore(snap)
        return _replace(base, status="cannot", note=exc.reason, steps=exc.steps or rem.steps)
    except Exception as exc:  # a remedy bug must not stop the others
        draft.restore(snap)
        return _replace(base, status="cannot", note=f"internal error: {type(exc).__name__}: {exc}")
    if not ctx.changes:
        return _replace(base, status="nothing", note=ctx.note or "nothing to change")
    return _replace(base, changes=tuple(ctx.changes), note=ctx.note)


def _replace(rp: RemedyPlan, **kw: Any) -> RemedyPlan:
    return replace(rp, **kw)


def _targets(draft: Draft) -> tuple[FileTarget, ...]:
    out = []
    for path in draft.touched():
        before = draft.original[path]
        after = draft.read(path)
        assert after is not None
        mode = draft.modes.get(path)
        out.append(FileTarget(path, None if before is None else sha256(before), after, mode))
    return tuple(out)


"""Run the job checks, and after applying, re-run them to record whether each remedy worked.

`fix` reads the job folder only: it runs the `scorep-ddp` playbook's checks of
the Score-P, launcher, script, trainer and artifacts layers, and gives every
node probe's fact a "not probed" failure up front, so no driver or CUDA probe
runs (a check that needs one says `unknown`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from doctor import registry
from doctor.case import Case
from doctor.facts import PROVIDERS, ProbeFailure
from doctor.model import Finding, Status
from doctor.remedy import journal
from doctor.remedy.model import Plan
from doctor.runner import Event, Run, order_checks, run_checks

JOB_LAYERS = ("scorep", "launcher", "script", "trainer", "artifacts")
CONFIG_LAYERS = ("scorep", "launcher", "script", "trainer")
NOT_PROBED = "not probed: gpu-doctor fix reads the job folder only"


def job_check_ids(playbook: str = "scorep-ddp") -> list[str]:
    from doctor.playbook import load_playbook

    registry.load()
    return [c for c in load_playbook(playbook).checks
            if registry.CHECKS[c].layer in JOB_LAYERS]


def node_presets(check_ids: Sequence[str]) -> dict[str, Any]:
    """A 'not probed' failure for every fact that only node-side probes provide."""
    checks = order_checks(check_ids)
    needed = {n for c in checks for n in c.needs}
    node_only = {n for c in checks if c.layer not in JOB_LAYERS for n in c.needs}
    probes = {n for n, p in PROVIDERS.items() if p.fn.__module__.startswith("doctor.probes")}
    return {n: ProbeFailure(n, "error", NOT_PROBED) for n in (needed & probes) | node_only}


def run_job_checks(case: Case, budget_s: float = 60.0, on_event: Callable[[Event], None] | None = None,
                   only: Sequence[str] = ()) -> Run:
    """The job-folder and artifacts checks of `scorep-ddp` (or just `only` of them), node probes preset."""
    ids = [c for c in job_check_ids() if not only or c in only]
    return run_checks(case, ids, budget_s=budget_s, on_event=on_event, playbook="scorep-ddp",
                      mode="fix", preset_facts=node_presets(ids))


def check_and_plan(case: Case, *, extra: Sequence[Finding] = (), only: Sequence[str] = (),
                   unsafe: bool = False, budget_s: float = 60.0) -> tuple[Run, Plan]:
    """What `gpu-doctor fix PATH` shows: the job checks run now, with `extra` findings
    (a node's, e.g. GPU003's), planned; unsafe remedies in `Plan.skipped` unless `unsafe`.

    The app's fix screen plans through this too, so the two never offer different plans.
    """
    from doctor.remedy.planner import make_plan

    history = journal.history(case.root) if case.root is not None else None  # before any file is read
    run = run_job_checks(case, budget_s=budget_s)
    plan = make_plan(case, run.findings + list(extra), only=only, unsafe=unsafe, facts=run.facts,
                     history=history)
    return run, plan


def recheck(case: Case, plan: Plan, budget_s: float = 60.0) -> Run:
    """Re-run the checks whose findings named the plan's applied remedies."""
    return run_job_checks(case, budget_s, only=sorted({c for rp in plan.ready for c in rp.checks}))


@dataclass(frozen=True)
class Verification:
    remedy_id: str
    verified: bool | None
    checks: dict[str, str]
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"verified": self.verified, "checks": self.checks, "note": self.note}


def verify_plan(plan: Plan, after: Run) -> list[Verification]:
    """For each applied remedy: do the checks that raised its findings still name it?"""
    out = []
    for rp in plan.ready:
        layers = {c: registry.CHECKS[c].layer for c in rp.checks if c in registry.CHECKS}
        config = [c for c in rp.checks if layers.get(c) in CONFIG_LAYERS]
        statuses = {c: (r.status.value if (r := after.result(c)) else "not run") for c in rp.checks}
        if not config:
            note = ("raised by the artifacts of the last run: only a new run can show it"
                    if any(layers.get(c) == "artifacts" for c in rp.checks)
                    else "raised by a node check, which fix does not re-run: run gpu-doctor --check-only there")
            out.append(Verification(rp.remedy_id, None, statuses, note))
            continue
        still = [c for c in config if _names(after, c, rp.remedy_id)]
        unclear = [c for c in config if (r := after.result(c)) is None
                   or r.status in (Status.UNKNOWN, Status.TIMEOUT, Status.SKIP)]
        if still:
            out.append(Verification(rp.remedy_id, False, statuses,
                                    f"still raised by {', '.join(still)}"))
        elif unclear:
            out.append(Verification(rp.remedy_id, None, statuses,
                                    f"{', '.join(unclear)} could not re-check"))
        else:
            out.append(Verification(rp.remedy_id, True, statuses))
    return out


def _names(run: Run, check_id: str, remedy_id: str) -> bool:
    res = run.result(check_id)
    return bool(res) and any(remedy_id in f.remedies for f in res.findings  # type: ignore[union-attr]
                             if f.status not in (Status.PASS, Status.SKIP))


def record(plan: Plan, tx: str, results: list[Verification]) -> None:
    journal.append(plan.root, {"type": "verify", "tx": tx,
                               "remedies": {v.remedy_id: v.to_json() for v in results}})


def findings_of(run: Run) -> list[Finding]:
    return run.findings

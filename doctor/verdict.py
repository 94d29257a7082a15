"""Exit codes, the one-line reason, and the versioned JSON document of a run."""

from __future__ import annotations

import enum
import os
import sys
from typing import Any

from doctor import __version__, registry
from doctor.model import CheckResult, Layer, Status
from doctor.runner import Run
from doctor.wording import count

SCHEMA_VERSION = "1.1"


class ExitCode(enum.IntEnum):
    """The gate's exit codes: an API that Slurm configs and scripts rely on."""

    OK = 0
    FINDINGS = 1
    ERROR = 2


FAIL_ON = {"error": (Status.FAIL,), "warning": (Status.FAIL, Status.WARN)}


def blocking(results: list[CheckResult], fail_on: str = "error") -> list[CheckResult]:
    """Results that make the run fail at this threshold.

    Any finding at or above the threshold, plus `unknown`/`timeout` on a node
    check: a node we could not measure is not a node to run on. A job-layer
    check is blocking when it is `unknown`/`timeout` because its probe failed
    (MemoryError, RecursionError, over budget) or a file was refused as hostile
    or over a bound (a FIFO, a 4 GB script): that job was not checked, so it
    must not pass.
    """
    bad = []
    for r in results:
        if r.status in FAIL_ON[fail_on]:
            bad.append(r)
        elif r.status in (Status.UNKNOWN, Status.TIMEOUT) and (
                r.layer == Layer.NODE.value or any(_not_checked(f) for f in r.findings)):
            bad.append(r)
    return bad


def _not_checked(finding: Any) -> bool:
    return finding.status in (Status.UNKNOWN, Status.TIMEOUT) and bool(
        finding.entities.get("probe") or finding.entities.get("bound"))


def not_checked(run: Run) -> tuple[str, str] | None:
    """("NOTHING CHECKED" / "NOT CHECKED", why) when PATH was given and its job was not read or
    nothing in it was checked (see doctor.jobfolder.coverage): such a run never passes."""
    job = run.facts.peek("job") if run.facts is not None and run.case.root is not None else None
    if job is None:  # the node-only gate never loads the job-folder modules
        return None
    from doctor.jobfolder.coverage import not_checked as job_not_checked
    from doctor.jobfolder.model import Job

    return job_not_checked(job, run.results) if isinstance(job, Job) else None


def exit_code(run: Run, fail_on: str = "error") -> ExitCode:
    return ExitCode.FINDINGS if blocking(run.results, fail_on) or not_checked(run) else ExitCode.OK


def counts(results: list[CheckResult]) -> dict[str, int]:
    out = {s.value: 0 for s in Status}
    for r in results:
        out[r.status.value] += 1
    return out


def reason_line(run: Run, fail_on: str = "error") -> str:
    """The one line a prologue log or a job script shows: root causes first, then the next command."""
    from doctor.diagnosis import diagnose

    host = run.case.host
    bad = blocking(run.results, fail_on)
    diagnosis = diagnose(run)
    step = diagnosis.next_step
    if bad:
        bad_ids = {b.check_id for b in bad}
        roots = [r for r in diagnosis.root_causes if r.problem.check_id in bad_ids]
        ids = list(dict.fromkeys([r.problem.check_id for r in roots] + [r.check_id for r in bad]))
        # A warning that may explain a failure, were its log's run known to allow it: said with its doubt.
        maybe = [r for r in diagnosis.root_causes if r.unsure and r.problem.check_id not in bad_ids
                 and any(s.problem.check_id in bad_ids for s in r.symptoms)]
        first = next((b for b in bad if roots and b.check_id == roots[0].problem.check_id), bad[0])
        step = next_for(first, diagnosis, run) or _first_step(diagnosis, run)
        if len(bad) > 2 or roots:
            causes = "; root causes: " + ", ".join(_root_words(r) for r in roots) if roots else ""
            if maybe:
                causes += "; possible causes: " + _maybe_words(maybe)
            line = (f"gpu-doctor: FAIL on {host}: {count(len(bad), 'check')} "
                    f"({', '.join(ids)}){causes}; first: {first.check_id} {first.status.value}: {first.message}")
        else:
            line = f"gpu-doctor: FAIL on {host}: " + "; ".join(f"{r.check_id} {r.status.value}: {r.message}"
                                                              for r in bad)
        unread = not_checked(run)
        if unread is not None:  # what was not read is said beside the findings of what was
            line += f"; {unread[0]}: {unread[1]}"
        return f"{line}; next: {step}" if step else line
    c = counts(run.results)
    unread = not_checked(run)
    if unread is not None:
        odd = [r for r in run.results if r.status in (Status.UNKNOWN, Status.TIMEOUT)]
        step = step or (f"gpu-doctor explain {odd[0].check_id}" if odd else
                        f"name the job script: gpu-doctor --check-only --launch FILE {run.case.root}")
        return f"gpu-doctor: {unread[0]} on {host}: {unread[1]}; next: {step}"
    summary = ", ".join(f"{n} {s}" for s, n in c.items() if n)
    warns = [r.check_id for r in run.results if r.status == Status.WARN]
    note = f" (warnings: {', '.join(warns)})" if warns else ""
    line = f"gpu-doctor: OK on {host}: {summary or 'no checks'}{note}"
    if step is not None and step.startswith("gpu-doctor fix "):
        step = _first_step(diagnosis, run)
    if step is None:
        odd = [r for r in run.results if r.status in (Status.UNKNOWN, Status.TIMEOUT)]
        step = f"gpu-doctor explain {odd[0].check_id}" if odd else None
    return f"{line}; next: {step}" if step else line


def _root_words(root: Any) -> str:
    """'SCR002 (explains ART003, ART004)'; a link whose log may come from a run without the cause's
    precondition: 'SCR001 (may explain ART004: not known whether the run that wrote ...)'."""
    sure = list(dict.fromkeys(s.problem.check_id for s in root.symptoms if not s.unsure))
    maybe = [s for s in root.symptoms if s.unsure and s.problem.check_id not in sure]
    words = [f"explains {', '.join(sure)}"] if sure else []
    if maybe:
        ids = list(dict.fromkeys(s.problem.check_id for s in maybe))
        words.append(f"may explain {', '.join(ids)}: {maybe[0].unsure}")
    return f"{root.problem.check_id} ({'; '.join(words)})"


def _maybe_words(roots: list[Any]) -> str:
    """'LNC002, SCR001 (may explain ART004: not known whether ...)': the doubt once for the causes it is shared by."""
    groups: dict[tuple[tuple[str, ...], str], list[str]] = {}
    for r in roots:
        ids = tuple(dict.fromkeys(s.problem.check_id for s in r.symptoms if s.unsure))
        groups.setdefault((ids, next(s.unsure for s in r.symptoms if s.unsure)), []).append(r.problem.check_id)
    return ", ".join(f"{', '.join(causes)} (may explain {', '.join(ids)}: {doubt})"
                     for (ids, doubt), causes in groups.items())


def next_for(result: CheckResult, diagnosis: Any, run: Run) -> str | None:
    """The next command for one check's result: its root-cause entry's, else its own, each as its
    remedy's plan answers it (`diagnosis.planned_next`)."""
    for r in diagnosis.root_causes:
        if r.problem.check_id == result.check_id:
            return _planned(run, r.problem.check_id, r.problem.layer, r.problem.remedies)
    if result.status in (Status.PASS, Status.SKIP):
        return None
    return _planned(run, result.check_id, result.layer, tuple(result.remedies))


def _planned(run: Run, check_id: str, layer: str, remedies: tuple[str, ...]) -> str:
    """`diagnosis.planned_next`, asked once per run (the reason line and the JSON's `next` agree)."""
    from doctor.diagnosis import planned_next

    memo = run.extra.setdefault("planned_next", {})
    key = (check_id, layer, tuple(remedies))
    if key not in memo:
        memo[key] = planned_next(check_id, layer, remedies, run.case)
    return str(memo[key])


def _first_step(diagnosis: Any, run: Run) -> str | None:
    """The diagnosis's own next step (the first root cause's, else the worst problem's), planned."""
    firsts = [r.problem for r in diagnosis.root_causes] + [u.problem for u in diagnosis.unexplained] \
        + list(diagnosis.independent)
    if not firsts or diagnosis.next_step is None:
        return None
    p = next((f for f in firsts if f.next_step == diagnosis.next_step), firsts[0])
    return _planned(run, p.check_id, p.layer, p.remedies)


def _remedy_json(rid: str, applied: dict[str, Any]) -> dict[str, Any]:
    rem = registry.remedy_for(rid)
    state = applied.get(rid, {})
    return {"id": rid, "safety": rem.safety.value if rem else "manual",
            "title": rem.title if rem else rid,
            "applied": bool(state.get("applied", False)), "verified": state.get("verified")}


def remedy_ids(r: CheckResult, applied: dict[str, Any]) -> list[str]:
    """The remedies the findings name, plus the check's own remedies already applied here.

    A check that passes because `gpu-doctor fix` applied its remedy still shows that
    remedy, with `applied` and `verified`.
    """
    ids = list(r.remedies)
    if applied:
        chk = registry.CHECKS.get(r.check_id)
        ids += [rid for rid in (chk.remedies if chk else ()) if rid in applied and rid not in ids]
    return ids


def check_json(r: CheckResult, applied: dict[str, Any] | None = None) -> dict[str, Any]:
    applied = applied or {}
    return {
        "id": r.check_id,
        "layer": r.layer,
        "title": r.title,
        "status": r.status.value,
        "message": r.message,
        "duration_ms": round(r.duration_ms, 1),
        "evidence": [e.to_json() for e in r.evidence],
        "entities": [dict(e) for e in r.entities],
        "remedies": [_remedy_json(rid, applied) for rid in remedy_ids(r, applied)],
        "findings": [
            {"status": f.status.value, "message": f.message,
             "evidence": [e.to_json() for e in f.evidence],
             "entities": dict(f.entities), "remedies": list(f.remedies),
             "data": dict(f.data)}
            for f in r.findings
        ],
    }


def run_json(run: Run, fail_on: str = "error", argv: list[str] | None = None) -> dict[str, Any]:

    code = exit_code(run, fail_on)
    unread = not_checked(run)
    overall = "fail" if code else ("warn" if any(r.status == Status.WARN for r in run.results) else "pass")
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "gpu-doctor", "version": __version__},
        "run": {
            "mode": run.mode,
            "playbook": run.playbook,
            "host": run.case.host,
            "slurm_job_id": run.case.env.get("SLURM_JOB_ID"),
            "expect_gpus": run.case.gpus_expected,   # --expect-gpus, else Slurm's allocation
            "path": str(run.case.root) if run.case.root else None,
            "start": run.started.isoformat(),
            "duration_s": round(run.duration_s, 3),
            "fail_on": fail_on,
            "argv": argv if argv is not None else sys.argv[1:],
            "uid": os.geteuid() if hasattr(os, "geteuid") else None,
        },
        "status": overall,
        "exit_code": int(code),
        "counts": counts(run.results),
        "not_checked": f"{unread[0]}: {unread[1]}" if unread else None,
        "checks": [check_json(r, run.extra.get("applied")) for r in run.results],
        "diagnosis": _diagnosis_json(run),
        **_job_json(run),
    }


def _diagnosis_json(run: Run) -> dict[str, Any]:
    """The diagnosis, its `next` as the remedy's plan answers it (as the reason line says)."""
    from doctor.diagnosis import diagnose

    diagnosis = diagnose(run)
    doc = diagnosis.to_json()
    if isinstance(doc.get("next"), str) and doc["next"].startswith("gpu-doctor fix "):
        doc["next"] = _first_step(diagnosis, run)
    return doc


def _job_json(run: Run) -> dict[str, Any]:
    """`job`: the process tree the job checks read, when they ran (see doctor.jobfolder.processes)."""
    job = run.facts.peek("job") if run.facts is not None else None
    if job is None:  # the node-only gate never loads the job-folder modules
        return {}
    from doctor.jobfolder.model import Job
    from doctor.jobfolder.processes import job_json

    return {"job": job_json(job)} if isinstance(job, Job) else {}

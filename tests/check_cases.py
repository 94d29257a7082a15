"""ruff-style fixtures: `tests/cases/<ID>/<case>/` runs one real check, plans its fix, applies, re-checks.

A case folder holds:

    job/          the job folder (scripts, logs, experiment folders) the check reads
    case.toml     optional: `description`, `env` (added to the case's environment), `scenario` and
                  `[knobs]` (a fake GPU node from tests/fakes: the node probes run for real
                  against it instead of the healthy node's facts), `[facts]`
                  (node facts that replace the healthy node's), `[failures]` (fact = "error: why"
                  or "timeout: why", a probe that failed), `unsafe = false` (plan safe remedies only)
    facts.json    optional: node facts too nested for TOML (a probe's output as it returns it)
    findings.txt  expected: the check's findings (ID, status, message, file:line of the evidence,
                  remedies) and the plan (each remedy's status)
    fix.diff      expected where the plan changes files: the unified diff `gpu-doctor fix --diff` prints
    fixed.txt     expected with fix.diff: the check's findings after applying, and each remedy's
                  verification

`GPU_DOCTOR_REGENERATE=1 pytest tests/test_check_cases.py` writes the expected files from what the
code does now; review their diff like code (`git diff tests/cases`).
"""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from doctor.case import Case
from doctor.facts import ProbeFailure
from doctor.model import CheckResult, Finding
from doctor.remedy.model import Plan
from doctor.runner import Run, run_checks

CASES = Path(__file__).resolve().parent / "cases"
REGENERATE = bool(os.environ.get("GPU_DOCTOR_REGENERATE"))
EXPECTED = ("findings.txt", "fix.diff", "fixed.txt")

# A healthy node with Score-P installed; a case's [facts] replace single facts.
NODE: dict[str, Any] = {
    "scorep_install": {"scorep_config": "/opt/scorep/bin/scorep-config", "version": "Score-P 8.4",
                       "cuda_support": True, "python_bindings": True, "config_summary": "CUDA support: yes",
                       "python": "/usr/bin/python3", "notes": []},
    "framework": {"ok": True, "error": None, "torch_version": "2.3.1", "torch_cuda": "12.1",
                  "device_count": 4, "nccl_version": "2.20.5"},
    "cuda_runtime": {"state": "ready", "ready_attempt": 1, "attempts": [], "last": {}},
    "nvml": {"driver_loaded": True, "error": None, "driver_version": "550.54.15", "cuda_driver_version": 12040,
             "gpus": [{"index": i, "name": "NVIDIA A100-SXM4-40GB", "uuid": f"GPU-{i}", "pci_bus_id": "",
                       "memory_total": 42949672960} for i in range(4)]},
}


@dataclass(frozen=True)
class CheckCase:
    check_id: str
    name: str
    folder: Path
    config: dict[str, Any]

    @property
    def id(self) -> str:
        return f"{self.check_id}/{self.name}"


def all_cases() -> list[CheckCase]:
    out = []
    for job in sorted(CASES.glob("*/*/job")):
        folder = job.parent
        config_file = folder / "case.toml"
        config = tomllib.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
        out.append(CheckCase(folder.parent.name, folder.name, folder, config))
    return out


def presets(case: CheckCase) -> dict[str, Any]:
    given = case.folder / "facts.json"
    node = {} if case.config.get("scenario") else NODE
    facts: dict[str, Any] = {**node, **case.config.get("facts", {}),
                             **(json.loads(given.read_text(encoding="utf-8")) if given.is_file() else {})}
    for name, why in case.config.get("failures", {}).items():
        kind, _, detail = str(why).partition(": ")
        facts[name] = ProbeFailure(name, kind, detail)
    return facts


def check(case: CheckCase, job: Path) -> Run:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/home/user"}
    if case.config.get("scenario"):
        from fakes.node import scenario_env

        env = scenario_env(case.config["scenario"], job.parent / "node", **case.config.get("knobs", {}))
    env.update(case.config.get("env", {}))
    return run_checks(Case(root=job, env=env, host="node07"), [case.check_id], budget_s=60,
                      preset_facts=presets(case))


def show_findings(result: CheckResult | None, job: Path) -> list[str]:
    if result is None:
        return ["(the check did not run)"]
    if not result.findings:
        return [f"{result.check_id} {result.status.value}  {result.message}"]
    return [line for f in result.findings for line in show_finding(f)]


def show_finding(f: Finding) -> list[str]:
    lines = [f"{f.check_id} {f.status.value}  {f.message}"]
    for ev in f.evidence:
        where = f"{ev.file}:{ev.line}" if ev.file and ev.line else (ev.file or "")
        label = f"{ev.label}: " if ev.label else ""
        lines.append(f"    {where}  {label}{ev.text}".rstrip() if where else f"    {label}{ev.text}")
    if f.remedies:
        lines.append(f"    remedies: {', '.join(f.remedies)}")
    return lines


def show_plan(plan: Plan) -> list[str]:
    lines = []
    for rp in (*plan.remedies, *plan.skipped):
        note = f": {rp.note}" if rp.note and rp.status != "ready" else ""
        lines.append(f"    {rp.remedy_id} ({rp.safety.value}) {rp.status}{note}")
    return ["plan:", *lines] if lines else ["plan: nothing to plan"]


def relative(text: str, job: Path) -> str:
    """Paths inside the copied job folder read as they do in the case folder."""
    return text.replace(f"{job}/", "").replace(str(job), ".")


def produce(case: CheckCase, tmp: Path) -> dict[str, str | None]:
    """Run the case; the text of each expected file (None: the file must not exist)."""
    from doctor.remedy.apply import apply_plan, undo
    from doctor.remedy.planner import make_plan
    from doctor.remedy.verify import verify_plan

    job = tmp / "job"
    shutil.copytree(case.folder / "job", job, symlinks=True)
    before = snapshot(job)
    run = check(case, job)
    result = run.result(case.check_id)
    findings = list(result.findings) if result else []
    plan = make_plan(run.case, findings, unsafe=case.config.get("unsafe", True), facts=run.facts)
    out: dict[str, str | None] = {
        "findings.txt": "\n".join([*show_findings(result, job), *show_plan(plan)]) + "\n",
        "fix.diff": None, "fixed.txt": None}
    if not plan.files:
        return {name: relative(text, job) if text else text for name, text in out.items()}
    out["fix.diff"] = plan.diff()
    applied = apply_plan(plan)
    after = check(case, job)
    verified = [f"    {v.remedy_id}: {'verified' if v.verified else 'NOT verified' if v.verified is False else 'unverified'}"
                + (f" ({v.note})" if v.note else "") for v in verify_plan(plan, after)]
    out["fixed.txt"] = "\n".join([*show_findings(after.result(case.check_id), job), "verification:", *verified]) + "\n"
    left = after.result(case.check_id)
    again = make_plan(after.case, list(left.findings) if left else [], unsafe=case.config.get("unsafe", True),
                      facts=after.facts)
    assert not again.files, f"{case.id}: planning again after the fix would change files again"
    if applied.tx is not None:
        undo(job)
    assert snapshot(job) == before, f"{case.id}: undo did not restore every byte"
    return {name: relative(text, job) if text else text for name, text in out.items()}


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and ".gpu-doctor" not in p.parts}


def compare(case: CheckCase, produced: dict[str, str | None]) -> list[str]:
    """The expected files that differ (after rewriting them when regenerating)."""
    stale = []
    for name in EXPECTED:
        path = case.folder / name
        text = produced.get(name)
        have = path.read_text(encoding="utf-8") if path.is_file() else None
        if have == text:
            continue
        if REGENERATE:
            if text is None:
                path.unlink()
            else:
                path.write_text(text, encoding="utf-8")
            continue
        stale.append(name)
    return stale

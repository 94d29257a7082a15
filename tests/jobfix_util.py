"""Helpers shared by the job-folder pattern tests (launch_chain, heldout): the job-layer findings
of a folder, and `gpu-doctor fix --apply --unsafe` followed by a re-check."""

from __future__ import annotations

from pathlib import Path

import pytest
from jobfolder_util import JOB_CHECKS, bad, run_check

from doctor.case import Case
from doctor.cli import main
from doctor.model import Outcome, Status
from doctor.remedy.journal import records
from doctor.remedy.verify import CONFIG_LAYERS, run_job_checks

# What no edit of the job folder can fix on this machine: Score-P is not installed here.
MACHINE = {"SCP001", "TRN002", "LNC003"}


def failing(folder: Path) -> dict[str, list[Outcome]]:
    """check id -> its outcomes above pass/skip, for every job-layer check of the catalogue."""
    out: dict[str, list[Outcome]] = {}
    for cid in JOB_CHECKS:
        found = bad(run_check(cid, folder))
        if found:
            out[cid] = found
    return out


def messages(found: dict[str, list[Outcome]]) -> dict[str, list[str]]:
    return {k: [o.message for o in v] for k, v in found.items()}


def fix_apply_unsafe(job: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, dict[str, bool], dict[str, str]]:
    """Run `gpu-doctor fix JOB --apply --unsafe`; return its output (stdout, then stderr), each applied remedy's
    `verified`, and the job-layer findings a re-check still raises (check id -> message)."""
    assert main(["fix", str(job), "--apply", "--unsafe"]) == 0
    captured = capsys.readouterr()
    out = captured.out + captured.err
    verifies = [r for r in records(job) if r["type"] == "verify"]
    verified = {k: v["verified"] for k, v in verifies[-1]["remedies"].items()} if verifies else {}
    after = run_job_checks(Case(root=job))
    left = {r.check_id: r.message for r in after.results
            if r.layer in CONFIG_LAYERS and r.status not in (Status.PASS, Status.SKIP) and r.check_id not in MACHINE}
    return out, verified, left

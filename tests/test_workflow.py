"""The whole workflow through the real CLI, as a user runs it on the bundled example:
check -> fix --apply -> check again (remedies applied and verified) -> undo -> as before.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from examples_util import EXAMPLES

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = EXAMPLES / "scorep-ddp-broken"


def gpu_doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "doctor", *args], capture_output=True, text=True,
                          timeout=300, env=env)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and ".gpu-doctor" not in p.parts}


def remedy_state(doc: dict, check_id: str, remedy_id: str) -> dict:
    check = next(c for c in doc["checks"] if c["id"] == check_id)
    return next(r for r in check["remedies"] if r["id"] == remedy_id)


@pytest.mark.slow
def test_check_fix_recheck_undo_on_the_bundled_example(tmp_path: Path, fake_node) -> None:
    job = tmp_path / "job"
    shutil.copytree(EXAMPLE, job)
    before = snapshot(job)
    env = fake_node("healthy")

    first = gpu_doctor("--check-only", "--playbook", "scorep-ddp", "--json", str(job), env=env)
    assert first.returncode == 1, first.stderr
    doc = json.loads(first.stdout)
    assert remedy_state(doc, "SCP003", "scorep-total-memory")["applied"] is False

    fixed = gpu_doctor("fix", str(job), "--apply", "--unsafe", env=env)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "scorep-total-memory: verified" in fixed.stdout

    second = gpu_doctor("--check-only", "--playbook", "scorep-ddp", "--json", str(job), env=env)
    doc = json.loads(second.stdout)
    statuses = {c["id"]: c["status"] for c in doc["checks"]}
    for cid in ("SCP002", "SCP003", "SCP005", "LNC001", "LNC002", "SCR001", "SCR002", "SCR003", "TRN001"):
        assert statuses[cid] in ("pass", "skip"), (cid, statuses[cid])
    assert remedy_state(doc, "SCP003", "scorep-total-memory") | {"title": ""} == {
        "id": "scorep-total-memory", "safety": "safe", "title": "", "applied": True, "verified": True}
    applied = [r for c in doc["checks"] for r in c["remedies"] if r["applied"]]
    assert len(applied) >= 5
    assert all(r["verified"] is not False for r in applied)

    undone = gpu_doctor("undo", str(job), "--all")
    assert undone.returncode == 0, undone.stderr
    assert snapshot(job) == before


def test_bundled_playbooks_name_only_catalogue_checks_and_remedies() -> None:
    from doctor import registry
    from doctor.playbook import available, load_playbook

    registry.load()
    names = available()
    assert {"prologue", "node", "scorep-ddp", "post-run", "p2p"} <= set(names)
    for name in names:
        pb = load_playbook(name)
        assert pb.checks, name
        referenced = {r for c in pb.checks for r in registry.CHECKS[c].remedies}
        assert not [r for r in referenced if r not in registry.REMEDIES], (name, referenced)


def test_prologue_reads_no_user_files() -> None:
    from doctor.playbook import load_playbook

    pb = load_playbook("prologue")
    assert pb.reads_user_files is False
    assert set(pb.checks) == {"GPU001", "GPU002", "GPU003", "GPU005", "P2P001"}


def test_the_reason_line_stays_one_line_naming_every_failing_check(tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(EXAMPLE, job)
    proc = gpu_doctor("--check-only", "--playbook", "scorep-ddp", "--quiet", str(job))
    assert proc.returncode == 1
    [line] = proc.stdout.splitlines()
    assert line.startswith("gpu-doctor: FAIL on ")
    for cid in ("SCP002", "SCP003", "SCP005", "LNC001", "SCR002", "SCR003", "TRN001"):
        assert cid in line
    assert "first: SCP002 fail: " in line
    assert line.endswith(f"; next: gpu-doctor fix {job} --only scorep-add-cuda --diff")


def test_a_mistyped_subcommand_is_a_one_line_usage_error() -> None:
    proc = gpu_doctor("lanch", "--", "train.py")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "neither a subcommand" in proc.stderr and "launch" in proc.stderr


def test_a_missing_python_is_a_usage_error_not_a_probe_failure() -> None:
    proc = gpu_doctor("--check-only", "--playbook", "node", "--python", "/nonexistent/python3")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("gpu-doctor: error: --python '/nonexistent/python3': no such interpreter "
                                   "(not an executable file, not on PATH)")


def test_launching_a_module_says_to_pass_the_script_file() -> None:
    proc = gpu_doctor("launch", "--nproc", "2", "--", "-m", "pkg.train")
    assert proc.returncode == 2
    assert "`-m` launches are not supported" in proc.stderr
    assert proc.stderr.strip().count("\n") == 0

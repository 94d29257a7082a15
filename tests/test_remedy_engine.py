"""The remedy engine: apply is atomic, journaled, idempotent, refuses stale or read-only files, undoes."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from remedy_util import make_job, seed_findings, snapshot

from doctor import registry
from doctor.case import Case
from doctor.model import Status
from doctor.remedy import (
    NotWritable,
    RemedyError,
    StaleFile,
    apply_plan,
    make_plan,
    remedy_states,
    transactions,
    undo,
)
from doctor.remedy import files as remedy_files
from doctor.remedy.journal import records
from doctor.remedy.verify import Verification, record, verify_plan

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def job(tmp_path: Path) -> Path:
    return make_job(tmp_path / "job")


def plan_for(job: Path, unsafe: bool = True):  # type: ignore[no-untyped-def]
    return make_plan(Case(root=job), seed_findings(job), unsafe=unsafe)


def test_apply_then_undo_restores_every_byte_and_removes_created_files(job: Path) -> None:
    before = snapshot(job)
    plan = plan_for(job)
    result = apply_plan(plan)
    assert result.tx is not None
    assert {p.name for p in result.written} == {"job.sbatch", "train.py", "run_ranks.sh"}
    assert b"SCOREP_TOTAL_MEMORY=3500M" in (job / "job.sbatch").read_bytes()
    assert snapshot(job) != before
    undone = undo(job)
    assert undone.txs == (result.tx,)
    assert snapshot(job) == before
    assert not (job / "run_ranks.sh").exists()
    assert not list(job.glob(".*.tmp"))


def test_apply_keeps_mode_bits_and_makes_the_launch_script_executable(job: Path) -> None:
    (job / "train.py").chmod(0o640)
    apply_plan(plan_for(job))
    assert stat.S_IMODE((job / "job.sbatch").stat().st_mode) == 0o750
    assert stat.S_IMODE((job / "train.py").stat().st_mode) == 0o640
    assert stat.S_IMODE((job / "run_ranks.sh").stat().st_mode) == 0o755


def test_applying_the_same_plan_twice_is_a_no_op(job: Path) -> None:
    plan = plan_for(job)
    apply_plan(plan)
    after = snapshot(job)
    journal_lines = len(records(job))
    again = apply_plan(plan)
    assert again.tx is None and again.written == ()
    assert len(again.already) == 3
    assert snapshot(job) == after
    assert len(records(job)) == journal_lines


def test_safe_only_plan_leaves_user_code_alone(job: Path) -> None:
    code = (job / "train.py").read_bytes()
    plan = plan_for(job, unsafe=False)
    assert {rp.remedy_id for rp in plan.skipped} >= {"lazy-scorep-import", "per-rank-launch"}
    result = apply_plan(plan)
    assert [p.name for p in result.written] == ["job.sbatch"]
    assert (job / "train.py").read_bytes() == code
    assert not (job / "run_ranks.sh").exists()


def test_file_edited_after_planning_is_refused_and_nothing_is_written(job: Path) -> None:
    plan = plan_for(job)
    with (job / "train.py").open("a") as fh:
        fh.write("# edited by hand\n")
    before = snapshot(job)
    with pytest.raises(StaleFile, match="train.py changed since the plan"):
        apply_plan(plan)
    assert snapshot(job) == before
    assert not (job / ".gpu-doctor" / "journal.jsonl").exists()


def test_file_created_after_planning_where_the_plan_creates_one_is_refused(job: Path) -> None:
    plan = plan_for(job)
    (job / "run_ranks.sh").write_text("#!/bin/sh\necho mine\n")
    with pytest.raises(StaleFile, match="run_ranks.sh appeared"):
        apply_plan(plan)
    assert (job / "run_ranks.sh").read_text() == "#!/bin/sh\necho mine\n"


def test_read_only_file_is_refused_with_nothing_changed(job: Path) -> None:
    plan = plan_for(job)
    (job / "train.py").chmod(0o444)
    before = snapshot(job)
    with pytest.raises(NotWritable, match=r"train.py: the file is read-only \(mode -r--r--r--\)"):
        apply_plan(plan)
    assert snapshot(job) == before
    assert not (job / ".gpu-doctor").exists()


def test_read_only_folder_is_refused_with_nothing_changed(job: Path) -> None:
    plan = plan_for(job)
    before = snapshot(job)
    job.chmod(0o555)
    try:
        with pytest.raises(NotWritable, match="the folder is read-only"):
            apply_plan(plan)
    finally:
        job.chmod(0o755)
    assert snapshot(job) == before
    assert not (job / ".gpu-doctor").exists()


def test_a_write_that_fails_part_way_puts_the_written_files_back(job: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    plan = plan_for(job)
    before = snapshot(job)
    real = remedy_files.swap_in
    calls = []

    def failing(tmp: Path, path: Path, expect: str | None) -> None:
        if ".gpu-doctor" not in path.parts:
            calls.append(path)
            if len(calls) == 2:
                raise OSError(28, "No space left on device", str(path))
        real(tmp, path, expect)

    monkeypatch.setattr(remedy_files, "swap_in", failing)
    with pytest.raises(RemedyError, match="No space left on device.*put back"):
        apply_plan(plan)
    monkeypatch.setattr(remedy_files, "swap_in", real)
    assert snapshot(job) == before
    assert [t.end for t in transactions(job)] == ["aborted"]


CRASH = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from doctor.case import Case
from doctor.remedy import apply_plan, make_plan, files
from remedy_util import seed_findings
job, after = Path(sys.argv[1]), int(sys.argv[2])
plan = make_plan(Case(root=job), seed_findings(job))
real, done = files.swap_in, []
def crashing(tmp, path, expect):
    if ".gpu-doctor" not in path.parts and len(done) == after:
        os.kill(os.getpid(), signal.SIGKILL)  # the temp file is written, the rename never happens
    real(tmp, path, expect)
    if ".gpu-doctor" not in path.parts:
        done.append(path)
files.swap_in = crashing
apply_plan(plan)
"""


@pytest.mark.parametrize("renames_before_crash", [1, 2])
def test_crash_between_two_writes_leaves_each_file_old_or_new_and_undo_restores(
        job: Path, renames_before_crash: int) -> None:
    before = snapshot(job)
    plan = plan_for(job)
    planned = {t.path.name: t.after for t in plan.files}
    proc = subprocess.run([sys.executable, "-c", CRASH, str(job), str(renames_before_crash), str(TESTS)],
                          capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    now = snapshot(job)
    changed = 0
    for name, data in before.items():
        assert now[name] in (data, planned.get(name, data)), f"{name} is neither old nor new"
        changed += now[name] != data
    created = "run_ranks.sh" in now
    assert changed + created == renames_before_crash
    if created:
        assert now["run_ranks.sh"] == planned["run_ranks.sh"]
    assert [t.end for t in transactions(job)] == ["interrupted"]
    with pytest.raises(RemedyError, match="interrupted; run `gpu-doctor undo`"):
        apply_plan(plan)
    undo(job)
    assert snapshot(job) == before
    assert not [p for p in job.iterdir() if p.name.endswith(".tmp")]


def test_undo_refuses_a_file_changed_after_the_fix_unless_forced(job: Path) -> None:
    before = snapshot(job)
    apply_plan(plan_for(job))
    (job / "train.py").write_text("print('rewritten')\n")
    with pytest.raises(StaleFile, match="train.py changed after gpu-doctor applied"):
        undo(job)
    assert (job / "train.py").read_text() == "print('rewritten')\n"
    assert (job / "run_ranks.sh").exists()
    undo(job, force=True)
    assert snapshot(job) == before


def test_undo_with_nothing_applied_does_nothing(job: Path) -> None:
    assert undo(job).txs == ()
    assert not (job / ".gpu-doctor").exists()


def test_undo_all_goes_back_through_several_fixes(job: Path) -> None:
    before = snapshot(job)
    apply_plan(plan_for(job, unsafe=False))
    apply_plan(make_plan(Case(root=job), seed_findings_after_safe(job), unsafe=True))
    assert len([t for t in transactions(job) if t.open]) == 2
    undone = undo(job, everything=True)
    assert len(undone.txs) == 2
    assert snapshot(job) == before


def seed_findings_after_safe(job: Path):  # type: ignore[no-untyped-def]
    ids = {"lazy-scorep-import", "destroy-process-group"}
    return [f for f in seed_findings(job) if set(f.remedies) & ids]


def test_journal_records_begin_commit_verify_and_remedy_states(job: Path) -> None:
    plan = plan_for(job)
    result = apply_plan(plan, ["gpu-doctor", "fix", "--apply"])
    assert result.tx is not None
    record(plan, result.tx, [Verification("scorep-total-memory", True, {"SCP003": "pass"}),
                             Verification("per-rank-launch", False, {"LNC001": "fail"}, "still raised")])
    lines = (job / ".gpu-doctor" / "journal.jsonl").read_text().splitlines()
    kinds = [json.loads(line)["type"] for line in lines]
    assert kinds == ["begin", "commit", "verify"]
    begin = json.loads(lines[0])
    assert begin["argv"] == ["gpu-doctor", "fix", "--apply"]
    entry = next(f for f in begin["files"] if f["path"].endswith("train.py"))
    assert (job / ".gpu-doctor" / entry["backup"]).read_bytes() == \
        (make_job(job.parent / "again") / "train.py").read_bytes()
    states = remedy_states(job)
    assert states["scorep-total-memory"] == {"applied": True, "verified": True, "tx": result.tx}
    assert states["per-rank-launch"]["verified"] is False
    undo(job)
    assert remedy_states(job) == {}


def test_a_torn_last_journal_line_is_ignored(job: Path) -> None:
    apply_plan(plan_for(job))
    with (job / ".gpu-doctor" / "journal.jsonl").open("a") as fh:
        fh.write('{"v": 1, "type": "undo", "tx": ')
    assert [t.end for t in transactions(job)] == ["applied"]
    undo(job)
    assert not (job / "run_ranks.sh").exists()


def test_a_symlinked_script_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    """A rename would replace the link (or edit a file outside the folder): refused, untouched."""
    job = make_job(tmp_path / "job")
    real = tmp_path / "shared" / "train.py"
    real.parent.mkdir()
    (job / "train.py").rename(real)
    os.symlink(real, job / "train.py")
    before, shared = snapshot(job), real.read_bytes()
    with pytest.raises(NotWritable, match="(symlink|outside the job folder).*nothing was written"):
        apply_plan(plan_for(job))
    assert (job / "train.py").is_symlink() and real.read_bytes() == shared
    assert snapshot(job) == before


def test_verification_says_true_false_or_cannot_tell(job: Path) -> None:
    """The re-check is the real one, on the folder as it is after a partial fix: the memory fixed
    (SCP003 passes), --cuda still missing (SCP002 fails), train.py broken by hand since (SCR001
    cannot analyse it: unknown), SCR004 not re-run."""
    from doctor.remedy.verify import run_job_checks

    registry.load()
    plan = plan_for(job)
    apply_plan(make_plan(Case(root=job), seed_findings(job), only=["scorep-total-memory"]))
    (job / "train.py").write_text((job / "train.py").read_text().replace("def main():", "def main(:"))
    after = run_job_checks(Case(root=job), only=["SCP003", "SCP002", "SCR001"])
    assert after.result("SCP003").status == Status.PASS  # type: ignore[union-attr]
    assert after.result("SCR001").status == Status.UNKNOWN  # type: ignore[union-attr]
    got = {v.remedy_id: v for v in verify_plan(plan, after)}
    assert got["scorep-total-memory"].verified is True
    assert got["scorep-add-cuda"].verified is False and "still raised by SCP002" in got["scorep-add-cuda"].note
    assert got["lazy-scorep-import"].verified is None
    assert got["cuda-real-op-check"].checks == {"SCR004": "not run"}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to apply in a folder someone else owns")
def test_root_applying_in_a_users_folder_leaves_everything_owned_by_that_user(job: Path) -> None:
    for path in [job, *job.iterdir()]:
        os.chown(path, 4321, 4321)
    apply_plan(plan_for(job))
    owned = [p for p in job.rglob("*") if p.stat().st_uid != 4321]
    assert owned == []

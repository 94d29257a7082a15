"""Writes that must never replace what is not a file, lose a user's edit, or reach outside the job.

Each test here reproduces a defect found by fuzzing (issue 20): `/dev/null` as
`--json-file` replaced by a 0600 file, an edit made during `fix --apply`
silently lost, `undo` on a copied folder restoring the original, a crafted
journal deleting or overwriting files anywhere.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from remedy_util import make_job, seed_findings, snapshot

from doctor.atomic import UnsafeFile, write_atomic
from doctor.case import Case
from doctor.cli import main
from doctor.remedy import NotWritable, RemedyError, StaleFile, apply_plan, make_plan, undo
from doctor.remedy import files as remedy_files
from doctor.remedy.journal import JournalError, records

REPO = Path(__file__).resolve().parent.parent


def plan_for(job: Path):  # type: ignore[no-untyped-def]
    return make_plan(Case(root=job), seed_findings(job))


@pytest.fixture
def hostile(tmp_path: Path) -> dict[str, Path]:
    """A FIFO, a symlink to a file outside, and /dev/null: none may be replaced."""
    fifo = tmp_path / "verdict.fifo"
    os.mkfifo(fifo)
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me\n")
    link = tmp_path / "verdict-link.json"
    link.symlink_to(outside)
    # A private copy of /dev/null: if a regression renamed over it, the machine's own stays intact.
    devnull = tmp_path / "null"
    try:
        os.mknod(devnull, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("cannot make a device node here (not root)")
    return {"fifo": fifo, "link": link, "devnull": devnull, "outside": outside}


def _unchanged(paths: dict[str, Path]) -> None:
    assert stat.S_ISFIFO(os.lstat(paths["fifo"]).st_mode)
    assert paths["link"].is_symlink() and paths["outside"].read_text() == "keep me\n"
    assert stat.S_ISCHR(os.lstat(paths["devnull"]).st_mode)


@pytest.mark.parametrize("which", ["fifo", "link", "devnull"])
def test_write_atomic_refuses_what_is_not_a_regular_file(hostile: dict[str, Path], which: str) -> None:
    with pytest.raises(UnsafeFile, match=str(hostile[which])):
        write_atomic(hostile[which], b"{}\n")
    _unchanged(hostile)
    assert not list(hostile["fifo"].parent.glob(".*.tmp"))


@pytest.mark.parametrize("which", ["fifo", "link", "devnull"])
def test_gate_json_file_refuses_a_device_fifo_or_symlink(hostile: dict[str, Path], which: str,
                                                        tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "doctor", "--check-only", "--only", "SCP001",
                           "--json-file", str(hostile[which]), str(tmp_path)],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(hostile[which]) in lines[0] and "Traceback" not in proc.stderr
    _unchanged(hostile)


@pytest.mark.parametrize("which", ["fifo", "link", "devnull"])
def test_report_output_refuses_a_device_fifo_or_symlink(hostile: dict[str, Path], which: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    target = hostile[which]
    named = target.with_name(target.name + ".json") if which != "link" else target
    if which == "fifo":
        os.mkfifo(named)
    if which == "devnull":
        os.mknod(named, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    code = main(["report", "-o", str(named), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and str(named) in err and len(err.strip().splitlines()) == 1
    assert not stat.S_ISREG(os.lstat(named).st_mode) or named.is_symlink()
    _unchanged(hostile)


def test_remedy_refuses_a_fifo_and_a_hard_linked_file_and_writes_nothing(tmp_path: Path) -> None:
    job = make_job(tmp_path / "job")
    plan = plan_for(job)
    other = tmp_path / "elsewhere.sbatch"
    os.link(job / "job.sbatch", other)  # a second name: a rename would split them
    before = snapshot(job)
    with pytest.raises(NotWritable, match="job.sbatch.*hard links"):
        apply_plan(plan)
    assert snapshot(job) == before and os.stat(other).st_nlink == 2
    assert not (job / ".gpu-doctor" / "journal.jsonl").exists() or not records(job)

    os.unlink(other)
    target = job / "train.py"
    target.unlink()
    os.mkfifo(target)
    with pytest.raises(RemedyError, match="train.py.*FIFO"):
        apply_plan(plan)
    assert stat.S_ISFIFO(os.lstat(target).st_mode)


def test_an_edit_made_while_applying_is_kept_and_nothing_is_written(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The user saves job.sbatch between gpu-doctor's backup and its rename: the edit survives."""
    job = make_job(tmp_path / "job")
    plan = plan_for(job)
    edited = b"#!/bin/bash\n# my edit while fix ran\nsrun python train.py\n"
    real = remedy_files.write_temp

    def user_saves_meanwhile(path: Path, data: bytes, mode: int, tag: str, owner=None):  # type: ignore[no-untyped-def]
        tmp = real(path, data, mode, tag, owner)
        if path.name == "job.sbatch":
            with open(path, "r+b") as fh:  # an in-place save, the way many editors write
                fh.write(edited)
                fh.truncate()
        return tmp

    monkeypatch.setattr(remedy_files, "write_temp", user_saves_meanwhile)
    before = snapshot(job)
    with pytest.raises(StaleFile, match="job.sbatch changed"):
        apply_plan(plan)
    now = snapshot(job)
    assert now["job.sbatch"] == edited
    assert {k: v for k, v in now.items() if k != "job.sbatch"} == \
        {k: v for k, v in before.items() if k != "job.sbatch"}
    assert not [p for p in job.iterdir() if p.name.endswith(".tmp")]


def test_undo_on_a_copied_folder_restores_the_copy_not_the_original(tmp_path: Path) -> None:
    a = make_job(tmp_path / "a")
    before = snapshot(a)
    apply_plan(plan_for(a))
    fixed = snapshot(a)
    b = tmp_path / "b"
    shutil.copytree(a, b, symlinks=True)
    result = undo(b)
    assert result.txs
    assert snapshot(b) == before
    assert snapshot(a) == fixed
    begin = next(r for r in records(b) if r["type"] == "begin")
    assert all(not os.path.isabs(f["path"]) for f in begin["files"])


def _applied(tmp_path: Path) -> tuple[Path, dict[str, bytes], list[str]]:
    job = make_job(tmp_path / "job")
    before = snapshot(job)
    apply_plan(plan_for(job))
    lines = (job / ".gpu-doctor" / "journal.jsonl").read_text().splitlines()
    return job, before, lines


def _rewrite_begin(job: Path, lines: list[str], change) -> None:  # type: ignore[no-untyped-def]
    recs = [json.loads(line) for line in lines]
    change(next(r for r in recs if r["type"] == "begin"))
    (job / ".gpu-doctor" / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def _craft_cases(victim: Path, job: Path) -> dict[str, object]:
    rel = os.path.relpath(victim, job)

    def absolute(b: dict) -> None:  # type: ignore[type-arg]
        first = b["files"][0]  # the victim holds what gpu-doctor wrote: the old undo restored it
        victim.write_bytes((job / first["path"]).read_bytes())
        b["files"][0] = {**first, "path": str(victim)}

    def backup_outside(b: dict) -> None:  # type: ignore[type-arg]
        i = next(i for i, f in enumerate(b["files"]) if f["action"] == "edit")
        b["files"][i] = {**b["files"][i], "backup": "../../" + victim.name, "before_sha256": _sha(victim)}

    return {
        "delete outside": lambda b: b["files"].append(
            {"path": rel, "action": "create", "before_sha256": None,
             "after_sha256": _sha(victim), "backup": None, "mode": None}),
        "absolute path": absolute,
        "backup outside": backup_outside,
        "setuid mode": lambda b: [f.__setitem__("mode", 0o4755) for f in b["files"] if f["action"] == "edit"],
    }


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("case", ["delete outside", "absolute path", "backup outside", "setuid mode"])
def test_a_crafted_journal_cannot_reach_outside_the_folder_or_add_mode_bits(tmp_path: Path, case: str) -> None:
    job, _before, lines = _applied(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("outside the job folder\n")
    _rewrite_begin(job, lines, _craft_cases(victim, job)[case])
    fixed, kept = snapshot(job), victim.read_bytes()
    with pytest.raises(RemedyError):
        undo(job)
    assert victim.read_bytes() == kept
    assert snapshot(job) == fixed
    assert not any(p.stat().st_mode & 0o6000 for p in job.iterdir() if p.is_file())


def test_a_symlinked_journal_is_never_written_through(tmp_path: Path) -> None:
    job, _before, lines = _applied(tmp_path)
    journal = job / ".gpu-doctor" / "journal.jsonl"
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text("\n".join(lines) + "\n")
    journal.unlink()
    journal.symlink_to(elsewhere)
    saved = elsewhere.read_bytes()
    with pytest.raises(JournalError, match="symlink"):
        undo(job)
    assert elsewhere.read_bytes() == saved


@pytest.mark.parametrize("bad", ['{"v": 1, "type": "begin", "tx": "x", "files": "nope"}',
                                 '["not", "an", "object"]', "garbage that is not json"])
def test_a_malformed_journal_line_is_one_clear_error_and_changes_nothing(
        tmp_path: Path, bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    job, _before, lines = _applied(tmp_path)
    (job / ".gpu-doctor" / "journal.jsonl").write_text("\n".join([bad, *lines]) + "\n")
    fixed = snapshot(job)
    code = main(["undo", str(job)])
    err = capsys.readouterr().err
    assert code == 2 and "journal.jsonl line 1" in err and len(err.strip().splitlines()) == 1
    assert "internal error" not in err
    assert snapshot(job) == fixed


def test_undo_when_the_state_folder_is_a_file_is_a_user_error(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    job = make_job(tmp_path / "job")
    (job / ".gpu-doctor").write_text("not a folder\n")
    code = main(["undo", str(job)])
    err = capsys.readouterr().err
    assert code == 2 and ".gpu-doctor is not a folder" in err and "internal error" not in err


def test_findings_naming_a_file_outside_the_folder_are_refused(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    job = make_job(tmp_path / "job")
    victim = tmp_path / "victim.sbatch"
    victim.write_text("#!/bin/bash\nexport SCOREP_TOTAL_MEMORY=4G\npython -m scorep train.py\n")
    saved = victim.read_bytes()
    crafted = tmp_path / "crafted.json"
    crafted.write_text(json.dumps({"checks": [{"id": "SCP003", "layer": "scorep", "findings": [{
        "status": "fail", "message": "m", "remedies": ["scorep-total-memory"],
        "evidence": [{"text": "export SCOREP_TOTAL_MEMORY=4G", "file": str(victim), "line": 2}],
        "data": {"file": str(victim), "line": 2, "var": "SCOREP_TOTAL_MEMORY", "value": "4G",
                 "proposed": "3500M"}}]}]}))
    code = main(["fix", str(job), "--findings", str(crafted), "--apply", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "outside the job folder" in err and str(victim) in err
    assert victim.read_bytes() == saved

"""Bad input never raises: each odd file becomes a clear finding or note, and the other checks still run."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest
from jobfolder_util import HEALTHY, JOB_CHECKS, case_for, job_of, run_check, worst, write_job

from doctor.jobfolder import reading
from doctor.model import Status
from doctor.runner import run_checks

LAUNCH = "#!/bin/bash\nexport SCOREP_TOTAL_MEMORY=4G\npython -m scorep --cuda train.py\n"


def problem_of(root: Path, name: str = "train.py") -> str | None:
    job = job_of(root)
    script = job.script(str(root / name))
    assert script is not None, [s.path for s in job.scripts]
    return script.problem


def assert_other_checks_still_run(root: Path) -> None:
    """The whole job-layer run completes; SCP003 still finds the 4G in the launch script."""
    run = run_checks(case_for(root), list(JOB_CHECKS), budget_s=60, preset_facts=dict(HEALTHY))
    assert {r.check_id for r in run.results} >= set(JOB_CHECKS)
    assert run.result("SCP003").status == Status.FAIL  # type: ignore[union-attr]
    assert not any("internal error" in r.message for r in run.results), [r.message for r in run.results]


def test_syntax_error_in_the_training_script(tmp_path: Path) -> None:
    root = write_job(tmp_path, {"job.sh": LAUNCH, "train.py": "import torch\ndef main(:\n    pass\n"})
    assert problem_of(root) == "syntax error at line 2: invalid syntax"
    out = run_check("SCR001", root)
    assert worst(out) == Status.UNKNOWN and "train.py" in out[0].message and "syntax error" in out[0].message
    assert_other_checks_still_run(root)


def test_binary_file_named_train_py(tmp_path: Path) -> None:
    root = write_job(tmp_path, {"job.sh": LAUNCH, "train.py": b"\x7fELF\x02\x01\x01\x00" + os.urandom(4096)})
    assert "binary file" in (problem_of(root) or "")
    assert worst(run_check("SCR002", root)) == Status.UNKNOWN
    assert_other_checks_still_run(root)


def test_empty_training_script_and_empty_job_script(tmp_path: Path) -> None:
    root = write_job(tmp_path, {"job.sh": LAUNCH, "empty.sh": "", "train.py": "   \n"})
    assert problem_of(root) == "empty file: nothing to analyse"
    job = job_of(root)
    assert any(n.kind == "empty" and n.file.endswith("empty.sh") for n in job.notes)
    assert_other_checks_still_run(root)


def test_unreadable_training_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = write_job(tmp_path, {"job.sh": LAUNCH, "train.py": "import scorep.user\n"})
    target = str(root / "train.py")
    real_open = os.open

    def denied(path: str, *args: object, **kw: object) -> int:
        if os.fspath(path) == target:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(reading.os, "open", denied)
    assert problem_of(root) == "unreadable: permission denied"
    assert worst(run_check("SCR001", root)) == Status.UNKNOWN


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads mode-000 files; covered through the fake above")
def test_unreadable_training_script_for_real(tmp_path: Path) -> None:
    root = write_job(tmp_path, {"job.sh": LAUNCH, "train.py": "import scorep.user\n"})
    (root / "train.py").chmod(0)
    try:
        assert problem_of(root) == "unreadable: permission denied"
    finally:
        (root / "train.py").chmod(0o644)


def test_a_100_mb_script_is_not_read_and_says_so(tmp_path: Path) -> None:
    root = write_job(tmp_path, {"job.sh": LAUNCH})
    with open(root / "train.py", "wb") as fh:
        fh.write(b"import scorep.user\n")
        fh.truncate(100 * 2**20)
    with open(root / "huge.sh", "wb") as fh:
        fh.write(b"#!/bin/bash\necho hi\n")
        fh.truncate(100 * 2**20)
    start = time.monotonic()
    job = job_of(root)
    assert time.monotonic() - start < 20  # bounded work, not a speed benchmark
    assert "100.0 MiB, above the 1 MiB limit" in (job.script(str(root / "train.py")).problem or "")  # type: ignore[union-attr]
    out = run_check("LNC001", root)
    assert any(o.status == Status.UNKNOWN and "huge.sh" in o.message for o in out)
    assert_other_checks_still_run(root)


def test_symlink_loop(tmp_path: Path) -> None:
    root = write_job(tmp_path, {"job.sh": LAUNCH})
    os.symlink("loop_b.py", root / "train.py")
    os.symlink("train.py", root / "loop_b.py")
    os.symlink("loop.sh", root / "loop.sh")
    assert problem_of(root) == "symlink loop"
    assert any(n.text == "symlink loop" for n in job_of(root).notes)
    assert_other_checks_still_run(root)


def test_fifo_named_train_py_does_not_block(tmp_path: Path) -> None:
    root = write_job(tmp_path, {"job.sh": LAUNCH})
    os.mkfifo(root / "train.py")
    assert problem_of(root) == "not a regular file but a FIFO (named pipe); not read"


def _said_elsewhere(path: Path, limit: int = 4 * 2**20) -> str:
    """What gpu-doctor's one opener (doctor.safeopen) says about `path`, e.g. for a --log file."""
    from doctor import safeopen

    with pytest.raises(safeopen.UnsafeFile) as refused:
        safeopen.read_regular(path, limit)
    return refused.value.why


def test_job_scripts_are_read_through_the_one_opener(tmp_path: Path) -> None:
    """A FIFO, a device and an oversize file as job scripts: the same one-line problem the other
    readers give (reading.read_bytes used to open and fstat files itself: "not a regular file")."""
    root = write_job(tmp_path, {"job.sh": LAUNCH})
    os.mkfifo(root / "prolog.sbatch")
    (root / "zero.sh").symlink_to("/dev/zero")
    with open(root / "huge.slurm", "wb") as fh:
        fh.write(b"#!/bin/bash\npython -m scorep --cuda train.py\n")
        fh.truncate(5 * 2**20)
    (root / "train.py").write_text("import torch\n")
    notes = {Path(n.file).name: n for n in job_of(root).notes}
    for name, kind in (("prolog.sbatch", "not-a-file"), ("zero.sh", "not-a-file"), ("huge.slurm", "too-large")):
        assert notes[name].text == _said_elsewhere(root / name), notes[name]
        assert notes[name].kind == kind
    assert notes["prolog.sbatch"].text == "not a regular file but a FIFO (named pipe); not read"
    assert notes["zero.sh"].text == "not a regular file but a character device; not read"
    assert notes["huge.slurm"].text == "5.0 MiB, above the 4 MiB limit; not read"
    out = run_check("LNC001", root)
    assert any(o.status == Status.UNKNOWN and "prolog.sbatch" in o.message and "FIFO" in o.message for o in out), \
        [o.message for o in out]
    assert_other_checks_still_run(root)


def test_non_utf8_files_are_read_with_a_note(tmp_path: Path) -> None:
    root = write_job(tmp_path, {
        "job.sh": "#!/bin/bash\n# Grüße\n".encode("latin-1") + b"export SCOREP_TOTAL_MEMORY=4G\n"
                  b"python -m scorep --cuda train.py\n",
        "train.py": "# Gr\xfc\xdfe\nimport scorep.user\nimport torch.distributed as dist\n"
                    "dist.init_process_group('nccl')\n".encode("latin-1"),
        "coded.py": b"# -*- coding: latin-1 -*-\n# \xe9t\xe9\nx = 1\n",
    })
    job = job_of(root)
    script = job.script(str(root / "train.py"))
    assert script is not None and script.problem is None and script.scorep_imports[0].site.line == 2
    assert any("not valid utf-8" in n for n in script.notes)
    assert any(n.kind == "encoding" and n.file.endswith("job.sh") for n in job.notes)
    assert worst(run_check("SCP003", root)) == Status.FAIL


def test_missing_training_script(tmp_path: Path) -> None:
    root = write_job(tmp_path, {"job.sh": LAUNCH})
    assert problem_of(root) == "does not exist"
    assert worst(run_check("SCR002", root)) == Status.UNKNOWN


def test_gate_as_root_does_not_follow_symlinks_out_of_the_folder(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the no-symlink rule applies to the gate running as root")
    secret = write_job(tmp_path / "elsewhere", {"train.py": "import scorep.user\n"})
    root = write_job(tmp_path / "job", {"job.sh": LAUNCH})
    os.symlink(secret / "train.py", root / "train.py")
    job = job_of(root, gate=True)
    assert "symlink" in (job.script(str(root / "train.py")).problem or "")  # type: ignore[union-attr]
    # outside the gate the same link is followed
    assert job_of(root).script(str(root / "train.py")).scorep_imports  # type: ignore[union-attr]


def test_scripts_outside_the_folder_are_not_read(tmp_path: Path) -> None:
    outside = write_job(tmp_path / "shared", {"train.py": "import scorep.user\n"})
    root = write_job(tmp_path / "job", {"job.sh": f"python -m scorep --cuda {outside / 'train.py'}\n"})
    assert problem_of(root, str(outside / "train.py")) == "outside the job folder; not read"


def test_no_job_folder_gives_an_empty_job(tmp_path: Path) -> None:
    from doctor.case import Case
    from doctor.jobfolder.discover import load_job

    assert load_job(Case(root=None)).commands == ()
    assert worst(run_check("SCR001", write_job(tmp_path, {}))) == Status.SKIP


def test_readiness_check_says_unknown_not_pass_when_no_script_could_be_read(tmp_path: Path) -> None:
    """SCR004 cannot know whether a script it could not parse asserts is_available()."""
    root = write_job(tmp_path, {"job.sh": LAUNCH,
                                "train.py": "import torch\nassert torch.cuda.is_available(\n"})
    out = run_check("SCR004", root)
    assert worst(out) == Status.UNKNOWN, [(o.status, o.message) for o in out]
    assert "train.py" in out[0].message and "syntax error" in out[0].message


def test_syntax_error_evidence_names_file_and_line(tmp_path: Path) -> None:
    root = write_job(tmp_path, {"job.sh": LAUNCH, "train.py": "import torch\n\n\ndef main(:\n    pass\n"})
    out = run_check("SCR001", root)
    assert worst(out) == Status.UNKNOWN
    assert [(e.file, e.line) for e in out[0].evidence] == [("train.py", 4)]


def test_launcher_check_does_not_pass_a_script_it_could_not_read(tmp_path: Path) -> None:
    """LNC001 cannot tell whether a script with a syntax error calls torch.distributed.run.main()."""
    root = write_job(tmp_path, {"job.sh": LAUNCH,
                                "train.py": "from torch.distributed.run import main\nmain(\n"})
    out = run_check("LNC001", root)
    assert worst(out) == Status.UNKNOWN, [(o.status, o.message) for o in out]
    assert "train.py" in out[0].message
    assert [(e.file, e.line) for e in out[0].evidence] == [("job.sh", 3), ("train.py", 2)]


def test_trainer_check_does_not_pass_when_the_script_holding_its_arguments_is_unreadable(tmp_path: Path) -> None:
    root = write_job(tmp_path, {"job.sh": LAUNCH, "train.py": (
        "from transformers import TrainingArguments\n"
        "args = TrainingArguments('out', load_best_model_at_end=True, eval_strategy='no'\n")})
    out = run_check("TRN001", root)
    assert worst(out) == Status.UNKNOWN, [(o.status, o.message) for o in out]
    assert [(e.file, e.line) for e in out[0].evidence] == [("train.py", 2)]


@pytest.mark.timeout(60)
def test_a_fifo_as_requirements_txt_does_not_block_the_teardown_check(tmp_path: Path) -> None:
    """SCR002 looks for an accelerate pin in requirements*.txt: it read it with Path.read_text,
    which blocks forever on a FIFO; now through the one opener, the FIFO is skipped."""
    root = write_job(tmp_path, {"job.sh": "#!/bin/bash\naccelerate launch --num_processes 2 train.py\n",
                                "train.py": "from accelerate import Accelerator\n\naccelerator = Accelerator()\n"
                                            "accelerator.end_training()\n"})
    os.mkfifo(root / "requirements.txt")
    (root / "pyproject.toml").write_text('[project]\nname = "ft"\ndependencies = [\n  "accelerate==0.26.1",\n]\n')
    out = run_check("SCR002", root)
    assert out and "accelerate 0.26.1" in " ".join(o.message for o in out) + " ".join(
        e.text + (e.label or "") for o in out for e in o.evidence), [(o.status, o.message) for o in out]

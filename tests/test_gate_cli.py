"""The gate's command line: bad input is one line and exit 2; the gate stays light."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest
from gate_util import run_gate

HEAVY = ("textual", "torch", "otf2", "libcst", "bashlex", "pycubexr")


def gpu_doctor(*args: str, env: dict[str, str] | None = None, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "doctor", *args], capture_output=True, text=True,
                          timeout=60, env=env, cwd=cwd)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("gpu-doctor: error: ")
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0]


def test_unknown_playbook_is_a_usage_error():
    assert_one_line_error(gpu_doctor("--check-only", "--playbook", "nosuch"), "unknown playbook 'nosuch'",
                          "prologue")


def test_missing_path_is_a_usage_error(tmp_path):
    missing = tmp_path / "no-such-job"
    assert_one_line_error(gpu_doctor("--check-only", str(missing)), str(missing), "does not exist")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every folder; permissions cannot make it unreadable")
def test_unreadable_path_is_a_usage_error(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    job.chmod(0)
    try:
        assert_one_line_error(gpu_doctor("--check-only", str(job)), str(job), "not readable")
    finally:
        job.chmod(0o755)


def test_unreadable_path_is_a_usage_error_even_as_root(tmp_path, monkeypatch, capsys):
    """The permission test above cannot run as root; this one fakes the denial in-process."""
    from doctor import cli

    job = tmp_path / "job"
    job.mkdir()
    monkeypatch.setattr(cli.os, "access", lambda path, mode: False)
    assert cli.main(["--check-only", str(job)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not readable" in err[0] and str(job) in err[0]


@pytest.mark.parametrize("flag", ["--script", "--launch", "--log"])
def test_missing_file_given_by_flag_is_a_usage_error(tmp_path, flag):
    missing = tmp_path / "nope.txt"
    assert_one_line_error(gpu_doctor("--check-only", "--playbook", "scorep-ddp", flag, str(missing), str(tmp_path)),
                          flag, str(missing), "does not exist")


def test_folder_given_as_a_file_is_a_usage_error(tmp_path):
    assert_one_line_error(gpu_doctor("--check-only", "--playbook", "post-run", "--log", str(tmp_path),
                                     str(tmp_path)), "--log", "is a folder")


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan", "inf"])
def test_bad_timeout_is_a_usage_error(value):
    assert_one_line_error(gpu_doctor("--check-only", "--timeout", value), "--timeout", repr(value))


def test_bad_fail_on_is_a_usage_error():
    assert_one_line_error(gpu_doctor("--check-only", "--fail-on", "sometimes"), "--fail-on")


def test_unknown_check_id_to_explain_is_a_usage_error():
    assert_one_line_error(gpu_doctor("explain", "GPU999"), "GPU999", "list-checks")


def test_unknown_only_id_is_a_usage_error():
    assert_one_line_error(gpu_doctor("--check-only", "--only", "XYZ123"), "XYZ123")


def test_explain_prints_the_check_docs_and_remedy_steps():
    proc = gpu_doctor("explain", "gpu003")
    assert proc.returncode == 0
    for part in ("GPU003 (node)", "What it does:", "Why is this bad?", "Example:", "Remedy:", "Fix safety:",
                 "node-exclude [manual]", "#SBATCH --exclude=<host>"):
        assert part in proc.stdout


def test_list_checks_names_every_node_check():
    proc = gpu_doctor("list-checks")
    assert proc.returncode == 0
    rows = {line.split()[0]: line for line in proc.stdout.splitlines()}
    for cid in ("GPU001", "GPU002", "GPU003", "GPU004", "GPU005"):
        assert rows[cid].split()[1] == "node"


def test_gate_imports_neither_textual_nor_torch(fake_node, tmp_path):
    code = (
        "import sys\n"
        "from doctor.cli import main\n"
        "rc = main(['--check-only', '--playbook', 'prologue', '-q'])\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print('HEAVY', ','.join(heavy), file=sys.stderr)\n"

        "sys.exit(rc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=fake_node("healthy"), capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("gpu-doctor: OK")  # it really ran the checks
    assert "HEAVY \n" in proc.stderr


def test_prologue_gate_imports_only_the_layers_it_runs(fake_node, tmp_path):
    # Fast start, and a broken module of another layer cannot fail a Slurm prologue.
    code = (
        "import sys\n"
        "from doctor.cli import main\n"
        "rc = main(['--check-only', '-q'])\n"
        "print(sorted(m for m in sys.modules if m.startswith(('checks.', 'remedies.', 'doctor.jobfolder',"
        " 'doctor.artifacts'))), file=sys.stderr)\n"
        "sys.exit(rc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=fake_node("healthy"), capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    loaded = ast.literal_eval(proc.stderr.strip().splitlines()[-1])
    assert "checks.node" in loaded
    assert not [m for m in loaded if m.startswith(("checks.script", "checks.scorep", "doctor.jobfolder"))]


def test_json_file_that_cannot_be_written_is_exit_2(fake_node, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = gpu_doctor("--check-only", "--json-file", str(blocker / "verdict.json"), env=fake_node("healthy"),
                      cwd=str(tmp_path))
    assert proc.returncode == 2
    assert "cannot write" in proc.stderr and "Traceback" not in proc.stderr


def test_quiet_gate_prints_nothing_on_stderr(fake_node, tmp_path):
    run = run_gate(fake_node("healthy"), "-q", tmp_path=tmp_path)
    assert run.rc == 0 and run.stderr == ""

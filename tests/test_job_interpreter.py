"""GPU004 runs torch with the job's own interpreter: --python, else the one the job script uses."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from doctor.case import Case
from doctor.model import Status
from doctor.runner import run_checks


def wrapper_python(folder: Path, marker: Path) -> Path:
    """An interpreter that notes it was used, then is the current one."""
    (folder / "venv" / "bin").mkdir(parents=True)
    py = folder / "venv" / "bin" / "python3"
    py.write_text(f'#!/bin/sh\necho used >> "{marker}"\nexec "{sys.executable}" "$@"\n')
    py.chmod(0o755)
    return py


def job_folder(tmp_path: Path, python: Path) -> Path:
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text("import torch\nprint('hi')\n")
    (job / "job.sh").write_text(f"#!/bin/bash\n#SBATCH --gres=gpu:1\n{python} train.py\n")
    return job


def test_the_framework_probe_uses_the_interpreter_the_job_script_runs(tmp_path: Path, fake_node) -> None:
    marker = tmp_path / "used.txt"
    job = job_folder(tmp_path, wrapper_python(tmp_path, marker))
    run = run_checks(Case(root=job, env=fake_node("healthy")), ["GPU004"], budget_s=90)
    assert marker.read_text().strip() == "used"
    assert run.result("GPU004").status == Status.FAIL  # a CPU-only torch on a GPU node


def test_an_explicit_python_wins_over_the_job_script(tmp_path: Path, fake_node) -> None:
    marker = tmp_path / "used.txt"
    job = job_folder(tmp_path, wrapper_python(tmp_path, marker))
    run = run_checks(Case(root=job, env=fake_node("healthy"), python=sys.executable), ["GPU004"], budget_s=90)
    assert not marker.exists()
    assert run.facts.get("framework")["python"] == sys.executable


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal only applies when the gate runs as root")
def test_the_gate_as_root_never_runs_a_user_writable_job_interpreter(tmp_path: Path, fake_node) -> None:
    marker = tmp_path / "used.txt"
    py = wrapper_python(tmp_path, marker)
    py.chmod(0o777)  # anybody may rewrite it
    py.parent.chmod(0o777)
    job = job_folder(tmp_path, py)
    run = run_checks(Case(root=job, env=fake_node("healthy"), gate=True), ["GPU004"], budget_s=90)
    assert not marker.exists()
    res = run.result("GPU004")
    assert res.status == Status.UNKNOWN
    assert "not running" in res.message and "as root" in res.message

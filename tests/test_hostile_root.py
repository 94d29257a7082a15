"""As root, nothing the job's owner controls runs (issue 28): one test per route the campaign found.

(a) `scorep-config` in the owner's `bin/` is a symlink to a trusted install, and a `scorep-info`
beside the symlink is the owner's script; (b) the owner's `bin/python` is a symlink to the system
interpreter with a `pyvenv.cfg` and a `.pth` in `lib/python3.X/site-packages/` beside it (the
`.pth` would run even under `-I`); (c) GPU004's probe with the job folder as its working folder
imported the folder's `torch.py`. Each test asserts that the planted code never ran; the gate
names what it skipped in one line. Root-only: CI runs as root.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from doctor import trust
from doctor.case import Case
from doctor.facts import Facts, ProbeContext

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the routes are about running as root")
OWNER = 65534  # nobody: the job folder's owner, somebody else than root
PY_VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"


def owned_by_user(*paths: Path) -> None:
    for p in paths:
        os.lchown(p, OWNER, OWNER)


def planted(marker: Path) -> str:
    return f"#!/bin/sh\ntouch {marker}\necho 'CUDA support: yes'\n"


@pytest.fixture
def trusted_dir() -> Iterator[Path]:
    """A folder only root can write, all the way up (a trusted Score-P install stands in it)."""
    home = os.path.expanduser("~")
    if trust.writable_by_others(home):
        pytest.skip(f"{home} is writable by others: no trusted folder to make")
    folder = Path(tempfile.mkdtemp(dir=home, prefix="gpu-doctor-trusted-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def job_with_path(tmp_path: Path, bin_dir: Path, script: str = "python -m scorep --cuda train.py\n") -> Path:
    job = tmp_path / "job"
    job.mkdir(exist_ok=True)
    (job / "run.sh").write_text(f"#!/bin/bash\nexport PATH={bin_dir}:/usr/bin:/bin\n{script}")
    (job / "train.py").write_text("import torch\n")
    owned_by_user(job, job / "run.sh", job / "train.py")
    return job


def context(case: Case) -> ProbeContext:
    deadline = time.monotonic() + 60
    return ProbeContext(case, Facts(case, deadline), deadline, 30.0)


def test_scorep_info_is_taken_beside_the_real_scorep_config_never_beside_the_symlink(
        tmp_path: Path, trusted_dir: Path) -> None:
    from doctor.jobfolder.facts import scorep_install

    marker = tmp_path / "owner-code-ran"
    (trusted_dir / "scorep-config").write_text("#!/bin/sh\necho 'Score-P 8.4'\n")
    (trusted_dir / "scorep-info").write_text("#!/bin/sh\necho 'Score-P 8.4\n  CUDA support: yes'\n")
    user_bin = tmp_path / "bin"
    user_bin.mkdir()
    (user_bin / "scorep-config").symlink_to(trusted_dir / "scorep-config")
    (user_bin / "scorep-info").write_text(planted(marker))
    for f in ("scorep-config", "scorep-info"):
        (trusted_dir / f).chmod(0o755)
    (user_bin / "scorep-info").chmod(0o755)
    owned_by_user(user_bin, user_bin / "scorep-config", user_bin / "scorep-info")
    case = Case(root=job_with_path(tmp_path, user_bin), env={"PATH": "/usr/bin:/bin"}, gate=True)
    value = scorep_install(context(case))
    assert not marker.exists(), value["notes"]
    assert value["version"] == "Score-P 8.4" and value["cuda_support"] is True, value["notes"]


def test_an_owner_venv_around_the_system_interpreter_is_refused_and_its_pth_never_runs(tmp_path: Path) -> None:
    from doctor.jobfolder.facts import scorep_install
    from doctor.probes.node import framework

    system = os.path.realpath(sys.executable)
    if trust.interpreter_refusal(system):
        pytest.skip(f"{system} itself is not trusted here")
    marker = tmp_path / "pth-ran"
    venv = tmp_path / "env"
    site = venv / "lib" / PY_VERSION / "site-packages"
    site.mkdir(parents=True)
    (venv / "bin").mkdir()
    (venv / "bin" / "python").symlink_to(system)
    (venv / "pyvenv.cfg").write_text(f"home = {os.path.dirname(system)}\ninclude-system-site-packages = false\n")
    (site / "planted.pth").write_text(f"import os; open({str(marker)!r}, 'w').close()\n")
    owned_by_user(venv, venv / "bin", venv / "bin" / "python", venv / "pyvenv.cfg", site / "planted.pth")
    subprocess.run([str(venv / "bin" / "python"), "-I", "-c", "pass"], check=True)  # the route is real:
    assert marker.exists()  # -I alone still runs the venv's .pth
    marker.unlink()
    case = Case(root=job_with_path(tmp_path, venv / "bin"), env={"PATH": "/usr/bin:/bin"}, gate=True)
    value = scorep_install(context(case))
    assert not marker.exists() and value["python_bindings"] is None
    assert any("pyvenv.cfg" in why for why in value["refused"]), value
    with pytest.raises(trust.Refused, match="pyvenv.cfg"):
        framework(context(case))
    assert not marker.exists()


def test_gpu004_never_imports_the_job_folders_modules(tmp_path: Path) -> None:
    from doctor.probes.node import framework

    marker = tmp_path / "torch-py-ran"
    python_dir = os.path.dirname(os.path.realpath(sys.executable))
    job = job_with_path(tmp_path, Path(python_dir), "python train.py\n")
    for name in ("torch.py", "json.py"):
        (job / name).write_text(f"open({str(marker)!r}, 'w').close()\n")
        owned_by_user(job / name)
    for gate in (True, False):  # the gate as root (guarded), and the app on the same folder
        value = framework(context(Case(root=job, env={"PATH": "/usr/bin:/bin"}, gate=gate)))
        assert not marker.exists(), (gate, value)
        assert value["python"] and "torch_version" in value


def test_the_gate_says_in_one_line_what_it_skipped_and_runs_none_of_it(tmp_path: Path) -> None:
    marker = tmp_path / "owner-code-ran"
    user_bin = tmp_path / "bin"
    user_bin.mkdir()
    (user_bin / "python").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (user_bin / "scorep-config").write_text(planted(marker))
    for f in ("python", "scorep-config"):
        (user_bin / f).chmod(0o755)
        owned_by_user(user_bin / f)
    owned_by_user(user_bin)
    job = job_with_path(tmp_path, user_bin)
    proc = subprocess.run([sys.executable, "-m", "doctor", "--check-only", str(job), "--only", "SCP001", "--only", "GPU004"],
                          capture_output=True, text=True, timeout=120, cwd=job)
    assert not marker.exists(), proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "not run because the job's owner can change" in ln]
    assert len(lines) == 1, proc.stderr
    assert "scorep-config" in lines[0] and "bindings" in lines[0], lines[0]
    # the framework probe is GPU004's: where no NVIDIA driver skips GPU004 first, it is named only when
    # the facts fetched ahead reached it before the run ended (a race on a loaded machine)
    if not re.search(r"^\s*GPU004\s+skip\b", proc.stderr, re.M):
        assert "framework" in lines[0], lines[0]


def test_no_helper_child_imports_a_doctor_package_from_the_working_folder(tmp_path: Path) -> None:
    """`python -m` puts the working folder first on sys.path: the report's timeline child starts in /."""
    script = Path(sys.executable).parent / "gpu-doctor"
    if not script.exists():
        pytest.skip("needs the installed gpu-doctor script (its own sys.path[0] is its bin folder)")
    marker = tmp_path / "planted-doctor-ran"
    here = tmp_path / "cwd"
    (here / "doctor" / "report").mkdir(parents=True)
    for init in ("doctor/__init__.py", "doctor/report/__init__.py", "doctor/report/timeline.py"):
        (here / init).write_text(f"open({str(marker)!r}, 'w').close()\n")
    job = tmp_path / "job"
    shutil.copytree(Path(__file__).resolve().parents[1] / "examples" / "scorep-ddp-trace", job)
    proc = subprocess.run([str(script), "report", str(job), "-o", str(tmp_path / "r.md"), "-q"], cwd=here,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    assert "Where the time goes" in (tmp_path / "r.md").read_text()  # the timeline child did run
    assert not marker.exists()

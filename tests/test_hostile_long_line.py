"""The shell reader stays linear in its input (issue 28): one long line, many commands on one line,
a deep pipeline. Before, each command kept its own copy of its whole line: a 90 KB line of
`true; true; ...` took 2.7 GB and 4.7 s, 180 KB took 10.7 GB and ran past `--timeout 10`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from doctor import limits
from doctor.case import Case
from doctor.jobfolder.discover import load_job

REPO = Path(__file__).resolve().parents[1]


def job_with(folder: Path, line: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.sh").write_text("#!/bin/bash\n" + line + "\n")
    (folder / "train.py").write_text("print('step 1')\n")
    return folder


def peak_mib(folder: Path) -> float:
    tracemalloc.start()
    try:
        job = load_job(Case(root=folder))
        return tracemalloc.get_traced_memory()[1] / 2**20 if job.commands else -1.0
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_memory_grows_with_the_line_not_with_its_square(tmp_path: Path) -> None:
    peak_mib(job_with(tmp_path / "warm", "true; true; python train.py"))  # imports are not the line's
    small = peak_mib(job_with(tmp_path / "small", "true; " * 600 + "python train.py"))
    big = peak_mib(job_with(tmp_path / "big", "true; " * 2400 + "python train.py"))
    # 4x the input: about 3.3x now; a copy of the line per command made it about 7x (16x in the limit).
    assert 0 < small and big < 5 * small, (small, big)


def test_every_command_on_a_line_shares_one_bounded_line_text(tmp_path: Path) -> None:
    job = load_job(Case(root=job_with(tmp_path / "j", "true; " * 3000 + "python train.py")))
    texts = {id(c.site.text) for c in job.commands}
    assert len(job.commands) == 3001 and len(texts) == 1
    assert len(job.commands[-1].site.text) == limits.MAX_SITE_CHARS and job.commands[-1].site.text.endswith("…")
    assert job.launches, "the launch at the end of the line is still found"


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["one line", "deep pipeline"])
def test_the_gate_on_200_kib_of_one_line_keeps_its_timeout_and_memory(tmp_path: Path, shape: str) -> None:
    n = 200 * 1024 // 6
    line = "true; " * n + "python train.py" if shape == "one line" else "cat" + " | cat" * n + " | python train.py"
    job = job_with(tmp_path / "job", line)
    timeout = 3.0
    t0 = time.monotonic()
    with (tmp_path / "out").open("w+") as out, (tmp_path / "err").open("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "doctor", "--check-only", str(job), "--timeout", str(timeout)],
                                cwd=REPO, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)  # its own peak memory, not any other child's
        wall = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
    said, errors = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    assert "Traceback" not in errors, errors[-2000:]
    assert wall < timeout + 5, f"{wall:.1f} s with --timeout {timeout}"
    assert usage.ru_maxrss < 1024 * 1024, f"{usage.ru_maxrss / 1024:.0f} MiB"  # KiB: under 1 GiB
    assert proc.returncode in (0, 1) and said.startswith("gpu-doctor:"), (proc.returncode, said, errors[-500:])

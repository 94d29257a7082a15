"""Nothing a rank starts outlives the launch (issue 28), even a daemon that hides from every marker.

Each rank forks; the child calls setsid and forks again; the grandchild execs `sleep` with an
empty environment (no GPU_DOCTOR_LAUNCH marker, its own session, re-parented away from the rank)
and the rank exits 0 at once. Before, the launch said "all 2 ranks finished", exit 0, and both
daemons ran on. Now each rank's cgroup holds them (where cgroup v2 lets gpu-doctor make groups),
else gpu-doctor, a subreaper, adopts them and sweeps them by process tree; the summary names them.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from launch_util import PYTHON, write_job

from doctor.launch import cgroup
from doctor.launch.engine import Launcher
from doctor.launch.spec import LaunchSpec

DAEMON = r'''
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execve("/bin/sleep", ["sleep", sys.argv[1]], {})
    os._exit(0)
os.wait()
print(f"rank {os.environ['RANK']} left a daemon", flush=True)
'''


def sleepers(tag: str) -> list[int]:
    """Live `sleep TAG` processes (the daemons of this test)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            with open(f"/proc/{name}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if argv[:2] == [b"sleep", tag.encode()] and state != b"Z":
            found.append(int(name))
    return found


@pytest.mark.parametrize("route", ["cgroup", "subreaper"])
def test_a_double_forked_setsid_daemon_with_an_empty_environment_does_not_outlive_the_launch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str) -> None:
    if route == "cgroup" and cgroup.own_cgroup() is None:
        pytest.skip("no writable cgroup v2 here: the subreaper route below is the one that runs")
    if route == "subreaper":
        monkeypatch.setattr(cgroup, "own_cgroup", lambda: None)
    tag = str(10_000 + uuid.uuid4().int % 80_000)  # a `sleep` duration no other process uses
    write_job(tmp_path, DAEMON, "job.py")
    spec = LaunchSpec("job.py", nproc=2, workdir=tmp_path, warmup=False, python=PYTHON, grace_s=0.5,
                      kill_after_s=2.0, args=(tag,))
    try:
        summary = Launcher(spec).run()
        left = sleepers(tag)
        assert not left, f"still running after the launch: {left}"
        assert summary.exit_code == 0 and all(r.returncode == 0 for r in summary.ranks), summary.reason
        assert len(summary.leftovers) == 2 and all("(sleep)" in k for k in summary.leftovers), summary.leftovers
        assert "killed 2 processes the ranks left running" in summary.reason, summary.reason
    finally:
        for pid in sleepers(tag):
            os.kill(pid, 9)

"""Nothing outlives gpu-doctor (issue 20): `kill -9` of the launcher or the gate, and setsid grandchildren.

Before: `kill -9` of `gpu-doctor launch` left both ranks running with PPID 1, `kill -9` of the
gate left its hung probe child running, and a rank's `setsid` grandchild survived the stop.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from fakes.node import pid_alive

REPO = Path(__file__).resolve().parent.parent

RANK = """\
import os, subprocess, sys, time
rank = os.environ["RANK"]
open(f"rank{rank}.pid", "w").write(str(os.getpid()))
if "--grandchild" in sys.argv:
    # a daemon the rank starts in a session of its own: it leaves the rank's process group
    child = subprocess.Popen(["setsid", "sleep", "300"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    open(f"grandchild{rank}.pid", "w").write(str(child.pid))
    sys.exit(0)
time.sleep(300)
"""


def wait_for(predicate: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def pids(folder: Path, pattern: str) -> list[int]:
    return [int(text) for text in (p.read_text().strip() for p in sorted(folder.glob(pattern))) if text]


def hung_pids(env: dict[str, str]) -> list[int]:
    """The fake's hang-*.pid files, tolerating one that is being written."""
    return pids(Path(env["FAKE_STATE_DIR"]), "hang-*.pid")


def launch(work: Path, *script_args: str) -> subprocess.Popen[bytes]:
    (work / "rank.py").write_text(RANK)
    return subprocess.Popen([sys.executable, "-m", "doctor", "launch", "--nproc", "2", "--no-warmup", "--plain",
                             "--quiet", "--workdir", str(work), "--", "rank.py", *script_args],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_kill_9_of_the_launcher_takes_its_ranks_with_it(tmp_path: Path) -> None:
    proc = launch(tmp_path)
    try:
        assert wait_for(lambda: len(pids(tmp_path, "rank*.pid")) == 2, 60), "the ranks never started"
        ranks = pids(tmp_path, "rank*.pid")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        orphans = [p for p in ranks if not wait_for(lambda p=p: not pid_alive(p), 5)]
        print(f"orphans after kill -9 of the launcher: {len(orphans)}")
        assert orphans == []
    finally:
        proc.kill()
        for p in pids(tmp_path, "rank*.pid"):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_setsid_grandchild_of_a_rank_does_not_survive_the_launch(tmp_path: Path) -> None:
    proc = launch(tmp_path, "--grandchild")
    try:
        assert proc.wait(120) == 0
        grandchildren = pids(tmp_path, "grandchild*.pid")
        assert len(grandchildren) == 2
        survivors = [p for p in grandchildren if pid_alive(p)]
        print(f"setsid grandchildren left after the launch: {len(survivors)}")
        assert survivors == []
    finally:
        for p in pids(tmp_path, "grandchild*.pid"):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_kill_9_of_the_gate_takes_its_hung_probe_with_it(tmp_path: Path, fake_node) -> None:  # type: ignore[no-untyped-def]
    env = fake_node("hang")
    gate = subprocess.Popen([sys.executable, "-m", "doctor", "--check-only", "--timeout", "60", "-q"],
                            env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: bool(hung_pids(env)), 60), "no probe reached the hanging call"
        hung = hung_pids(env)
        os.kill(gate.pid, signal.SIGKILL)
        gate.wait(10)
        orphans = [p for p in hung if not wait_for(lambda p=p: not pid_alive(p), 5)]
        print(f"probe children left after kill -9 of the gate: {len(orphans)}")
        assert orphans == []
    finally:
        gate.kill()
        for p in hung_pids(env):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass

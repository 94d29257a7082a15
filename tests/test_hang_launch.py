"""`gpu-doctor launch --stall S` on real gloo ranks (CPU): the verdict names the rank that diverged
and what the others wait in, before anything stops the ranks; nothing is left running afterwards.

The job (tests/hang_jobs/train.py) runs 4 ranks; at step 50 rank 1 skips the all_reduce (and waits
in the final barrier), sleeps in its data loader, or sleeps in C holding the GIL (ctypes.PyDLL).
The symmetric stall drops the ranks' loopback traffic (iptables in a network namespace the test
makes): every rank then waits in the same all_reduce.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from launch_util import PYTHON, REPO, TESTS

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

JOB = TESTS / "hang_jobs" / "train.py"


def line_of(code: str) -> int:
    return next(i for i, line in enumerate(JOB.read_text().splitlines(), 1) if code in line)


ALL_REDUCE = f"train.py:{line_of('dist.all_reduce(grad)')}"


def launch(tmp_path: Path, mode: str, stall: float, *extra: str, prefix: tuple[str, ...] = (),
           timeout: float = 150) -> tuple[subprocess.CompletedProcess[str], Path, float]:
    work = tmp_path / mode
    work.mkdir(parents=True, exist_ok=True)
    shutil.copy(JOB, work / "train.py")
    run = work / "run"
    t0 = time.monotonic()
    done = subprocess.run([*prefix, PYTHON, "-m", "doctor", "launch", "--nproc", "4", "--no-warmup", "--plain",
                           "-q", "--stall", str(stall), "--stall-action", "stop", "--run-dir", str(run),
                           "--", "train.py", "--mode", mode, *extra],
                          cwd=work, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    return done, run, time.monotonic() - t0


def stall_onset(run: Path) -> float:
    """When the ranks went quiet: the newest rank log's last write."""
    return max((run / f"rank_{r}.log").stat().st_mtime for r in range(4))


def assert_nothing_left(run: Path) -> None:
    pids = json.loads((run / "pids.json").read_text())["ranks"].values()
    alive = [p for p in pids if Path(f"/proc/{p}").exists()
             and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]
    samplers = [p for p in os.listdir("/proc") if p.isdigit() and Path(_cmdline(p).split("\0")[0]).name == "py-spy"
                and any(f"--pid\0{q}\0" in _cmdline(p) for q in pids)]
    assert not alive and not samplers, (alive, samplers)


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace")
    except OSError:
        return ""


def hang(run: Path) -> dict:
    return json.loads((run / "hang.json").read_text())


def test_rank_that_skipped_an_all_reduce_is_named_and_the_others_wait_in_all_reduce(tmp_path: Path) -> None:
    """(bench/bench_hang.py runs this and the data loader case 20 times in a row.)"""
    done, run, _ = launch(tmp_path, "skip", 15)
    out = done.stderr + done.stdout
    assert done.returncode == 3, out
    doc = hang(run)
    assert doc["diverged_ranks"] == [1], doc["verdict"]
    assert doc["verdict"].startswith(f"ranks 0, 2, 3 wait in all_reduce ({ALL_REDUCE}"), doc["verdict"]
    assert f"rank 1 is in barrier (train.py:{line_of('dist.barrier()')}" in doc["verdict"] and doc["verdict"].endswith("rank 1 diverged")
    assert doc["collective"]["op"] == "all_reduce" and doc["collective"]["ranks"] == [0, 2, 3]
    [major, minor] = doc["groups"]
    assert (major["ranks"], major["moving"], minor["ranks"], minor["moving"]) == ([0, 2, 3], False, [1], False)
    assert major["frames"][0]["function"] == "all_reduce" and major["frames"][0]["file"].endswith("distributed_c10d.py")
    # The verdict is on disk before the ranks were stopped, within 45 s of the stall.
    assert (run / "hang.json").stat().st_mtime - stall_onset(run) < 45
    assert "stalled 15s: rank 1 diverged (barrier)" in out
    assert (run / "hang-stacks" / "rank_1.txt").read_text().count("barrier (") >= 2
    assert_nothing_left(run)


def test_rank_asleep_in_its_data_loader_is_named_with_the_loop_line(tmp_path: Path) -> None:
    done, run, _ = launch(tmp_path, "loader", 15)
    doc = hang(run)
    assert doc["diverged_ranks"] == [1], doc["verdict"]
    assert f"rank 1 is in DataLoader.__next__ (train.py:{line_of('for step, batch in enumerate(loader)')}" in doc["verdict"]
    assert doc["verdict"].startswith(f"ranks 0, 2, 3 wait in all_reduce ({ALL_REDUCE}, after step 49)")
    assert (run / "hang.json").stat().st_mtime - stall_onset(run) < 45
    assert "rank 1 diverged (DataLoader)" in done.stderr
    assert_nothing_left(run)


def test_rank_holding_the_gil_in_c_shows_its_native_stack(tmp_path: Path) -> None:
    done, run, _ = launch(tmp_path, "gil", 5)
    doc = hang(run)
    assert doc["diverged_ranks"] == [1], doc["verdict"]
    [stuck] = [g for g in doc["groups"] if g["ranks"] == [1]]
    assert stuck["frames"][0]["function"] == "hold_the_gil"
    natives = [f["function"] for f in stuck.get("native_frames", [])]
    # Native frames from py-spy --native, or the reason there are none: never silence.
    assert ("sleep" in natives or "clock_nanosleep" in natives) or stuck.get("native_reason"), stuck
    assert "holding the GIL" in stuck["what"]
    assert_nothing_left(run)


def test_symmetric_stall_says_no_rank_diverged_and_points_at_the_interconnect(tmp_path: Path) -> None:
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("iptables") or not shutil.which("nsenter"):
        pytest.skip("needs root, iproute2, iptables and nsenter (a network namespace of the test's own)")
    ns = f"gdhang-{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        work = tmp_path / "healthy"
        cut = subprocess.Popen(["sh", "-c", f"while ! grep -q 'step 20/' {work}/run/rank_3.log 2>/dev/null; do "
                                f"sleep 0.2; done; ip netns exec {ns} iptables -A INPUT -i lo -j DROP"])
        done, run, _ = launch(tmp_path, "healthy", 5, "--steps", "100000", "--step-s", "0.02",
                              prefix=("nsenter", f"--net=/run/netns/{ns}"))
        cut.wait(10)
    finally:
        subprocess.run(["ip", "netns", "delete", ns], check=False)
    doc = hang(run)
    assert doc["diverged_ranks"] == [] and len(doc["groups"]) == 1, doc["verdict"]
    assert doc["verdict"].startswith(f"all 4 ranks wait in all_reduce ({ALL_REDUCE}"), doc["verdict"]
    assert "no rank diverged" in doc["verdict"] and "P2P002" in doc["verdict"] and "NCCL_DEBUG=INFO" in doc["verdict"]
    assert "stalled 5s: no rank diverged (all_reduce)" in done.stderr
    assert_nothing_left(run)


def test_flight_recorder_dumps_of_gloo_ranks_show_the_mismatched_collective_and_art005_names_rank_1(
        tmp_path: Path) -> None:
    """--flight-recorder on real gloo ranks: the collectives time out after 5 s, each rank dumps its
    Flight Recorder (the script does what NCCL does by itself), ART005 reads the dumps afterwards."""
    work = tmp_path / "fr"
    work.mkdir()
    shutil.copy(JOB, work / "train.py")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([PYTHON, "-m", "doctor", "launch", "--nproc", "4", "--no-warmup", "--plain", "-q",
                           "--stall", "0", "--flight-recorder", "--", "train.py", "--mode", "skip",
                           "--pg-timeout", "5"], cwd=work, capture_output=True, text=True, timeout=150, env=env)
    assert done.returncode == 1, done.stderr
    [run] = (work / ".gpu-doctor" / "runs").iterdir()
    assert sorted(p.name for p in run.glob("fr_trace_rank_*")) == [f"fr_trace_rank_{r}" for r in range(4)]
    from doctor.hang.flight import read_run

    result = read_run(run)
    assert result is not None
    [pg] = result["process_groups"]
    mm = pg["mismatch"]
    assert mm["by_rank"]["1"]["op"] == "barrier" and {mm["by_rank"][r]["op"] for r in "023"} == {"all_reduce"}
    gate = subprocess.run([PYTHON, "-m", "doctor", "--check-only", "--playbook", "post-run", "--json", str(work)],
                          capture_output=True, text=True, timeout=120, env=env)
    [art005] = [c for c in json.loads(gate.stdout)["checks"] if c["id"] == "ART005"]
    assert art005["status"] == "fail", art005
    assert art005["findings"][0]["message"].startswith(
        f"the Flight Recorder dumps of the last launch show rank 1 out of step: collective #{mm['seq']} of "
        "default_pg differs between ranks"), art005

"""The launch engine on small plain-Python ranks (no torch): events, logs, stops, srun mode."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import threading
from pathlib import Path

from launch_util import PYTHON, cli_env, group_members, running, wait_until, write_job

from doctor.launch.engine import Launcher
from doctor.launch.events import (
    Event,
    RankExited,
    RankOutput,
    RankProgress,
    RankStarted,
    RankState,
    RunFinished,
)
from doctor.launch.spec import LaunchSpec

BARS = r'''
import os, sys
rank = os.environ["RANK"]
sys.stdout.write(f"hello from rank {rank} of {os.environ['WORLD_SIZE']}\n")
for i in range(1, 6):
    sys.stdout.write(f"\r{i * 20}%|##| {i}/5 [00:0{i}<00:00]")
    sys.stdout.flush()
sys.stdout.write("\r\n" + "z" * 200000 + "\nbye\n")
'''

SLEEPER = r'''
import os, subprocess, sys, threading
child = subprocess.Popen(["sleep", "600"])
print(f"rank {os.environ['RANK']} child {child.pid}", flush=True)
threading.Event().wait()
'''


def _spec(tmp_path: Path, script: str, nproc: int = 2, **kw: object) -> LaunchSpec:
    write_job(tmp_path, script, "job.py")
    opts: dict = {"warmup": False, "python": PYTHON, "grace_s": 0.5, "kill_after_s": 2.0}
    opts.update(kw)
    return LaunchSpec("job.py", nproc=nproc, workdir=tmp_path, **opts)


def test_engine_streams_events_to_asyncio_and_keeps_exact_logs(tmp_path: Path) -> None:
    launcher = Launcher(_spec(tmp_path, BARS))

    async def consume() -> list[Event]:
        stream = launcher.subscribe_async()
        launcher.start()
        return [ev async for ev in stream]

    events = asyncio.run(consume())

    assert isinstance(events[-1], RunFinished) and events[-1].summary.exit_code == 0
    assert sorted(ev.rank for ev in events if isinstance(ev, RankStarted)) == [0, 1]
    lines = [line for ev in events if isinstance(ev, RankOutput) and ev.rank == 1 for line in ev.lines]
    assert lines[0] == "hello from rank 1 of 2"
    assert lines[1] == "100%|##| 5/5 [00:05<00:00]"      # the bar as a terminal leaves it
    assert lines[2].startswith("z" * 1000) and lines[2].endswith("[cut; full line in the log]")
    assert lines[3] == "bye"
    progress = [(ev.step, ev.total) for ev in events if isinstance(ev, RankProgress) and ev.rank == 1]
    assert progress[-1] == (5, 5)
    exited = [ev for ev in events if isinstance(ev, RankExited)]
    assert {(ev.rank, ev.state) for ev in exited} == {(0, RankState.DONE), (1, RankState.DONE)}
    # Everything a rank printed precedes its exit event.
    assert max(i for i, ev in enumerate(events) if isinstance(ev, RankOutput) and ev.rank == 1) < \
        next(i for i, ev in enumerate(events) if isinstance(ev, RankExited) and ev.rank == 1)
    log = Path(events[-1].summary.rank(1).log_path).read_bytes()
    assert log.startswith(b"hello from rank 1 of 2\n\r20%|##| 1/5")
    assert log.endswith(b"\r\n" + b"z" * 200000 + b"\nbye\n")


def test_engine_events_for_one_rank_from_a_blocking_iterator_in_a_thread(tmp_path: Path) -> None:
    launcher = Launcher(_spec(tmp_path, "import os; print('line of', os.environ['RANK'])\n", nproc=2))
    stream = launcher.subscribe(rank=1)
    seen: list[Event] = []
    reader = threading.Thread(target=lambda: seen.extend(stream))
    reader.start()
    launcher.start()
    reader.join(60)
    assert isinstance(seen[-1], RunFinished)
    assert {getattr(ev, "rank", None) for ev in seen[:-1]} == {1}
    assert any(isinstance(ev, RankOutput) and ev.lines == ("line of 1",) for ev in seen)


def test_a_rank_that_cannot_start_fails_the_run(tmp_path: Path) -> None:
    summary = Launcher(_spec(tmp_path, "", nproc=2, python=str(tmp_path / "no-python"))).run()
    assert summary.exit_code == 127
    assert summary.first_failed == 0
    assert "cannot start" in summary.rank(0).last_lines[0]


def test_stop_from_the_api_stops_every_rank_and_their_children(tmp_path: Path) -> None:
    launcher = Launcher(_spec(tmp_path, SLEEPER)).start()
    wait_until(lambda: all(s.lines for s in launcher.statuses()), 30, "both ranks to print")
    children = [int(s.last_line.split()[-1]) for s in launcher.statuses()]
    launcher.stop("stopped by the test")
    summary = launcher.wait(30)
    with Launcher(_spec(tmp_path, SLEEPER, nproc=1)) as closed:
        closed.start()
        wait_until(lambda: closed.statuses()[0].lines, 30, "the rank to print")
    assert closed.summary is not None and closed.summary.ranks[0].state == RankState.KILLED

    assert summary is not None and summary.exit_code == 130
    assert summary.reason == "stopped by the test; stopped 2 of 2 ranks"
    assert [r.state for r in summary.ranks] == [RankState.KILLED] * 2
    for pid in [*(r.pid for r in summary.ranks if r.pid), *children]:
        wait_until(lambda pid=pid: not running(pid), 5, f"pid {pid} to be gone")


def test_sighup_to_gpu_doctor_stops_every_rank_group(tmp_path: Path) -> None:
    write_job(tmp_path, SLEEPER)
    err = tmp_path / "err.txt"
    proc = subprocess.Popen([PYTHON, "-m", "doctor", "launch", "--plain", "--no-warmup", "--nproc", "2",
                             "--", "job.py"], cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE,
                            stderr=err.open("w"), text=True, start_new_session=True)
    try:
        first = proc.stdout.readline() if proc.stdout else ""
        second = proc.stdout.readline() if proc.stdout else ""
        children = [int(line.split()[-1]) for line in (first, second)]
        ranks = [int(line.split("(pid ")[1].split(")")[0]) for line in err.read_text().splitlines()
                 if "(pid " in line]
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(timeout=30) == 128 + signal.SIGHUP
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(ranks) == 2
    for pid in [*ranks, *children]:
        wait_until(lambda pid=pid: not running(pid), 5, f"pid {pid} to be gone")
    assert all(group_members(pgid) == [] for pgid in ranks)
    assert "interrupted by SIGHUP; stopped 2 of 2 ranks" in err.read_text()


FAKE_SRUN = r'''#!{python}
"""Test stand-in for `srun --label`: runs the tasks here, labels their lines."""
import os, subprocess, sys, threading, time
args, opts = sys.argv[1:], {{}}
while args and args[0].startswith("--"):
    key, _, value = args.pop(0)[2:].partition("=")
    opts[key] = value
ntasks, per_node = int(opts["ntasks"]), int(opts["ntasks-per-node"])
env = dict(os.environ)
for item in opts["export"].split(",")[1:]:
    key, value = item.split("=", 1)
    env[key] = value
procs = []
for task in range(ntasks):
    task_env = dict(env, SLURM_PROCID=str(task), SLURM_LOCALID=str(task % per_node), SLURM_NTASKS=str(ntasks),
                    SLURM_NODEID=str(task // per_node), SLURM_TASKS_PER_NODE=f"{{per_node}}(x{{ntasks // per_node}})")
    procs.append(subprocess.Popen(args, env=task_env, cwd=opts["chdir"], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT))
lock = threading.Lock()
def pump(task, proc):
    for line in proc.stdout:
        with lock:
            sys.stdout.write(f"{{task}}: {{line.decode()}}")
            sys.stdout.flush()
threads = [threading.Thread(target=pump, args=(t, p)) for t, p in enumerate(procs)]
for t in threads: t.start()
codes = {{}}
while len(codes) < len(procs):   # --kill-on-bad-exit=1: the first failure ends the step
    for task, proc in enumerate(procs):
        if task not in codes and proc.poll() is not None:
            codes[task] = proc.returncode
            if proc.returncode > 0:
                print(f"srun: error: node0{{task // per_node + 1}}: task {{task}}: Exited with exit code "
                      f"{{proc.returncode}}", file=sys.stderr, flush=True)
                for other in procs:
                    if other.poll() is None and opts.get("kill-on-bad-exit") == "1":
                        other.kill()
    time.sleep(0.02)
for t in threads: t.join()
sys.exit(max(codes.values()))
'''


def _srun_env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text(FAKE_SRUN.format(python=PYTHON))
    srun.chmod(0o755)
    env = cli_env()
    env.update(PATH=f"{bin_dir}:{env['PATH']}", SLURM_JOB_ID="777")
    return env


def test_srun_mode_demultiplexes_labelled_output_into_rank_logs(tmp_path: Path) -> None:
    env = _srun_env(tmp_path)
    script = "import os; print('rank', os.environ['RANK'], 'local', os.environ['LOCAL_RANK'], " \
             "'of', os.environ['WORLD_SIZE'], 'at', os.environ['MASTER_ADDR'], 'dir', " \
             "os.environ['SCOREP_EXPERIMENT_DIRECTORY'])\n"
    launcher = Launcher(_spec(tmp_path, script, nproc=2, nnodes=2, slurm_hosts=("node01", "node02"), env=env))
    summary = launcher.run()

    assert summary.exit_code == 0, summary.reason
    assert summary.master == "node01:30277"   # 29500 + job id % 2000: every node agrees
    for rank in range(4):
        log = Path(summary.rank(rank).log_path).read_text()
        # node01 resolves nowhere here: the task says it leaves the socket interface to the libraries.
        said, ran = log.splitlines()
        assert re.fullmatch(rf"gpu-doctor: socket interface for rank {rank} on \S+: not set: MASTER_ADDR node01 "
                            r"does not resolve here; the libraries choose \(name it with --socket-ifname\)", said)
        assert ran == f"rank {rank} local {rank % 2} of 4 at node01 dir scorep_rank_{rank}"
    assert [s.state for s in launcher.statuses()] == [RankState.DONE] * 4


def test_srun_mode_names_the_task_srun_reports_failed(tmp_path: Path) -> None:
    script = ("import os, sys, threading\nprint('up', flush=True)\n"
              "sys.exit(3) if os.environ['RANK'] == '1' else threading.Event().wait()\n")
    spec = _spec(tmp_path, script, nproc=1, nnodes=3, slurm_hosts=("node01", "node02", "node03"),
                 env=_srun_env(tmp_path))
    summary = Launcher(spec).run()

    assert summary.exit_code == 3
    assert summary.first_failed == 1
    # srun does not end the step (--kill-on-bad-exit=0): the launcher stops the rest after --grace.
    assert summary.reason == "rank 1 on node02 failed first (exit code 3); stopped ranks 0, 2 after the 0.5 s grace"
    assert [r.state for r in summary.ranks] == [RankState.KILLED, RankState.FAILED, RankState.KILLED]

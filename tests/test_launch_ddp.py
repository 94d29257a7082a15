"""The launcher on real CPU `gloo` DDP ranks (torch from the test interpreter)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from launch_util import (
    PYTHON,
    cli_env,
    fake_scorep_env,
    group_members,
    running,
    wait_until,
    write_job,
)

from doctor import registry
from doctor.launch.engine import Launcher
from doctor.launch.events import Event, RankExited, RankState, RunFinished
from doctor.launch.spec import LaunchSpec

pytest.importorskip("torch")
pytestmark = pytest.mark.slow


def spec_for(tmp_path: Path, nproc: int, *args: str, **kw: object) -> LaunchSpec:
    write_job(tmp_path)
    opts: dict = {"warmup": False, "grace_s": 1.0, "kill_after_s": 3.0, "python": PYTHON}
    opts.update(kw)
    return LaunchSpec("job.py", tuple(args), nproc=nproc, workdir=tmp_path, **opts)


@pytest.mark.parametrize("nproc", [2, 4])
def test_all_ranks_finish_with_logs_states_and_progress(tmp_path: Path, nproc: int) -> None:
    launcher = Launcher(spec_for(tmp_path, nproc, "--steps", "3"))
    summary = launcher.run()

    assert summary.exit_code == 0, summary.reason
    assert summary.reason == f"all {nproc} ranks finished with exit code 0"
    assert [r.state for r in summary.ranks] == [RankState.DONE] * nproc
    for status in launcher.statuses():
        log = Path(status.log_path).read_text()
        assert f"rank {status.rank} joined a world of {nproc}" in log
        assert f"rank {status.rank} done" in log
        assert (status.step, status.total, status.epoch) == (3, 3, 1.0)
        assert status.loss is not None
    assert Path(summary.run_dir, "summary.json").exists()


def test_failing_rank_stops_the_others_after_the_grace(tmp_path: Path) -> None:
    exits: list[RankExited] = []
    launcher = Launcher(spec_for(tmp_path, 2, "--fail-rank", "1", "--others-wait", grace_s=1.0),
                        on_event=lambda ev: exits.append(ev) if isinstance(ev, RankExited) else None)
    summary = launcher.run()

    assert summary.exit_code == 1
    assert summary.first_failed == 1
    assert summary.reason.startswith("rank 1 failed first (exit code 1); stopped rank 0 after the 1 s grace")
    assert any("RuntimeError: boom on rank 1 at step 1" in line for line in summary.rank(1).last_lines)
    assert summary.rank(0).state == RankState.KILLED
    assert summary.rank(0).signal == "SIGTERM"
    failed, stopped = exits[0], exits[1]
    assert (failed.rank, stopped.rank) == (1, 0)
    # Stopped once the grace was over, and well before anything else could have ended it.
    assert 1.0 <= stopped.at - failed.at < 1.0 + 3.0 + 2.0


def _launch_cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Path]:
    err = tmp_path / "gpu-doctor.err"
    proc = subprocess.Popen([PYTHON, "-m", "doctor", "launch", "--plain", *args], cwd=tmp_path,
                            env=env or cli_env(), stdout=subprocess.DEVNULL, stderr=err.open("w"),
                            start_new_session=True)
    return proc, err


def _rank_pids(err: Path, n: int) -> dict[int, int]:
    pids = {}
    for line in err.read_text().splitlines():
        if " started (pid " in line:
            rank = int(line.split("rank ", 1)[1].split()[0])
            pids[rank] = int(line.split("(pid ", 1)[1].split(")")[0])
    return pids if len(pids) == n else {}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_gpu_doctor_leaves_no_rank_process(tmp_path: Path, sig: signal.Signals) -> None:
    write_job(tmp_path)
    proc, err = _launch_cli(tmp_path, "--nproc", "2", "--no-warmup", "--kill-after", "3", "--",
                            "job.py", "--idle", "--grandchild")
    try:
        pids = wait_until(lambda: _rank_pids(err, 2), 60, "both ranks to start")
        assert isinstance(pids, dict)
        run_dir = next((tmp_path / ".gpu-doctor" / "runs").iterdir())
        logs = [run_dir / f"rank_{r}.log" for r in (0, 1)]
        wait_until(lambda: all("idle" in log.read_text() for log in logs), 60, "both ranks to idle")
        grandchildren = [int(log.read_text().split("grandchild pid ")[1].split()[0]) for log in logs]
        assert all(running(p) for p in [*pids.values(), *grandchildren])

        proc.send_signal(sig)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    assert code == 128 + sig
    assert f"interrupted by {sig.name}" in err.read_text()
    for pid in [*pids.values(), *grandchildren]:
        wait_until(lambda pid=pid: not running(pid), 5, f"pid {pid} to be gone")
    for pgid in pids.values():
        assert group_members(pgid) == []
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [r["state"] for r in summary["ranks"]] == ["killed", "killed"]


def test_fifty_megabytes_of_long_lines_do_not_block(tmp_path: Path) -> None:
    launcher = Launcher(spec_for(tmp_path, 2, "--spam-mb", "50", "--line-kb", "1024", "--steps", "1"))
    summary = launcher.run()

    assert summary.exit_code == 0, summary.reason
    log0 = Path(summary.rank(0).log_path)
    assert log0.stat().st_size > 50 * 2**20
    status0 = launcher.statuses()[0]
    assert status0.bytes == log0.stat().st_size
    assert "rank 0 done" in log0.read_text()[-2000:]


def test_rank_stuck_before_rendezvous_times_out_clearly(tmp_path: Path) -> None:
    launcher = Launcher(spec_for(tmp_path, 2, "--hang-before-init", "1", rendezvous_timeout_s=2.0))
    summary = launcher.run()

    assert summary.exit_code == 124
    assert summary.reason.startswith(f"rendezvous timed out: 1 of 2 ranks joined {summary.master} "
                                     "within 2 s of the first; not joined: rank 1")
    assert "not joining the rendezvous" in summary.reason
    assert [r.state for r in summary.ranks] == [RankState.KILLED, RankState.KILLED]
    assert all(not running(r.pid) for r in summary.ranks if r.pid)


def test_instrumented_ranks_each_run_under_their_own_wrapper(tmp_path: Path) -> None:
    env = fake_scorep_env(tmp_path)
    events: list[Event] = []
    spec = spec_for(tmp_path, 2, "--steps", "2", instrument="scorep", scorep_flags=("--thread=pthread",),
                    env=env)
    summary = Launcher(spec, on_event=events.append).run()

    assert summary.exit_code == 0, summary.reason
    records = [json.loads(p.read_text()) for p in (tmp_path / "scorep_records").iterdir()]
    by_rank = {int(r["env"]["RANK"]): r for r in records}
    assert sorted(by_rank) == [0, 1]
    for rank, rec in by_rank.items():
        assert rec["argv"] == ["--thread=pthread", "job.py", "--steps", "2"]
        assert rec["env"]["SCOREP_EXPERIMENT_DIRECTORY"] == f"scorep_rank_{rank}"
        assert rec["pid"] == summary.rank(rank).pid
        assert rec["cwd"] == str(tmp_path)
        assert (tmp_path / f"scorep_rank_{rank}" / "profile.cubex").exists()
        assert "done" in Path(summary.rank(rank).log_path).read_text()
    assert isinstance(events[-1], RunFinished)


def test_cli_instrumented_without_cuda_flag_warms_up_warns_and_verifies(tmp_path: Path) -> None:
    write_job(tmp_path)
    env = cli_env(fake_scorep_env(tmp_path))
    out = subprocess.run([PYTHON, "-m", "doctor", "launch", "--plain", "--nproc", "2", "--instrument",
                          "scorep", "--scorep-flags", "--thread=pthread", "--", "job.py", "--steps", "1"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    assert out.returncode == 0, out.stderr
    assert "no CUDA here: torch" in out.stderr and "CPU-only build; continuing without a GPU" in out.stderr
    # The stand-in leaves empty placeholder profiles: the artifacts checks (when in this build)
    # read them and do not count them as measurements; without those checks the files count.
    registry.load()
    if "ART003" in registry.CHECKS:
        assert "gpu-doctor: 0/2 ranks measured, CUDA recorded: not asked (no --cuda)" in out.stderr
        assert "ART003 fail: 0 of 2 ranks left a complete measurement" in out.stderr
    else:
        assert "gpu-doctor: 2/2 ranks measured, CUDA recorded: not asked (no --cuda)" in out.stderr
    assert "[rank 1] step 1/1 loss" in out.stdout


def test_cli_instrumented_with_cuda_on_a_cpu_node_fails_before_launching(tmp_path: Path) -> None:
    write_job(tmp_path)
    env = cli_env(fake_scorep_env(tmp_path))
    out = subprocess.run([PYTHON, "-m", "doctor", "launch", "--plain", "--nproc", "2", "--instrument",
                          "scorep", "--", "job.py"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)

    assert out.returncode == 1
    assert "CUDA warm-up failed: no CUDA here" in out.stderr
    assert "--instrument scorep with --cuda needs CUDA" in out.stderr
    assert not list((tmp_path / "scorep_records").iterdir())   # no rank was started

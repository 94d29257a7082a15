"""doctor.hang without a job: the verdict's wording, the reasons a rank cannot be sampled, the
Flight Recorder's matching, `gpu-doctor hang` on plain processes and on bad input."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

from doctor.hang import cli, flight, stacks
from doctor.hang.groups import RankStack
from doctor.hang.stacks import Frame, Sample, Thread
from doctor.hang.verdict import judge

C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def _sample(rank: int, frames: list[tuple[str, str, int]], owns_gil: bool = False) -> Sample:
    thread = Thread(1, "MainThread", owns_gil, False, tuple(Frame(*f) for f in frames), os_thread_id=100 + rank)
    return Sample(rank, 100 + rank, time.time(), (thread,))


def _stack(rank: int, frames: list[tuple[str, str, int]], step: int | None = 7) -> RankStack:
    s = _sample(rank, frames)
    return RankStack(rank, s, s, step=step)


IN_ALL_REDUCE = [("all_reduce", C10D, 3252), ("train_step", "/job/train.py", 43), ("<module>", "/job/train.py", 59)]
IN_BARRIER = [("barrier", C10D, 5356), ("<module>", "/job/train.py", 63)]
IN_SAVE = [("save", "/venv/lib/python3.11/site-packages/torch/serialization.py", 900),
           ("checkpoint", "/job/train.py", 80), ("<module>", "/job/train.py", 61)]


def test_even_split_names_the_group_outside_the_collective_as_diverged() -> None:
    v = judge([_stack(0, IN_ALL_REDUCE), _stack(1, IN_SAVE), _stack(2, IN_ALL_REDUCE), _stack(3, IN_SAVE)])
    assert v.diverged_ranks == (1, 3)
    assert v.verdict == ("ranks 0, 2 wait in all_reduce (train.py:43, after step 7); ranks 1, 3 are in save "
                         "(train.py:80, after step 7): ranks 1, 3 diverged")
    assert v.collective == {"op": "all_reduce", "where": "train.py:43", "ranks": [0, 2], "step": 7}


def test_a_rank_that_cannot_be_sampled_is_named_with_its_reason_not_counted_as_diverged() -> None:
    gone = Sample(3, 999, time.time(), reason="process 999 is gone (it ended before it could be sampled)")
    v = judge([_stack(0, IN_ALL_REDUCE), _stack(1, IN_BARRIER), _stack(2, IN_ALL_REDUCE), RankStack(3, gone, gone)])
    assert v.diverged_ranks == (1,)
    assert v.verdict.endswith("rank 1 diverged; rank 3 could not be sampled: process 999 is gone "
                              "(it ended before it could be sampled)")
    assert v.to_json()["groups"][-1] == {"ranks": [3], "frames": [], "moving": False, "what": "", "where": "",
                                         "reason": "process 999 is gone (it ended before it could be sampled)"}


def test_one_group_for_every_rank_is_a_symmetric_stall() -> None:
    v = judge([_stack(r, IN_ALL_REDUCE) for r in range(4)])
    assert v.diverged_ranks == () and v.short == "no rank diverged (all_reduce)"
    assert v.verdict.startswith("all 4 ranks wait in all_reduce (train.py:43, after step 7): no rank diverged; ")
    assert "P2P002" in v.verdict and "NCCL_DEBUG=INFO" in v.verdict


def test_a_rank_whose_stack_changed_between_samples_is_moving() -> None:
    a, b = _sample(1, IN_SAVE), _sample(1, IN_BARRIER)
    v = judge([_stack(0, IN_BARRIER), RankStack(1, a, b), _stack(2, IN_BARRIER)])
    assert v.diverged_ranks == () and v.groups[0].moving
    assert v.verdict.startswith("all 3 ranks run in barrier")


def test_sampling_a_pid_that_is_gone_says_so() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    s = stacks.sample(proc.pid, 0)
    assert not s.ok and s.reason == f"process {proc.pid} is gone (it ended before it could be sampled)"


def test_without_py_spy_the_reason_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(stacks, "py_spy_path", lambda: None)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert cli.main(["--pid", str(proc.pid)]) == 1
    finally:
        proc.kill()
        proc.wait()
    out = capsys.readouterr().out
    assert out.startswith("no rank could be sampled; rank 0 could not be sampled: py-spy is not installed "
                          "(pip install py-spy"), out


def test_hang_pid_samples_a_live_process_twice_and_prints_its_frames(tmp_path: Path) -> None:
    script = tmp_path / "waiter.py"
    script.write_text("import time\n\ndef wait_for_data():\n    time.sleep(60)\n\nwait_for_data()\n")
    proc = subprocess.Popen([sys.executable, str(script)])
    try:
        time.sleep(0.5)
        done = subprocess.run([sys.executable, "-m", "doctor", "hang", "--pid", str(proc.pid), "--json"],
                              capture_output=True, text=True, timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    [group] = doc["groups"]
    assert group["ranks"] == [0] and group["moving"] is False
    assert group["frames"][0] == {"function": "wait_for_data", "file": str(script), "line": 4}
    assert doc["verdict"].startswith("rank 0 waits in wait_for_data (waiter.py:4): no rank diverged")


def test_hang_on_a_folder_that_is_no_launch_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "doctor", "hang", str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (f"gpu-doctor: error: {tmp_path}/pids.json: not found: {tmp_path} is not a "
                                   "gpu-doctor launch's run folder (or the launch has not started its ranks yet)")


def _entry(seq: int, op: str, sizes: list[list[int]], dtype: str = "Float") -> dict[str, object]:
    return {"record_id": seq - 1, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
            "p2p_seq_id": 0, "op_id": seq, "profiling_name": f"gloo:{op}", "input_sizes": sizes,
            "input_dtypes": [dtype], "state": "scheduled", "is_p2p": False}


def test_flight_recorder_dumps_name_the_first_collective_a_rank_did_not_enter(tmp_path: Path) -> None:
    steps = [_entry(s, "all_reduce", [[4]]) for s in range(1, 51)]
    for rank in (0, 2, 3):
        (tmp_path / f"fr_trace_rank_{rank}").write_bytes(pickle.dumps(
            {"version": "2.10", "pg_config": {}, "entries": [*steps, _entry(51, "all_reduce", [[4]])]}))
    (tmp_path / "fr_trace_rank_1").write_bytes(pickle.dumps(
        {"version": "2.10", "pg_config": {}, "entries": [*steps[:49], _entry(50, "barrier", [[0]])]}))
    result = flight.read_run(tmp_path, world=5)
    assert result is not None
    [pg] = result["process_groups"]
    assert pg["first_unjoined"] == {"seq": 51, "op": "all_reduce", "joined": [0, 2, 3], "not_joined": [1]}
    assert pg["mismatch"]["seq"] == 50 and pg["mismatch"]["by_rank"]["1"]["op"] == "barrier"
    assert result["no_dump"] == [4]
    assert "collective #51 (all_reduce) of default_pg: rank(s) 0, 2, 3 entered it, rank(s) 1 did not" in result["summary"]


def test_a_flight_recorder_dump_that_names_a_class_is_refused(tmp_path: Path) -> None:
    (tmp_path / "fr_trace_rank_0").write_bytes(pickle.dumps({"entries": [Path("/etc")]}))
    result = flight.read_run(tmp_path)
    assert result is not None and result["dumps"] == []
    assert "not a Flight Recorder dump (a Flight Recorder dump holds no objects" in result["errors"][0]


def test_flight_recorder_flag_sets_the_dump_variables_without_overriding_the_users(tmp_path: Path) -> None:
    env = flight.flight_recorder_env({"TORCH_NCCL_TRACE_BUFFER_SIZE": "64"}, tmp_path)
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in env
    assert env["TORCH_FR_BUFFER_SIZE"] == "2000" and env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert env["TORCH_FR_DUMP_TEMP_FILE"] == str(tmp_path / "fr_trace_rank_")


def test_launch_with_the_flight_recorder_flag_gives_every_rank_the_variables(tmp_path: Path) -> None:
    from doctor.launch.spec import LaunchSpec, plan_ranks

    plans = plan_ranks(LaunchSpec("train.py", nproc=2, env={}, flight_recorder=True), 29500, tmp_path)
    assert [p.rank_env["TORCH_FR_DUMP_TEMP_FILE"] for p in plans] == [str(tmp_path / "fr_trace_rank_")] * 2
    assert "TORCH_FR_BUFFER_SIZE" not in plan_ranks(LaunchSpec("train.py", nproc=1, env={}), 29500, tmp_path)[0].rank_env


def test_srun_label_pieces_of_each_task_make_its_document() -> None:
    from doctor.hang.job import task_documents

    one = json.dumps({"node": "node1", "ranks": [{"rank": 0}]})
    two = json.dumps({"node": "node2", "ranks": [{"rank": 1}]})
    out = f"0: {one[:20]}\n1: {two[:15]}\n0: {one[20:]}\n1: {two[15:]}\nsrun: warning: odd line\n"
    assert [d["node"] for d in task_documents(out)] == ["node1", "node2"]


def test_without_ptrace_permission_the_reason_says_so(tmp_path: Path) -> None:
    """py-spy run as `nobody` against this user's process: the kernel refuses the trace."""
    import os
    import shutil

    tool = stacks.py_spy_path()
    if os.geteuid() != 0 or shutil.which("runuser") is None or tool is None:
        pytest.skip("needs root and runuser (to run py-spy as another user)")
    as_nobody = tmp_path / "py-spy-as-nobody"
    as_nobody.write_text(f'#!/bin/sh\nexec runuser -u nobody -- {tool} "$@"\n')
    as_nobody.chmod(0o755)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        s = stacks.sample(proc.pid, 0, py_spy=str(as_nobody))
    finally:
        proc.kill()
        proc.wait()
    assert s.reason is not None and s.reason.startswith(f"no permission to trace process {proc.pid} (ptrace)"), s.reason

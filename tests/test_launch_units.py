"""The launcher's parts without DDP: progress, output shaping, commands, Slurm, warm-up, verdict, view."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import types
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from launch_util import PYTHON, cli_env, fake_scorep_env

from doctor import registry
from doctor.cli import main as gpu_doctor
from doctor.launch import slurm
from doctor.launch.events import RankResult, RankState, RankStatus, RunSummary
from doctor.launch.gpus import read_gpus
from doctor.launch.output import CUT_MARK, LineSplitter
from doctor.launch.progress import Progress, parse_progress
from doctor.launch.spec import LaunchSpec, plan_ranks
from doctor.launch.srun_task import task_env, tasks_on_node
from doctor.launch.verify import verify
from doctor.launch.view import live_renderable, summary_lines
from doctor.launch.warmup import run_warmup
from doctor.model import passed


@pytest.mark.parametrize("line, expected", [
    ("{'loss': 0.6931, 'learning_rate': 5e-05, 'epoch': 0.12}", Progress(None, None, 0.12, 0.6931)),
    ("{'train_runtime': 3.1, 'train_loss': 0.5, 'epoch': 1.0}", Progress(None, None, 1.0, 0.5)),
    (" 12%|#2        | 6/50 [00:03<00:22,  1.95it/s]", Progress(6, 50)),
    ("Epoch 0:  45%|####5     | 9/20 [00:01<00:01, 6.1it/s, loss=0.3]", Progress(9, 20, 0.0, 0.3)),
    ("step 12", Progress(12, None)),
    ("Step 12/50 loss 0.25", Progress(12, 50, None, 0.25)),
    ("global_step=40", Progress(40, None)),
    ("iter 7 of 100", Progress(7, 100)),
    ("[12/50] training", Progress(12, 50)),
    ("Epoch 3/10", Progress(None, None, 3.0)),
    ("saving checkpoint to /data/2024/11/run", None),
    ("NCCL INFO Channel 00/02 : 0 1", None),
])
def test_progress_is_read_from_common_trainer_lines(line: str, expected: Progress | None) -> None:
    assert parse_progress(line) == expected


def test_carriage_return_bars_show_as_a_terminal_shows_them() -> None:
    split = LineSplitter()
    assert split.feed(b"load\n 10%| 1/10 [\r 50%| 5/10 [") == (["load"], " 50%| 5/10 [")
    assert split.feed(b"\r100%| 10/10 [\r") == ([], "100%| 10/10 [")
    assert split.feed(b"\ndone\r") == (["100%| 10/10 ["], "done")
    assert split.feed(b"\nnext") == (["done"], "next")   # a CRLF cut across two reads
    assert split.flush() == ["next"]


def test_a_line_longer_than_the_limit_is_cut_for_the_view_only() -> None:
    split = LineSplitter(max_line=50, max_pending=1000)
    lines, current = split.feed(b"y" * 1500)
    assert lines == ["y" * 50 + CUT_MARK] and current is None
    assert split.feed(b"y" * 5000) == ([], None)            # the rest of that line is skipped
    assert split.feed(b"yy\nshort\n") == (["short"], None)
    assert split.feed("h\u00e9\n".encode()) == (["h\u00e9"], None)


def _spec(tmp_path: Path, **kw: object) -> LaunchSpec:
    return LaunchSpec("train.py", ("--max_steps", "50"), nproc=2, python="/opt/py/bin/python",
                      workdir=tmp_path, env={"PATH": "/usr/bin", "SCOREP_PYTHON_BINDINGS_INITIALISED": "true"},
                      **kw)  # type: ignore[arg-type]


def test_instrumented_rank_commands_and_environments_are_exact(tmp_path: Path) -> None:
    spec = _spec(tmp_path, instrument="scorep", scorep_flags=("--cuda", "--thread=pthread"))
    plans = plan_ranks(spec, 29611, tmp_path / "run")

    for plan in plans:
        assert plan.argv == ("/opt/py/bin/python", "-m", "scorep", "--cuda", "--thread=pthread",
                             "train.py", "--max_steps", "50")
        assert plan.rank_env == {
            "RANK": str(plan.rank), "LOCAL_RANK": str(plan.rank), "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29611",
            "SCOREP_EXPERIMENT_DIRECTORY": f"scorep_rank_{plan.rank}", "SCOREP_TOTAL_MEMORY": "256M",
            "PYTHONUNBUFFERED": "1"}
        assert plan.log_path == str(tmp_path / "run" / f"rank_{plan.rank}.log")
        env = plan.env(spec.base_env())
        assert "SCOREP_PYTHON_BINDINGS_INITIALISED" not in env   # else scorep would skip its re-exec
        assert env["PATH"] == "/usr/bin"


def test_uninstrumented_ranks_run_the_script_directly(tmp_path: Path) -> None:
    plans = plan_ranks(_spec(tmp_path), 29611, tmp_path)
    assert plans[1].argv == ("/opt/py/bin/python", "train.py", "--max_steps", "50")
    assert "SCOREP_EXPERIMENT_DIRECTORY" not in plans[1].rank_env


def test_srun_command_runs_one_instrumented_task_per_rank(tmp_path: Path) -> None:
    spec = _spec(tmp_path, instrument="scorep", nnodes=2, scorep_flags=("--cuda",))
    cmd = slurm.srun_command(spec, "node01", 29712)
    task = cmd.index("doctor.launch.srun_task")
    assert cmd[:task - 2] == [
        "srun", "--nodes=2", "--ntasks=4", "--ntasks-per-node=2", "--distribution=block",
        "--kill-on-bad-exit=0", "--label", "--unbuffered", f"--chdir={tmp_path}",
        "--export=ALL,MASTER_ADDR=node01,MASTER_PORT=29712,SCOREP_TOTAL_MEMORY=256M"]
    assert cmd[task + 1:] == ["--rendezvous-timeout", "300", "--socket-ifname", "auto", "--warmup-python", "/opt/py/bin/python", "--warmup-budget", "300",
                              "--require-cuda", "--", "/opt/py/bin/python", "-m", "scorep", "--cuda",
                              "train.py", "--max_steps", "50"]


@pytest.mark.parametrize("line, report", [
    ("srun: error: node2: tasks 2-3: Killed", ("node2", (2, 3), -9)),
    ("srun: error: node1: task 0: Exited with exit code 1", ("node1", (0,), 1)),
    ("srun: error: gpu07: tasks 0,2-3: Segmentation fault", ("gpu07", (0, 2, 3), -11)),
    ("srun: Force Terminated StepId=1.0", None),
])
def test_srun_task_reports_name_the_node_and_every_task(line: str, report: object) -> None:
    assert slurm.task_report(line) == report


@pytest.mark.parametrize("text, hosts", [
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("gpu5,cpu[8-9]", ["gpu5", "cpu8", "cpu9"]),
    ("n[9-11]-ib", ["n9-ib", "n10-ib", "n11-ib"]),
])
def test_slurm_node_lists_expand_without_scontrol(text: str, hosts: list[str]) -> None:
    assert slurm.parse_nodelist(text) == hosts


def test_srun_task_maps_slurm_variables_and_execs(tmp_path: Path) -> None:
    assert tasks_on_node("2(x3),1", 3) == 1 and tasks_on_node("4(x2)", 1) == 4
    env = cli_env({"PATH": os.environ["PATH"], "SLURM_PROCID": "5", "SLURM_LOCALID": "1",
                   "SLURM_NTASKS": "6", "SLURM_NODEID": "2", "SLURM_TASKS_PER_NODE": "2(x3)",
                   "MASTER_ADDR": "node01", "MASTER_PORT": "29700"})
    names = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "SCOREP_EXPERIMENT_DIRECTORY"]
    show = f"import json, os; print(json.dumps({{k: os.environ.get(k) for k in {names!r}}}), os.getpid())"
    proc = subprocess.Popen([PYTHON, "-m", "doctor.launch.srun_task", "--", PYTHON, "-c", show],
                            env=env, stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=60)
    doc, pid = out.rsplit(" ", 1)
    assert json.loads(doc) == {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "2",
                               "NODE_RANK": "2", "SCOREP_EXPERIMENT_DIRECTORY": "scorep_rank_5"}
    assert int(pid) == proc.pid   # exec'd in place: srun's signals reach the rank itself


def test_srun_task_outside_srun_says_so() -> None:
    out = subprocess.run([PYTHON, "-m", "doctor.launch.srun_task", "--", "true"], env=cli_env({}),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "not inside an srun task" in out.stderr
    with pytest.raises(Exception, match="MASTER_ADDR is not set"):
        task_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"})


def test_more_than_one_node_outside_slurm_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "train.py").write_text("")
    code = gpu_doctor(["launch", "--nnodes", "2", "--workdir", str(tmp_path), "--", "train.py"])
    assert code == 2
    assert ("--nnodes 2: more than one node needs a Slurm allocation (salloc/sbatch -N 2); "
            "gpu-doctor does not start ranks on other hosts itself") in capsys.readouterr().err


def test_multi_node_allocation_launches_through_srun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from doctor.launch import cli

    (tmp_path / "train.py").write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("srun",):
        (bin_dir / tool).write_text("#!/bin/sh\n")
        (bin_dir / tool).chmod(0o755)
    env = {"PATH": str(bin_dir), "SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "2",
           "SLURM_JOB_NODELIST": "gpu[07-08]"}
    args = cli.build_parser().parse_args(["--nproc", "4", "--workdir", str(tmp_path)])
    spec = cli.build_spec(args, ["train.py"], env)
    assert (spec.nnodes, spec.slurm_hosts, spec.world_size) == (2, ("gpu07", "gpu08"), 8)


@pytest.mark.parametrize("argv, message", [
    (["--", "missing.py"], "script 'missing.py' not found in"),
    (["--scorep-flags", "--cuda --", "--", "train.py"], "must not contain `--`"),
    (["--", "torchrun", "--nproc-per-node=4", "train.py"], "is a launcher"),
    ([], "nothing to launch"),
    (["--nproc", "0", "--", "train.py"], "must be 1 or more"),
])
def test_bad_launch_arguments_are_one_line_errors(tmp_path: Path, argv: list[str], message: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "train.py").write_text("")
    (tmp_path / "torchrun").write_text("")
    assert gpu_doctor(["launch", "--workdir", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_missing_scorep_names_what_was_looked_for(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "train.py").write_text("")
    monkeypatch.setenv("PATH", str(tmp_path))
    # an interpreter without the bindings (this venv may hold the real ones: scripts/build-scorep.sh)
    bare = tmp_path / "python"
    bare.write_text(f"#!/bin/sh\nexec {PYTHON} -I -S \"$@\"\n")
    bare.chmod(0o755)
    code = gpu_doctor(["launch", "--instrument", "scorep", "--workdir", str(tmp_path), "--python", str(bare),
                       "--", "train.py"])
    err = capsys.readouterr().err
    assert code == 2
    assert "`scorep-config` is not on PATH" in err
    assert f"the `scorep` Python module is not importable by {bare}" in err


def test_scorep_found_through_the_stand_in(tmp_path: Path) -> None:
    from doctor.launch.scorep import find_scorep

    found = find_scorep(PYTHON, fake_scorep_env(tmp_path))
    assert found.ok and found.module and found.module.endswith("fake_scorep/scorep/__init__.py")


def _fake_python(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fakepython"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_warmup_retries_a_not_ready_runtime_in_fresh_processes(tmp_path: Path) -> None:
    python = _fake_python(tmp_path, """n=$(cat "$COUNTER" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$COUNTER"
if [ $n -le 2 ]; then echo '{"ok": false, "kind": "not_ready", "error": "RuntimeError: CUDA error: system not ready"}'
else echo '{"ok": true, "kind": "ready", "torch": "2.13.0"}'; fi
""")
    seen: list[str] = []
    res = run_warmup(python, {"COUNTER": str(tmp_path / "n"), "LD_PRELOAD": "/x/libscorep_init.so"},
                     budget_s=30, backoff_s=0.01, on_attempt=lambda n, r: seen.append(str(r["kind"])))
    assert (res.ok, res.attempts, seen) == (True, 3, ["not_ready", "not_ready", "ready"])
    assert res.describe().startswith("CUDA runtime ready after attempt 3")


def test_warmup_reports_a_hung_runtime_as_a_broken_node(tmp_path: Path) -> None:
    res = run_warmup(_fake_python(tmp_path, "exec sleep 30\n"), {}, budget_s=1.0, backoff_s=0.01)
    assert (res.ok, res.kind, res.attempts) == (False, "hung", 1)
    assert "looks broken (field guide error 4)" in res.describe()


def test_warmup_does_not_retry_a_cpu_only_build(tmp_path: Path) -> None:
    python = _fake_python(tmp_path, """echo '{"ok": false, "kind": "cpu_build", "torch": "2.13.0+cpu", "error": "AssertionError: Torch not compiled with CUDA enabled"}'\n""")
    res = run_warmup(python, {}, budget_s=30, backoff_s=5)
    assert (res.ok, res.no_cuda, res.attempts) == (False, True, 1)
    assert res.describe() == "no CUDA here: torch 2.13.0+cpu is a CPU-only build"


def _summary(tmp_path: Path, n: int) -> RunSummary:
    ranks = tuple(RankResult(r, RankState.DONE, 0, 100 + r, str(tmp_path / f"rank_{r}.log"), ())
                  for r in range(n))
    return RunSummary(0, "ok", ranks, None, str(tmp_path), 1.0, n, "127.0.0.1:1")


def test_verdict_counts_rank_folders_and_reads_cuda_from_art002(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    for r, files in enumerate((["profile.cubex"], ["traces.otf2"], ["scorep.cfg"])):
        (tmp_path / f"scorep_rank_{r}").mkdir()
        for name in files:
            (tmp_path / f"scorep_rank_{r}" / name).write_text("")
    spec = LaunchSpec("t.py", nproc=4, workdir=tmp_path, instrument="scorep", env={})
    registry.load()
    for cid in ("ART001", "ART002", "ART003", "ART004"):
        monkeypatch.delitem(registry.CHECKS, cid, raising=False)
    without = verify(spec, _summary(tmp_path, 4), started_wall=0.0)
    assert without.verdict_line() == "2/4 ranks measured, CUDA recorded: unknown (ART002 not available)"
    assert without.unavailable == ("ART001", "ART002", "ART003", "ART004")
    assert without.problems()[0].startswith("rank 2: ") and without.problems()[0].endswith(": incomplete")
    assert without.problems()[1].endswith("scorep_rank_3: missing")

    monkeypatch.setitem(registry.CHECKS, "ART002", registry.Check(
        "ART002", "artifacts", "CUDA recorded", lambda facts: passed("CUDA locations in every rank")))
    with_art = verify(spec, _summary(tmp_path, 4), started_wall=0.0)
    assert with_art.verdict_line() == "2/4 ranks measured, CUDA recorded: yes"


@pytest.mark.parametrize("cuda, verdict", [(True, "2/2 ranks measured, CUDA recorded: yes"),
                                            (False, "2/2 ranks measured, CUDA recorded: no")])
def test_verdict_over_real_traces_uses_the_artifacts_checks(tmp_path: Path, cuda: bool, verdict: str) -> None:
    tracegen = pytest.importorskip("tracegen")
    registry.load()
    if "ART002" not in registry.CHECKS:
        pytest.skip("the artifacts checks are not in this build")
    tracegen.per_rank_job(tmp_path, 2, cuda=cuda)
    spec = LaunchSpec("t.py", nproc=2, workdir=tmp_path, instrument="scorep", scorep_flags=("--cuda",), env={})
    check = verify(spec, _summary(tmp_path, 2), started_wall=0.0)
    assert check.verdict_line() == verdict
    assert check.unavailable == ()


def test_placeholder_profiles_do_not_count_as_measured(tmp_path: Path) -> None:
    registry.load()
    if "ART003" not in registry.CHECKS:
        pytest.skip("the artifacts checks are not in this build")
    for r in (0, 1):
        (tmp_path / f"scorep_rank_{r}").mkdir()
        (tmp_path / f"scorep_rank_{r}" / "scorep.cfg").write_text("SCOREP_ENABLE_PROFILING=true\n")
        (tmp_path / f"scorep_rank_{r}" / "profile.cubex").write_bytes(b"")
    spec = LaunchSpec("t.py", nproc=2, workdir=tmp_path, instrument="scorep", scorep_flags=(), env={})
    check = verify(spec, _summary(tmp_path, 2), started_wall=0.0)
    assert check.verdict_line() == "0/2 ranks measured, CUDA recorded: not asked (no --cuda)"
    assert any(p.startswith("ART003 fail: 0 of 2 ranks left a complete measurement") for p in check.problems())


def test_live_view_renders_rank_states_and_gpus_as_na(tmp_path: Path) -> None:
    from rich.console import Console

    statuses = (RankStatus(0, RankState.RUNNING, 11, 12, 50, 0.5, 0.31, "step 12/50 [x]"),
                RankStatus(1, RankState.FAILED, 12, returncode=-9, last_line="Killed"))
    console = Console(record=True, width=120, color_system=None)
    console.print(live_renderable("2 ranks", statuses, (), "NVML unavailable (no driver)"))
    text = console.export_text()
    assert "running" in text and "12/50 ep 0.5 loss 0.31" in text and "step 12/50 [x]" in text
    assert "killed by SIGKILL" in text
    assert "NVML unavailable (no driver)" in text and "N/A" in text


def test_gpu_samples_come_from_nvml_and_unreadable_metrics_are_na() -> None:
    mem = types.SimpleNamespace(used=3 * 2**30, total=80 * 2**30)

    def util(handle: int) -> object:
        if handle == 1:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return types.SimpleNamespace(gpu=87)

    nvml = types.SimpleNamespace(nvmlDeviceGetCount=lambda: 2, nvmlDeviceGetHandleByIndex=lambda i: i,
                                 nvmlDeviceGetName=lambda h: b"NVIDIA H100", nvmlDeviceGetUtilizationRates=util,
                                 nvmlDeviceGetMemoryInfo=lambda h: mem)
    gpus = read_gpus(nvml)
    assert [(g.name, g.util_text, g.mem_text) for g in gpus] == [
        ("NVIDIA H100", "87%", "3.0/80.0 GiB"), ("NVIDIA H100", "N/A", "3.0/80.0 GiB")]


def test_summary_names_the_first_failing_rank_and_its_last_lines(tmp_path: Path) -> None:
    ranks = (RankResult(0, RankState.KILLED, -15, 10, "r0.log", ("waiting",)),
             RankResult(1, RankState.FAILED, 1, 11, "r1.log", tuple(f"line {i}" for i in range(15))))
    lines = summary_lines(RunSummary(1, "rank 1 failed first (exit code 1)", ranks, 1, ".", 2.0, 2, "a:1"))
    assert lines[0] == "rank 1 failed first (exit code 1) (2.0 s, exit code 1)"
    assert "killed by SIGTERM" in lines[1]
    assert lines[3] == "  last lines of rank 1 (r1.log):"
    assert lines[4:] == [f"    | line {i}" for i in range(5, 15)]


SAMPLE_GPUS = """import time
from doctor.launch.gpus import GpuMonitor
monitor = GpuMonitor(0.05).start()
for _ in range(500):
    samples, error = monitor.snapshot()
    if samples or error != "not sampled yet":
        break
    time.sleep(0.02)
print(error, [(g.index, g.name, g.util_text, g.mem_text) for g in samples])
"""


@pytest.mark.parametrize("scenario, expected", [
    ("healthy", "None [(0, 'NVIDIA H100 80GB HBM3', '0%', '0.0/79.6 GiB')"),
    ("no_driver", "no NVIDIA driver on this host []"),  # in words, not an exception class name
])
def test_gpu_monitor_through_the_fake_nvml_library(fake_node: Callable[..., dict[str, str]], scenario: str,
                                                   expected: str) -> None:
    out = subprocess.run([PYTHON, "-c", SAMPLE_GPUS], env=cli_env(fake_node(scenario)), capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.startswith(expected), out.stdout + out.stderr


def test_ranks_sit_on_nodes_in_blocks_and_a_node_whose_ranks_all_died_is_lost() -> None:
    from doctor.launch import placement
    from doctor.launch.events import RankResult, RankState

    nodes = placement.rank_nodes(("gpu07", "gpu08"), 2)
    assert nodes == {0: "gpu07", 1: "gpu07", 2: "gpu08", 3: "gpu08"}
    results = [RankResult(0, RankState.KILLED, -15, 1, "", ()), RankResult(1, RankState.FAILED, 1, 1, "", ()),
               RankResult(2, RankState.FAILED, -9, 1, "", ()), RankResult(3, RankState.FAILED, -9, 1, "", ())]
    assert placement.lost_nodes(results, nodes) == {"gpu08": [2, 3]}


def test_rendezvous_marks_say_rank_node_and_what_round_trip() -> None:
    from doctor.launch import placement

    line = placement.reach_line(3, "gpu08", "10.0.0.7:29512", False, "connect timed out after 3 s")
    assert line == "gpu-doctor: rank 3 on gpu08 cannot reach 10.0.0.7:29512 (connect timed out after 3 s)"
    assert placement.parse_mark(line) == placement.RendezvousMark(3, "gpu08", "unreachable",
                                                                  "connect timed out after 3 s")
    joined = placement.parse_mark(placement.joined_line(0, "gpu07", "10.0.0.7:29512"))
    assert joined == placement.RendezvousMark(0, "gpu07", "joined")
    assert placement.parse_mark("gpu-doctor: rank 3 says hello") is None


def test_srun_tasks_of_a_launch_above_the_job_folder_put_each_ranks_folder_there(tmp_path: Path) -> None:
    """`gpu-doctor launch -- job/train.py` from the folder above: srun runs the tasks there (the ranks'
    working folder, as locally), and each task's SCOREP_EXPERIMENT_DIRECTORY is the job folder's."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text("")
    spec = replace(_spec(tmp_path, instrument="scorep", nnodes=2), script="job/train.py")
    cmd = slurm.srun_command(spec, "node01", 29712)
    assert f"--chdir={tmp_path}" in cmd
    task = cmd[cmd.index("doctor.launch.srun_task") + 1:cmd.index("--")]
    assert task[task.index("--experiment-base") + 1] == str(job)
    env = task_env({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "MASTER_ADDR": "node01", "MASTER_PORT": "1"}, str(job))
    assert env["SCOREP_EXPERIMENT_DIRECTORY"] == f"{job}/scorep_rank_3"
    (tmp_path / "train.py").write_text("")
    assert "--experiment-base" not in slurm.srun_command(replace(spec, script="train.py"), "node01", 29712)

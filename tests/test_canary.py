"""`gpu-doctor launch --canary K`: the DDP replicas compared every K steps, on real gloo ranks (CPU).

The training script (tests/fixtures/canary/ddp_train.py) simulates the faults itself: it flips
one bit of one parameter on one rank, or stalls or ends a rank before an optimizer step.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from launch_util import PYTHON, REPO, TEARDOWN_ABORT, cli_env

from doctor.canary import launch as canary_launch
from doctor.canary import report

pytest.importorskip("torch")

JOB = REPO / "tests" / "fixtures" / "canary" / "ddp_train.py"
BOOTSTRAP = canary_launch.BOOTSTRAP


def launch(tmp_path: Path, nproc: int, options: list[str], job_args: list[str],
           timeout: float = 240) -> tuple[subprocess.CompletedProcess[str], dict]:
    """`gpu-doctor launch --plain --nproc N OPTIONS -- ddp_train.py ARGS`: the result and canary.json.
    Once more if torch 2.13's gloo teardown aborted a rank at exit (tests/launch_util.py)."""
    shutil.copy(JOB, tmp_path / "ddp_train.py")
    for attempt in (1, 2):
        run = tmp_path / f"run{attempt}"
        res = subprocess.run([PYTHON, "-m", "doctor", "launch", "--plain", "--quiet", "--no-warmup",
                              "--nproc", str(nproc), "--run-dir", str(run), *options, "--", "ddp_train.py",
                              *job_args], cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
                             timeout=timeout)
        aborted = any(TEARDOWN_ABORT in log.read_text(errors="replace") for log in run.glob("rank_*.log"))
        if not (aborted and attempt == 1):
            break
    doc = json.loads((run / "canary.json").read_text())
    assert left_running(tmp_path) == [], "a rank outlived its launch"
    assert "the ranks left running" not in res.stderr      # the engine's sweep found nothing to stop either
    return res, doc


def left_running(folder: Path) -> list[str]:
    """Processes still working in `folder` (the ranks and whatever they started run there)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cwd", "cmdline"]):
        if proc.info["cwd"] and str(folder) in proc.info["cwd"]:
            found.append(" ".join(proc.info["cmdline"] or []))
    return found


@pytest.mark.slow
@pytest.mark.parametrize(("bit", "action"), [(3, "fail"), (23, "stop")], ids=["mantissa-bit", "exponent-bit"])
def test_one_flipped_bit_on_rank_2_is_named_with_its_tensor_by_the_next_check(
        tmp_path: Path, bit: int, action: str) -> None:
    res, doc = launch(tmp_path, 4, ["--canary", "10", "--canary-action", action],
                      ["--steps", "150", "--flip-rank", "2", "--flip-after", "137", "--flip-bit", str(bit),
                       "--flip-tensor", "layer3.weight", "--os-exit"])

    line = "step 140: rank 2's `layer3.weight` differs from ranks 0, 1, 3"
    assert res.returncode == canary_launch.EXIT_CANARY, res.stderr[-3000:]
    assert f"gpu-doctor: error: canary: {line}\n" in res.stderr           # live, while the ranks run
    assert f"gpu-doctor:   canary: {line}\n" in res.stderr                # and in the summary
    first = doc["first_mismatch"]
    assert (first["step"], first["minority"], first["majority"], first["tensor"]) == \
        (140, [2], [0, 1, 3], "layer3.weight")
    assert doc["verdict"] == "mismatch" and doc["how"] == ["all_gather"]
    assert all(doc["ranks"][str(r)]["agreed"] == 13 for r in range(4))      # steps 10..130 agreed
    assert "P2P002" in res.stderr and "ART006" in res.stderr
    if action == "stop":
        assert "--canary-action stop" in res.stderr and "killed by SIGTERM" in res.stderr
    else:
        assert "all 4 ranks finished with exit code 0" in res.stderr


@pytest.mark.slow
def test_clean_ranks_agree_at_every_check_and_the_cost_is_reported(tmp_path: Path) -> None:
    res, doc = launch(tmp_path, 2, ["--canary", "10"], ["--steps", "400", "--print-every", "400", "--os-exit"])

    assert res.returncode == 0, res.stderr[-3000:]
    assert doc["verdict"] == "clean" and doc["checks"] == 40 and doc["mismatches"] == []
    assert doc["ranks"] == {str(r): {"checks": 40, "agreed": 40, "steps": 400, "host": doc["ranks"][str(r)]["host"],
                                     "device": "cpu"} for r in (0, 1)}
    cost = doc["cost"]
    assert 0 < cost["digest_ms_mean"] <= cost["digest_ms_max"] and cost["step_ms_mean"] > 0
    assert cost["overhead_pct"] == pytest.approx(100 * cost["hook_ms_mean"] / (10 * cost["step_ms_mean"]))
    assert "canary: every 10 steps, 40 checks up to step 400: the replicas were identical at every check; " \
           f"digest {cost['digest_ms_mean']:.2f} ms per check" in res.stderr


@pytest.mark.slow
def test_a_rank_that_stalls_past_the_timeout_is_named_and_the_others_go_on(tmp_path: Path) -> None:
    res, doc = launch(tmp_path, 4, ["--canary", "5", "--canary-timeout", "3"],
                      ["--steps", "30", "--stall-rank", "3", "--stall-step", "15", "--stall-s", "7", "--os-exit"])

    assert res.returncode == 0, res.stderr[-3000:]
    assert "gpu-doctor:   canary: step 15: rank 3 missed the check (no digest within 3 s)\n" in res.stderr
    assert [(m["step"], m["ranks"]) for m in doc["missed"]] == [(15, [3])]
    assert doc["verdict"] == "missed" and doc["mismatches"] == []
    # every rank went on to the end and kept checking (through the store once the group timed out)
    assert all(doc["ranks"][str(r)]["checks"] == 6 for r in range(4)), doc["ranks"]
    assert doc["how"] == ["store"]


@pytest.mark.slow
def test_a_rank_that_dies_before_a_check_is_named_and_the_others_finish(tmp_path: Path) -> None:
    res, doc = launch(tmp_path, 3, ["--canary", "10", "--canary-timeout", "3", "--grace", "30"],
                      ["--steps", "20", "--die-rank", "2", "--die-step", "20", "--os-exit"])

    assert res.returncode == 7, res.stderr[-3000:]     # the rank's own exit code
    assert "gpu-doctor:   canary: step 20: rank 2 missed the check (no digest within 3 s)\n" in res.stderr
    assert "rank 0   done" in res.stderr and "rank 1   done" in res.stderr
    assert doc["ranks"]["0"]["checks"] == 2 and doc["ranks"]["2"]["checks"] == 1


def test_bootstrap_runs_the_users_sitecustomize_and_waits_for_torch(tmp_path: Path) -> None:
    user = tmp_path / "user_site"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = 'yes'\n")
    (user / "helper_mod.py").write_text("VALUE = 41\n")
    env = {**os.environ, **canary_launch.rank_env(10, 5.0, tmp_path, {"PYTHONPATH": str(user)})}
    probe = ("import os, sys\n"
             "print('torch at start:', 'torch' in sys.modules, os.environ.get('USER_SITE_RAN'))\n"
             "import helper_mod\n"
             "import torch\n"
             "from gpu_doctor_canary import watch\n"
             "print('canary:', watch._CANARY.k, watch._CANARY.timeout_s, helper_mod.VALUE + 1)\n")
    res = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)

    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["torch at start: False yes", "canary: 10 5.0 42"]
    assert env["PYTHONPATH"] == f"{BOOTSTRAP}{os.pathsep}{user}"


def test_digests_see_one_flipped_bit_and_name_its_tensor() -> None:
    import torch

    sys.path.insert(0, str(BOOTSTRAP))
    try:
        from gpu_doctor_canary.digest import digests
    finally:
        sys.path.remove(str(BOOTSTRAP))
    torch.manual_seed(0)
    tensors = [torch.randn(64, 32), torch.randn(7, dtype=torch.float16), torch.randn(33)[1:],
               torch.randn(5, dtype=torch.bfloat16)]
    total, per = digests(tensors)
    for which, bit in ((0, 0), (0, 23), (0, 31), (1, 14), (2, 22), (3, 7)):
        flipped = [t.clone() for t in tensors]
        words = flipped[which].view(-1).view(torch.int16 if flipped[which].element_size() == 2 else torch.int32)
        words[3] ^= 1 << bit
        total2, per2 = digests(flipped)
        assert int(total2) != int(total)
        assert (per2 != per).nonzero().flatten().tolist() == [which]


def test_warn_reports_the_mismatch_but_keeps_the_ranks_exit_code(tmp_path: Path) -> None:
    (tmp_path / "canary").mkdir()
    for rank, value in ((0, []), (1, [{"step": 30, "minority": [1], "majority": [0, 2], "tensor": "fc.bias",
                                       "line": "step 30: rank 1's `fc.bias` differs from ranks 0, 2"}]), (2, [])):
        (tmp_path / "canary" / f"rank_{rank}.json").write_text(json.dumps(
            {"rank": rank, "checks": 3, "agreed": 2, "mismatches": value, "missed": [], "problems": [],
             "cost": {"digest_ms_total": 0.3, "digest_ms_max": 0.2, "hook_ms_total": 0.6,
                      "exchange_ms_total": 3.0, "exchange_ms_max": 2.0, "step_ms_total": 29.0,
                      "step_samples": 29}}))
    for action, code in (("warn", 0), ("fail", 3)):
        got = canary_launch.outcome(tmp_path, 10, action, 3, 60.0, 0, "all 3 ranks finished with exit code 0")
        assert got[0] == code
        assert got[1] == "replicas differ: step 30: rank 1's `fc.bias` differs from ranks 0, 2; " \
                         "all 3 ranks finished with exit code 0"
        assert got[2][0] == "canary: step 30: rank 1's `fc.bias` differs from ranks 0, 2"
    doc = json.loads((tmp_path / "canary.json").read_text())
    assert doc["cost"]["overhead_pct"] == pytest.approx(100 * 0.2 / (10 * 1.0))
    assert report.summary_lines(doc)[-1].startswith("canary: the cause to test next: corrupt GPU peer copies")


def test_mark_is_the_rank_sides(tmp_path: Path) -> None:
    text = (BOOTSTRAP / "gpu_doctor_canary" / "watch.py").read_text()
    assert f'MARK = "{canary_launch.MARK}"' in text


@pytest.mark.slow
@pytest.mark.scorep
def test_the_canary_runs_inside_ranks_measured_by_real_score_p(tmp_path: Path) -> None:
    from scorep_real import require, scorep_env

    scorep = require()
    shutil.copy(JOB, tmp_path / "ddp_train.py")
    env = scorep_env(scorep)     # PYTHONPATH already holds the user's entries: the bootstrap goes first
    for attempt in (1, 2):
        run = tmp_path / f"run{attempt}"
        res = subprocess.run([PYTHON, "-m", "doctor", "launch", "--plain", "--quiet", "--no-warmup", "--nproc", "3",
                              "--instrument", "scorep", "--scorep-flags", "--noinstrumenter", "--run-dir", str(run),
                              "--canary", "5", "--", "ddp_train.py", "--steps", "12", "--flip-rank", "1",
                              "--flip-after", "7"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        if not any(TEARDOWN_ABORT in log.read_text(errors="replace") for log in run.glob("rank_*.log")):
            break
    line = "step 10: rank 1's `layer3.weight` differs from ranks 0, 2"
    assert res.returncode == canary_launch.EXIT_CANARY, res.stderr[-3000:]
    assert f"gpu-doctor:   canary: {line}\n" in res.stderr
    assert "3/3 ranks measured" in res.stderr
    assert json.loads((run / "canary.json").read_text())["first_mismatch"]["line"] == line


def test_art006_reads_clean_missed_and_broken_records(tmp_path: Path) -> None:
    from doctor import registry
    from doctor.canary.facts import newest, read

    check = registry.get_check("ART006")
    logs = tmp_path / "logs"
    logs.mkdir()
    base = {"k": 10, "verdict": "clean", "checks": 5, "last_check_step": 50, "mismatches": [], "missed": [],
            "ranks": {"0": {"device": "cpu", "host": "vm"}}, "cost": {"digest_ms_mean": 0.5, "digest_ms_max": 0.9}}
    (logs / "canary.json").write_text(json.dumps(base))
    found = check.fn({"canary": read(newest(tmp_path))})
    assert (found.status.value, found.message) == ("pass", "the replicas were identical at all 5 checks every "
                                                   "10 steps up to step 50; digest 0.50 ms per check (max 0.90)")
    missed = {**base, "missed": [{"step": 20, "ranks": [3], "line": "step 20: rank 3 missed the check (no digest "
                                                                     "within 60 s)"}]}
    (logs / "canary.json").write_text(json.dumps(missed))
    found = check.fn({"canary": read(newest(tmp_path))})
    assert found.status.value == "warn" and found.message.startswith("1 rank missed a canary check (step 20: rank 3")
    for text, problem in (("{", "not JSON"), ('{"k": 1}', "not a gpu-doctor canary record"),
                          (json.dumps({**base, "missed": [{"step": "x"}]}), "'missed' is not a list of checks")):
        (logs / "canary.json").write_text(text)
        found = check.fn({"canary": read(newest(tmp_path))})
        assert found.status.value == "unknown"
        assert found.message.startswith(f"{logs / 'canary.json'}: ") and problem in found.message


def test_optimizer_state_is_hashed_after_the_parameters_and_named_after_them(tmp_path: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from doctor.launch.spec import free_port

    sys.path.insert(0, str(BOOTSTRAP))
    try:
        from gpu_doctor_canary.watch import Canary
    finally:
        sys.path.remove(str(BOOTSTRAP))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        canary = Canary(2, str(tmp_path), 5.0, optimizer_state=True)
        ddp = DistributedDataParallel(torch.nn.Linear(4, 2))
        canary.ddp_built(ddp)
        opt = torch.optim.Adam(ddp.parameters())
        for _ in range(2):
            ddp(torch.ones(3, 4)).sum().backward()
            opt.step()
            canary.after_step(opt, (), {})
        canary.drain(10.0)
    finally:
        dist.destroy_process_group()
    assert [name for name, _ in canary.named] == [
        "weight", "bias", "weight (optimizer exp_avg)", "weight (optimizer exp_avg_sq)", "weight (optimizer step)",
        "bias (optimizer exp_avg)", "bias (optimizer exp_avg_sq)", "bias (optimizer step)"]
    record = json.loads((tmp_path / "canary" / "rank_0.json").read_text())
    assert (record["checks"], record["agreed"], record["tensors"], record["how"]) == (1, 1, 8, "all_gather")


def test_the_words_for_two_minority_groups_and_for_no_majority() -> None:
    sys.path.insert(0, str(BOOTSTRAP))
    try:
        from gpu_doctor_canary.compare import disagreements
    finally:
        sys.path.remove(str(BOOTSTRAP))
    names = ["embed.weight", "layer1.weight", "layer1.bias"]
    vectors = {0: [1, 2, 3], 1: [1, 2, 3], 2: [1, 9, 3], 3: [1, 2, 3], 4: [1, 2, 8]}
    lines = [d["line"] for d in disagreements(50, {0: 7, 1: 7, 2: 5, 3: 7, 4: 6}, vectors, names)]
    assert lines == ["step 50: rank 2's `layer1.weight` differs from ranks 0, 1, 3",
                     "step 50: rank 4's `layer1.bias` differs from ranks 0, 1, 3"]
    tie = disagreements(60, {0: 7, 1: 7, 2: 5, 3: 5}, {0: [1, 2, 3], 2: [4, 2, 3]}, names)
    assert [(d["line"], d["majority"]) for d in tie] == [
        ("step 60: no majority: ranks 2, 3's `embed.weight` differs from ranks 0, 1", [])]
    assert disagreements(70, {0: 7, 1: 7}, {}, names) == []

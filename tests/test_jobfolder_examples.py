"""The bundled examples and realistic clean job folders, end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from jobfolder_util import EXAMPLES, FIXTURES, JOB_CHECKS, REPO, bad, run_check, where
from launch_util import TEARDOWN_ABORT

from doctor.model import Status

BROKEN = EXAMPLES / "scorep-ddp-broken"
FIXED = EXAMPLES / "scorep-ddp-fixed"
NO_CUDA = {"framework": {"ok": False, "error": "RuntimeError: CUDA error: system not ready (802)",
                         "torch_cuda": "12.1", "device_count": 0}}

# (check, status, evidence that must be there): the README of the broken example lists these.
INTENDED = [
    ("SCP002", Status.FAIL, [("job.sbatch", 27), ("job.sbatch", 18)]),
    ("SCP003", Status.FAIL, [("job.sbatch", 17)]),
    ("SCP005", Status.FAIL, [("job.sbatch", 27)]),
    ("LNC001", Status.FAIL, [("job.sbatch", 27), ("scorep_torchrun.py", 6)]),
    ("LNC002", Status.WARN, [("job.sbatch", 27), ("job.sbatch", 24)]),  # a risk: no cold runtime seen
    ("SCR001", Status.WARN, [("train.py", 18)]),
    ("SCR002", Status.FAIL, [("train.py", 94)]),
    ("SCR003", Status.FAIL, [("metrics.py", 22), ("metrics.py", 21)]),
    ("SCR004", Status.WARN, [("train.py", 85)]),
    ("TRN001", Status.FAIL, [("job.sbatch", 34), ("job.sbatch", 33)]),
]


@pytest.mark.parametrize("check_id,status,evidence", INTENDED, ids=[i[0] for i in INTENDED])
def test_broken_example_shows_each_intended_finding_with_file_and_line(
        check_id: str, status: Status, evidence: list[tuple[str, int]]) -> None:
    out = run_check(check_id, BROKEN)
    hits = [o for o in out if o.status == status]
    assert hits, [(o.status, o.message) for o in out]
    assert set(evidence) <= set(where(hits))
    assert all(o.data.get("file", "").startswith(str(BROKEN)) for o in hits)


def test_broken_example_fp16_hides_a_cuda_failure() -> None:
    out = run_check("TRN002", BROKEN, NO_CUDA)
    assert out[0].status == Status.FAIL and ("job.sbatch", 35) in where(out)
    assert run_check("TRN002", BROKEN)[0].status == Status.PASS


def test_broken_example_has_nothing_else_above_pass() -> None:
    intended = {i[0] for i in INTENDED}
    extra = {cid: [o.message for o in bad(run_check(cid, BROKEN))] for cid in JOB_CHECKS if cid not in intended}
    assert {k: v for k, v in extra.items() if v} == {}


@pytest.mark.parametrize("check_id", JOB_CHECKS)
def test_fixed_example_raises_nothing_above_pass(check_id: str) -> None:
    assert bad(run_check(check_id, FIXED)) == []


@pytest.mark.parametrize("folder", sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()))
def test_realistic_clean_job_folders_raise_nothing_above_pass(folder: str) -> None:
    found = {cid: [o.message for o in bad(run_check(cid, FIXTURES / folder))] for cid in JOB_CHECKS}
    assert {k: v for k, v in found.items() if v} == {}


def test_clean_fixtures_are_really_analysed() -> None:
    """Guards the test above against passing vacuously."""
    perrank = {cid: run_check(cid, FIXTURES / "perrank-scorep")[0] for cid in ("LNC002", "SCP006", "SCR002")}
    assert all(o.status == Status.PASS for o in perrank.values())
    assert "warmed up" in perrank["LNC002"].message and "differs per rank" in perrank["SCP006"].message
    srun = run_check("TRN001", FIXTURES / "srun-scorep")[0]
    assert "save 100, eval 50" in srun.message
    hf = run_check("TRN001", FIXTURES / "hf-torchrun")[0]
    assert "both 'epoch'" in hf.message


@pytest.mark.slow
def test_gate_on_the_broken_example_end_to_end() -> None:
    proc = subprocess.run([sys.executable, "-m", "doctor", "--check-only", "--playbook", "scorep-ddp", "--json",
                           str(BROKEN)], capture_output=True, text=True, timeout=240, cwd=REPO,
                          env={**os.environ, "PATH": os.environ.get("PATH", "")})
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout)
    checks = {c["id"]: c for c in doc["checks"]}
    for check_id, status, evidence in INTENDED:
        assert checks[check_id]["status"] == status.value, checks[check_id]["message"]
        got = {(e["file"], e["line"]) for e in checks[check_id]["evidence"]}
        assert set(evidence) <= got, (check_id, got)
        assert checks[check_id]["remedies"], check_id
    assert {c["layer"] for c in doc["checks"]} >= {"node", "scorep", "launcher", "script", "trainer"}


def _run_train(folder: Path, *args: str, nproc: int = 2) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_"))}
    env["OMP_NUM_THREADS"] = "1"
    for _attempt in (1, 2):  # once more if torch 2.13's gloo teardown aborted a rank at exit (its flake)
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
                               "--master_port", "0", "--standalone", "train.py", "--use_cpu", "True", *args],
                              cwd=folder, capture_output=True, text=True, timeout=240, env=env)
        if not (proc.returncode != 0 and TEARDOWN_ABORT in proc.stderr):
            break
    return proc


@pytest.mark.slow
def test_fixed_training_script_runs_two_gloo_ranks_on_cpu() -> None:
    pytest.importorskip("torch")
    proc = _run_train(FIXED, "--max_steps", "3", "--logging_steps", "1", "--per_device_train_batch_size", "4",
                      "--evaluation_strategy", "no", "--load_best_model_at_end", "False")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "done: 3 steps" in proc.stdout


@pytest.mark.slow
def test_broken_training_script_stops_on_the_strategy_conflict() -> None:
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, "train.py", "--use_cpu", "True", "--evaluation_strategy", "no",
                           "--load_best_model_at_end", "True"], cwd=BROKEN, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode != 0
    assert "--load_best_model_at_end requires the save and eval strategy to match" in proc.stderr


def test_loading_the_catalogue_imports_no_parser_library() -> None:
    code = ("import sys, doctor.registry as r; r.load(); "
            "bad = [m for m in ('tree_sitter', 'yaml', 'libcst', 'torch', 'textual') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr

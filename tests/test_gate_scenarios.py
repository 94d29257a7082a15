"""The gate through the real CLI on each fake node scenario (issue 2's "Must show")."""

from __future__ import annotations

import ctypes
import json
import socket
import subprocess
import sys

import pytest
from fakes.node import attempts, hung_pids, pid_alive, real_driver_present
from gate_util import run_gate, validate

HOST = socket.gethostname()
GPU_CHECKS = ("GPU001", "GPU002", "GPU003", "GPU005")


def test_healthy_node_passes_every_gpu_check(fake_node, tmp_path):
    run = run_gate(fake_node("healthy"), tmp_path=tmp_path)
    assert run.rc == 0, run.stderr
    assert run.stdout.startswith(f"gpu-doctor: OK on {HOST}")
    assert len(run.stdout.splitlines()) == 1
    assert {c: run.status(c) for c in GPU_CHECKS} == dict.fromkeys(GPU_CHECKS, "pass")
    assert "4 GPUs: NVIDIA H100 80GB HBM3" in run.check("GPU001")["message"]
    assert "GPU004" not in {c["id"] for c in run.doc["checks"]}  # prologue runs no user-side code


def test_json_on_stdout_is_the_schema_document(fake_node, tmp_path):
    env = fake_node("healthy")
    proc = subprocess.run([sys.executable, "-m", "doctor", "--check-only", "--json", "-q"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    doc = json.loads(proc.stdout)
    validate(doc)
    assert proc.returncode == doc["exit_code"] == 0
    assert doc["run"]["mode"] == "check-only" and doc["run"]["playbook"] == "prologue"
    gpu1 = next(c for c in doc["checks"] if c["id"] == "GPU001")
    assert {"id", "layer", "status", "message", "evidence", "duration_ms"} <= gpu1.keys()
    assert any(e["label"] == "GPU 3" for e in gpu1["evidence"])


@pytest.mark.parametrize("k", [1, 2])
def test_runtime_ready_after_transient_802(fake_node, tmp_path, k):
    env = fake_node("transient_802", FAKE_CUDART_FAIL_FIRST=k)
    run = run_gate(env, tmp_path=tmp_path)
    assert run.rc == 0, run.stdout
    gpu3 = run.check("GPU003")
    assert gpu3["status"] == "warn"
    assert f"ready after attempt {k + 1}" in gpu3["message"]
    assert "802" in gpu3["message"]
    assert attempts(env, "cudart") == k + 1  # one fresh process per attempt
    assert "warnings: GPU003" in run.stdout


def test_transient_802_fails_the_gate_with_fail_on_warning(fake_node, tmp_path):
    run = run_gate(fake_node("transient_802", FAKE_CUDART_FAIL_FIRST=1), "--fail-on", "warning",
                   tmp_path=tmp_path)
    assert run.rc == 1
    assert "GPU003 warn" in run.stdout


@pytest.mark.slow
def test_permanent_802_fails_naming_gpu003_and_the_host(fake_node, tmp_path):
    env = fake_node("permanent_802")
    run = run_gate(env, "--timeout", "3", tmp_path=tmp_path)
    assert run.rc == 1
    line = run.stdout.strip()
    assert len(run.stdout.splitlines()) == 1
    assert "GPU003" in line and HOST in line
    assert "never ready within" in line and f"--exclude={HOST}" in line
    assert run.status("GPU003") == "fail"
    assert attempts(env, "cudart") >= 2
    assert "node-exclude" in [r["id"] for r in run.check("GPU003")["remedies"]]


@pytest.mark.slow
def test_hung_runtime_times_out_within_budget_and_leaves_no_process(fake_node, tmp_path):
    env = fake_node("hang", FAKE_HANG_FORK=1)
    run = run_gate(env, "--timeout", "3", tmp_path=tmp_path)
    assert run.rc == 1
    assert run.seconds < 3 + 2
    assert run.status("GPU003") == "timeout"
    assert "hung in cuda_runtime probe" in run.check("GPU003")["message"]
    assert "GPU003 timeout" in run.stdout
    pids = hung_pids(env)
    assert len(pids) == 2  # the probe and the helper it forked, both in the probe's group
    assert [p for p in pids if pid_alive(p)] == []


@pytest.mark.slow
def test_hung_nvml_times_out_and_skips_the_rest(fake_node, tmp_path):
    env = fake_node("nvml_hang")
    run = run_gate(env, "--timeout", "2", tmp_path=tmp_path)
    assert run.rc == 1 and run.seconds < 2 + 2
    assert run.status("GPU001") == "timeout"
    assert "probe 'nvml' timed out" in run.check("GPU001")["message"]
    assert run.status("GPU003") == "skip"
    assert [p for p in hung_pids(env) if pid_alive(p)] == []


@pytest.mark.parametrize("scenario", ["no_driver", "driver_not_loaded"])
def test_host_without_driver_is_a_skip(fake_node, tmp_path, scenario):
    if scenario == "no_driver" and real_driver_present():
        pytest.skip("a real NVIDIA driver is installed here; the libraries cannot be hidden")
    run = run_gate(fake_node(scenario), tmp_path=tmp_path)
    assert run.rc == 0, run.stdout
    assert run.status("GPU001") == "skip"
    assert run.check("GPU001")["message"] == "no NVIDIA driver on this host"
    assert "depends on GPU001" in run.check("GPU003")["message"]


@pytest.mark.parametrize("how", [("--expect-gpus", "4"), ("SLURM_JOB_GPUS", "0,1,2,3")])
def test_host_without_driver_fails_when_gpus_are_expected(fake_node, tmp_path, how):
    if how[0].startswith("--"):
        env, args = fake_node("driver_not_loaded"), how
    else:
        env, args = fake_node("driver_not_loaded", **{how[0]: how[1]}), ()
    run = run_gate(env, *args, tmp_path=tmp_path)
    assert run.rc == 1
    assert run.status("GPU001") == "fail"
    assert f"no NVIDIA driver on {HOST}, but 4 GPUs are expected" in run.stdout
    assert " ".join(how) in run.stdout or "=".join(how) in run.stdout


def test_fewer_gpus_than_expected_fails(fake_node, tmp_path):
    run = run_gate(fake_node("healthy", FAKE_GPU_COUNT=2), "--expect-gpus", "4", tmp_path=tmp_path)
    assert run.rc == 1
    assert "NVML sees 2 GPUs" in run.check("GPU001")["message"]


def test_driver_api_count_mismatch_names_both_numbers(fake_node, tmp_path):
    run = run_gate(fake_node("count_mismatch"), tmp_path=tmp_path)
    assert run.rc == 1
    gpu2 = run.check("GPU002")
    assert gpu2["status"] == "fail"
    assert gpu2["message"] == "CUDA driver API sees 3 GPUs but NVML sees 4"
    labels = {e["label"]: e["text"] for e in gpu2["evidence"]}
    assert labels["cuDeviceGetCount"] == "3" and labels["NVML device count"] == "4"


def test_cuda_visible_devices_limits_what_the_driver_api_must_see(fake_node, tmp_path):
    run = run_gate(fake_node("healthy", CUDA_VISIBLE_DEVICES="0,1"), tmp_path=tmp_path)
    assert run.rc == 0, run.stdout
    assert run.status("GPU002") == "pass"


def test_fabric_not_ready_fails_gpu005(fake_node, tmp_path):
    run = run_gate(fake_node("fabric_not_ready"), tmp_path=tmp_path)
    assert run.rc == 1
    assert run.status("GPU005") == "fail"
    assert "in progress" in run.check("GPU005")["message"]
    assert "GPU005" in run.stdout


def test_node_without_nvswitch_skips_gpu005(fake_node, tmp_path):
    run = run_gate(fake_node("no_fabric"), tmp_path=tmp_path)
    assert run.rc == 0
    assert run.status("GPU005") == "skip"


def test_runtime_library_too_new_for_the_driver_falls_back_to_the_driver_api(fake_node, tmp_path):
    # libcudart.so.13 (runtime 13.0) with a CUDA 12.4 driver, and no libcudart.so.12.
    try:
        ctypes.CDLL("libcudart.so.12")
        pytest.skip("a real libcudart.so.12 is installed here")
    except OSError:
        pass
    env = fake_node("healthy")
    (tmp_path / "fake-libs-healthy" / "libcudart.so.12").unlink()
    run = run_gate(env, tmp_path=tmp_path)
    assert run.status("GPU003") == "pass", run.check("GPU003")
    texts = [e["text"] for e in run.check("GPU003")["evidence"]]
    assert any("needs a newer driver" in t for t in texts)

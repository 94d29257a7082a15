"""Node probes against the fake libraries: the real pynvml and ctypes, in subprocesses."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest
from fakes.node import attempts
from gate_util import run_gate

from doctor import registry
from doctor.case import Case
from doctor.facts import Facts, ProbeFailure


def gather(env: dict[str, str], name: str, budget: float = 20.0, **case_kw):
    registry.load()
    return Facts(Case(env=env, **case_kw), time.monotonic() + budget).get(name)


def test_nvml_fact_lists_the_gpus_through_real_pynvml(fake_node):
    nv = gather(fake_node("healthy", FAKE_GPU_COUNT=2, FAKE_GPU_MEMORY_USED_MIB=1024, FAKE_GPU_UTIL=37), "nvml")
    assert nv["driver_loaded"] and not nv["no_driver"]
    assert nv["driver_version"] == "550.54.15" and nv["cuda_driver_version"] == 12040
    assert [g["index"] for g in nv["gpus"]] == [0, 1]
    gpu = nv["gpus"][1]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["pci_bus_id"] == "00000000:28:00.0"
    assert gpu["uuid"].startswith("GPU-")
    assert gpu["memory_total"] == 81559 << 20 and gpu["memory_used"] == 1024 << 20
    assert gpu["utilization_gpu"] == 37
    assert [f["state_name"] for f in nv["fabric"]["gpus"]] == ["completed", "completed"]


def test_nvml_init_error_is_not_mistaken_for_no_driver(fake_node):
    nv = gather(fake_node("healthy", FAKE_NVML_INIT_ERROR=999), "nvml")
    assert not nv["driver_loaded"] and not nv["no_driver"]
    assert nv["error_code"] == 999 and "Unknown Error" in nv["error"]


def test_fabric_state_per_gpu(fake_node):
    fab = gather(fake_node("healthy", FAKE_FABRIC="1:in_progress,3:not_started"), "fabric")
    assert [g["state_name"] for g in fab["gpus"]] == ["completed", "in progress", "completed", "not started"]


def test_driver_probe_counts_and_names_errors(fake_node):
    drv = gather(fake_node("healthy", FAKE_CUDA_ERROR=803), "cuda_driver")
    assert drv["loaded"] and drv["code"] == 803
    assert drv["name"] == "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"
    assert drv["path"].endswith("libcuda.so.1")


def test_runtime_probe_uses_a_fresh_process_per_attempt(fake_node):
    # The fake keeps its first result for the rest of a process, like the real runtime:
    # only new processes can see it become ready.
    env = fake_node("transient_802", FAKE_CUDART_FAIL_FIRST=2)
    rt = gather(env, "cuda_runtime")
    assert rt["state"] == "ready" and rt["ready_attempt"] == 3
    assert [a["code"] for a in rt["attempts"]] == [802, 802, 0]
    assert rt["attempts"][0]["name"] == "cudaErrorSystemNotReady"
    assert attempts(env, "cudart") == 3


def test_runtime_probe_stops_at_once_on_an_error_no_retry_cures(fake_node):
    env = fake_node("healthy", FAKE_CUDART_ERROR=34)
    rt = gather(env, "cuda_runtime")
    assert rt["state"] == "error" and len(rt["attempts"]) == 1
    assert rt["last"]["name"] == "cudaErrorStubLibrary"


@pytest.mark.slow
def test_runtime_probe_gives_up_inside_its_budget(fake_node):
    env = fake_node("permanent_802")
    t0 = time.monotonic()
    rt = gather(env, "cuda_runtime", budget=2.5)
    assert time.monotonic() - t0 < 2.5 + 1.5
    assert rt["state"] == "never_ready" and len(rt["attempts"]) >= 2
    assert {a["code"] for a in rt["attempts"]} == {802}


def test_runtime_probe_prefers_the_runtime_matching_the_driver(fake_node):
    rt = gather(fake_node("healthy", FAKE_CUDA_DRIVER_VERSION=13000), "cuda_runtime")
    assert rt["last"]["library"] == "libcudart.so.13" and rt["last"]["runtime_version"] == 13000


def test_probe_that_cannot_start_is_a_failure_not_a_crash(fake_node):
    value = gather(fake_node("healthy"), "framework", python="/nonexistent/python3")
    assert isinstance(value, ProbeFailure) and "cannot start /nonexistent/python3" in value.detail


def fake_torch(tmp_path: Path, works: bool) -> Path:
    """A tiny `torch` package whose zeros(1).cuda() works or raises like a cold node."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    action = "return self" if works else 'raise RuntimeError("CUDA error: system not ready")'
    (site / "torch" / "__init__.py").write_text(textwrap.dedent(f"""
        __version__ = "2.99.0+fake"
        class version:
            cuda = "12.4"
        class _Tensor:
            def cuda(self):
                {action}
        def zeros(*args, **kwargs):
            return _Tensor()
        class cuda:
            synchronize = staticmethod(lambda: None)
            device_count = staticmethod(lambda: {4 if works else 0})
            is_available = staticmethod(lambda: {works})
            class nccl:
                version = staticmethod(lambda: (2, 21, 5))
    """))
    return site


def test_framework_probe_reports_the_exception_text(fake_node, tmp_path):
    env = fake_node("healthy", PYTHONPATH=str(fake_torch(tmp_path, works=False)))
    fw = gather(env, "framework", python=sys.executable)
    assert fw["ok"] is False
    assert fw["error"] == "RuntimeError: CUDA error: system not ready"
    assert fw["torch_version"] == "2.99.0+fake" and fw["nccl_version"] == "2.21.5"
    assert fw["is_available"] is False


def test_gpu004_fails_with_the_exception_and_nvml_count_through_the_cli(fake_node, tmp_path):
    env = fake_node("healthy", PYTHONPATH=str(fake_torch(tmp_path, works=False)))
    run = run_gate(env, "--playbook", "node", "--python", sys.executable, tmp_path=tmp_path)
    assert run.rc == 1
    gpu4 = run.check("GPU004")
    assert gpu4["status"] == "fail"
    assert "RuntimeError: CUDA error: system not ready" in gpu4["message"]
    assert "NVML sees 4 GPUs" in gpu4["message"] and "see GPU003" in gpu4["message"]


def test_gpu004_passes_when_torch_reaches_cuda(fake_node, tmp_path):
    env = fake_node("healthy", PYTHONPATH=str(fake_torch(tmp_path, works=True)))
    run = run_gate(env, "--playbook", "node", "--python", sys.executable, tmp_path=tmp_path)
    assert run.status("GPU004") == "pass", run.check("GPU004")
    assert "torch 2.99.0+fake (CUDA 12.4)" in run.check("GPU004")["message"]


def test_gpu004_fails_when_the_given_interpreter_has_no_torch(fake_node, tmp_path):
    bare = tmp_path / "python-without-site"
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    bare.chmod(0o755)
    run = run_gate(fake_node("healthy"), "--playbook", "node", "--python", str(bare), tmp_path=tmp_path)
    gpu4 = run.check("GPU004")
    assert gpu4["status"] == "fail"
    assert f"torch cannot be imported by {bare} (--python)" in gpu4["message"]
    assert "ModuleNotFoundError" in gpu4["message"]


@pytest.mark.slow
def test_gpu004_with_real_cpu_only_torch(fake_node, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.version.cuda is not None:
        pytest.skip("this torch is a CUDA build")
    run = run_gate(fake_node("healthy"), "--playbook", "node", tmp_path=tmp_path, timeout=120)
    gpu4 = run.check("GPU004")
    assert gpu4["status"] == "fail"
    assert "CPU-only build" in gpu4["message"] and "Torch not compiled with CUDA enabled" in gpu4["message"]

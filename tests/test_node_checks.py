"""Node checks as pure functions over facts: the messages a user reads for each failure mode."""

from __future__ import annotations

from typing import Any

import pytest

from doctor.case import Case
from doctor.runner import run_checks


def nvml(count: int = 4, **kw: Any) -> dict[str, Any]:
    gpus = [{"index": i, "name": "NVIDIA A100-SXM4-40GB", "uuid": f"GPU-{i}", "pci_bus_id": f"0000:{i:02x}:00.0",
             "memory_total": 40 << 30} for i in range(count)]
    doc = {"driver_loaded": True, "no_driver": False, "error": None, "error_code": None,
           "driver_version": "535.104.05", "cuda_driver_version": 12020, "gpus": gpus,
           "fabric": {"gpus": [{"index": i, "state": 3, "state_name": "completed", "status": 0,
                                "health_mask": 0, "supported": True, "error": None} for i in range(count)]}}
    doc.update(kw)
    return doc


def attempt(code: int | None, n: int = 1, **kw: Any) -> dict[str, Any]:
    doc = {"api": "runtime", "library": "libcudart.so.12", "path": "/usr/lib/libcudart.so.12", "code": code,
           "name": None, "count": 4 if code == 0 else None, "runtime_version": 12020, "attempt": n,
           "duration_s": 0.02, "timed_out": False}
    doc.update(kw)
    return doc


def runtime(state: str, codes: list[int | None], **kw: Any) -> dict[str, Any]:
    tries = [attempt(c, i + 1) for i, c in enumerate(codes)]
    doc = {"state": state, "ready_attempt": len(tries) if state == "ready" else None, "waited_s": 12.3,
           "budget_s": 45.0, "attempts": tries, "last": tries[-1]}
    doc.update(kw)
    return doc


def driver(code: int = 0, count: int | None = 4, **kw: Any) -> dict[str, Any]:
    doc = {"api": "driver", "library": "libcuda.so.1", "path": "/usr/lib/libcuda.so.1", "loaded": True,
           "load_error": None, "driver_version": 12020, "code": code, "name": None, "count": count}
    doc.update(kw)
    return doc


def run(check_id: str, facts: dict[str, Any], host: str = "node07", **case_kw: Any) -> dict[str, Any]:
    case = Case(env=case_kw.pop("env", {}), host=host, **case_kw)
    result = run_checks(case, [check_id], budget_s=5, preset_facts=facts).result(check_id)
    assert result is not None
    return {"status": result.status.value, "message": result.message, "remedies": result.remedies,
            "evidence": [str(e) for e in result.evidence]}


def test_nvml_init_error_with_a_driver_present_fails_gpu001():
    out = run("GPU001", {"nvml": nvml(driver_loaded=False, error="nvmlInit failed: GPU is lost",
                                      error_code=15, gpus=[])})
    assert out["status"] == "fail"
    assert out["message"] == "NVML cannot initialise on node07: nvmlInit failed: GPU is lost"
    assert "node-driver" in out["remedies"]


def test_no_driver_expected_by_slurm_names_the_variable():
    facts = {"nvml": nvml(driver_loaded=False, no_driver=True, error="nvmlInit failed: Driver Not Loaded", gpus=[])}
    out = run("GPU001", facts, env={"SLURM_JOB_GPUS": "0,1"})
    assert out["status"] == "fail"
    assert out["message"] == "no NVIDIA driver on node07, but 2 GPUs are expected (SLURM_JOB_GPUS=0,1)"


def test_expect_gpus_zero_keeps_a_driverless_host_a_skip():
    facts = {"nvml": nvml(driver_loaded=False, no_driver=True, error="x", gpus=[])}
    assert run("GPU001", facts, expect_gpus=0)["status"] == "skip"


def test_gpu001_pass_lists_driver_and_gpus_as_evidence():
    out = run("GPU001", {"nvml": nvml(2)})
    assert out["status"] == "pass"
    assert out["message"] == "driver 535.104.05 (CUDA 12.2), 2 GPUs: NVIDIA A100-SXM4-40GB"
    assert "GPU 1: NVIDIA A100-SXM4-40GB, 0000:01:00.0, GPU-1, 40.0 GiB" in out["evidence"]


def test_driver_api_stub_library_fails_with_the_named_code():
    out = run("GPU002", {"nvml": nvml(), "cuda_driver": driver(34, None)})
    assert out["status"] == "fail"
    assert "34 CUDA_ERROR_STUB_LIBRARY" in out["message"] and "node07" in out["message"]
    assert out["remedies"][0] == "node-cuda-libs"


def test_driver_api_not_ready_is_a_warning_that_defers_to_gpu003():
    out = run("GPU002", {"nvml": nvml(), "cuda_driver": driver(802, None)})
    assert out["status"] == "warn"
    assert "802 CUDA_ERROR_SYSTEM_NOT_READY" in out["message"] and "GPU003" in out["message"]


def test_missing_libcuda_with_nvml_present_fails():
    out = run("GPU002", {"nvml": nvml(), "cuda_driver": driver(loaded=False, load_error="libcuda.so.1: "
                                                                "cannot open shared object file")})
    assert out["status"] == "fail" and "libcuda.so.1 cannot be loaded" in out["message"]


def test_compat_libcuda_version_mismatch_warns():
    out = run("GPU002", {"nvml": nvml(), "cuda_driver": driver(driver_version=12040)})
    assert out["status"] == "warn" and "CUDA 12.4 but NVML reports 12.2" in out["message"]


@pytest.mark.parametrize("code,name", [
    (802, "cudaErrorSystemNotReady"), (803, "cudaErrorSystemDriverMismatch"),
    (804, "cudaErrorCompatNotSupportedOnDevice"), (100, "cudaErrorNoDevice"),
    (35, "cudaErrorInsufficientDriver"), (3, "cudaErrorInitializationError"),
    (46, "cudaErrorDevicesUnavailable"), (999, "cudaErrorUnknown"), (34, "cudaErrorStubLibrary"),
])
def test_runtime_error_codes_are_named(code, name):
    out = run("GPU003", {"nvml": nvml(), "cuda_runtime": runtime("error", [code])})
    assert out["status"] == "fail"
    assert f"cudaGetDeviceCount returned {code} {name} (" in out["message"]
    assert "node07" in out["message"]


def test_never_ready_names_host_budget_and_exclusion():
    out = run("GPU003", {"nvml": nvml(), "cuda_runtime": runtime("never_ready", [802] * 6)})
    assert out["status"] == "fail"
    assert out["message"].startswith("CUDA runtime never ready within 12 s on node07: 6 attempts, last 802")
    assert "#SBATCH --exclude=node07" in out["message"]
    assert out["remedies"][:2] == ("exclude-node", "node-exclude")
    assert "attempt 6: 802 cudaErrorSystemNotReady" in out["evidence"][5]


def test_hung_runtime_is_a_timeout_naming_the_probe():
    hung = runtime("hung", [None])
    hung["last"].update(timed_out=True, duration_s=20.0)
    out = run("GPU003", {"nvml": nvml(), "cuda_runtime": hung})
    assert out["status"] == "timeout"
    assert out["message"] == ("hung in cuda_runtime probe on node07: cudaGetDeviceCount did not return "
                              "within 20 s (attempt 1, killed)")


def test_ready_after_k_reports_the_earlier_codes():
    out = run("GPU003", {"nvml": nvml(), "cuda_runtime": runtime("ready", [802, 999, 0])})
    assert out["status"] == "warn"
    assert out["message"].startswith("CUDA runtime ready after attempt 3 (cudaGetDeviceCount; earlier "
                                     "attempts: 802 system not ready, 999 unknown error;")
    assert out["remedies"] == ("cuda-warmup", "node-cuda-warmup")


def test_runtime_count_below_visible_devices_warns():
    rt = runtime("ready", [0])
    rt["last"]["count"] = 2
    out = run("GPU003", {"nvml": nvml(), "cuda_runtime": rt})
    assert out["status"] == "warn" and out["message"] == "CUDA runtime sees 2 GPUs but NVML sees 4"


def test_gpu003_skipped_when_the_driver_is_missing():
    facts = {"nvml": nvml(driver_loaded=False, no_driver=True, error="x", gpus=[]),
             "cuda_runtime": runtime("error", [35])}
    out = run("GPU003", facts)
    assert out["status"] == "skip"
    assert out["message"] == "skipped: depends on GPU001, which is skip (no NVIDIA driver on this host)"


def framework(**kw: Any) -> dict[str, Any]:
    doc = {"ok": True, "error": None, "import_error": None, "python": "/opt/venv/bin/python",
           "torch_version": "2.3.1", "torch_cuda": "12.1", "device_count": 4, "is_available": True,
           "nccl_version": "2.20.5"}
    doc.update(kw)
    return doc


def test_gpu004_skips_without_torch_when_no_interpreter_was_given():
    out = run("GPU004", {"nvml": nvml(), "framework": framework(ok=False, import_error="ModuleNotFoundError: "
                                                                "No module named 'torch'")})
    assert out["status"] == "skip" and "--python" in out["message"]


def test_gpu004_torch_device_count_differs_from_nvml():
    out = run("GPU004", {"nvml": nvml(), "framework": framework(device_count=2)})
    assert out["status"] == "warn" and "torch sees 2 GPUs but NVML sees 4" in out["message"]


def test_gpu004_pass_names_versions():
    out = run("GPU004", {"nvml": nvml(), "framework": framework()})
    assert out["status"] == "pass"
    assert out["message"] == "torch 2.3.1 (CUDA 12.1) ran torch.zeros(1).cuda(): 4 GPUs"
    assert out["evidence"][0] == "/opt/venv/bin/python: torch 2.3.1, CUDA 12.1, NCCL 2.20.5"


def fabric(states: list[int], status: int = 0, health: int = 0) -> dict[str, Any]:
    names = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}
    return {"gpus": [{"index": i, "state": s, "state_name": names[s], "status": status, "health_mask": health,
                      "supported": s != 0, "error": None} for i, s in enumerate(states)]}


def test_fabric_not_started_on_one_gpu_fails_naming_it():
    out = run("GPU005", {"nvml": nvml(), "fabric": fabric([3, 1, 3, 3])})
    assert out["status"] == "fail"
    assert out["message"].startswith("NVSwitch fabric not ready on GPU 1 (not started)")


def test_fabric_registration_failure_fails():
    out = run("GPU005", {"nvml": nvml(), "fabric": fabric([3, 3], status=999)})
    assert out["status"] == "fail" and "registration failed on GPU 0, 1" in out["message"]


def test_fabric_degraded_bandwidth_warns():
    out = run("GPU005", {"nvml": nvml(), "fabric": fabric([3, 3], health=1)})
    assert out["status"] == "warn" and "degraded" in out["message"]


def test_fabric_query_that_died_is_unknown():
    out = run("GPU005", {"nvml": nvml(), "fabric": {"error": "the fabric query died (killed by SIGSEGV)"}})
    assert out["status"] == "unknown" and "SIGSEGV" in out["message"]

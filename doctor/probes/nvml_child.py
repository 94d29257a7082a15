"""The NVML probe (GPU001, GPU005), run by path in a subprocess.

    python -I -S nvml_child.py <folder holding pynvml>

Standard library and `pynvml` only, so it starts fast and a crash or hang in
the driver stays in this process. Prints two lines, Python literal dicts
(`repr`, read with `ast.literal_eval`), each flushed at once:
`{"section": "nvml", ...}` (driver, GPUs) and then `{"section": "fabric", ...}`
(NVSwitch fabric state per GPU), so a crash in the fabric query still leaves
the first line. Command line equivalent: `nvidia-smi -q` (and its `Fabric` part).
"""

from __future__ import annotations

import sys
from typing import Any

# nvmlReturn_t codes that mean "this host has no usable NVIDIA driver".
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NO_DRIVER = (NVML_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_LIBRARY_NOT_FOUND)
FABRIC_STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}


def emit(doc: dict[str, Any]) -> None:
    sys.stdout.write(repr(doc) + "\n")
    sys.stdout.flush()


def text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def error_of(exc: BaseException) -> tuple[int | None, str]:
    code = getattr(exc, "value", None)
    return (code if isinstance(code, int) else None), f"{exc}"


def gpu_info(nvml: Any, index: int) -> tuple[Any, dict[str, Any]]:
    """One GPU's identity and load; a failing query leaves its field None and says why."""
    gpu: dict[str, Any] = {"index": index, "name": None, "uuid": None, "pci_bus_id": None,
                           "memory_total": None, "memory_used": None, "utilization_gpu": None}
    errors: dict[str, str] = {}
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception as exc:
        gpu["errors"] = {"handle": error_of(exc)[1]}
        return None, gpu
    queries = {
        "name": lambda: text(nvml.nvmlDeviceGetName(handle)),
        "uuid": lambda: text(nvml.nvmlDeviceGetUUID(handle)),
        "pci_bus_id": lambda: text(nvml.nvmlDeviceGetPciInfo(handle).busId),
        "memory": lambda: nvml.nvmlDeviceGetMemoryInfo(handle),
        "utilization_gpu": lambda: int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
    }
    for key, query in queries.items():
        try:
            value = query()
        except Exception as exc:
            errors[key] = error_of(exc)[1]
            continue
        if key == "memory":
            gpu["memory_total"], gpu["memory_used"] = int(value.total), int(value.used)
        else:
            gpu[key] = value
    if errors:
        gpu["errors"] = errors
    return handle, gpu


def driver_section(nvml: Any) -> tuple[list[Any], dict[str, Any]]:
    doc: dict[str, Any] = {"section": "nvml", "driver_loaded": False, "no_driver": False,
                           "error": None, "error_code": None, "driver_version": None,
                           "cuda_driver_version": None, "gpus": []}
    try:
        nvml.nvmlInit()
    except Exception as exc:
        code, msg = error_of(exc)
        doc.update(error=f"nvmlInit failed: {msg}", error_code=code, no_driver=code in NO_DRIVER)
        return [], doc
    doc["driver_loaded"] = True
    for key, query in (("driver_version", lambda: text(nvml.nvmlSystemGetDriverVersion())),
                       ("cuda_driver_version", lambda: int(nvml.nvmlSystemGetCudaDriverVersion()))):
        try:
            doc[key] = query()
        except Exception as exc:
            doc.setdefault("errors", {})[key] = error_of(exc)[1]
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except Exception as exc:
        code, msg = error_of(exc)
        doc.update(error=f"nvmlDeviceGetCount failed: {msg}", error_code=code)
        return [], doc
    handles = []
    for index in range(count):
        handle, gpu = gpu_info(nvml, index)
        handles.append(handle)
        doc["gpus"].append(gpu)
    return handles, doc


def fabric_of(nvml: Any, handle: Any, index: int) -> dict[str, Any]:
    import ctypes

    entry: dict[str, Any] = {"index": index, "state": None, "state_name": None, "status": None,
                             "health_mask": None, "supported": True, "error": None}
    if handle is None:
        entry["error"] = "no NVML handle"
        return entry
    try:
        info = nvml.c_nvmlGpuFabricInfoV_t()
        nvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
        entry["health_mask"] = int(info.healthMask)
    except Exception as exc:
        code, msg = error_of(exc)
        if code == NVML_ERROR_NOT_SUPPORTED:
            entry.update(supported=False)
            return entry
        if code != NVML_ERROR_FUNCTION_NOT_FOUND:
            entry["error"] = msg
            return entry
        try:  # drivers before the versioned call
            info = nvml.c_nvmlGpuFabricInfo_t()
            nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
        except Exception as exc2:
            code, msg = error_of(exc2)
            entry.update(supported=code not in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND),
                         error=None if code in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND)
                         else msg)
            return entry
    state = int(info.state)
    entry.update(state=state, state_name=FABRIC_STATES.get(state, f"state {state}"),
                 status=int(info.status), supported=state != 0)
    return entry


def emit_p2p() -> None:
    """The P2P matrix (P2P001) in the same process: pynvml is imported once per gate."""
    import os

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        import p2p_nvml  # type: ignore[import-not-found]

        emit({"section": "p2p", **p2p_nvml.probe()})
    except Exception as exc:  # P2P001 then runs its own query and reports the failure
        emit({"section": "p2p_error", "error": f"{type(exc).__name__}: {exc}"})


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        sys.path.insert(0, argv[1])
    try:
        import pynvml as nvml
    except Exception as exc:
        emit({"section": "nvml", "driver_loaded": False, "no_driver": False, "error_code": None,
              "error": f"cannot import pynvml (nvidia-ml-py): {exc}", "driver_version": None,
              "cuda_driver_version": None, "gpus": []})
        return 0
    handles, doc = driver_section(nvml)
    emit(doc)
    if doc["driver_loaded"]:
        gpus = [fabric_of(nvml, h, i) for i, h in enumerate(handles)]
        emit({"section": "fabric", "gpus": gpus})
        emit_p2p()
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

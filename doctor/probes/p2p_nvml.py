"""The NVML peer-to-peer matrix probe (P2P001), run by path in a subprocess.

Standard library and `pynvml` only, so a crash or hang in the driver stays in
this process. Prints one JSON line: the GPUs and, per ordered pair, the raw
NVML P2P status codes for read, write and NVLink and the topology common
ancestor. Command line equivalent: `nvidia-smi topo -p2p rwn` and
`nvidia-smi topo -m`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

# nvmlGpuP2PCapsIndex_t. Integers on purpose: nvidia-ml-py 13.615.71 defines
# NVML_P2P_CAPS_INDEX_READ as the tuple (0,), which ctypes cannot pass.
CAPS = {"read": 0, "write": 1, "nvlink": 2}


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _gpu(nvml: Any, index: int, handle: Any) -> dict[str, Any]:
    gpu: dict[str, Any] = {"index": index, "name": None, "pci_bus_id": None}
    try:
        gpu["name"] = _text(nvml.nvmlDeviceGetName(handle))
        gpu["pci_bus_id"] = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
    except Exception as exc:  # identity is decoration; the matrix is what matters
        gpu["error"] = str(exc)
    return gpu


def _pair(nvml: Any, handles: list[Any], src: int, dst: int,
          topology: dict[tuple[int, int], Any]) -> dict[str, Any]:
    pair: dict[str, Any] = {"src": src, "dst": dst, "errors": {}}
    for name, index in CAPS.items():
        try:
            pair[name] = int(nvml.nvmlDeviceGetP2PStatus(handles[src], handles[dst], index))
        except Exception as exc:
            pair[name] = None
            pair["errors"][name] = str(exc)
    key = (min(src, dst), max(src, dst))
    if key not in topology:
        try:
            topology[key] = int(nvml.nvmlDeviceGetTopologyCommonAncestor(handles[src], handles[dst]))
        except Exception as exc:
            topology[key] = str(exc)
    level = topology[key]
    pair["topology"] = level if isinstance(level, int) else None
    if not isinstance(level, int):
        pair["errors"]["topology"] = level
    return pair


def probe() -> dict[str, Any]:
    """The raw matrix, or `driver_loaded: False` with NVML's error."""
    try:
        import pynvml as nvml
    except ImportError as exc:
        return {"driver_loaded": False, "error": f"nvidia-ml-py is not installed: {exc}",
                "gpus": [], "pairs": []}
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return {"driver_loaded": False, "error": f"nvmlInit: {exc}", "gpus": [], "pairs": []}
    try:
        count = int(nvml.nvmlDeviceGetCount())
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        gpus = [_gpu(nvml, i, h) for i, h in enumerate(handles)]
        topology: dict[tuple[int, int], Any] = {}
        pairs = [_pair(nvml, handles, s, d, topology)
                 for s in range(count) for d in range(count) if s != d]
        try:
            driver = _text(nvml.nvmlSystemGetDriverVersion())
        except Exception:
            driver = None
        return {"driver_loaded": True, "error": None, "driver_version": driver,
                "gpus": gpus, "pairs": pairs}
    except Exception as exc:
        return {"driver_loaded": True, "error": f"{type(exc).__name__}: {exc}", "gpus": [], "pairs": []}
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1]:  # run with -I -S: the folder holding pynvml is passed in
        sys.path.insert(0, sys.argv[1])
    sys.stdout.write(json.dumps(probe()) + "\n")

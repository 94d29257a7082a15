"""The CUDA driver/runtime API probes (GPU002, GPU003), run by path in a subprocess.

    python -I -S cuda_child.py driver
    python -I -S cuda_child.py runtime

Standard library and ctypes only, so it starts in milliseconds and a hang or
crash in the driver stays in this process; one process is one attempt (a
runtime that failed once stays failed in its process). Prints one line: a
Python literal dict (`repr`; no `json` import, which would cost more than the probe).

`driver`: `cuInit(0)` and `cuDeviceGetCount` on `libcuda.so.1`, plus
`cuDriverGetVersion`. `runtime`: `cudaGetDeviceCount` on the `libcudart.so.*` the loader
finds that matches the driver's CUDA major (else the newest the driver supports),
plus its runtime and driver versions; with no usable runtime library it falls
back to `cuInit` + `cuDeviceGetCount` and says so (`"api": "driver"`). Command line equivalent: CUDA samples' `deviceQuery`.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

RUNTIME_LIBRARIES = ("libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so")


def loaded_path(fragment: str) -> str | None:
    """Where the loader found a library, from /proc/self/maps."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                path = line.rsplit(None, 1)[-1]
                if fragment in path.rsplit("/", 1)[-1]:
                    return path
    except OSError:
        pass
    return None


def driver_name(lib: Any, code: int) -> tuple[str | None, str | None]:
    name, desc = ctypes.c_char_p(), ctypes.c_char_p()
    try:
        if lib.cuGetErrorName(code, ctypes.byref(name)) != 0:
            name.value = None
        if lib.cuGetErrorString(code, ctypes.byref(desc)) != 0:
            desc.value = None
    except AttributeError:
        return None, None
    return (name.value.decode() if name.value else None, desc.value.decode() if desc.value else None)


def runtime_name(lib: Any, code: int) -> tuple[str | None, str | None]:
    try:
        lib.cudaGetErrorName.restype = ctypes.c_char_p
        lib.cudaGetErrorString.restype = ctypes.c_char_p
        name, desc = lib.cudaGetErrorName(code), lib.cudaGetErrorString(code)
    except AttributeError:
        return None, None
    return (name.decode() if name else None, desc.decode() if desc else None)


def probe_driver() -> dict[str, Any]:
    doc: dict[str, Any] = {"api": "driver", "library": "libcuda.so.1", "path": None, "loaded": False,
                           "load_error": None, "driver_version": None, "code": None, "name": None,
                           "string": None, "count": None}
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        doc["load_error"] = str(exc)
        return doc
    doc["loaded"], doc["path"] = True, loaded_path("libcuda.so")
    version = ctypes.c_int(0)
    if lib.cuDriverGetVersion(ctypes.byref(version)) == 0:
        doc["driver_version"] = version.value
    code = int(lib.cuInit(0))
    if code == 0:
        count = ctypes.c_int(0)
        code = int(lib.cuDeviceGetCount(ctypes.byref(count)))
        if code == 0:
            doc["count"] = count.value
    doc["code"] = code
    doc["name"], doc["string"] = driver_name(lib, code)
    return doc


def driver_cuda_version() -> int | None:
    """The CUDA version the driver supports (cuDriverGetVersion needs no cuInit)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    version = ctypes.c_int(0)
    return version.value if lib.cuDriverGetVersion(ctypes.byref(version)) == 0 else None


def runtime_candidates(driver_version: int | None) -> list[str]:
    """The runtime matching the driver's CUDA major first, then newest to oldest."""
    names = list(RUNTIME_LIBRARIES)
    if driver_version:
        names.insert(0, f"libcudart.so.{driver_version // 1000}")
    return list(dict.fromkeys(names))


def load_runtime(driver_version: int | None) -> tuple[Any, str, int | None, list[str]]:
    """The first runtime library that loads and that the driver supports."""
    skipped: list[str] = []
    for name in runtime_candidates(driver_version):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        version = ctypes.c_int(0)
        rt = version.value if lib.cudaRuntimeGetVersion(ctypes.byref(version)) == 0 else None
        if driver_version and rt and rt > driver_version:
            skipped.append(f"{loaded_path(name) or name} (runtime {rt} needs a newer driver than {driver_version})")
            continue
        return lib, name, rt, skipped
    return None, "", None, skipped


def probe_runtime() -> dict[str, Any]:
    driver_version = driver_cuda_version()
    lib, name, rt_version, skipped = load_runtime(driver_version)
    if lib is None:
        fallback = probe_driver()
        fallback["runtime_missing"] = "no usable CUDA runtime library (" + (
            "; ".join(skipped) if skipped else "none of " + ", ".join(runtime_candidates(driver_version))) + ")"
        return fallback
    doc: dict[str, Any] = {"api": "runtime", "library": name, "path": loaded_path(name) or name,
                           "loaded": True, "runtime_version": rt_version, "driver_version": None,
                           "code": None, "name": None, "string": None, "count": None,
                           "skipped": skipped}
    count = ctypes.c_int(0)
    code = int(lib.cudaGetDeviceCount(ctypes.byref(count)))
    if code == 0:
        doc["count"] = count.value
    version = ctypes.c_int(0)
    if lib.cudaDriverGetVersion(ctypes.byref(version)) == 0:
        doc["driver_version"] = version.value
    doc["code"] = code
    doc["name"], doc["string"] = runtime_name(lib, code)
    return doc


def main(argv: list[str]) -> int:
    mode = argv[1] if len(argv) > 1 else ""
    if mode not in ("driver", "runtime"):
        sys.stderr.write("usage: cuda_child.py driver|runtime\n")
        return 2
    doc = probe_driver() if mode == "driver" else probe_runtime()
    sys.stdout.write(repr(doc) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Fake NVIDIA libraries at the C ABI boundary, built once per session with gcc.

    from fakes.node import scenario_env
    env = scenario_env("transient_802", tmp_path, FAKE_CUDART_FAIL_FIRST=3)
    subprocess.run([sys.executable, "-m", "doctor", "--check-only"], env=env)

`scenario_env` returns a full environment: the current one without any real
CUDA/Slurm/FAKE_* variables, `LD_LIBRARY_PATH` pointing at a per-test folder
holding the fakes that the scenario installs (the probes find them the way
they find the real ones), `FAKE_STATE_DIR` (a per-test folder for counters and
pid files), and the scenario's knobs; keyword arguments add or override knobs
(a value of None removes one).

Libraries: `libnvidia-ml.so.1` (the real pynvml loads it), `libcuda.so.1`,
`libcudart.so.12` and `libcudart.so.13` (runtime version 12040 / 13000).

Knobs (environment variables read by the fakes at call time):

| knob | effect (default) |
|---|---|
| FAKE_GPU_COUNT | GPUs everywhere (4) |
| FAKE_NVML_COUNT, FAKE_CUDA_COUNT, FAKE_CUDART_COUNT | override the count for NVML / driver API / runtime API only |
| CUDA_VISIBLE_DEVICES | limits the driver/runtime counts (not NVML), as the real libraries do |
| FAKE_NVML_INIT_ERROR | nvmlInit returns this code (9 = DRIVER_NOT_LOADED, 999 = UNKNOWN) |
| FAKE_NVML_HANG=1 | nvmlInit never returns |
| FAKE_DRIVER_VERSION | NVML driver version string (550.54.15) |
| FAKE_CUDA_DRIVER_VERSION | CUDA version of the driver, NVML/cuDriverGetVersion/cudaDriverGetVersion (12040) |
| FAKE_GPU_NAME | device name (NVIDIA H100 80GB HBM3) |
| FAKE_GPU_MEMORY_MIB, FAKE_GPU_MEMORY_USED_MIB | memory total (81559) and used (0), MiB |
| FAKE_GPU_UTIL, FAKE_GPU_MEM_UTIL | utilization rates, percent (0) |
| FAKE_CUDA_ERROR | cuInit fails with this code, always (e.g. 802, 100, 999) |
| FAKE_CUDA_FAIL_FIRST=K, FAKE_CUDA_FAIL_CODE | the first K cuInit attempts (counted across processes) fail with the code (802) |
| FAKE_CUDA_HANG=1 | cuInit never returns |
| FAKE_CUDART_ERROR | the runtime's initialisation (cudaGetDeviceCount...) fails with this code, always |
| FAKE_CUDART_FAIL_FIRST=K, FAKE_CUDART_FAIL_CODE | the first K runtime initialisations (across processes) fail (802) |
| FAKE_CUDART_HANG=1 | the runtime's initialisation never returns |
| FAKE_CUDART_VERSION | cudaRuntimeGetVersion (12040 for .so.12, 13000 for .so.13) |
| FAKE_HANG_FORK=1 | a hanging call also forks a helper that hangs (tests group kill) |
| FAKE_FABRIC | NVSwitch fabric state for every GPU, or per GPU "1:in_progress,3:not_started": completed, in_progress, not_started, not_supported, unsupported (call returns NOT_SUPPORTED), failed (status FAKE_FABRIC_STATUS, 999), degraded (completed) |
| FAKE_P2P | per pair "0-1:not_supported,2-3:corrupt": NVML P2P status words ok, chipset_not_supported, gpu_not_supported, topology_not_supported, disabled, not_supported, unknown; "corrupt" looks healthy to NVML and cudaDeviceCanAccessPeer but every cudaMemcpyPeer/cudaMemcpy between the pair flips bits; "hang" looks healthy but such a copy never returns |
| FAKE_TOPOLOGY | per pair common ancestor "0-1:single,2-3:system" (internal, single, multiple, hostbridge, node, system; default node) |

Attempt counters live in `$FAKE_STATE_DIR/{nvmlInit,cuInit,cudart}.count`; a hanging
call writes `$FAKE_STATE_DIR/hang-<what>-<pid>.pid`. The first driver/runtime
initialisation result sticks for the rest of the process, like the real libraries.
The runtime answers 35 (insufficient driver) when `libcuda.so.1` cannot be loaded.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build"
SOURCES = ("fake_common.h", "fake_nvml.c", "fake_cuda.c", "fake_cudart.c")
LIBRARIES = ("libnvidia-ml.so.1", "libcuda.so.1", "libcudart.so.12", "libcudart.so.13")
CFLAGS = ("-shared", "-fPIC", "-O1", "-Wall", "-Werror")

# Scenario -> (libraries installed, knobs).
DRIVER = ("libnvidia-ml.so.1", "libcuda.so.1")
ALL = LIBRARIES
SCENARIOS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "healthy": (ALL, {}),
    "transient_802": (ALL, {"FAKE_CUDART_FAIL_FIRST": "2"}),
    "permanent_802": (ALL, {"FAKE_CUDART_ERROR": "802"}),
    "hang": (ALL, {"FAKE_CUDART_HANG": "1"}),
    "driver_hang": (ALL, {"FAKE_CUDA_HANG": "1"}),
    "nvml_hang": (ALL, {"FAKE_NVML_HANG": "1"}),
    "no_driver": (("libcudart.so.12",), {}),
    "driver_not_loaded": (ALL, {"FAKE_NVML_INIT_ERROR": "9", "FAKE_CUDA_ERROR": "100",
                                "FAKE_CUDART_ERROR": "100"}),
    "no_runtime_library": (DRIVER, {}),
    "fabric_not_ready": (ALL, {"FAKE_FABRIC": "in_progress"}),
    "no_fabric": (ALL, {"FAKE_FABRIC": "unsupported"}),
    "count_mismatch": (ALL, {"FAKE_CUDA_COUNT": "3"}),
    "runtime_count_mismatch": (ALL, {"FAKE_CUDART_COUNT": "3"}),
    "p2p_unsupported": (ALL, {"FAKE_P2P": "0-1:not_supported"}),
    "p2p_corrupt": (ALL, {"FAKE_P2P": "2-3:corrupt"}),
}

# Variables of the real environment that would change what the probes see.
SCRUB_PREFIXES = ("FAKE_", "SLURM_", "GPU_DOCTOR_")
SCRUB = ("CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "LD_LIBRARY_PATH", "NVIDIA_VISIBLE_DEVICES")


def _digest() -> str:
    h = hashlib.sha256()
    for name in SOURCES:
        h.update((HERE / name).read_bytes())
    h.update(" ".join(CFLAGS).encode())
    return h.hexdigest()[:16]


def _compile(out: Path) -> None:
    jobs = [
        ("fake_nvml.c", "libnvidia-ml.so.1", ()),
        ("fake_cuda.c", "libcuda.so.1", ()),
        ("fake_cudart.c", "libcudart.so.12", ("-DCUDART_MAJOR=12",)),
        ("fake_cudart.c", "libcudart.so.13", ("-DCUDART_MAJOR=13",)),
    ]
    for source, lib, extra in jobs:
        cmd = ["gcc", *CFLAGS, *extra, f"-Wl,-soname,{lib}", "-o", str(out / lib),
               str(HERE / source), "-ldl"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"building {lib} failed:\n{' '.join(cmd)}\n{proc.stderr}")


def build_fakes() -> Path:
    """The folder holding the compiled fakes; built once per source version.

    Safe with several test sessions at once: builds in a temp folder under a
    lock and renames it into place.
    """
    BUILD.mkdir(parents=True, exist_ok=True)
    final = BUILD / _digest()
    if all((final / lib).is_file() for lib in LIBRARIES):
        return final
    if shutil.which("gcc") is None:
        raise RuntimeError("gcc is needed to build the fake NVIDIA libraries")
    with open(BUILD / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not all((final / lib).is_file() for lib in LIBRARIES):
            tmp = Path(tempfile.mkdtemp(dir=BUILD, prefix=".build-"))
            try:
                _compile(tmp)
                shutil.rmtree(final, ignore_errors=True)
                tmp.rename(final)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return final


def clean_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without anything that would point the probes at real GPUs."""
    env = dict(os.environ if base is None else base)
    for key in list(env):
        if key in SCRUB or key.startswith(SCRUB_PREFIXES):
            del env[key]
    return env


def scenario_env(name: str, tmp_path: Path, **knobs: Any) -> dict[str, str]:
    """A full environment for scenario `name` (see SCENARIOS), with extra knobs."""
    if name not in SCENARIOS:
        raise KeyError(f"unknown fake node scenario {name!r} (known: {', '.join(SCENARIOS)})")
    libs, preset = SCENARIOS[name]
    built = build_fakes()
    libdir = Path(tmp_path) / f"fake-libs-{name}"
    state = Path(tmp_path) / f"fake-state-{name}"
    libdir.mkdir(parents=True, exist_ok=True)
    state.mkdir(parents=True, exist_ok=True)
    for lib in libs:
        link = libdir / lib
        if not link.exists():
            link.symlink_to(built / lib)
    env = clean_env()
    env.update(preset)
    for key, value in knobs.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    env["LD_LIBRARY_PATH"] = str(libdir)
    env["FAKE_STATE_DIR"] = str(state)
    return env


def attempts(env: dict[str, str], counter: str) -> int:
    """How many times `counter` (nvmlInit, cuInit, cudart) was attempted in this scenario."""
    path = Path(env["FAKE_STATE_DIR"]) / f"{counter}.count"
    return int(path.read_text().strip() or 0) if path.exists() else 0


def hung_pids(env: dict[str, str]) -> list[int]:
    """Pids of the processes that entered a hanging fake call."""
    state = Path(env["FAKE_STATE_DIR"])
    return [int(p.read_text().strip()) for p in sorted(state.glob("hang-*.pid"))]


def pid_alive(pid: int) -> bool:
    """True if pid runs (a zombie awaiting its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def real_driver_present() -> bool:
    """True where a real NVIDIA driver library is on the loader path (a GPU machine)."""
    import ctypes.util

    return ctypes.util.find_library("nvidia-ml") is not None or ctypes.util.find_library("cuda") is not None

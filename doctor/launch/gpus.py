"""Per-GPU utilisation and memory for the live view, from NVML (N/A without a driver).

Command line equivalent:
    nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,memory.total --format=csv

Sampling runs in a daemon thread so a slow or hung driver call never stalls
the launcher or the view; a missing NVML library is a message, not an error.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GpuSample:
    index: int
    name: str
    util_pct: int | None
    mem_used: int | None
    mem_total: int | None

    @property
    def util_text(self) -> str:
        return "N/A" if self.util_pct is None else f"{self.util_pct}%"

    @property
    def mem_text(self) -> str:
        if self.mem_used is None or self.mem_total is None:
            return "N/A"
        return f"{self.mem_used / 2**30:.1f}/{self.mem_total / 2**30:.1f} GiB"


def _call(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:
        return None


def read_gpus(nvml: Any) -> tuple[GpuSample, ...]:
    """One sample of every GPU through an initialised pynvml module."""
    count = _call(nvml.nvmlDeviceGetCount) or 0
    samples = []
    for i in range(count):
        handle = _call(nvml.nvmlDeviceGetHandleByIndex, i)
        if handle is None:
            samples.append(GpuSample(i, "N/A", None, None, None))
            continue
        name = _call(nvml.nvmlDeviceGetName, handle) or "N/A"
        if isinstance(name, bytes):
            name = name.decode("utf-8", "replace")
        util = _call(nvml.nvmlDeviceGetUtilizationRates, handle)
        mem = _call(nvml.nvmlDeviceGetMemoryInfo, handle)
        samples.append(GpuSample(i, str(name), getattr(util, "gpu", None),
                                 getattr(mem, "used", None), getattr(mem, "total", None)))
    return tuple(samples)


def nvml_unavailable(exc: BaseException) -> str:
    """Why NVML cannot be read, in words (GPU001's for a missing driver), not an exception's class name."""
    from doctor.probes.nvml_child import NO_DRIVER

    if getattr(exc, "value", None) in NO_DRIVER:
        return "no NVIDIA driver on this host"
    if isinstance(exc, ImportError):
        return "NVML unavailable: the nvidia-ml-py package (pynvml) is not installed"
    return f"NVML unavailable: {exc}"


class GpuMonitor:
    """`start()`, then `snapshot()` -> (samples, error); error names why it is N/A."""

    def __init__(self, interval_s: float = 1.0):
        self.interval_s = interval_s
        self._samples: tuple[GpuSample, ...] = ()
        self._error: str | None = "not sampled yet"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> GpuMonitor:
        self._thread = threading.Thread(target=self._loop, name="gpu-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def snapshot(self) -> tuple[tuple[GpuSample, ...], str | None]:
        return self._samples, self._error

    def _loop(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as exc:
            self._error = nvml_unavailable(exc)
            return
        try:
            while not self._stop.is_set():
                self._samples = read_gpus(pynvml)
                self._error = None if self._samples else "NVML reports no GPUs"
                self._stop.wait(self.interval_s)
        finally:
            _call(pynvml.nvmlShutdown)

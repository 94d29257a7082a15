"""The versions table: driver, CUDA driver and runtime, torch and its CUDA, NCCL, Score-P.

Each row names the fact it came from, or says "N/A (reason)" when that fact's
provider is missing, failed, or reported nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from doctor.facts import ProbeFailure
from doctor.runner import Run
from doctor.wording import count


def pick(obj: Any, *keys: str) -> Any:
    """The first present, non-None field of a dict or object."""
    for key in keys:
        value = obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)
        if value is not None:
            return value
    return None


def fact(run: Run, name: str) -> tuple[Any, str | None]:
    """(value, None) or (None, why it is not available)."""
    value = run.facts.get(name)
    if isinstance(value, ProbeFailure):
        return None, value.detail
    if value is None:
        return None, "no value"
    return value, None


def cuda_version_text(value: Any) -> str | None:
    """12040 -> '12.4' (the CUDA API's integer encoding); strings pass through."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return f"{value // 1000}.{value % 1000 // 10}" if value > 0 else None
    return str(value)


def _row(name: str, value: Any, source: str, why: str | None, python: str | None = None) -> dict[str, Any]:
    text = None if value in (None, "") else str(value)
    return {"name": name, "value": text, "source": source, "python": python,
            "note": None if text is not None else f"N/A ({why or 'not reported'})"}


def job_interpreter(run: Run) -> tuple[str, str]:
    """(the job's interpreter, how it was found): the one the torch and bindings probes ran."""
    import sys

    fw, _ = fact(run, "framework")
    sp, _ = fact(run, "scorep_install")
    python = pick(fw, "python") if fw is not None else None
    python = python or (pick(sp, "python") if sp is not None else None) or run.case.job_python
    if run.case.python:
        return python, str(run.case.options.get("python_from") or "--python")
    job = run.facts.peek("job")
    named = None if isinstance(job, ProbeFailure) or job is None else pick(job, "python")
    if python == sys.executable:
        return python, "gpu-doctor's own interpreter (the job names none that was found)"
    if named:
        return python, f"the job script's `{named}`, looked up on the job's PATH"
    return python, "python3 on the job's PATH"


def _failure_text(doc: Any) -> str | None:
    """'802 cudaErrorSystemNotReady: system not yet initialized' from a probe result's code fields."""
    code = pick(doc, "code")
    if code in (None, 0):
        return pick(doc, "load_error", "crashed")
    words = " ".join(str(x) for x in (code, pick(doc, "name")) if x is not None)
    detail = pick(doc, "string")
    return f"{words}: {detail}" if detail else words


def runtime_state(rt: Any) -> str | None:
    """How the runtime probe ended: 'ready at attempt 2 of 2', 'never ready (802 ...)'..."""
    state = pick(rt, "state")
    if state is None:
        return None
    attempts = len(pick(rt, "attempts") or [])
    if state == "ready":
        return f"ready at attempt {pick(rt, 'ready_attempt')} of {attempts}"
    last = _failure_text(pick(rt, "last") or {})
    return f"{str(state).replace('_', ' ')} after {count(attempts, 'attempt')}" + (f" ({last})" if last else "")


def driver_init(drv: Any) -> str | None:
    """cuInit's outcome: 'ok, 4 devices' or '100 CUDA_ERROR_NO_DEVICE: ...'."""
    if pick(drv, "loaded") is False:
        return f"libcuda not loaded: {pick(drv, 'load_error') or 'no reason given'}"
    code = pick(drv, "code")
    if code == 0:
        devices = pick(drv, "count")
        return "ok" + (f", {count(int(devices), 'device')}" if devices is not None else "")
    return _failure_text(drv)


def versions(run: Run) -> list[dict[str, Any]]:
    """Driver, CUDA, torch, NCCL and Score-P versions, each with its source or why it is N/A."""
    return cuda_rows(run) + framework_rows(run) + scorep_rows(run)


def cuda_rows(run: Run) -> list[dict[str, Any]]:
    nvml, nvml_why = fact(run, "nvml")
    drv, drv_why = fact(run, "cuda_driver")
    rt, rt_why = fact(run, "cuda_runtime")
    if nvml is not None and not pick(nvml, "driver_loaded"):
        nvml, nvml_why = None, f"driver not loaded: {pick(nvml, 'error') or 'no reason given'}"
    cuda_api = pick(drv, "driver_version") if drv is not None else None
    if cuda_api is None and nvml is not None:
        cuda_api = pick(nvml, "cuda_driver_version")
    last = pick(rt, "last") if rt is not None else None
    runtime = pick(last, "runtime_version") if last is not None else None
    return [
        _row("NVIDIA driver", pick(nvml, "driver_version") if nvml else None, "nvml", nvml_why),
        _row("CUDA driver API", cuda_version_text(cuda_api), "cuda_driver",
             (_failure_text(drv) if drv is not None else None) or drv_why or nvml_why),
        _row("CUDA driver init", driver_init(drv) if drv is not None else None, "cuda_driver", drv_why),
        _row("CUDA runtime", cuda_version_text(runtime), "cuda_runtime",
             (_failure_text(last) if last is not None else None) or rt_why),
        _row("CUDA runtime state", runtime_state(rt) if rt is not None else None, "cuda_runtime", rt_why),
    ]


def framework_rows(run: Run) -> list[dict[str, Any]]:
    fw, why = fact(run, "framework")
    torch_version = pick(fw, "torch_version") if fw is not None else None
    python = pick(fw, "python") if fw is not None else None
    if fw is not None and torch_version is None:
        torch_row = _row("torch", None, "framework",
                         f"torch not importable: {pick(fw, 'import_error', 'error') or 'no reason given'}", python)
        return [torch_row] + [_row(name, None, "framework", "see torch", python)
                              for name in ("torch CUDA build", "torch CUDA use", "NCCL")]
    use = None if fw is None else ("works" if pick(fw, "ok") else f"fails: {pick(fw, 'error')}")
    return [
        _row("torch", torch_version, "framework", why, python),
        _row("torch CUDA build", pick(fw, "torch_cuda") if fw else None, "framework",
             why or "torch built without CUDA", python),
        _row("torch CUDA use", use, "framework", why, python),
        _row("NCCL", pick(fw, "nccl_version") if fw else None, "framework", why or "not in this torch build",
             python),
    ]


def scorep_rows(run: Run) -> list[dict[str, Any]]:
    sp, why = fact(run, "scorep_install")
    rows = [_row("Score-P", pick(sp, "version") if sp else None, "scorep_install",
                 why or "scorep-config not found")]
    if sp is not None:
        for name, key in (("Score-P CUDA support", "cuda_support"), ("Score-P Python bindings", "python_bindings")):
            value = pick(sp, key)
            rows.append(_row(name, None if value is None else ("yes" if value else "no"), "scorep_install",
                             "not reported", pick(sp, "python") if key == "python_bindings" else None))
    return rows

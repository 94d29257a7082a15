"""Node facts: NVML, the CUDA driver API, the CUDA runtime API, the framework, the fabric.

Every probe that touches the driver runs in a subprocess (`run_isolated`: own
session, hard timeout, killed as a group) started with `python -I -S` and a
stdlib + ctypes (+ pynvml) child script, so it starts in milliseconds.

Facts (shared contracts):
- `nvml`: {"driver_loaded", "no_driver", "error", "error_code", "driver_version",
  "cuda_driver_version", "gpus": [{"index", "name", "uuid", "pci_bus_id", "memory_total",
  "memory_used", "utilization_gpu"}], "fabric": {...}}
- `fabric`: {"gpus": [{"index", "state", "state_name", "status", "health_mask", "supported",
  "error"}]} or {"error": str} when the query died.
- `cuda_driver`: {"api": "driver", "library", "path", "loaded", "load_error",
  "driver_version", "code", "name", "string", "count"}
- `cuda_runtime`: {"state": "ready"|"never_ready"|"error"|"hung", "ready_attempt",
  "waited_s", "budget_s", "attempt_timeout_s", "attempts": [one cuda_child result each,
  plus "attempt", "duration_s", "timed_out"], "last": the last attempt}
- `framework`: {"ok", "error", "import_error", "python", "torch_version", "torch_cuda",
  "device_count", "is_available", "nccl_version"}
"""

from __future__ import annotations

import ast
import json
import sys
import time
from pathlib import Path
from typing import Any

from doctor.facts import ProbeContext, ProbeTimeout, provider
from doctor.isolate import Isolated, run_isolated
from doctor.probes.cuda_errors import RETRYABLE

HERE = Path(__file__).resolve().parent

# GPU003's retries: a fresh process per attempt, backoff doubling from BACKOFF_START
# up to BACKOFF_MAX, all within the provider's budget. An attempt that runs past
# ATTEMPT_TIMEOUT is a hang; the last attempt always gets at least MIN_ATTEMPT.
RUNTIME_BUDGET = 45.0
ATTEMPT_TIMEOUT = 20.0
BACKOFF_START = 0.25
BACKOFF_MAX = 5.0
MIN_ATTEMPT = 1.0

_pynvml_dir: str | None = None


def pynvml_dir() -> str:
    """The folder holding pynvml, found without importing it (children run with -I -S)."""
    global _pynvml_dir
    if _pynvml_dir is None:
        import importlib.util

        spec = importlib.util.find_spec("pynvml")
        _pynvml_dir = str(Path(spec.origin).parent) if spec and spec.origin else ""
    return _pynvml_dir


def child_argv(script: str, *args: str) -> list[str]:
    """Isolated (-I), no site (-S): the child sees only the stdlib and what we pass."""
    return [sys.executable, "-I", "-S", str(HERE / script), *args]


def child_docs(out: Isolated) -> list[dict[str, Any]]:
    """The dicts a child printed, one per line as Python literals (never evaluated as code)."""
    docs = []
    for line in out.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                doc = ast.literal_eval(line)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
            if isinstance(doc, dict):
                docs.append(doc)
    return docs


def died(out: Isolated) -> str:
    """Why a child printed nothing: its signal or exit code and the end of its stderr."""
    how = f"killed by {out.signal_name}" if out.signal_name else f"exit code {out.returncode}"
    tail = out.stderr.strip().splitlines()[-1:] if out.stderr.strip() else []
    return how + (f": {tail[0]}" if tail else "")


@provider("nvml", timeout=15.0)
def nvml(ctx: ProbeContext) -> dict[str, Any]:
    """Driver, GPUs and fabric state through pynvml, in one child process."""
    limit = ctx.limit()
    out = run_isolated(child_argv("nvml_child.py", pynvml_dir()), limit, env=dict(ctx.case.env))
    sections = {d.get("section"): d for d in child_docs(out)}
    doc = sections.get("nvml")
    if doc is None:
        if out.timed_out:
            raise ProbeTimeout(f"nvmlInit or an NVML query did not return within {limit:.1f} s (killed)")
        raise RuntimeError(f"the nvml probe died ({died(out)})")
    doc.pop("section", None)
    fabric = sections.get("fabric")
    if fabric is not None:
        fabric.pop("section", None)
    elif doc.get("driver_loaded"):
        why = (f"the fabric query did not return within {limit:.1f} s" if out.timed_out
               else f"the fabric query died ({died(out)})")
        fabric = {"error": why, "timed_out": out.timed_out}
    doc["fabric"] = fabric
    p2p = sections.get("p2p")
    if p2p is not None:
        p2p.pop("section", None)
        doc["p2p"] = p2p
    return doc


@provider("fabric", timeout=15.0)
def fabric(ctx: ProbeContext) -> dict[str, Any]:
    """NVSwitch fabric state per GPU (queried by the nvml probe's child)."""
    value = ctx.need("nvml")
    if not value.get("driver_loaded"):
        return {"gpus": [], "error": None, "no_driver": True}
    return value.get("fabric") or {"error": "the nvml probe returned no fabric state"}


@provider("cuda_driver", timeout=15.0)
def cuda_driver(ctx: ProbeContext) -> dict[str, Any]:
    """cuInit + cuDeviceGetCount on libcuda.so.1, once, in a fresh process."""
    limit = ctx.limit()
    out = run_isolated(child_argv("cuda_child.py", "driver"), limit, env=dict(ctx.case.env))
    docs = child_docs(out)
    if not docs:
        if out.timed_out:
            raise ProbeTimeout(f"cuInit did not return within {limit:.1f} s (killed)")
        raise RuntimeError(f"the cuda_driver probe died ({died(out)})")
    return docs[-1]


def runtime_attempt(ctx: ProbeContext, number: int, timeout: float) -> dict[str, Any]:
    """One attempt in a fresh process: the child's result plus how it ended."""
    out = run_isolated(child_argv("cuda_child.py", "runtime"), timeout, env=dict(ctx.case.env))
    docs = child_docs(out)
    doc: dict[str, Any] = docs[-1] if docs else {"code": None, "name": None, "string": None, "api": "runtime"}
    doc.update(attempt=number, duration_s=round(out.duration_s, 3), timed_out=out.timed_out)
    if not docs and not out.timed_out:
        doc["crashed"] = died(out)
    return doc


def retryable(attempt: dict[str, Any]) -> bool:
    return bool(attempt.get("crashed")) or attempt.get("code") in RETRYABLE


@provider("cuda_runtime", timeout=RUNTIME_BUDGET)
def cuda_runtime(ctx: ProbeContext) -> dict[str, Any]:
    """Probe the runtime API until it is ready, with backoff, within the budget.

    Each attempt is a fresh process: a runtime that failed once in a process
    stays failed there. Ends 'ready' (at attempt k), 'error' (a code no retry
    cures), 'never_ready' (budget spent) or 'hung' (an attempt never returned).
    """
    budget = ctx.limit()
    start = time.monotonic()
    attempts: list[dict[str, Any]] = []
    delay = BACKOFF_START
    state = "never_ready"
    while True:
        left = budget - (time.monotonic() - start)
        attempt = runtime_attempt(ctx, len(attempts) + 1, min(ATTEMPT_TIMEOUT, max(left, 0.05)))
        attempts.append(attempt)
        if attempt["timed_out"]:
            state = "hung"
            break
        if attempt.get("code") == 0:
            state = "ready"
            break
        if not retryable(attempt):
            state = "error"
            break
        left = budget - (time.monotonic() - start)
        if left < MIN_ATTEMPT + 0.05:
            break
        time.sleep(min(delay, left - MIN_ATTEMPT))
        delay = min(delay * 2, BACKOFF_MAX)
    return {
        "state": state,
        "ready_attempt": len(attempts) if state == "ready" else None,
        "waited_s": round(time.monotonic() - start, 3),
        "budget_s": round(budget, 3),
        "attempt_timeout_s": ATTEMPT_TIMEOUT,
        "attempts": attempts,
        "last": attempts[-1],
    }


FRAMEWORK_MARK = "GPU_DOCTOR_FRAMEWORK "
# Runs in the job's interpreter: any Python 3, nothing but torch and the stdlib.
# zeros().cuda() comes first: device_count()/is_available() cache a failure.
FRAMEWORK_CODE = f"""
import json, sys
r = {{"python": sys.executable, "ok": False, "error": None, "import_error": None,
     "torch_version": None, "torch_cuda": None, "device_count": None, "is_available": None,
     "nccl_version": None}}
try:
    import torch
except BaseException as e:
    r["import_error"] = "%s: %s" % (type(e).__name__, e)
else:
    r["torch_version"] = str(torch.__version__)
    r["torch_cuda"] = getattr(torch.version, "cuda", None)
    try:
        torch.zeros(1).cuda()
        torch.cuda.synchronize()
        r["ok"] = True
    except BaseException as e:
        r["error"] = ("%s: %s" % (type(e).__name__, e)).strip()
    try:
        r["device_count"] = int(torch.cuda.device_count())
        r["is_available"] = bool(torch.cuda.is_available())
    except BaseException:
        pass
    try:
        v = torch.cuda.nccl.version()
        r["nccl_version"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except BaseException:
        pass
sys.stdout.write({FRAMEWORK_MARK!r} + json.dumps(r) + "\\n")
"""


def job_interpreter(ctx: ProbeContext) -> str:
    """--python, else the job's own interpreter when a job folder is examined, else this one."""
    if ctx.case.python or ctx.case.root is None:
        return ctx.case.job_python
    from doctor.jobfolder.facts import job_env, job_path, job_python, path_folders

    job = ctx.facts.get("job")
    path_var = job_path(job_env(job, dict(ctx.case.env)))
    found = job_python(ctx, job, path_var)
    if found is None and not path_folders(path_var):
        raise RuntimeError(f"the job's PATH ({path_var[:120]}) holds no folder, so the interpreter it "
                           "runs cannot be found")
    return found or ctx.case.job_python


def python_source(ctx: ProbeContext) -> str:
    if ctx.case.python:
        return "--python"
    if ctx.case.root is not None:
        return "the interpreter the job script runs, as found on its PATH"
    return "the interpreter gpu-doctor runs in"


@provider("framework", timeout=90.0)
def framework(ctx: ProbeContext) -> dict[str, Any]:
    """torch.zeros(1).cuda() in the job's interpreter, in try/except, in a subprocess.

    The interpreter: --python, else the one the job script runs (from the job
    folder, when there is one), else the current one. It starts in a neutral
    working folder (a job folder's `torch.py` is never imported). Guarded (the gate
    as root, or somebody else's folder: `doctor.trust`), a discovered interpreter
    the job's owner can change (it, its pyvenv.cfg, its site-packages) is refused,
    and the one that runs is isolated (`-I`, the admin's PYTHONPATH only); an explicit
    --python is the admin's choice, isolated all the same.
    """
    from doctor import trust

    python = job_interpreter(ctx)
    guard = trust.guarded(ctx.case)
    if guard and not ctx.case.python and (why := trust.interpreter_refusal(python)):
        raise trust.Refused(f"not running {python} {trust.as_whom()}: {why}")
    limit = ctx.limit()
    # Guarded: -I (no user site, no PYTHON* variables, no script folder on sys.path) with the
    # admin's PYTHONPATH carried by hand; gpu-doctor's environment is the admin's, not the job's.
    argv = ([trust.interpreter_argv0(python), "-I", "-c", trust.admin_path(FRAMEWORK_CODE, ctx.case.env)]
            if guard else [python, "-c", FRAMEWORK_CODE])
    out = run_isolated(argv, limit, env=dict(ctx.case.env), cwd=trust.NEUTRAL_CWD)
    for line in reversed(out.stdout.splitlines()):
        if line.startswith(FRAMEWORK_MARK):
            return {**json.loads(line[len(FRAMEWORK_MARK):]), "python": python,
                    "python_source": python_source(ctx)}
    if out.timed_out:
        raise ProbeTimeout(f"torch.zeros(1).cuda() in {python} did not return within {limit:.1f} s "
                           "(killed)")
    if out.returncode is None:
        raise RuntimeError(out.stderr.strip() or f"cannot start {python}")
    return {"ok": False, "python": python, "error": f"{python} ended without a result ({died(out)})",
            "import_error": None, "torch_version": None, "torch_cuda": None, "device_count": None,
            "is_available": None, "nccl_version": None}

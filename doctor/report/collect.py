"""Collect the raw (unredacted) report document: the gate's JSON plus the context a support team needs.

Every source is optional: a fact whose provider is missing or failed becomes
"N/A (reason)", never an exception. Field shapes of other areas' facts are read
through `pick`, which accepts dicts and objects, so small contract drifts show
as N/A rather than crash the report.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import shlex
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from doctor import __version__
from doctor.facts import ProbeFailure
from doctor.report import sources
from doctor.runner import Run
from doctor.verdict import run_json

REPORT_VERSION = "1.0"
VERSION_FACTS = ("nvml", "cuda_driver", "cuda_runtime", "framework", "scorep_install")
CONTEXT_FACTS = VERSION_FACTS + ("p2p_matrix", "logscan", "experiments", "job")


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


def bytes_text(value: Any) -> str | None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        return None
    gib = value / 1024**3
    return f"{gib:.1f} GiB" if gib >= 1 else f"{value / 1024**2:.0f} MiB"


def _row(name: str, value: Any, source: str, why: str | None) -> dict[str, Any]:
    text = None if value in (None, "") else str(value)
    return {"name": name, "value": text, "source": source,
            "note": None if text is not None else f"N/A ({why or 'not reported'})"}


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
    return f"{str(state).replace('_', ' ')} after {attempts} attempt(s)" + (f" ({last})" if last else "")


def driver_init(drv: Any) -> str | None:
    """cuInit's outcome: 'ok, 4 devices' or '100 CUDA_ERROR_NO_DEVICE: ...'."""
    if pick(drv, "loaded") is False:
        return f"libcuda not loaded: {pick(drv, 'load_error') or 'no reason given'}"
    code = pick(drv, "code")
    if code == 0:
        count = pick(drv, "count")
        return "ok" + (f", {count} device(s)" if count is not None else "")
    return _failure_text(drv)


def versions(run: Run) -> list[dict[str, Any]]:
    """Driver, CUDA, torch, NCCL and Score-P versions, each with its source or why it is N/A."""
    nvml, nvml_why = fact(run, "nvml")
    drv, drv_why = fact(run, "cuda_driver")
    rt, rt_why = fact(run, "cuda_runtime")
    fw, fw_why = fact(run, "framework")
    sp, sp_why = fact(run, "scorep_install")
    if nvml is not None and not pick(nvml, "driver_loaded"):
        nvml_why = f"driver not loaded: {pick(nvml, 'error') or 'no reason given'}"
        nvml = None
    if fw is not None and not pick(fw, "torch_version"):
        fw_why = f"torch not importable: {pick(fw, 'import_error', 'error') or 'no reason given'}"
    cuda_api = pick(drv, "driver_version") if drv is not None else None
    if cuda_api is None and nvml is not None:
        cuda_api = pick(nvml, "cuda_driver_version")
    last = pick(rt, "last") if rt is not None else None
    runtime = pick(last, "runtime_version") if last is not None else None
    drv_note = (_failure_text(drv) if drv is not None else None) or drv_why or nvml_why
    rt_note = (_failure_text(last) if last is not None else None) or rt_why
    torch_why = fw_why
    if fw is not None and not pick(fw, "torch_version"):
        fw_why = "see torch"
    rows = [
        _row("NVIDIA driver", pick(nvml, "driver_version") if nvml else None, "nvml", nvml_why),
        _row("CUDA driver API", cuda_version_text(cuda_api), "cuda_driver", drv_note),
        _row("CUDA driver init", driver_init(drv) if drv is not None else None, "cuda_driver", drv_why),
        _row("CUDA runtime", cuda_version_text(runtime), "cuda_runtime", rt_note),
        _row("CUDA runtime state", runtime_state(rt) if rt is not None else None, "cuda_runtime", rt_why),
        _row("torch", pick(fw, "torch_version") if fw else None, "framework", torch_why),
        _row("torch CUDA build", pick(fw, "torch_cuda") if fw else None, "framework",
             fw_why or "torch built without CUDA"),
        _row("torch CUDA use", ("works" if pick(fw, "ok") else f"fails: {pick(fw, 'error')}")
             if fw and pick(fw, "torch_version") else None, "framework", fw_why),
        _row("NCCL", pick(fw, "nccl_version") if fw else None, "framework", fw_why or "not in this torch build"),
        _row("Score-P", pick(sp, "version") if sp else None, "scorep_install",
             sp_why or "scorep-config not found"),
    ]
    if sp is not None:
        cuda = pick(sp, "cuda_support")
        bindings = pick(sp, "python_bindings")
        rows.append(_row("Score-P CUDA support", None if cuda is None else ("yes" if cuda else "no"),
                         "scorep_install", "not reported"))
        rows.append(_row("Score-P Python bindings", None if bindings is None else ("yes" if bindings else "no"),
                         "scorep_install", "not reported"))
    return rows


def gpus(run: Run) -> tuple[list[dict[str, Any]], str | None]:
    nvml, why = fact(run, "nvml")
    if nvml is None:
        return [], f"N/A ({why})"
    if not pick(nvml, "driver_loaded"):
        return [], f"N/A (driver not loaded: {pick(nvml, 'error') or 'no reason given'})"
    out = []
    for gpu in pick(nvml, "gpus") or []:
        mem = pick(gpu, "memory_total")
        out.append({"index": pick(gpu, "index"), "name": pick(gpu, "name"),
                    "memory_total": mem, "memory": bytes_text(mem),
                    "pci_bus_id": pick(gpu, "pci_bus_id"), "uuid": pick(gpu, "uuid")})
    return out, None if out else "NVML reports no GPUs"


def topology(run: Run) -> dict[str, Any]:
    """The P2P matrix as labels + rows of cells, its legend, and the integrity test when it ran."""
    value, why = fact(run, "p2p_matrix")
    out: dict[str, Any] = {"available": False, "note": f"N/A ({why})", "labels": [], "rows": [],
                           "raw": None, "legend": None, "integrity": None}
    if value is None:
        return out
    out.update(sources.matrix_table(value))
    out["available"] = out["note"] is None
    try:
        from doctor.probes import p2p

        out["legend"] = p2p.LEGEND
        integrity = run.facts.peek("p2p_integrity")
        if isinstance(integrity, Mapping) and integrity.get("requested") and integrity.get("devices"):
            out["integrity"] = p2p.render_integrity(integrity)
    except Exception:  # the P2P area's renderers are decoration here
        pass
    return out


def system(run: Run) -> dict[str, Any]:
    return {
        "host": run.case.host,
        "fqdn": socket.getfqdn(),
        "os": sources.os_release() or platform.platform(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "job_python": run.case.job_python,
        "cpu_count": os.cpu_count(),
    }


def slurm(env: Mapping[str, str]) -> dict[str, Any]:
    variables = {k: v for k, v in env.items() if k.startswith(("SLURM_", "SLURMD_"))}
    return {"in_job": "SLURM_JOB_ID" in env, "job_id": env.get("SLURM_JOB_ID"),
            "environment": dict(sorted(variables.items()))}


def job_env(run: Run) -> dict[str, str]:
    """What the job's scripts set (fact `job`: `Job.env`, EnvVar values with a `site`)."""
    job, _ = fact(run, "job")
    env = pick(job, "env", "environment") if job is not None else None
    out: dict[str, str] = {}
    for name, var in (env.items() if isinstance(env, Mapping) else ()):
        if isinstance(var, str):
            out[str(name)] = var
        elif pick(var, "site") is not None:  # None: inherited from gpu-doctor's own environment
            value = pick(var, "value", "raw")
            out[str(name)] = str(value) if value is not None else ""
    return out


def facts_status(run: Run) -> dict[str, dict[str, Any]]:
    out = {}
    for name in CONTEXT_FACTS:
        value = run.facts.peek(name)
        ok = value is not None and not isinstance(value, ProbeFailure)
        out[name] = {"ok": ok, "error": str(value) if isinstance(value, ProbeFailure) else None,
                     "duration_ms": round(run.facts.durations_ms.get(name, 0.0), 1)}
    return out


def build_document(run: Run, argv: list[str], fail_on: str = "error") -> dict[str, Any]:
    """The raw report document: redact it before it leaves the process."""
    case = run.case
    journal = sources.remedy_journal(case.root)
    run.extra["applied"] = sources.applied_state(journal["entries"])
    doc = run_json(run, fail_on, argv)
    for name in CONTEXT_FACTS:
        run.facts.get(name)
    gpu_rows, gpu_note = gpus(run)
    logscan, logscan_why = fact(run, "logscan")
    doc.update({
        "report": {"format_version": REPORT_VERSION, "generated": dt.datetime.now(dt.UTC).isoformat(),
                   "command_line": shlex.join(["gpu-doctor", "report", *argv]),
                   "tool_version": __version__},
        "system": system(run),
        "versions": versions(run),
        "scorep": scorep_summary(run),
        "gpus": gpu_rows,
        "gpus_note": gpu_note,
        "topology": topology(run),
        "slurm": slurm(case.env),
        "environment": {"process": dict(case.env), "job": job_env(run)},
        "remedy_journal": journal,
        "last_launch": sources.last_launch(sources.workdirs(case.root)),
        "log_excerpts": sources.log_excerpts(logscan, case.root) if logscan is not None else [],
        "log_excerpts_note": None if logscan is not None else f"N/A ({logscan_why})",
        "experiments": sources.experiment_list(fact(run, "experiments")[0]),
        "facts": facts_status(run),
    })
    return doc


def scorep_summary(run: Run) -> dict[str, Any]:
    sp, why = fact(run, "scorep_install")
    if sp is None:
        return {"available": False, "note": f"N/A ({why})", "config_summary": None, "scorep_config": None}
    return {"available": True, "note": None, "scorep_config": pick(sp, "scorep_config"),
            "config_summary": pick(sp, "config_summary")}


def host_names(run: Run) -> list[str]:
    names = [run.case.host, socket.getfqdn()]
    return [n for n in names if n and n not in ("localhost",)]


def homes_and_users() -> tuple[list[str], list[str]]:
    """This user's home folder and login, from the password database as well as the env."""
    homes, users = [str(Path.home())], []
    try:
        import pwd

        entry = pwd.getpwuid(os.getuid())
        homes.append(entry.pw_dir)
        users.append(entry.pw_name)
    except (ImportError, KeyError):
        pass
    return homes, users

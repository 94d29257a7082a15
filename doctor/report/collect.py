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
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from doctor import __version__
from doctor.facts import ProbeFailure
from doctor.report import history, sources, timeline
from doctor.report.versions import fact, job_interpreter, pick, versions
from doctor.runner import Run
from doctor.verdict import run_json

REPORT_VERSION = "1.0"
VERSION_FACTS = ("nvml", "cuda_driver", "cuda_runtime", "framework", "scorep_install")
CONTEXT_FACTS = VERSION_FACTS + ("p2p_matrix", "logscan", "experiments", "job")


def bytes_text(value: Any) -> str | None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        return None
    gib = value / 1024**3
    return f"{gib:.1f} GiB" if gib >= 1 else f"{value / 1024**2:.0f} MiB"


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
    job_python, job_python_from = job_interpreter(run)
    return {
        "host": run.case.host,
        "fqdn": socket.getfqdn(),
        "os": sources.os_release() or platform.platform(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "job_python": job_python,
        "job_python_from": job_python_from,
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
    journal = history.remedy_journal(case.root)
    run.extra["applied"] = history.applied_state(journal["entries"])
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
        "last_launch": history.last_launch(history.workdirs(case.root)),
        "log_excerpts": sources.log_excerpts(logscan, case.root) if logscan is not None else [],
        "log_excerpts_note": None if logscan is not None else f"N/A ({logscan_why})",
        "experiments": sources.experiment_list(fact(run, "experiments")[0]),
        "facts": facts_status(run),
    })
    # last: it takes whatever is left of the run's time budget
    doc["timeline"] = timeline.section(case.root, run.facts.deadline - time.monotonic())
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

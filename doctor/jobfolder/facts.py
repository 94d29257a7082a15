"""Facts of the job-folder area: `job` (the parsed folder) and `scorep_install` (SCP001).

`scorep_install` is
`{"scorep_config": path|None, "version": str|None, "cuda_support": bool|None,
"python_bindings": bool|None, "config_summary": str|None}` plus `python`
(the interpreter asked) and `notes` (why a value is None). It looks on the
PATH the job will run with, and asks the job's interpreter, each in a
subprocess with a time limit. As root in the gate it runs nothing that a
user could have replaced.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from typing import Any

from doctor import limits, trust
from doctor.facts import ProbeContext, ProbeFailure, provider
from doctor.isolate import run_isolated
from doctor.jobfolder.discover import load_job
from doctor.jobfolder.model import Job

BINDINGS_PROBE = r"""
import importlib.util, json, os, sys
spec = importlib.util.find_spec("scorep")
found = None
where = None
if spec is not None and spec.submodule_search_locations:
    where = list(spec.submodule_search_locations)[0]
    names = os.listdir(where)
    found = any(n.startswith(("_bindings", "scorep_bindings")) for n in names)
print(json.dumps({"package": where, "bindings": found if spec is not None else False}))
"""


@provider("job", timeout=20.0, reads_user_files=True)
def job_fact(ctx: ProbeContext) -> Job:
    """The parsed job folder (scripts, launch commands, environment, trainer arguments).

    Input past the bounds of `doctor.limits` that still got through (a stack or
    memory exhausted) fails the probe naming the file it was reading: the checks
    that need the job say `unknown` and the gate exits non-zero.
    """
    try:
        return load_job(ctx.case)
    except (RecursionError, MemoryError) as exc:
        where = limits.reading() or str(ctx.case.root)
        raise limits.LimitExceeded(f"{where}: {type(exc).__name__} while analysing it (nested too deeply "
                                   "or too large); not analysed") from None


def job_env(job: Any, fallback: dict[str, str]) -> dict[str, str]:
    """The job's environment as strings (values that cannot be known statically are left out)."""
    if not isinstance(job, Job) or not job.env:
        return dict(fallback)
    return {k: v.value for k, v in job.env.items() if v.value is not None}


@provider("scorep_install", timeout=15.0, reads_user_files=True)
def scorep_install(ctx: ProbeContext) -> dict[str, Any]:
    """Score-P on the job's PATH: scorep-config, version, CUDA support, Python bindings."""
    job = ctx.facts.get("job")
    env = job_env(job, dict(ctx.case.env))
    path_var = job_path(env)
    guard = trust.guarded(ctx.case)
    notes: list[str] = []
    refused: list[str] = []
    out: dict[str, Any] = {"scorep_config": None, "version": None, "cuda_support": None,
                           "python_bindings": None, "config_summary": None, "python": None, "notes": notes,
                           "refused": refused}
    config = shutil.which("scorep-config", path=path_var)
    out["scorep_config"] = config
    # Guarded, nothing of the owner's runs: the tools by their real paths, scorep-info beside the real
    # scorep-config, a system PATH, a neutral working folder (LD_PRELOAD, PYTHONPATH... never reach them).
    real = os.path.realpath(config) if config else None
    run_env = trust.clean_env(ctx.case.env, os.path.dirname(real) if real else None) if guard else env
    cwd = trust.NEUTRAL_CWD if guard else None
    why = trust.writable_by_others(real) if guard and real else None
    if config is None or real is None:
        notes.append(f"scorep-config is not on the job's PATH ({_short(path_var)})")
    elif why:
        notes.append(f"{config} not run {trust.as_whom()}: {why}")
        refused.append(f"scorep-config ({why})")
    else:
        res = run_isolated([real if guard else config, "--version"], ctx.limit(5.0), env=run_env, cwd=cwd)
        if res.timed_out:
            notes.append(f"`{config} --version` timed out")
        elif res.returncode == 0:
            out["version"] = (res.stdout.strip().splitlines() or [""])[0] or None
        else:
            notes.append(f"`{config} --version` failed: {(res.stderr or res.stdout).strip()[:200]}")
        info = trust.sibling(real, "scorep-info") if guard else os.path.join(os.path.dirname(config), "scorep-info")
        if not guard and not os.path.exists(info):
            info = shutil.which("scorep-info", path=path_var) or info
        why = trust.writable_by_others(info) if guard and os.path.exists(info) else None
        if why:
            notes.append(f"{info} not run {trust.as_whom()}: {why}")
            refused.append(f"scorep-info ({why})")
        else:
            _config_summary(out, info, ctx.limit(5.0), run_env, cwd)
    python = job_python(ctx, job, path_var)
    out["python"] = python
    if python is None:
        notes.append("the job's Python interpreter was not found")
    elif guard and (why := trust.interpreter_refusal(python)):
        notes.append(f"the bindings probe not run {trust.as_whom()}: {why}")
        refused.append(f"the Score-P bindings probe ({why})")
    else:
        argv = [trust.interpreter_argv0(python), "-I", "-c", BINDINGS_PROBE] if guard else [python, "-c", BINDINGS_PROBE]
        res = run_isolated(argv, ctx.limit(8.0), env=trust.clean_env(ctx.case.env) if guard else env, cwd=cwd)
        if res.timed_out:
            notes.append(f"{python}: the bindings probe timed out")
        else:
            try:
                doc = res.json()
                out["python_bindings"] = bool(doc.get("bindings"))
                if not doc.get("bindings"):
                    notes.append(f"{python} cannot import scorep (the Score-P Python bindings)" if not
                                 doc.get("package") else f"{doc['package']} has no compiled bindings")
            except ValueError:
                notes.append(f"{python}: the bindings probe failed: {(res.stderr or '').strip()[:200]}")
    return out


def _config_summary(out: dict[str, Any], info: str, limit: float, env: dict[str, str], cwd: str | None) -> None:
    """`scorep-info config-summary` into `out`: the summary and whether CUDA support is built in."""
    res = run_isolated([info, "config-summary"], limit, env=env, cwd=cwd)
    if res.returncode == 0 and not res.timed_out:
        out["config_summary"] = res.stdout
        m = re.search(r"CUDA support:\s*(\w+)", res.stdout)
        out["cuda_support"] = (m.group(1).lower() == "yes") if m else None
        if m is None:
            out["notes"].append("`scorep-info config-summary` does not mention CUDA support")
    else:
        out["notes"].append(f"`{info} config-summary` failed: {(res.stderr or res.stdout).strip()[:200] or 'no output'}")


def job_path(env: dict[str, str]) -> str:
    """The PATH the job's commands are looked up in."""
    return env.get("PATH", os.defpath)


def job_python(ctx: ProbeContext, job: Any, path_var: str) -> str | None:
    """The interpreter the job runs: --python, else the job script's `python` on `path_var`."""
    if ctx.case.python:
        return shutil.which(ctx.case.python, path=path_var) or ctx.case.python
    if isinstance(job, Job) and job.python:
        found = shutil.which(job.python, path=path_var)
        if found:
            return found
    if isinstance(job, ProbeFailure) or not isinstance(job, Job) or job.python is None:
        return sys.executable
    if not path_folders(path_var):  # PATH=/dev/zero: nothing can be found; never assume ours
        return None
    return shutil.which("python3", path=path_var) or sys.executable


def path_folders(path_var: str) -> list[str]:
    """The entries of a PATH that are folders (`PATH=/dev/zero` has none)."""
    return [p for p in path_var.split(os.pathsep) if p and os.path.isdir(p)]


def _short(path_var: str) -> str:
    return path_var if len(path_var) <= 120 else path_var[:117] + "..."

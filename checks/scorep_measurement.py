"""Score-P layer, what the measurement costs: memory (SCP009) and overhead (SCP010).

Both read the job folder before the run and the logs after it. The numbers come
from real Score-P 8.4 + scorep 4.5.1 runs (doctor/scorep_memory.py,
tests/test_scorep_real.py). Found as checks/scorep_<topic>.py (the SCP layer).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from doctor.facts import Facts
from doctor.jobfolder.model import Command, Job, Launch, Site
from doctor.jobfolder.queries import command_data, ev, var_data, var_evidence
from doctor.jobfolder.scorep_values import SizeError, parse_size
from doctor.model import Evidence, Layer, Outcome, fail, passed, skip, unknown, warn
from doctor.registry import check
from doctor.scorep_memory import PROPOSED, instrumenter_on, judge, propose_total_memory
from doctor.wording import noun_for

L = Layer.SCOREP
TORCH_MODULES = ("torch", "transformers", "lightning", "pytorch_lightning", "accelerate", "deepspeed", "timm")


def _logscan(facts: Facts, signature: str) -> list[dict[str, Any]]:
    value = facts.get("logscan")
    if not isinstance(value, list):
        return []
    return [m for m in value if isinstance(m, dict) and m.get("signature") == signature]


def _log_evidence(job: Job | None, m: dict[str, Any]) -> Evidence:
    where = str(m["file"]) if m.get("file") else None
    if where and job is not None:
        where = job.rel(where)
    return Evidence(str(m.get("text", "")), where, m.get("line"), "log")


def _ranks(matches: list[dict[str, Any]]) -> list[int]:
    return sorted({r for m in matches if isinstance(r := (m.get("values") or {}).get("rank"), int)})


def torch_import(job: Job, launch: Launch) -> str | None:
    """Why the measured process imports torch (None: it does not, as far as the folder shows)."""
    sp = launch.spawner
    if sp is not None:  # the launcher itself runs under Score-P (LNC001) and imports torch to spawn
        if sp.kind == "wrapper-script" and sp.wrapper_script:
            return f"{job.rel(sp.wrapper_script)} runs torch.distributed.run, which imports torch"
        return f"{sp.kind}, the launcher Score-P wraps, imports torch"
    path = launch.training_script or launch.script
    entry = job.script(path)
    if entry is None:
        return None
    for s in job.import_closure(entry, import_time_only=False):
        for imp in s.imports:
            if imp.module.split(".")[0] in TORCH_MODULES:
                return f"{job.rel(s.path)}:{imp.site.line} imports {imp.module}"
    return None


def _where_to_set(cmd: Command, var: Any) -> dict[str, Any]:
    site: Site = var.site if var is not None and var.site is not None else cmd.site
    return {"file": site.file, "line": site.line, "text": site.text, "insert_before": var is None}


def _job_setting(job: Job | None) -> tuple[int, str] | None:
    """(bytes, value) of the SCOREP_TOTAL_MEMORY the job's first instrumented launch gets, when known."""
    if job is None or not job.instrumented:
        return None
    var = job.instrumented[0][0].var("SCOREP_TOTAL_MEMORY")
    if var is None or var.value is None:
        return None
    try:
        return parse_size(var.value), var.value
    except SizeError:
        return None


def _measured(job: Job) -> list[tuple[Command, Launch, bool, str | None]]:
    """(command, launch, Python instrumenter on, why torch is imported) per instrumented launch."""
    out = []
    for cmd, launch in job.instrumented:
        assert launch.scorep is not None
        out.append((cmd, launch, instrumenter_on(launch.scorep.flags), torch_import(job, launch)))
    return out


@check("SCP009", L, "Score-P's measurement memory too small for what the job instruments",
       needs=("job", "logscan"), remedies=("scorep-measurement-memory",), handles_failures=True)
def measurement_memory(facts: Facts) -> list[Outcome]:
    """What it does:
    Before the run: for every `python -m scorep` launch with the Python instrumenter on (no
    `--noinstrumenter`) whose process imports torch, compares `SCOREP_TOTAL_MEMORY` (default
    16000k) with what tracing `import torch` needs. After the run: finds Score-P's
    `No free memory page available: Out of memory. Please increase SCOREP_TOTAL_MEMORY=N`
    in the logs and proposes a value from N.

    Why is this bad?
    The Python instrumenter records every Python call, and `import torch` alone makes
    ~800 000 of them per rank. With the default 16000k each rank aborts (SIGABRT) before
    training and leaves an experiment folder without a trace (ART003 only sees "0 of N
    ranks left a complete measurement"). Measured: 32M holds a profile, 48M a trace.

    Example:
        python -m scorep train.py        # train.py: import torch; SCOREP_TOTAL_MEMORY unset
        [Score-P] src/measurement/SCOREP_Memory.c:187: Error: No free memory page available:
        Out of memory. Please increase SCOREP_TOTAL_MEMORY=16375808 and try again.

    Remedy:
    `export SCOREP_TOTAL_MEMORY=256M` (16x Score-P's value, under the 4 GiB cap), or measure
    less (SCP010: a filter file, `--noinstrumenter` with user regions).

    Severity:
    fail when the logs hold Score-P's out-of-memory abort and the job still sets less than the
    proposal, or when the Python instrumenter meets a process that imports torch with less than
    64M (the default 16000k included); unknown when the value is only known at run time; pass
    when the job now sets enough or does not instrument torch; skip without Score-P.

    Fix safety:
    Safe: sets one variable (memory per rank, allocated as Score-P needs it).
    """
    job = facts.get("job")
    job = job if isinstance(job, Job) else None
    out: list[Outcome] = []
    ooms = _logscan(facts, "scorep_oom")
    if ooms:
        totals = [v for m in ooms if isinstance(v := (m.get("values") or {}).get("total_memory"), int)]
        total = max(totals) if totals else None
        proposed = propose_total_memory(total) if total else PROPOSED
        first, ranks = ooms[0], _ranks(ooms)
        now = _job_setting(job)
        data: dict[str, Any] = {"var": "SCOREP_TOTAL_MEMORY", "current_bytes": total, "proposed": proposed,
                                "ranks": ranks,
                "log": {"file": first.get("file"), "line": first.get("line"), "text": first.get("text")}}
        if job is not None and job.instrumented:
            cmd = job.instrumented[0][0]
            data.update(_where_to_set(cmd, cmd.var("SCOREP_TOTAL_MEMORY")))
        who = f"{noun_for(len(ranks), 'rank')} {', '.join(map(str, ranks))}" if ranks else "a measured process"
        if now is not None and now[0] >= parse_size(proposed):
            out.append(passed(f"{who} ran out of measurement memory with SCOREP_TOTAL_MEMORY={total} bytes; the job "
                              f"sets {now[1]} now (at least {proposed})", _log_evidence(job, first)))
        else:
                out.append(fail(f"{who} ran out of Score-P measurement memory (SCOREP_TOTAL_MEMORY={total or '?'} "
                            f"bytes) and aborted without a trace: set SCOREP_TOTAL_MEMORY={proposed}",
                            [_log_evidence(job, m) for m in ooms[:8]]
                            + [Evidence(f"SCOREP_TOTAL_MEMORY={proposed}", label="proposed")],
                            "scorep-measurement-memory", data=data))
    if job is None:
        return out or [unknown(str(facts.get("job")), entities={"probe": "job"})]
    for cmd, _launch, instrumenter, torch in _measured(job):
        var = cmd.var("SCOREP_TOTAL_MEMORY")
        if var is not None and var.value is None:
            out.append(unknown(f"SCOREP_TOTAL_MEMORY={var.raw} cannot be known before the job runs",
                               var_evidence(job, var)))
            continue
        verdict = judge(var.value if var is not None else None, instrumenter, torch is not None)
        where = [ev(job, cmd.site, "launch")] + ([var_evidence(job, var)] if var is not None else [])
        if verdict.enough or verdict.bytes is None:  # not a size: SCP003's finding
            out.append(passed(verdict.reason, where))
            continue
        data = command_data(cmd) | {"var": "SCOREP_TOTAL_MEMORY", "current_bytes": verdict.bytes,
                                    "proposed": PROPOSED, "torch": torch} | _where_to_set(cmd, var)
        if var is not None:
            data["setting"] = var_data(var)
        out.append(fail(f"{verdict.reason}; {torch}: set SCOREP_TOTAL_MEMORY={PROPOSED}", where
                        + [Evidence(f"SCOREP_TOTAL_MEMORY={PROPOSED}", label="proposed")],
                        "scorep-measurement-memory", data=data))
    if not out:
        return [skip("no `python -m scorep` launch and no Score-P memory errors in the logs")]
    return out


HEAVY_VISITS = 100_000  # region visits in one rank's profile: more than a diagnostic run needs
MAX_EXCLUDED = 15


def heaviest_modules(module_visits: Sequence[Mapping[str, Any]]) -> list[str]:
    """The top-level Python modules that make 95 % of the profile's module visits (at most 15)."""
    rows = [(str(r.get("module")), int(r.get("visits") or 0)) for r in module_visits]
    total = sum(v for _m, v in rows)
    out: list[str] = []
    covered = 0
    for module, visits in rows:
        if covered >= 0.95 * total or len(out) >= MAX_EXCLUDED:
            break
        out.append(module)
        covered += visits
    return out


def _folder_bytes(path: str) -> int:
    total = 0
    for base, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(base, name))
            except OSError:
                continue
    return total


def _heavy_profiles(job: Job | None, exps: Any) -> list[Outcome]:
    """One warning for the heaviest profile among the experiment folders, naming its busiest modules."""
    heavy = []
    for e in getattr(exps, "folders", ()):
        prof = e.profile
        if prof is None or not prof.ok:
            continue
        visits = next((int(t.get("visits") or 0) for t in prof.by_type if t.get("type") == "ALL"), 0)
        if visits >= HEAVY_VISITS:
            heavy.append((visits, e, prof))
    if not heavy:
        return []
    visits, exp, prof = max(heavy, key=lambda h: h[0])
    modules = heaviest_modules(prof.module_visits)
    where = job.rel(exp.path) if job is not None else exp.path
    mb = _folder_bytes(exp.path) / 1e6
    shown = ", ".join(f"{r.get('module')} ({int(r.get('visits') or 0)})" for r in prof.module_visits[:5])
    data: dict[str, Any] = {"var": "SCOREP_FILTERING_FILE", "profile": prof.path, "visits": visits,
                            "folder_mb": round(mb, 1), "exclude_modules": modules, "heavy_folders": len(heavy)}
    if job is not None and job.instrumented:
        data.update(_where_to_set(job.instrumented[0][0], None))
    cmd, launch = job.instrumented[0] if job is not None and job.instrumented else (None, None)
    flt = cmd.var("SCOREP_FILTERING_FILE") if cmd is not None else None
    if flt is not None or (launch is not None and launch.scorep is not None
                           and not instrumenter_on(launch.scorep.flags)):
        how = f"SCOREP_FILTERING_FILE={flt.raw}" if flt is not None else "--noinstrumenter"
        return [passed(f"{where}: the last run's profile holds {visits} region visits; the job measures less now "
                       f"({how})", Evidence(f"{visits} visits", job.rel(prof.path) if job is not None else prof.path,
                                            label="profile"))]
    text = (f"{where}: the profile holds {visits} region visits ({mb:.1f} MB in the folder"
            + (f", {len(heavy)} such folders" if len(heavy) > 1 else "") + ")"
            + (f"; the busiest modules: {shown}" if shown else "")
            + ": a filter that excludes them keeps a diagnostic run to a few hundred KB")
    return [warn(text, Evidence(f"{visits} visits; modules by visits: {shown or 'n/a'}",
                                job.rel(prof.path) if job is not None else prof.path, label="profile"),
                 "scorep-filter-file", data=data)]


FILTER_HINT = ("a filter file (SCOREP_FILTERING_FILE, e.g. from `scorep-score` on a profile run) or "
               "`--noinstrumenter` with user regions (scorep.user.region) for the diagnostic run")


@check("SCP010", L, "the measurement costs more than the question needs (overhead, trace size, call depth)",
       needs=("job", "logscan", "experiments"), remedies=("scorep-filter-file", "scorep-callpath-depth"),
       handles_failures=True)
def measurement_overhead(facts: Facts) -> list[Outcome]:
    """What it does:
    Judges a run's measurement: profiles with 100 000 region visits or more in the job's
    experiment folders (the `scorep-score` view), naming the Python modules that make them, and
    Score-P's `callpath depth limitation of 100 exceeded ... Consider setting
    SCOREP_PROFILING_MAX_CALLPATH_DEPTH to N` in the logs. Before any run it only notes where the
    Python instrumenter runs unfiltered on a process that imports torch.

    Why is this bad?
    Unfiltered, the instrumenter records every Python call torch makes: measured here, a
    3-step 2-rank job made ~800 000 region visits and ~40 MB (trace + 12 MB profile) per
    rank, most of it `import torch`; startup takes seconds to minutes per rank. The
    question of a diagnostic run (does every rank measure? where does the step time go?)
    needs a few hundred KB. Call paths deeper than the limit are folded in the profile.

    Example:
        python -m scorep --thread=pthread train.py        # no filter, no --noinstrumenter
        Reached callpath depth was 178. Consider setting SCOREP_PROFILING_MAX_CALLPATH_DEPTH to 178.

    Remedy:
    `export SCOREP_FILTERING_FILE=scorep.filter` with a filter that excludes the heaviest
    regions of a profile run (gpu-doctor writes it: the modules `scorep-score` ranks
    highest, or all but `__main__` and user regions); or `--noinstrumenter` with user
    regions. For the depth warning: `export SCOREP_PROFILING_MAX_CALLPATH_DEPTH=N` (Score-P's N).

    Severity:
    warn when a profile holds 100 000 region visits or more and the job still measures unfiltered,
    or when the logs hold the call-path depth warning and the job sets a lower depth; pass when
    the job filters, uses --noinstrumenter, or sets the depth asked for (before any run, an
    unfiltered instrumenter is only noted); skip without Score-P.

    Fix safety:
    Safe: writes a new filter file and sets variables; what the job computes is unchanged.
    """
    job = facts.get("job")
    job = job if isinstance(job, Job) else None
    out: list[Outcome] = []
    warnings = _logscan(facts, "callpath_depth")
    if warnings:
        limits = [v for m in warnings if isinstance(v := (m.get("values") or {}).get("max_depth"), int)]
        depths = [v for m in warnings if isinstance(v := (m.get("values") or {}).get("reached_depth"), int)]
        reached = max(depths) if depths else None
        first = warnings[0]
        data: dict[str, Any] = {"var": "SCOREP_PROFILING_MAX_CALLPATH_DEPTH", "max_depth": max(limits) if limits else None,
                "proposed": reached, "ranks": _ranks(warnings),
                "log": {"file": first.get("file"), "line": first.get("line"), "text": first.get("text")}}
        if job is not None and job.instrumented:
            cmd = job.instrumented[0][0]
            data.update(_where_to_set(cmd, cmd.var("SCOREP_PROFILING_MAX_CALLPATH_DEPTH")))
        setting = job.instrumented[0][0].var("SCOREP_PROFILING_MAX_CALLPATH_DEPTH") \
            if job is not None and job.instrumented else None
        if reached and setting is not None and (setting.value or "").isdigit() and int(setting.value or 0) >= reached:
            out.append(passed(f"the logs' call paths reached depth {reached}; the job sets "
                              f"SCOREP_PROFILING_MAX_CALLPATH_DEPTH={setting.value} now", _log_evidence(job, first)))
        else:
            out.append(warn(f"the profile's call paths reached depth {reached or '?'}, over Score-P's limit of "
                            f"{data['max_depth'] or '?'}: set SCOREP_PROFILING_MAX_CALLPATH_DEPTH={reached or '?'} "
                            f"or measure less ({FILTER_HINT})", [_log_evidence(job, m) for m in warnings[:8]],
                            "scorep-callpath-depth", data=data))
    out.extend(_heavy_profiles(job, facts.get("experiments")))
    if job is None:
        return out or [unknown(str(facts.get("job")), entities={"probe": "job"})]
    for cmd, _launch, instrumenter, torch in _measured(job):
        where = ev(job, cmd.site, "launch")
        flt = cmd.var("SCOREP_FILTERING_FILE")
        if not instrumenter:
            out.append(passed("--noinstrumenter: only user regions are measured", where))
        elif flt is not None and flt.unfollowed:  # `read`, `eval "$(...)"`: maybe set, maybe not
            out.append(unknown(f"SCOREP_FILTERING_FILE={flt.raw}: whether the Python instrumenter is filtered is "
                               "known only when the job runs", var_evidence(job, flt)))
        elif flt is not None:
            out.append(passed(f"the Python instrumenter is filtered (SCOREP_FILTERING_FILE={flt.raw})",
                              var_evidence(job, flt)))
        elif torch is not None:
            # No run to size it by: not a finding yet (the profile or the logs of a run make one).
            # A pass carries no advice (the catalogue's Remedy has the filter file and --noinstrumenter).
            out.append(passed(f"the Python instrumenter is on and unfiltered ({torch}); no profile or log of a run "
                              "here shows its cost yet", where))
        else:
            out.append(passed("the Python instrumenter is on, and the measured script does not import torch",
                              where))
    if not out:
        return [skip("no `python -m scorep` launch, no heavy profile and no Score-P call-depth warnings in the logs")]
    return out

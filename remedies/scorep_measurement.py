"""Remedies for what a Score-P measurement costs (SCP009 memory, SCP010 overhead).

All are `safe`: they change how much Score-P records, not what the job computes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from doctor.jobfolder.queries import settings
from doctor.jobfolder.scorep_values import SizeError, parse_size
from doctor.model import Phase, Safety
from doctor.registry import remedy
from doctor.remedy.draft import RemedyContext
from doctor.remedy.model import ENV, CannotPlan
from doctor.remedy.spans import SpanEdits, at_targets, chain_root, job_of, value_span
from doctor.scorep_memory import PROPOSED

FILTER_NAME = "scorep.filter"
# Keep the training script's own functions and the user regions (scorep.user.region names
# are recorded as `user:NAME`); everything torch, the standard library and site-packages call
# is left out. Checked with real Score-P 8.4 + scorep 4.5.1: ~300 KB instead of ~40 MB per rank.
DIAGNOSTIC_FILTER = """\
# Score-P filter for a diagnostic run, written by gpu-doctor (SCP010).
# {why}
SCOREP_REGION_NAMES_BEGIN
  EXCLUDE {exclude}
  INCLUDE __main__:* user:*
SCOREP_REGION_NAMES_END
"""


def _proposals(ctx: RemedyContext, key: str = "proposed") -> list[Any]:
    return [t.data.get(key) for t in ctx.targets() if t.data.get(key) is not None]


def _size(value: str) -> int:
    try:
        return parse_size(value)
    except SizeError:
        return 0


def _set_or_export(ctx: RemedyContext, name: str, value: str, smaller: Callable[[str], bool]) -> None:
    """Raise every setting of NAME the launch reads where `smaller(old)`, else export it before the launch."""
    job = job_of(ctx)
    found = settings(job, name)
    if not found:
        export_before_launch(ctx, name, value)
        return
    edits = SpanEdits(ctx)
    changed: list[str] = []
    manual: list[str] = []
    for var, _cmds in found:
        if var.value is not None and not smaller(var.value):
            continue
        span = value_span(var)
        if span is None or var.site is None or var.value is None:
            at = f"{job.rel(var.site.file)}:{var.site.line}" if var.site is not None else "the environment"
            manual.append(f"{name}={var.raw} ({at}) is only known when the job runs; set it to {value} there")
            continue
        edits.replace(span, value)
        changed.append(f"{name}={var.value} -> {value}")
    if changed:
        edits.write(ENV, "; ".join(dict.fromkeys(changed)))
    elif manual:
        raise CannotPlan(manual[0], manual)
    else:
        ctx.note = f"{name} is already {value} or more"


def export_before_launch(ctx: RemedyContext, name: str, value: str) -> Path:
    """`export NAME=value` right before the statement that starts the instrumented launch the
    findings point at (the outermost launcher when the launch runs in a wrapper's workers)."""
    job = job_of(ctx)
    if not job.instrumented:
        raise CannotPlan(f"no `python -m scorep` launch found to set {name} for",
                         [f"Add `export {name}={value}` to the job script before the instrumented launch."])
    root = chain_root(at_targets(ctx, job.instrumented)[0][0])
    edits = SpanEdits(ctx)
    line = f"export {name}={value}"
    edits.insert_lines_before(root.site.file, root.statement_line or root.site.line, [line])
    edits.write(ENV, line)
    return Path(root.site.file)


@remedy("scorep-measurement-memory", Safety.SAFE,
        "Give Score-P enough measurement memory (SCOREP_TOTAL_MEMORY) for what the job instruments",
        phase=Phase.FLAGS)
def measurement_memory(ctx: RemedyContext) -> None:
    """Set SCOREP_TOTAL_MEMORY to the largest proposal of the findings (256M by default): raise
    a setting that is smaller, else export it before the instrumented launch."""
    sizes = [(_size(str(p)), str(p)) for p in _proposals(ctx)] or [(_size(PROPOSED), PROPOSED)]
    want, value = max(sizes)
    _set_or_export(ctx, "SCOREP_TOTAL_MEMORY", value, lambda old: _size(old) < want)


@remedy("scorep-callpath-depth", Safety.SAFE,
        "Raise SCOREP_PROFILING_MAX_CALLPATH_DEPTH to the depth Score-P reached", phase=Phase.FLAGS)
def callpath_depth(ctx: RemedyContext) -> None:
    """Set SCOREP_PROFILING_MAX_CALLPATH_DEPTH to the depth of the log's warning."""
    depths = [int(p) for p in _proposals(ctx) if str(p).isdigit()]
    if not depths:
        ctx.note = "no call-path depth warning in the logs: nothing to raise"
        return
    want = max(depths)
    _set_or_export(ctx, "SCOREP_PROFILING_MAX_CALLPATH_DEPTH", str(want),
                   lambda old: not old.isdigit() or int(old) < want)


def filter_text(exclude_modules: list[str], source: str | None) -> str:
    """The filter: EXCLUDE the profile's heaviest modules, or everything, keeping __main__ and user regions."""
    if exclude_modules:
        patterns = " ".join(p for m in exclude_modules for p in (f"{m}:*", f"{m}.*"))
        why = (f"Excludes the modules with the most region visits in {source} (the profile run's "
               "`scorep-score` ranking).")
    else:
        patterns = "*"
        why = "No profile run yet: measures only the training script's own functions and the user regions."
    return DIAGNOSTIC_FILTER.format(why=why, exclude=patterns)


@remedy("scorep-filter-file", Safety.SAFE,
        "Write a Score-P filter file for the diagnostic run and set SCOREP_FILTERING_FILE",
        phase=Phase.FLAGS)
def filter_file(ctx: RemedyContext) -> None:
    """Create scorep.filter next to the job script (from the profile's heaviest modules when a
    profile run was found) and export SCOREP_FILTERING_FILE before the instrumented launch."""
    modules: list[str] = []
    source = None
    for t in ctx.targets():
        for m in t.data.get("exclude_modules") or []:
            if m not in modules:
                modules.append(str(m))
        source = source or t.data.get("profile")
    script = export_before_launch(ctx, "SCOREP_FILTERING_FILE", FILTER_NAME)
    target = script.parent / FILTER_NAME
    if ctx.draft.read(target) is None:
        ctx.create(target, filter_text(modules, source), f"write {FILTER_NAME}")
    else:
        ctx.note = f"{target.name} exists already: it is used as it is"

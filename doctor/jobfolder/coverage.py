"""Whether the job was checked at all: a job that was not read never passes.

The job-layer checks each say `unknown` where their input could not be read; this module says
so for the whole job, in one line the verdict shows as NOT CHECKED / NOTHING CHECKED:

- a job script that could not be read (binary, refused, too deep): bash would run it, gpu-doctor
  did not read it;
- the program a launch starts does not exist, or cannot be analysed: what it does is not known
  (and where it does not exist the job fails when it starts);
- every job-layer check skipped or unknown: nothing was checked (no launch found, a launch only
  known when the job runs).
"""

from __future__ import annotations

from collections.abc import Iterable

from doctor.jobfolder.model import Job
from doctor.model import CheckResult, Status

JOB_LAYERS = ("scorep", "launcher", "script", "trainer")
# job-layer checks whose pass is about the node (LNC003: this node's runtime is not broken), not the job
ABOUT_THE_NODE = {"LNC003"}
_UNCHECKED = (Status.SKIP, Status.UNKNOWN, Status.TIMEOUT)


def not_read(job: Job) -> str | None:
    """Why part of the job that runs was not read (a job script, the program it starts), or None."""
    for f in job.shell_files:
        if f.role == "job" and not f.analysed:
            note = next((n for n in job.notes if n.file == f.path), None)
            return f"{job.rel(f.path)} was not read ({note.text if note else 'unreadable'})"
    for s in job.scripts:
        if s.role in ("entry", "launcher") and s.origin is not None and s.problem:
            where = f"{job.rel(s.origin.file)}:{s.origin.line}"
            return f"{job.rel(s.path)}, which {where} starts, {_problem(s.problem)}"
    for n in job.notes:
        if n.kind == "recursive":
            return f"{job.rel(n.file)}:{n.line} {n.text}"
    return None


def _problem(text: str) -> str:
    return text if text.startswith(("does not", "is ")) else f"was not read ({text})"


def nothing_found(job: Job) -> str:
    """Why no job-layer check had anything to look at."""
    from doctor.jobfolder.queries import unfollowed

    links = unfollowed(job)
    if links:
        n = links[0]
        return f"no launch found that gpu-doctor can follow ({job.rel(n.file)}:{n.line or '?'}: {n.text})"
    if not job.shell_files and not job.scripts:
        return f"no job script or Python script found in {job.root}"
    if not job.launches:
        return f"no launch found in {job.rel(job.shell_files[0].path) if job.shell_files else job.root}"
    return "every job check was skipped or unknown"


def not_checked(job: Job | None, results: Iterable[CheckResult]) -> tuple[str, str] | None:
    """("NOTHING CHECKED" or "NOT CHECKED", why) for a run over a job folder; None when the job was checked."""
    if job is None or job.root is None:
        return None
    results = [r for r in results if r.layer in JOB_LAYERS and r.check_id not in ABOUT_THE_NODE]
    if not results:
        return None
    why = not_read(job)
    if all(r.status in _UNCHECKED for r in results):
        return "NOTHING CHECKED", why or nothing_found(job)
    return ("NOT CHECKED", why) if why else None

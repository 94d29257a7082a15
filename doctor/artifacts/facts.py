"""Facts of the artifacts area: `experiments` and `logscan`.

`experiments` (an `Experiments`): every Score-P experiment folder under the job
folder with its scorep.cfg and trace/profile definition summaries.
`logscan` (a `LogScan`, a list): `{"signature", "file", "line", "text", "values"}`
per match of a known failure message in the job's logs (`--log` overrides discovery), and
`run`: what the run that wrote the log had (`scorep`, `cuda`, `node`: on this host; None where not
known), by its launch record or the log's own lines, or None for a Slurm output file of the job
(the job script's run: the job model says). See doctor.artifacts.runrecord.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from doctor.artifacts.discover import discover
from doctor.artifacts.experiments import Experiments, summarize
from doctor.artifacts.logscan import LogScan, discover_logs, scan_logs
from doctor.artifacts.runrecord import run_of_log
from doctor.facts import ProbeContext, ProbeTimeout, provider


def _root_only(ctx: ProbeContext) -> bool:
    """As root in gate mode: follow no symlinks, import nothing user-writable."""
    return ctx.case.gate and ctx.case.as_root


@provider("experiments", timeout=90.0, reads_user_files=True)
def experiments(ctx: ProbeContext) -> Experiments:
    root = ctx.case.root
    if root is None:
        return Experiments(None, ())
    dirs = discover(Path(root), follow_symlinks=not _root_only(ctx))
    return summarize(str(root), dirs, ctx.limit(), isolated=_root_only(ctx))


def _log_paths(ctx: ProbeContext) -> list[Path]:
    """The job's logs: `--log` files, else the ones found in the job folder."""
    case = ctx.case
    if case.logs:
        return [Path(p) for p in case.logs]
    if case.root is not None and Path(case.root).is_dir():
        return discover_logs(Path(case.root), follow_symlinks=not _root_only(ctx))
    return []


@provider("logscan", timeout=120.0, reads_user_files=True)
def logscan(ctx: ProbeContext) -> LogScan:
    case = ctx.case
    try:
        scan = scan_logs(_log_paths(ctx), deadline=time.monotonic() + ctx.limit())
    except TimeoutError as exc:
        raise ProbeTimeout(str(exc)) from None
    runs: dict[str, dict[str, Any] | None] = {}
    for match in scan:
        if match["file"] not in runs:
            runs[match["file"]] = run_of_log(match["file"], case.host)
        match["run"] = runs[match["file"]]
    return scan


@provider("collective_logs", timeout=120.0, reads_user_files=True)
def collective_logs(ctx: ProbeContext) -> Any:
    """ART005's fact: watchdog timeouts, desync reports and NCCL RAS lines in the job's logs."""
    from doctor.artifacts.logscan import launch_logs
    from doctor.hang.flight import read_run
    from doctor.hang.logs import scan

    case = ctx.case
    found = scan(_log_paths(ctx))
    if case.root is not None and Path(case.root).is_dir():
        rank_logs = launch_logs(Path(case.root), follow_symlinks=not _root_only(ctx))
        if rank_logs:
            found.flight = read_run(rank_logs[0].parent)
    return found

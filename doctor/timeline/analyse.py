"""`analyse(paths)`: the whole timeline analysis, for the CLI, the TUI and the report."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

from doctor.timeline.classify import DEFAULT_STEP_REGEX, compile_step_regex
from doctor.timeline.discover import RunFolder, group_runs
from doctor.timeline.model import ProfileSums, RankTimeline, RunTimeline, TimelineReport
from doctor.timeline.profile import ProfileError, read_profile
from doctor.timeline.scaling import scaling_table
from doctor.timeline.trace import TraceError, read_trace

WINDOWS = ("region", "iteration")


def analyse(paths: Sequence[Path] | Path, step_regex: str | None = None, window: str = "region",
            keep_steps: int = 10_000, on_progress: Callable[[str], None] | None = None) -> TimelineReport:
    """Analyse every experiment folder under `paths`; never raises for bad traces (they become
    notes). Raises ValueError for an invalid `step_regex` or `window`."""
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {', '.join(WINDOWS)}, got {window!r}")
    pattern = compile_step_regex(step_regex)
    roots = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    notes = [f"{root}: no such file or folder" for root in roots if not root.exists()]
    folders = group_runs([root for root in roots if root.exists()])
    if not folders and not notes:
        notes.append("no Score-P experiment folders (traces.otf2, profile.cubex, scorep_rank_N, "
                     f"scorep-*) under {', '.join(str(r) for r in roots)}")
    runs = [_run(folder, pattern, window, keep_steps, on_progress) for folder in folders]
    scaling, scaling_notes = scaling_table(runs)
    return TimelineReport(step_regex=pattern.pattern if step_regex is not None else DEFAULT_STEP_REGEX,
                          window=window, runs=tuple(runs), scaling=tuple(scaling),
                          notes=tuple(notes + scaling_notes))


def _run(folder: RunFolder, pattern: re.Pattern[str], window: str, keep_steps: int,
         on_progress: Callable[[str], None] | None) -> RunTimeline:
    ranks: list[RankTimeline] = []
    profiles: list[ProfileSums] = []
    notes: list[str] = []
    for experiment in folder.experiments:
        if on_progress:
            on_progress(f"reading {experiment}")
        if (experiment / "traces.otf2").is_file():
            try:
                ranks.extend(read_trace(experiment, pattern, window, keep_steps))
                continue
            except TraceError as exc:
                notes.append(str(exc))
        if (experiment / "profile.cubex").is_file():
            try:
                profiles.append(read_profile(experiment, pattern))
            except ProfileError as exc:
                notes.append(str(exc))
        elif not (experiment / "traces.otf2").is_file():
            notes.append(f"{experiment}: no traces.otf2 or profile.cubex (the rank died before "
                         "Score-P flushed, or the measurement never started)")
    if ranks and profiles:
        # A run is read one way: the timeline where traces exist; profiles of the other ranks
        # would mix sums into a timeline table.
        notes.append(f"{len(profiles)} experiment(s) have only a profile; their sums are listed apart")
    return RunTimeline(folder.label, folder.path, tuple(ranks), tuple(profiles), tuple(notes))

"""`analyse(paths)`: the whole timeline analysis, for the CLI, the TUI and the report."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from doctor.timeline import creader
from doctor.timeline.classify import DEFAULT_STEP_REGEX, compile_step_regex
from doctor.timeline.discover import group_runs
from doctor.timeline.experiment import ExperimentRead, ReadOptions, build_run, joined, tasks_for, wanted
from doctor.timeline.model import RankRange, TimelineReport
from doctor.timeline.parallel import read_all
from doctor.timeline.progress import Progress
from doctor.timeline.scaling import scaling_table

WINDOWS = ("region", "iteration")


def analyse(paths: Sequence[Path] | Path, step_regex: str | None = None, window: str = "region",
            keep_steps: int = 10_000, on_progress: Callable[[Progress], None] | None = None, *,
            reader: str = creader.AUTO, jobs: int = 1, rank_range: RankRange | None = None) -> TimelineReport:
    """Analyse every experiment folder under `paths`, `jobs` folders at a time in worker processes
    (the same result as one at a time); never raises for bad traces (they become notes).
    Raises ValueError for an invalid `step_regex`, `window` or `reader`."""
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {', '.join(WINDOWS)}, got {window!r}")
    pattern = compile_step_regex(step_regex)
    # Chosen here, not in the workers: they may have started with another environment.
    options = ReadOptions(pattern, window, keep_steps, creader.choose(reader), rank_range)
    roots = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    notes = [f"{root}: no such file or folder" for root in roots if not root.exists()]
    folders = group_runs([root for root in roots if root.exists()])
    if not folders and not notes:
        notes.append("no Score-P experiment folders (traces.otf2, profile.cubex, scorep_rank_N, "
                     f"scorep-*) under {', '.join(str(r) for r in roots)}")
    chosen = [(folder, [e for e in folder.experiments if wanted(e, rank_range)]) for folder in folders]
    tasks = tasks_for([e for _, experiments in chosen for e in experiments], jobs)
    parts: dict[Path, list[ExperimentRead]] = {}
    for task, read in zip(tasks, read_all(tasks, options, jobs, on_progress), strict=True):
        parts.setdefault(task.experiment, []).append(read)
    runs = [build_run(folder.label, folder.path, [joined(parts[e]) for e in experiments])
            for folder, experiments in chosen if experiments or rank_range is None]
    scaling, scaling_notes = scaling_table(runs)
    return TimelineReport(step_regex=pattern.pattern if step_regex is not None else DEFAULT_STEP_REGEX,
                          window=window, runs=tuple(runs), scaling=tuple(scaling),
                          notes=tuple(notes + scaling_notes), rank_range=rank_range)

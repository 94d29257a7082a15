"""One experiment folder, read: the unit of work of `analyse` and of its worker processes.

`read_experiment` reads a folder's trace (its ranks' timelines) or, failing that, its profile;
`build_run` puts a run together from its folders' reads, in folder order. `--merge` rebuilds
runs from the JSON documents of parts with the same `build_run`, so a merged report equals
the whole one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from doctor.timeline import creader
from doctor.timeline.model import ExperimentNotes, ProfileSums, RankRange, RankTimeline, RunTimeline
from doctor.wording import count

_RANK_IN_FOLDER = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
_PROFILE_ONLY = re.compile(r"^\d+ experiment\(s\) have only a profile")


@dataclass(frozen=True)
class ReadOptions:
    """How each experiment folder is read (sent to the worker processes as is)."""

    step_regex: re.Pattern[str]
    window: str = "region"
    keep_steps: int = 10_000
    reader: str = creader.AUTO
    rank_range: RankRange | None = None


@dataclass(frozen=True)
class ExperimentRead:
    """What one experiment folder gave: its ranks' timelines, or its profile, and notes."""

    path: Path
    ranks: tuple[RankTimeline, ...] = ()
    profile: ProfileSums | None = None
    notes: tuple[str, ...] = ()
    events: int = 0
    failed: bool = False       # its trace could not be read


def folder_rank(experiment: Path) -> int | None:
    """N of a per-rank folder `scorep_rank_N`; None for folders named otherwise."""
    match = _RANK_IN_FOLDER.search(experiment.name)
    return int(match[1]) if match else None


def wanted(experiment: Path, rank_range: RankRange | None) -> bool:
    """Folders of ranks outside the range are not opened; unnumbered ones are (their processes
    are picked by number inside)."""
    number = folder_rank(experiment)
    return rank_range is None or number is None or number in rank_range


@dataclass(frozen=True)
class Task:
    """One worker's share: an experiment folder, or part `k` of `n` of its processes (block k of
    the trace's processes in their order: the parts' ranks, put one after the other, are the
    whole trace's)."""

    experiment: Path
    part: tuple[int, int] | None = None


def tasks_for(experiments: list[Path], jobs: int) -> list[Task]:
    """Folders, and where there are fewer folders than jobs, the traces not named per rank
    (one trace holding many processes, MPI-style) split into parts."""
    parts = jobs // len(experiments) if experiments else 1
    tasks = []
    for experiment in experiments:
        if parts > 1 and folder_rank(experiment) is None and (experiment / "traces.otf2").is_file():
            tasks += [Task(experiment, (k, parts)) for k in range(parts)]
        else:
            tasks.append(Task(experiment))
    return tasks


def joined(reads: list[ExperimentRead]) -> ExperimentRead:
    """The parts of one folder as one read, as if it had been read whole: if a part could not
    be read, neither could the whole trace."""
    first = reads[0]
    notes = tuple(dict.fromkeys(note for read in reads for note in read.notes))
    if any(read.failed for read in reads):
        profile = next((read.profile for read in reads if read.profile is not None), None)
        return ExperimentRead(first.path, profile=profile, notes=notes, failed=True)
    ranks = tuple(rank for read in reads for rank in read.ranks)
    return ExperimentRead(first.path, ranks, first.profile, notes, sum(r.events for r in ranks))


def read_experiment(experiment: Path, options: ReadOptions, on_events: Callable[[int], None] | None = None,
                    part: tuple[int, int] | None = None) -> ExperimentRead:
    """One experiment folder (or part of its processes): the trace's timelines where it has a
    trace, else its profile."""
    from doctor.timeline.profile import ProfileError, read_profile
    from doctor.timeline.trace import TraceError, read_trace

    notes: list[str] = []
    rank_range = options.rank_range

    def keep(number: int | None, index: int, total: int) -> bool:
        return ((rank_range is None or number in rank_range)
                and (part is None or index * part[1] // total == part[0]))

    failed = False
    if experiment.name.endswith((".pt.trace.json", ".pt.trace.json.gz")):
        return _read_kineto(experiment, options, on_events)
    if (experiment / "traces.otf2").is_file():
        try:
            ranks = read_trace(experiment, options.step_regex, options.window, options.keep_steps,
                               options.reader, keep, on_events)
            return ExperimentRead(experiment, tuple(ranks), events=sum(r.events for r in ranks))
        except TraceError as exc:
            notes.append(str(exc))
            failed = True
    if (experiment / "profile.cubex").is_file():
        if folder_rank(experiment) not in (options.rank_range or RankRange()):
            return ExperimentRead(experiment, notes=tuple(notes), failed=failed)
        try:
            return ExperimentRead(experiment, profile=read_profile(experiment, options.step_regex),
                                  notes=tuple(notes), failed=failed)
        except ProfileError as exc:
            notes.append(str(exc))
    elif not (experiment / "traces.otf2").is_file():
        notes.append(f"{experiment}: no traces.otf2 or profile.cubex (the rank died before "
                     "Score-P flushed, or the measurement never started)")
    return ExperimentRead(experiment, notes=tuple(notes), failed=failed)


def _read_kineto(path: Path, options: ReadOptions, on_events: Callable[[int], None] | None) -> ExperimentRead:
    from doctor.timeline.kineto import KinetoError, read_kineto

    try:
        rank = read_kineto(path, options.step_regex, options.window, options.keep_steps, on_events)
    except KinetoError as exc:
        return ExperimentRead(path, notes=(str(exc),), failed=True)
    if options.rank_range is not None and rank.rank not in options.rank_range:
        return ExperimentRead(path)
    return ExperimentRead(path, (rank,), events=rank.events)


def build_run(label: str, path: Path, reads: Iterable[ExperimentRead]) -> RunTimeline:
    """A run from its experiment folders' reads, in folder order (also what --merge rebuilds)."""
    reads = list(reads)
    ranks = [rank for read in reads for rank in read.ranks]
    if ranks and all(rank.format == "kineto" for rank in ranks):
        # torch.profiler's file names say nothing of the rank: order by distributedInfo.rank
        ranks.sort(key=lambda r: (r.rank is None, r.rank or 0, r.label))
    profiles = [read.profile for read in reads if read.profile is not None]
    notes = [note for read in reads for note in read.notes]
    if ranks and profiles:
        # A run is read one way: the timeline where traces exist; profiles of the other ranks
        # would mix sums into a timeline table.
        notes.append(f"{count(len(profiles), 'experiment has', 'experiments have')} only a profile; "
                     "their sums are listed apart")
    return RunTimeline(label, path, tuple(ranks), tuple(profiles), tuple(notes),
                       tuple(ExperimentNotes(read.path, read.notes) for read in reads))


def is_run_summary_note(note: str) -> bool:
    """Notes `build_run` adds itself (rebuilt by --merge, not copied)."""
    return bool(_PROFILE_ONLY.match(note))

"""The timeline's values: what the TUI, the report and `gpu-doctor timeline --json` show.

Times inside a `Breakdown` are integer ticks of the trace's timer (`resolution` ticks per
second), so the interval arithmetic is exact; `to_json()` gives seconds.

JSON document (`TimelineReport.to_json()`, `schema` = "gpu-doctor.timeline/1"):
- `step_regex`, `window` ("region": a step is its region's span; "iteration": from one step's
  start to the next one's), `reader` ("c": the C extension, "python": the otf2 package's
  callbacks, "c+python" when ranks were read both ways, "none" when no trace was read),
  `rank_range` ("A:B" as given to --rank-range, or null), `notes` (strings), `runs`, `scaling`.
- `runs[]`: `label`, `path`, `ranks` (count), `source` ("trace", "profile" or "none"),
  `notes`, `experiments[]` (`path`, `notes`: each experiment folder read, what
  `--merge` needs to put split runs back together), `rank_timelines[]`, `profiles[]`.
- `rank_timelines[]`: `rank` (int or null), `label`, `experiment` (folder), `reader`, `devices`,
  `gpu_locations`, `resolution` (ticks/s), `events` (records in the locations read), `notes`,
  `whole_run` (a breakdown over the trace's whole clock window), `format` ("otf2" or "kineto"),
  `hta` (Holistic Trace Analysis' metrics under HTA's names, see `HtaCut.to_json`), `tensorboard`
  (the TensorBoard plugin's Computation / Overlapping / Communication / Other split of the step
  time, or of the whole run without steps), `regions` (CPU regions by exclusive time, the top
  ones, and `categories`: collectives / compute / data loading / other), `hints`, and `steps`:
  `{region, count, median_wall_s, mean_wall_s, min_wall_s, max_wall_s, total, mean, list}`
  where `total` and `mean` are breakdowns and `list` holds the first steps kept (each a
  breakdown plus `index` and `start_s`, seconds since the trace's start); `collective_starts_s`:
  per step, when its last NCCL kernel started (seconds on the trace's own clock; null: none).
- `runs[].stragglers` (null with fewer than two ranks with collectives in their steps): `steps`
  (compared), `per_step[]` (`step`, `rank` entering the step's last collective last, `lag_s`
  behind the median rank), `share` (rank -> share of last arrivals), `culprit`, `stability`
  (the culprit's share: 1.0 = the same rank is last in every step).
- breakdown: `wall_s`, `busy_s` (union of all GPU activity on the rank's streams), `idle_s`
  (wall - busy), `compute_s` (union of compute kernels), `comm_s` (union of NCCL kernels),
  `hidden_comm_s` (|comm ∩ compute|), `exposed_comm_s` (|comm \\ compute|), `other_s` (union
  of copies/memsets), `exposed_comm_share` (exposed / wall), `summed` (`compute_s`, `comm_s`,
  `other_s`: plain sums of kernel durations, what a profile shows), `kernels` (`compute`,
  `comm`: kernels started in the window).
- `profiles[]` (Cube profiles where no trace exists): `experiment`, `kind` = "sums, no overlap
  information", `wall_s`, `compute_sum_s`, `comm_sum_s`, `other_sum_s`, `compute_visits`,
  `comm_visits`, `step_count`, `step_time_s`, `notes`, `regions` (as for a trace: the top CPU
  regions by exclusive time and the four categories).
- `scaling[]`: `run`, `ranks`, `basis` ("median step" or "run wall"), `time_s`,
  `throughput` (ranks / time, relative units: samples/s for a fixed per-rank batch),
  `speedup`, `efficiency` (speedup / (ranks / smallest ranks)), `exposed_comm_share`.
"""

from __future__ import annotations

import statistics
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

SCHEMA = "gpu-doctor.timeline/1"
PROFILE_KIND = "sums, no overlap information"


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Where one window's wall time went on one rank's GPU(s), in ticks."""

    resolution: int
    wall: int = 0
    busy: int = 0
    compute: int = 0
    comm: int = 0
    hidden: int = 0
    other: int = 0
    compute_sum: int = 0
    comm_sum: int = 0
    other_sum: int = 0
    compute_kernels: int = 0
    comm_kernels: int = 0

    @property
    def exposed(self) -> int:
        """Communication with no compute kernel running beside it: |comm \\ compute|."""
        return self.comm - self.hidden

    @property
    def idle(self) -> int:
        return self.wall - self.busy

    def seconds(self, ticks: int) -> float:
        return ticks / self.resolution

    def __add__(self, other: Breakdown) -> Breakdown:
        if other.resolution != self.resolution:
            raise ValueError("cannot add breakdowns with different timer resolutions")
        return Breakdown(self.resolution, *(getattr(self, f.name) + getattr(other, f.name)
                                            for f in fields(self)[1:]))

    def to_json(self) -> dict[str, Any]:
        s = self.seconds
        return {
            "wall_s": s(self.wall), "busy_s": s(self.busy), "idle_s": s(self.idle),
            "compute_s": s(self.compute), "comm_s": s(self.comm),
            "hidden_comm_s": s(self.hidden), "exposed_comm_s": s(self.exposed),
            "other_s": s(self.other),
            "exposed_comm_share": self.exposed / self.wall if self.wall else None,
            "summed": {"compute_s": s(self.compute_sum), "comm_s": s(self.comm_sum),
                       "other_s": s(self.other_sum)},
            "kernels": {"compute": self.compute_kernels, "comm": self.comm_kernels},
        }


@dataclass(frozen=True, slots=True)
class Step:
    """One training step: its start (ticks since the trace's start) and its breakdown."""

    index: int
    start: int
    breakdown: Breakdown

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "start_s": self.breakdown.seconds(self.start),
                **self.breakdown.to_json()}


STEP_ROW = 2 + len(fields(Breakdown)) - 1   # index, start, then a Breakdown's ticks after resolution


@dataclass(frozen=True)
class StepSummary:
    """All steps of one rank: the total, the wall-time spread, and the first steps one by one.

    The steps kept one by one are `rows`, a flat int64 array of `STEP_ROW` values per step
    (index, start, wall, busy, ... as in Breakdown): ten thousand steps per rank cross from the
    worker processes as one buffer, and become `Step`s only where they are shown."""

    region: str
    count: int
    total: Breakdown
    median_wall: float
    min_wall: float
    max_wall: float
    rows: array[int] = field(default_factory=lambda: array("q"))
    comm_starts: array[int] = field(default_factory=lambda: array("q"))  # per step, absolute ticks, -1 none

    @property
    def kept(self) -> tuple[Step, ...]:
        r, rows = self.total.resolution, self.rows
        return tuple(Step(rows[i], rows[i + 1], Breakdown(r, *rows[i + 2:i + STEP_ROW]))
                     for i in range(0, len(rows), STEP_ROW))

    @property
    def kept_count(self) -> int:
        return len(self.rows) // STEP_ROW

    @property
    def mean(self) -> Breakdown:
        """The per-step mean (integer ticks, rounded down)."""
        t = self.total
        n = max(self.count, 1)
        return Breakdown(t.resolution, *(getattr(t, f.name) // n for f in fields(t)[1:]))

    def to_json(self) -> dict[str, Any]:
        return {"region": self.region, "count": self.count, "median_wall_s": self.median_wall,
                "mean_wall_s": self.total.seconds(self.total.wall) / max(self.count, 1),
                "min_wall_s": self.min_wall, "max_wall_s": self.max_wall,
                "total": self.total.to_json(), "mean": self.mean.to_json(),
                "list": [step.to_json() for step in self.kept],
                "collective_starts_s": [t / self.total.resolution if t >= 0 else None for t in self.comm_starts]}


def step_rows(steps: Iterable[Step]) -> array[int]:
    """`StepSummary.rows` from steps."""
    rows = array("q")
    for step in steps:
        rows.append(step.index)
        rows.append(step.start)
        rows.extend(getattr(step.breakdown, f.name) for f in fields(Breakdown)[1:])
    return rows


@dataclass(frozen=True)
class RankTimeline:
    """One rank's timeline, from its OTF2 trace."""

    label: str
    rank: int | None
    experiment: Path
    devices: tuple[int | str, ...]
    gpu_locations: tuple[str, ...]
    resolution: int
    events: int
    whole_run: Breakdown
    steps: StepSummary | None
    notes: tuple[str, ...] = ()
    reader: str = "python"
    hta: HtaCut | None = None
    regions: tuple[RegionTime, ...] = ()
    format: str = "otf2"
    hints: tuple[str, ...] = ()

    def tensorboard(self) -> dict[str, Any]:
        """The TensorBoard plugin's split of the step time (the whole run without steps)."""
        b = self.steps.total if self.steps else self.whole_run
        union = b.compute + b.comm - b.hidden
        parts = {"computation": b.compute - b.hidden, "overlapping": b.hidden, "communication": b.exposed,
                 "other": b.wall - union}
        out: dict[str, Any] = {"basis": "steps" if self.steps else "whole run"}
        for name, ticks in parts.items():
            out[f"{name}_s"] = b.seconds(ticks)
            out[f"{name}_pctg"] = round(100 * ticks / b.wall, 2) if b.wall else None
        return out

    def categories(self) -> dict[str, float]:
        """Exclusive CPU time (s) in collectives, compute, data loading and the rest."""
        out = dict.fromkeys(CATEGORIES, 0.0)
        for region in self.regions:
            out[region.category] += region.exclusive
        return out

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "label": self.label, "experiment": str(self.experiment), "reader": self.reader,
                "format": self.format,
                "devices": list(self.devices), "gpu_locations": list(self.gpu_locations),
                "resolution": self.resolution, "events": self.events,
                "whole_run": self.whole_run.to_json(),
                "hta": self.hta.to_json() if self.hta else None, "tensorboard": self.tensorboard(),
                "regions": {"top": [r.to_json() for r in self.regions], "categories": self.categories()},
                "hints": list(self.hints),
                "steps": self.steps.to_json() if self.steps else None, "notes": list(self.notes)}


CATEGORIES = ("collectives", "compute", "data_loading", "other")


@dataclass(frozen=True)
class RegionTime:
    """One CPU region of a rank: exclusive seconds (time on top of a thread's stack) and visits."""

    name: str
    exclusive: float
    visits: int
    category: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "exclusive_s": self.exclusive, "visits": self.visits, "category": self.category}


@dataclass(frozen=True)
class HtaCut:
    """The running figures Holistic Trace Analysis' metrics are made of, in ticks, over HTA's
    window: up to the start of the last step when there are two or more (HTA leaves the last
    profiler step out), else the whole trace. `first_kernel` < 0: no kernel at all."""

    resolution: int
    first_kernel: int
    last_end: int
    busy: int
    compute: int
    comm: int
    hidden: int
    host_wait: int
    kernel_wait: int
    other_wait: int
    last_step_left_out: bool
    launches: bool = False       # the trace links kernels to their launches (Kineto): host wait is known

    def to_json(self) -> dict[str, Any]:
        r = self.resolution
        kernel_time = max(self.last_end - self.first_kernel, 0) if self.first_kernel >= 0 else 0
        idle = max(kernel_time - self.busy, 0)
        non_compute = kernel_time - self.compute - idle

        def pct(part: int, whole: int) -> float | None:
            return round(100 * part / whole, 2) if whole else None

        waits = self.host_wait + self.kernel_wait + self.other_wait
        host: int | None = self.host_wait if self.launches else None
        return {
            "window": ("up to the last step's start (HTA leaves the last profiler step out)"
                       if self.last_step_left_out else "the whole trace"),
            "temporal_breakdown": {
                "kernel_time_s": kernel_time / r, "idle_time_s": idle / r, "compute_time_s": self.compute / r,
                "non_compute_time_s": non_compute / r, "idle_time_pctg": pct(idle, kernel_time),
                "compute_time_pctg": pct(self.compute, kernel_time),
                "non_compute_time_pctg": pct(non_compute, kernel_time)},
            "idle_breakdown": {
                "host_wait_s": None if host is None else host / r, "kernel_wait_s": self.kernel_wait / r,
                "other_s": (self.other_wait + (0 if self.launches else self.host_wait)) / r,
                "host_wait_pctg": None if host is None else pct(host, waits),
                "kernel_wait_pctg": pct(self.kernel_wait, waits),
                "other_pctg": pct(self.other_wait + (0 if self.launches else self.host_wait), waits),
                "host_wait_known": self.launches},
            "comp_comm_overlap_pctg": pct(self.hidden, self.comm),
            "ticks": [self.first_kernel, self.last_end, self.busy, self.compute, self.comm, self.hidden,
                      self.host_wait, self.kernel_wait, self.other_wait],
        }


@dataclass(frozen=True)
class ProfileSums:
    """The same categories from a Cube profile: sums, no overlap information."""

    experiment: Path
    label: str
    rank: int | None
    wall: float
    compute_sum: float
    comm_sum: float
    other_sum: float
    compute_visits: int
    comm_visits: int
    step_count: int
    step_time: float
    notes: tuple[str, ...] = ()
    regions: tuple[RegionTime, ...] = ()      # CPU regions by exclusive time (all of them)

    def categories(self) -> dict[str, float]:
        out = dict.fromkeys(CATEGORIES, 0.0)
        for region in self.regions:
            out[region.category] += region.exclusive
        return out

    def to_json(self) -> dict[str, Any]:
        return {"experiment": str(self.experiment), "label": self.label, "rank": self.rank,
                "regions": {"top": [r.to_json() for r in self.regions[:8]], "categories": self.categories()},
                "kind": PROFILE_KIND, "wall_s": self.wall, "compute_sum_s": self.compute_sum,
                "comm_sum_s": self.comm_sum, "other_sum_s": self.other_sum,
                "compute_visits": self.compute_visits, "comm_visits": self.comm_visits,
                "step_count": self.step_count, "step_time_s": self.step_time, "notes": list(self.notes)}


@dataclass(frozen=True)
class ExperimentNotes:
    """One experiment folder that was read, and what could not be read in it."""

    path: Path
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "notes": list(self.notes)}


@dataclass(frozen=True)
class RunTimeline:
    """One run of the job: the experiment folders of its ranks."""

    label: str
    path: Path
    ranks: tuple[RankTimeline, ...]
    profiles: tuple[ProfileSums, ...]
    notes: tuple[str, ...] = ()
    experiments: tuple[ExperimentNotes, ...] = ()

    @property
    def rank_count(self) -> int:
        return len(self.ranks) + len(self.profiles)

    @property
    def source(self) -> str:
        return "trace" if self.ranks else "profile" if self.profiles else "none"

    def stragglers(self) -> Stragglers | None:
        """Who entered the steps' last collective last, across this run's ranks (or None)."""
        return find_stragglers(self.ranks)

    def to_json(self) -> dict[str, Any]:
        found = self.stragglers()
        return {"label": self.label, "path": str(self.path), "ranks": self.rank_count,
                "source": self.source, "notes": list(self.notes),
                "stragglers": found.to_json() if found else None,
                "experiments": [e.to_json() for e in self.experiments],
                "rank_timelines": [r.to_json() for r in self.ranks],
                "profiles": [p.to_json() for p in self.profiles]}


@dataclass(frozen=True)
class ScalingRow:
    """One run in the scaling table, against the run with the fewest ranks."""

    run: str
    ranks: int
    basis: str
    time: float
    throughput: float
    speedup: float
    efficiency: float
    exposed_comm_share: float | None

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "ranks": self.ranks, "basis": self.basis, "time_s": self.time,
                "throughput": self.throughput, "speedup": self.speedup, "efficiency": self.efficiency,
                "exposed_comm_share": self.exposed_comm_share}


@dataclass(frozen=True)
class RankRange:
    """`--rank-range A:B`: ranks A <= rank < B (either end may be left out, as in a Python slice).

    A rank without a number (an experiment folder not named `..._rank_N` holding one process)
    belongs to the range that holds rank 0, so that the ranges of a split run cover it once."""

    start: int | None = None
    stop: int | None = None

    @classmethod
    def parse(cls, text: str) -> RankRange:
        """"0:8", "8:", ":4"; raises ValueError naming the problem."""
        head, sep, tail = text.partition(":")
        try:
            start = int(head) if head.strip() else None
            stop = int(tail) if tail.strip() else None
        except ValueError:
            start = stop = -1
        if not sep or (start is not None and start < 0) or (stop is not None and stop < 0):
            raise ValueError(f"--rank-range wants A:B with whole numbers A <= rank < B, got {text!r}")
        if start is not None and stop is not None and stop <= start:
            raise ValueError(f"--rank-range {text}: B must be greater than A")
        return cls(start, stop)

    def __contains__(self, rank: object) -> bool:
        number = 0 if rank is None else rank
        if not isinstance(number, int):
            return False
        return (self.start is None or number >= self.start) and (self.stop is None or number < self.stop)

    def __str__(self) -> str:
        return f"{'' if self.start is None else self.start}:{'' if self.stop is None else self.stop}"


@dataclass(frozen=True)
class TimelineReport:
    """Everything `gpu-doctor timeline` found under its PATHs."""

    step_regex: str
    window: str
    runs: tuple[RunTimeline, ...]
    scaling: tuple[ScalingRow, ...]
    notes: tuple[str, ...] = ()
    rank_range: RankRange | None = None

    @property
    def analysed(self) -> bool:
        """True when at least one rank's trace or profile was read."""
        return any(run.ranks or run.profiles for run in self.runs)

    @property
    def reader(self) -> str:
        """Which reader streamed the traces: "c", "python", "c+python", or "none"."""
        used = {rank.reader for run in self.runs for rank in run.ranks}
        return "+".join(sorted(used)) if used else "none"

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "step_regex": self.step_regex, "window": self.window,
                "reader": self.reader, "rank_range": str(self.rank_range) if self.rank_range else None,
                "notes": list(self.notes), "runs": [run.to_json() for run in self.runs],
                "scaling": [row.to_json() for row in self.scaling]}


# -- stragglers across steps ----------------------------------------------------------------------
#
# Stragglers across steps: per step, which rank entered the step's collective last, and by how much.
#
# In DDP every rank waits in the gradient AllReduce for the last one to arrive, so the rank whose
# last NCCL kernel of a step starts latest held the others up (Holistic Trace Analysis' "late
# start of the dominant collective"; HTA counts only kernels named `ncclKernel*`, this counts
# `ncclDevKernel*` too). Over the run: each rank's share of last arrivals, the culprit (the rank
# with the largest share), and its stability (that share: 1.0 = the same rank every step).
#
# Steps are matched by their index on each rank; as HTA does, the last step is left out (its
# kernels may run past the end of the trace) when there are two steps or more. Start times are
# on each rank's own trace clock: ranks of one node share it.


@dataclass(frozen=True)
class Stragglers:
    steps: int
    per_step: tuple[tuple[int, int | str, float], ...]   # (step, last rank, lag behind the median, s)
    share: dict[str, float]                              # rank -> share of last arrivals
    culprit: int | str
    stability: float

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "culprit": self.culprit, "stability": self.stability,
                "share": self.share,
                "per_step": [{"step": s, "rank": r, "lag_s": lag} for s, r, lag in self.per_step]}


def find_stragglers(ranks: Sequence[RankTimeline]) -> Stragglers | None:
    """None unless two ranks or more have steps with NCCL kernels."""
    starts = []
    for rank in ranks:
        if rank.steps is None or not any(t >= 0 for t in rank.steps.comm_starts):
            continue
        name: int | str = rank.rank if rank.rank is not None else rank.label
        r = rank.steps.total.resolution
        starts.append((name, [t / r if t >= 0 else None for t in rank.steps.comm_starts]))
    if len(starts) < 2:
        return None
    steps = min(len(s) for _, s in starts)
    if steps >= 2:
        steps -= 1
    per_step = []
    for k in range(steps):
        arrivals: list[tuple[float, int | str]] = [(t, name) for name, s in starts if (t := s[k]) is not None]
        if len(arrivals) < 2:
            continue
        latest, who = max(arrivals, key=lambda a: a[0])
        lag = latest - statistics.median(t for t, _ in arrivals)
        per_step.append((k, who, lag))
    if not per_step:
        return None
    counts: dict[str, int] = {str(name): 0 for name, _ in starts}
    for _, who, _ in per_step:
        counts[str(who)] += 1
    share = {name: n / len(per_step) for name, n in counts.items()}
    culprit_key = max(share, key=lambda n: (share[n], -list(share).index(n)))
    culprit = next(name for name, _ in starts if str(name) == culprit_key)
    return Stragglers(len(per_step), tuple(per_step), share, culprit, share[culprit_key])

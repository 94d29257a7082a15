"""The scaling table: the same job at different rank counts.

DDP keeps the batch per rank fixed, so a run with N ranks does N times the work per step
(weak scaling): throughput is proportional to ranks / step time, and the efficiency against
the smallest run is (throughput / smallest throughput) / (ranks / smallest ranks), which is
smallest step time / this step time. The step time of a run is the mean over its ranks of each
rank's median step (the median ignores the slow first steps). Where some run has no steps, all
runs fall back to the whole-run wall time, which is only comparable if every run did the same
number of steps.
"""

from __future__ import annotations

from statistics import mean

from doctor.timeline.model import RunTimeline, ScalingRow

STEP_BASIS = "median step"
RUN_BASIS = "run wall"


def scaling_table(runs: list[RunTimeline]) -> tuple[list[ScalingRow], list[str]]:
    """Rows in rank order and notes; empty when fewer than two runs with different rank counts."""
    usable = [run for run in runs if run.rank_count]
    if len({run.rank_count for run in usable}) < 2:
        return [], []
    notes = []
    basis = STEP_BASIS if all(_step_time(run) is not None for run in usable) else RUN_BASIS
    if basis == RUN_BASIS:
        notes.append("scaling uses whole-run wall time (some run has no step regions): comparable "
                     "only if every run did the same number of steps")
    measured = []
    for run in sorted(usable, key=lambda r: (r.rank_count, r.label)):
        time = _step_time(run) if basis == STEP_BASIS else _run_time(run)
        if time is None or time <= 0:
            notes.append(f"{run.label}: no time to compare; left out of the scaling table")
            continue
        measured.append((run, time))
    if len(measured) < 2:
        return [], notes
    base_run, base_time = measured[0]
    base_throughput = base_run.rank_count / base_time
    rows = []
    for run, time in measured:
        throughput = run.rank_count / time
        speedup = throughput / base_throughput
        rows.append(ScalingRow(run.label, run.rank_count, basis, time, throughput, speedup,
                               speedup / (run.rank_count / base_run.rank_count), _exposed_share(run, basis)))
    return rows, notes


def _step_time(run: RunTimeline) -> float | None:
    if run.ranks:
        medians = [r.steps.median_wall for r in run.ranks if r.steps]
        return mean(medians) if medians else None
    times = [p.step_time / p.step_count for p in run.profiles if p.step_count]
    return mean(times) if times else None


def _run_time(run: RunTimeline) -> float | None:
    if run.ranks:
        return mean(r.whole_run.seconds(r.whole_run.wall) for r in run.ranks)
    walls = [p.wall for p in run.profiles if p.wall > 0]
    return mean(walls) if walls else None


def _exposed_share(run: RunTimeline, basis: str) -> float | None:
    """Exposed communication / wall over all ranks (None from profiles: sums cannot tell)."""
    if not run.ranks:
        return None
    windows = [r.steps.total if basis == STEP_BASIS and r.steps else r.whole_run for r in run.ranks]
    wall = sum(w.seconds(w.wall) for w in windows)
    return sum(w.seconds(w.exposed) for w in windows) / wall if wall else None

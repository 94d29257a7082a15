"""Rich tables for `gpu-doctor timeline`: per rank, per step, profile sums, scaling."""

from __future__ import annotations

from typing import TYPE_CHECKING

from doctor.timeline.model import PROFILE_KIND, Breakdown, RankTimeline, RunTimeline, TimelineReport
from doctor.wording import count

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

LEGEND = ("busy = union of all GPU activity on the rank's streams; compute / comm = union of compute / "
          "NCCL kernels; hidden = comm ∩ compute; exposed = comm not under compute; idle = wall - busy. "
          "Σ = plain sums of kernel durations (what a profile shows): they double-count overlap.")


def seconds(value: float) -> str:
    """2.375 s, 12.3 ms, 40 µs."""
    size = abs(value)
    if size >= 1:
        return f"{value:.3f} s"
    if size >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    if size == 0:
        return "0"
    return f"{value * 1e6:.3g} µs"


def percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "-"


READERS = {"c": "the C reader (the sweep in OTF2's callbacks, doctor.timeline._sweep)",
           "python": "the Python reader (the otf2 package's callbacks)"}


def reader_line(report: TimelineReport) -> str:
    """`Events read by the C reader (...)`: which path ran."""
    used = report.reader.split("+")
    return "Events read by " + " and ".join(READERS.get(r, r) for r in used) + "."


def render(report: TimelineReport, console: Console, every_step: bool = False) -> None:
    if report.reader != "none":
        console.print(reader_line(report), highlight=False)
    if report.rank_range is not None:
        console.print(f"Ranks {report.rank_range} only (--rank-range); `gpu-doctor timeline --merge` combines "
                      "the parts' --json documents.", highlight=False)
    for run in report.runs:
        console.print(f"[bold]Run {run.label}[/bold]: {count(run.rank_count, 'rank')}, from {run.source}s  ({run.path})")
        if run.ranks:
            console.print(_whole_run_table(run))
            if any(rank.steps for rank in run.ranks):
                console.print(_steps_table(run))
            for rank in run.ranks:
                for line in verdict_lines(rank):
                    console.print(f"  {line}", soft_wrap=True, highlight=False)
                for note in rank.notes:
                    console.print(f"  [dim]{rank.label}: {note}[/dim]", soft_wrap=True, highlight=False)
                if every_step and rank.steps:
                    console.print(_every_step_table(rank))
        if run.profiles:
            console.print(_profile_table(run))
        console.print()
    if report.scaling:
        console.print(_scaling_table(report))
    if any(run.ranks for run in report.runs):
        console.print(f"[dim]{LEGEND}[/dim]", soft_wrap=True, highlight=False)


def verdict_lines(rank: RankTimeline) -> list[str]:
    """The seed's lesson, in numbers: how much of the summed NCCL time was really exposed."""
    b = rank.steps.total if rank.steps else rank.whole_run
    where = "in steps" if rank.steps else "over the run"
    s = b.seconds
    if not b.comm_sum:
        return [f"{rank.label}: no NCCL kernels {where}; GPU busy {percent(b.busy, b.wall)} of the wall time"]
    lines = [f"{rank.label}: NCCL kernels Σ {seconds(s(b.comm_sum))} {where}; on the timeline "
             f"{seconds(s(b.comm))}, of which {seconds(s(b.hidden))} hidden under compute and "
             f"{seconds(s(b.exposed))} exposed = {percent(b.exposed, b.wall)} of the wall time"]
    if b.compute_sum + b.comm_sum > b.wall:
        lines.append(f"{rank.label}: Σ compute + Σ comm = {seconds(s(b.compute_sum + b.comm_sum))} exceeds the "
                     f"wall time {seconds(s(b.wall))}: summed kernel time double-counts the overlap")
    return lines


def _table(title: str, *columns: str) -> Table:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i == 0 else "right")
    return table


_COLUMNS = ("busy", "idle", "compute", "comm", "hidden", "exposed", "exposed %", "Σ compute", "Σ comm")


def unit_for(values: list[float]) -> tuple[str, float]:
    """One unit per table, so columns line up: seconds from 10 s up, else milliseconds."""
    return ("s", 1.0) if max(values, default=0.0) >= 10 else ("ms", 1e3)


def _cells(b: Breakdown, scale: float) -> list[str]:
    def fmt(ticks: int) -> str:
        return f"{b.seconds(ticks) * scale:,.3f}" if scale == 1.0 else f"{b.seconds(ticks) * scale:,.1f}"

    return [fmt(b.busy), fmt(b.idle), fmt(b.compute), fmt(b.comm), fmt(b.hidden), fmt(b.exposed),
            percent(b.exposed, b.wall), fmt(b.compute_sum), fmt(b.comm_sum)]


def _rank_name(rank: RankTimeline) -> str:
    return str(rank.rank) if rank.rank is not None else rank.label


def _whole_run_table(run: RunTimeline) -> Table:
    unit, scale = unit_for([r.whole_run.seconds(r.whole_run.wall) for r in run.ranks])
    table = _table(f"Whole run, per rank (timeline; times in {unit})", "rank", "streams", "wall", *_COLUMNS)
    for rank in run.ranks:
        b = rank.whole_run
        table.add_row(_rank_name(rank), str(len(rank.gpu_locations)),
                      _cells(Breakdown(b.resolution, b.wall, b.wall), scale)[0], *_cells(b, scale))
    return table


def _steps_table(run: RunTimeline) -> Table:
    unit, scale = unit_for([r.steps.max_wall for r in run.ranks if r.steps])
    table = _table(f"Per step, per rank (mean over the steps; timeline; times in {unit})", "rank", "steps",
                   "median", "mean", *_COLUMNS)
    for rank in run.ranks:
        if rank.steps is None:
            table.add_row(_rank_name(rank), "0", *["-"] * (len(_COLUMNS) + 2))
            continue
        mean = rank.steps.mean
        median = f"{rank.steps.median_wall * scale:,.{3 if scale == 1.0 else 1}f}"
        table.add_row(_rank_name(rank), str(rank.steps.count), median,
                      _cells(Breakdown(mean.resolution, mean.wall, mean.wall), scale)[0], *_cells(mean, scale))
    return table


def _every_step_table(rank: RankTimeline) -> Table:
    assert rank.steps is not None
    unit, scale = unit_for([rank.steps.max_wall])
    table = _table(f"Rank {_rank_name(rank)}: every step (times in {unit}; start in s)", "step", "start",
                   "wall", *_COLUMNS)
    for step in rank.steps.kept:
        b = step.breakdown
        table.add_row(str(step.index), f"{b.seconds(step.start):.3f}",
                      _cells(Breakdown(b.resolution, b.wall, b.wall), scale)[0], *_cells(b, scale))
    return table


def _profile_table(run: RunTimeline) -> Table:
    table = _table(f"Profile ({PROFILE_KIND})", "experiment", "wall", "Σ compute", "Σ comm", "Σ copies",
                   "kernels", "NCCL kernels", "steps", "mean step")
    for p in run.profiles:
        table.add_row(p.label, seconds(p.wall), seconds(p.compute_sum), seconds(p.comm_sum),
                      seconds(p.other_sum), str(p.compute_visits), str(p.comm_visits), str(p.step_count),
                      seconds(p.step_time / p.step_count) if p.step_count else "-")
    return table


def _scaling_table(report: TimelineReport) -> Table:
    basis = report.scaling[0].basis
    table = _table(f"Scaling (time = {basis}; throughput = ranks / time in rank-steps/s, fixed batch per rank)", "run",
                   "ranks", "time", "throughput", "speedup", "efficiency", "exposed comm")
    for row in report.scaling:
        share = f"{100 * row.exposed_comm_share:.1f} %" if row.exposed_comm_share is not None else "n/a (sums)"
        table.add_row(row.run, str(row.ranks), seconds(row.time), f"{row.throughput:.3g}",
                      f"{row.speedup:.2f}x", f"{100 * row.efficiency:.0f} %", share)
    return table

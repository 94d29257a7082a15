"""Rich tables for `gpu-doctor timeline`: per rank, per step, profile sums, scaling."""

from __future__ import annotations

from typing import TYPE_CHECKING

from doctor.sanitize import markup
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
           "python": "the Python reader (the otf2 package's callbacks)",
           "kineto": "the torch.profiler (Kineto JSON) reader"}


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
        console.print(f"[bold]Run {markup(run.label)}[/bold]: {count(run.rank_count, 'rank')}, from {run.source}s  "
                      f"({markup(str(run.path))})", highlight=False)
        gpu = any(rank.gpu_locations for rank in run.ranks)
        if run.ranks and gpu:
            console.print(_whole_run_table(run))
            if any(rank.steps for rank in run.ranks):
                console.print(_steps_table(run))
        if run.ranks:
            if any(rank.hta for rank in run.ranks):
                console.print(_hta_table(run))
                console.print(_tensorboard_table(run))
            if not all(rank.gpu_locations for rank in run.ranks) and any(rank.regions for rank in run.ranks):
                console.print(_cpu_table(run))
            for line in straggler_lines(run):
                console.print(f"  {markup(line)}", soft_wrap=True, highlight=False)
            for rank in run.ranks:
                for line in verdict_lines(rank) if gpu else ():
                    console.print(f"  {markup(line)}", soft_wrap=True, highlight=False)
                for note in rank.notes:
                    console.print(f"  [dim]{markup(rank.label)}: {markup(note)}[/dim]", soft_wrap=True, highlight=False)
                if every_step and rank.steps:
                    console.print(_every_step_table(rank))
            if every_step:
                found = run.stragglers()
                if found:
                    console.print(_straggler_table(found))
        if run.profiles:
            console.print(_profile_table(run))
            if any(p.regions for p in run.profiles):
                console.print(_profile_cpu_table(run))
        for hint in run_hints(run):
            console.print(f"  [bold]hint:[/bold] {markup(hint)}", soft_wrap=True, highlight=False)
        console.print()
    if report.scaling:
        console.print(_scaling_table(report))
    if any(rank.gpu_locations for run in report.runs for rank in run.ranks):
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


def run_hints(run: RunTimeline) -> list[str]:
    """What to turn on for more, once per run."""
    hints = [hint for rank in run.ranks for hint in rank.hints]
    if run.profiles and not run.ranks:
        hints.append("only a profile (sums, no timeline): set SCOREP_ENABLE_TRACING=true for a trace")
    if run.profiles and not any(p.step_count for p in run.profiles):
        hints.append("no training steps: wrap each iteration in a `train_step` user region")
    if run.profiles and not any(p.compute_visits or p.comm_visits for p in run.profiles):
        hints.append("no GPU kernels: measure CUDA with `python -m scorep --cuda`")
    return list(dict.fromkeys(hints))


def straggler_lines(run: RunTimeline) -> list[str]:
    """Who held the collectives up, step after step."""
    found = run.stragglers()
    if found is None:
        return []
    lags = [lag for _, who, lag in found.per_step if who == found.culprit]
    lag = sorted(lags)[len(lags) // 2] if lags else 0.0
    shares = ", ".join(f"{rank} {100 * share:.0f} %" for rank, share in
                       sorted(found.share.items(), key=lambda kv: -kv[1]) if share)
    return [f"Stragglers over {count(found.steps, 'step')}: rank {found.culprit} entered the step's last collective "
            f"last in {100 * found.stability:.0f} % of the steps (culprit stability {found.stability:.2f}), "
            f"median lag {seconds(lag)} behind the median rank; last arrivals: {shares}"]


def _hta_table(run: RunTimeline) -> Table:
    hta = next(r.hta for r in run.ranks if r.hta)
    window = "up to the last step's start, as HTA" if hta.last_step_left_out else "whole trace"
    table = _table(f"Holistic Trace Analysis' metrics, per rank (HTA's names, % ; {window})", "rank",
                   "idle_time", "compute_time", "non_compute_time", "host_wait", "kernel_wait", "other",
                   "comp_comm_overlap_pctg")

    def pct(value: object) -> str:
        return "-" if value is None else f"{value:.2f}"

    for rank in run.ranks:
        if rank.hta is None:
            table.add_row(markup(_rank_name(rank)), *["-"] * 7)
            continue
        doc = rank.hta.to_json()
        tb, idle = doc["temporal_breakdown"], doc["idle_breakdown"]
        table.add_row(markup(_rank_name(rank)), pct(tb["idle_time_pctg"]), pct(tb["compute_time_pctg"]),
                      pct(tb["non_compute_time_pctg"]),
                      pct(idle["host_wait_pctg"]) if idle["host_wait_known"] else "n/a",
                      pct(idle["kernel_wait_pctg"]), pct(idle["other_pctg"]), pct(doc["comp_comm_overlap_pctg"]))
    return table


def _tensorboard_table(run: RunTimeline) -> Table:
    table = _table("TensorBoard's split of the step time, per rank (%)", "rank", "basis", "Computation",
                   "Overlapping", "Communication", "Other")
    for rank in run.ranks:
        tb = rank.tensorboard()
        table.add_row(markup(_rank_name(rank)), tb["basis"],
                      *("-" if tb[f"{k}_pctg"] is None else f"{tb[f'{k}_pctg']:.1f}"
                        for k in ("computation", "overlapping", "communication", "other")))
    return table


def _cpu_table(run: RunTimeline) -> Table:
    table = _table("CPU time per rank (no GPU streams: exclusive time of the regions on the CPU threads)", "rank",
                   "wall", "steps", "median step", "collectives", "compute", "data loading", "other", "top regions")
    for rank in run.ranks:
        c = rank.categories()
        top = "; ".join(f"{r.name} {seconds(r.exclusive)}" for r in rank.regions[:3])
        steps = rank.steps
        table.add_row(markup(_rank_name(rank)), seconds(rank.whole_run.seconds(rank.whole_run.wall)),
                      str(steps.count) if steps else "0", seconds(steps.median_wall) if steps else "-",
                      *(seconds(c[k]) for k in ("collectives", "compute", "data_loading", "other")), markup(top))
    return table


def _profile_cpu_table(run: RunTimeline) -> Table:
    table = _table("CPU time per experiment (profile: exclusive time of the regions on the CPU locations)",
                   "experiment", "collectives", "compute", "data loading", "other", "top regions")
    for p in run.profiles:
        c = p.categories()
        top = "; ".join(f"{r.name} {seconds(r.exclusive)}" for r in p.regions[:3])
        table.add_row(markup(p.label), *(seconds(c[k]) for k in ("collectives", "compute", "data_loading", "other")),
                      markup(top))
    return table


def _straggler_table(found: object) -> Table:
    table = _table("Last arrival at each step's last collective", "step", "rank", "lag behind the median")
    for step, who, lag in found.per_step:  # type: ignore[attr-defined]
        table.add_row(str(step), markup(str(who)), seconds(lag))
    return table


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
        table.add_row(markup(_rank_name(rank)), str(len(rank.gpu_locations)),
                      _cells(Breakdown(b.resolution, b.wall, b.wall), scale)[0], *_cells(b, scale))
    return table


def _steps_table(run: RunTimeline) -> Table:
    unit, scale = unit_for([r.steps.max_wall for r in run.ranks if r.steps])
    table = _table(f"Per step, per rank (mean over the steps; timeline; times in {unit})", "rank", "steps",
                   "median", "mean", *_COLUMNS)
    for rank in run.ranks:
        if rank.steps is None:
            table.add_row(markup(_rank_name(rank)), "0", *["-"] * (len(_COLUMNS) + 2))
            continue
        mean = rank.steps.mean
        median = f"{rank.steps.median_wall * scale:,.{3 if scale == 1.0 else 1}f}"
        table.add_row(markup(_rank_name(rank)), str(rank.steps.count), median,
                      _cells(Breakdown(mean.resolution, mean.wall, mean.wall), scale)[0], *_cells(mean, scale))
    return table


def _every_step_table(rank: RankTimeline) -> Table:
    assert rank.steps is not None
    unit, scale = unit_for([rank.steps.max_wall])
    table = _table(f"Rank {markup(_rank_name(rank))}: every step (times in {unit}; start in s)", "step", "start",
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
        table.add_row(markup(p.label), seconds(p.wall), seconds(p.compute_sum), seconds(p.comm_sum),
                      seconds(p.other_sum), str(p.compute_visits), str(p.comm_visits), str(p.step_count),
                      seconds(p.step_time / p.step_count) if p.step_count else "-")
    return table


def _scaling_table(report: TimelineReport) -> Table:
    basis = report.scaling[0].basis
    table = _table(f"Scaling (time = {basis}; throughput = ranks / time in rank-steps/s, fixed batch per rank)", "run",
                   "ranks", "time", "throughput", "speedup", "efficiency", "exposed comm")
    for row in report.scaling:
        share = f"{100 * row.exposed_comm_share:.1f} %" if row.exposed_comm_share is not None else "n/a (sums)"
        table.add_row(markup(row.run), str(row.ranks), seconds(row.time), f"{row.throughput:.3g}",
                      f"{row.speedup:.2f}x", f"{100 * row.efficiency:.0f} %", share)
    return table

"""The report's "Where the time goes" section: the timeline analysis of the job folder's traces.

`section(root, budget_s)` finds the Score-P experiment folders under the job folder that hold a
trace or a profile and runs `doctor.timeline.analyse` on the folder in a child process
(`python -m doctor.report.timeline ROOT KEEP_STEPS`), killed when the run's remaining time
budget is spent: a multi-GB trace takes a while, and a corrupt one may crash the OTF2 reader,
and neither may cost the report. Whatever happens becomes the section's `status` and `note`;
nothing raises.

The section (`doc["timeline"]`; null for a node-only report):
  status       analysed | no_traces | unreadable | skipped | timeout | failed
  note         one line saying why there are no numbers (null when analysed)
  path         the folder analysed
  experiments  experiment folders holding traces.otf2 or profile.cubex
  duration_s   how long the analysis ran
  result       the `gpu-doctor timeline --json` document (gpu-doctor.timeline/1), or null

`blocks(section)` turns it into paragraphs and tables that render_md and render_html lay out.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from doctor.wording import count

KEEP_STEPS = 20          # steps per rank listed one by one in the report (totals cover all)
MIN_BUDGET_S = 1.0       # below this, starting Python and the OTF2 reader is not worth it
SCHEMA = "gpu-doctor.timeline/1"
PROFILE_KIND = "sums, no overlap information"
LEGEND = ("Wall = the rank's trace window; GPU busy = union of all GPU activity on the rank's streams; "
          "compute / comm = union of compute / NCCL kernels; hidden = comm under compute; exposed = comm "
          "with no compute beside it; idle = wall - busy. Σ = plain sums of kernel durations, what a "
          "profile shows: they double-count overlapping kernels.")


# -- collecting --------------------------------------------------------------------------------

def measured_experiments(root: Path) -> list[Path]:
    """Experiment folders under `root` that hold a trace or a profile (what analyse can read)."""
    from doctor.timeline.discover import find_experiments

    return [e for e in find_experiments(root)
            if e.name.endswith((".pt.trace.json", ".pt.trace.json.gz"))   # torch.profiler, one per rank
            or (e / "traces.otf2").is_file() or (e / "profile.cubex").is_file()]


def section(root: Path | None, budget_s: float) -> dict[str, Any] | None:
    """The report's timeline section for the job folder `root`, within `budget_s` seconds."""
    if root is None:
        return None
    out: dict[str, Any] = {"status": "failed", "note": None, "path": str(root), "experiments": 0,
                           "duration_s": 0.0, "result": None}
    try:
        _fill(out, root, budget_s)
    except Exception as exc:  # the report must be written whatever the analysis does
        out.update(status="failed", note=f"the timeline analysis failed: {type(exc).__name__}: {exc}")
    return out


def _fill(out: dict[str, Any], root: Path, budget_s: float) -> None:
    if not root.is_dir():
        out.update(status="no_traces", note=f"{root} is not a folder: no traces to analyse")
        return
    experiments = measured_experiments(root)
    out["experiments"] = len(experiments)
    if not experiments:
        out.update(status="no_traces", note=(
            "No Score-P traces or profiles in the job folder (no traces.otf2 or profile.cubex): an "
            "instrumented launch (`gpu-doctor launch`) leaves them in scorep_rank_N/."))
        return
    budget_s = max(0.0, budget_s)
    if budget_s < MIN_BUDGET_S:
        out.update(status="skipped", note=(
            f"Skipped: {budget_s:.1f} s left of the run's time budget (--timeout) for "
            f"{count(len(experiments), 'experiment folder')}; run `gpu-doctor timeline {root}` for the numbers."))
        return
    from doctor.isolate import run_isolated

    # `-m` puts the working folder first on sys.path: start in `/`, never in a job folder.
    res = run_isolated(child_argv(root), timeout=budget_s, env=child_env(), cwd="/")
    out["duration_s"] = round(res.duration_s, 3)
    if res.timed_out:
        out.update(status="timeout", note=(
            f"Stopped after {budget_s:.1f} s, the run's remaining time budget, while reading "
            f"{count(len(experiments), 'experiment folder')}; run `gpu-doctor timeline {root}` for the numbers, "
            "or raise --timeout."))
        return
    if res.returncode != 0:
        why = res.signal_name or last_line(res.stderr) or f"exit code {res.returncode}"
        out.update(status="failed", note=f"The timeline analysis failed: {why}")
        return
    try:
        result = res.json()
    except ValueError:
        result = None
    if not isinstance(result, dict) or result.get("schema") != SCHEMA:
        out.update(status="failed", note="The timeline analysis printed no timeline document: "
                                         f"{last_line(res.stderr) or last_line(res.stdout) or 'no output'}")
        return
    out["result"] = result
    if any(run.get("rank_timelines") or run.get("profiles") for run in result.get("runs", [])):
        out["status"] = "analysed"
    else:
        why = next(iter(all_notes(result)), "no reason given")
        out.update(status="unreadable", note=f"No trace or profile could be read: {why}")


def child_argv(root: Path) -> list[str]:
    """The analysis runs in this Python, in a child process that can be killed at the budget."""
    return [sys.executable, "-m", "doctor.report.timeline", os.path.abspath(root), str(KEEP_STEPS)]


def child_env() -> dict[str, str]:
    """This process's environment, with the folder holding the `doctor` package importable."""
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return env


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:500] if lines else ""


def all_notes(result: Mapping[str, Any]) -> list[str]:
    notes = [str(n) for n in result.get("notes", [])]
    for run in result.get("runs", []):
        notes += [str(n) for n in run.get("notes", [])]
    return notes


def child(argv: Sequence[str]) -> int:
    """In the child process: analyse ROOT, print the timeline JSON document on one line."""
    from doctor.timeline import analyse
    from doctor.timeline.parallel import default_jobs

    report = analyse([Path(argv[0])], keep_steps=int(argv[1]) if len(argv) > 1 else KEEP_STEPS,
                     jobs=default_jobs())
    sys.stdout.write(json.dumps(report.to_json(), default=str) + "\n")
    return 0


# -- rendering ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Para:
    text: str
    muted: bool = False


@dataclass(frozen=True)
class Table:
    caption: str
    headers: tuple[str, ...]
    rows: list[tuple[str, ...]]


Block = Para | Table

BREAKDOWN_HEADERS = ("Wall", "GPU busy", "Compute", "Comm (NCCL)", "Hidden comm", "Exposed comm",
                     "Exposed %", "Idle", "Σ compute", "Σ comm")


def seconds(value: Any) -> str:
    """2.375 s, 12.3 ms, 40 µs; '-' when unknown."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "-"
    size = abs(value)
    if size >= 1:
        return f"{value:.3f} s"
    if size >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return "0" if size == 0 else f"{value * 1e6:.3g} µs"


def percent(part: Any, whole: Any) -> str:
    ok = all(isinstance(v, (int, float)) for v in (part, whole))
    return f"{100 * part / whole:.1f} %" if ok and whole else "-"


def breakdown_cells(b: Mapping[str, Any]) -> tuple[str, ...]:
    summed = b.get("summed") or {}
    return (seconds(b.get("wall_s")), seconds(b.get("busy_s")), seconds(b.get("compute_s")),
            seconds(b.get("comm_s")), seconds(b.get("hidden_comm_s")), seconds(b.get("exposed_comm_s")),
            percent(b.get("exposed_comm_s"), b.get("wall_s")), seconds(b.get("idle_s")),
            seconds(summed.get("compute_s")), seconds(summed.get("comm_s")))


def rank_name(rank: Mapping[str, Any]) -> str:
    return f"rank {rank['rank']}" if rank.get("rank") is not None else str(rank.get("label") or "?")


def contrast_lines(rank: Mapping[str, Any]) -> list[str]:
    """The summed view against the timeline view (field guide, lesson 8), in numbers."""
    steps = rank.get("steps")
    b = steps["total"] if steps else rank["whole_run"]
    where = f"in {count(steps['count'], 'step')}" if steps else "over the run"
    name = rank_name(rank)
    summed = b.get("summed") or {}
    wall = b.get("wall_s") or 0.0
    comm_sum, compute_sum = summed.get("comm_s") or 0.0, summed.get("compute_s") or 0.0
    if not comm_sum:
        return [f"{name}: no NCCL kernels {where}; GPU busy {percent(b.get('busy_s'), wall)} of the wall time."]
    lines = [f"{name}: NCCL kernels Σ {seconds(comm_sum)} {where}; on the timeline "
             f"{seconds(b.get('comm_s'))}, of which {seconds(b.get('hidden_comm_s'))} hidden under compute "
             f"and {seconds(b.get('exposed_comm_s'))} exposed = {percent(b.get('exposed_comm_s'), wall)} "
             "of the wall time."]
    if compute_sum + comm_sum > wall * (1 + 1e-9):
        lines.append(f"{name}: Σ compute + Σ comm = {seconds(compute_sum + comm_sum)} exceeds the wall "
                     f"time {seconds(wall)}: summed kernel time double-counts the overlap.")
    return lines


def blocks(tl: Mapping[str, Any]) -> list[Block]:
    """The section as paragraphs and tables, in reading order."""
    result = tl.get("result")
    if tl.get("status") != "analysed" or not isinstance(result, Mapping):
        out: list[Block] = [Para(str(tl.get("note") or "No timeline numbers."))]
        if isinstance(result, Mapping):
            out += [Para(n, muted=True) for n in all_notes(result)]
        return out
    runs = result.get("runs", [])
    out = [Para(f"From the Score-P experiment folders under {tl['path']} ({tl['experiments']} with a trace "
                f"or profile, analysed in {tl['duration_s']:.1f} s). `gpu-doctor timeline {tl['path']}` "
                "shows the same; `--steps` lists every step.")]
    for run in runs:
        out += _run_blocks(run)
    if result.get("scaling"):
        out.append(_scaling(result["scaling"]))
    out += [Para(str(n), muted=True) for n in result.get("notes", [])]
    if any(run.get("rank_timelines") for run in runs):
        out.append(Para(LEGEND, muted=True))
    return out


def _run_blocks(run: Mapping[str, Any]) -> list[Block]:
    label = run.get("label")
    ranks, profiles = run.get("rank_timelines") or [], run.get("profiles") or []
    source = {"trace": "traces (timeline)", "profile": f"profiles ({PROFILE_KIND})"}
    out: list[Block] = [Para(f"Run {label}: {count(int(run.get('ranks') or 0), 'rank')}, from "
                             f"{source.get(run.get('source', ''), 'nothing readable')}.")]
    if ranks:
        out.append(Table(f"Run {label}: per rank, whole run (timeline)", ("Rank", "Streams", *BREAKDOWN_HEADERS),
                         [(rank_name(r), str(len(r.get("gpu_locations") or [])), *breakdown_cells(r["whole_run"]))
                          for r in ranks]))
        if any(r.get("steps") for r in ranks):
            out.append(Table(f"Run {label}: per step, per rank (mean over the steps; timeline)",
                             ("Rank", "Steps", "Median step", *BREAKDOWN_HEADERS), [_step_row(r) for r in ranks]))
        if any(r.get("hta") for r in ranks):
            out.append(Table(f"Run {label}: Holistic Trace Analysis' metrics, per rank (HTA's names, %)",
                             HTA_HEADERS, [_hta_row(r) for r in ranks]))
            out.append(Table(f"Run {label}: TensorBoard's split of the step time, per rank (%)",
                             ("Rank", "Basis", "Computation", "Overlapping", "Communication", "Other"),
                             [_tensorboard_row(r) for r in ranks]))
        if not all(r.get("gpu_locations") for r in ranks):
            out.append(Table(f"Run {label}: CPU time per rank (no GPU streams: exclusive time of the CPU regions)",
                             ("Rank", "Collectives", "Compute", "Data loading", "Other", "Top regions"),
                             [_cpu_row(r) for r in ranks]))
        out += [Para(line) for line in straggler_lines(run.get("stragglers"))]
        out += [Para(line) for r in ranks for line in contrast_lines(r)]
        out += [Para(f"{rank_name(r)}: {n}", muted=True) for r in ranks for n in r.get("notes") or []]
        out += [Para(f"Hint: {h}") for h in dict.fromkeys(h for r in ranks for h in r.get("hints") or [])]
    if profiles:
        out.append(Table(f"Run {label}: profile ({PROFILE_KIND})",
                         ("Experiment", "Wall", "Σ compute", "Σ comm", "Σ copies", "Kernels", "NCCL kernels",
                          "Steps", "Mean step"), [_profile_row(p) for p in profiles]))
        out.append(Para("These are sums from the Cube profile: they cannot show how much communication ran "
                        "under compute. Trace the run (SCOREP_ENABLE_TRACING=true) for the hidden / exposed "
                        "split.", muted=True))
        out += [Para(f"{p.get('label')}: {n}", muted=True) for p in profiles for n in p.get("notes") or []]
    out += [Para(str(n), muted=True) for n in run.get("notes") or []]
    return out


HTA_HEADERS = ("Rank", "idle_time", "compute_time", "non_compute_time", "host_wait", "kernel_wait", "other",
               "comp_comm_overlap_pctg")


def _pctg(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def _hta_row(rank: Mapping[str, Any]) -> tuple[str, ...]:
    hta = rank.get("hta")
    if not hta:
        return (rank_name(rank), *["-"] * (len(HTA_HEADERS) - 1))
    tb, idle = hta["temporal_breakdown"], hta["idle_breakdown"]
    return (rank_name(rank), _pctg(tb.get("idle_time_pctg")), _pctg(tb.get("compute_time_pctg")),
            _pctg(tb.get("non_compute_time_pctg")),
            _pctg(idle.get("host_wait_pctg")) if idle.get("host_wait_known") else "n/a",
            _pctg(idle.get("kernel_wait_pctg")), _pctg(idle.get("other_pctg")), _pctg(hta.get("comp_comm_overlap_pctg")))


def _tensorboard_row(rank: Mapping[str, Any]) -> tuple[str, ...]:
    tb = rank.get("tensorboard") or {}
    return (rank_name(rank), str(tb.get("basis", "-")),
            *(_pctg(tb.get(f"{k}_pctg")) for k in ("computation", "overlapping", "communication", "other")))


def _cpu_row(rank: Mapping[str, Any]) -> tuple[str, ...]:
    regions = rank.get("regions") or {}
    c = regions.get("categories") or {}
    top = "; ".join(f"{r.get('name')} {seconds(r.get('exclusive_s'))}" for r in (regions.get("top") or [])[:3])
    return (rank_name(rank), *(seconds(c.get(k)) for k in ("collectives", "compute", "data_loading", "other")), top)


def straggler_lines(found: Any) -> list[str]:
    """Who entered the steps' last collective last, and how steady that was."""
    if not isinstance(found, Mapping) or not found.get("steps"):
        return []
    shares = ", ".join(f"rank {r} {100 * v:.0f} %" for r, v in sorted((found.get("share") or {}).items(),
                                                                       key=lambda kv: -kv[1]) if v)
    return [f"Stragglers over {count(int(found['steps']), 'step')}: rank {found.get('culprit')} entered the step's "
            f"last collective last in {100 * float(found.get('stability') or 0):.0f} % of the steps (culprit "
            f"stability {float(found.get('stability') or 0):.2f}); last arrivals: {shares}."]


def _step_row(rank: Mapping[str, Any]) -> tuple[str, ...]:
    steps = rank.get("steps")
    if not steps:
        return (rank_name(rank), "0", "-", *["-"] * len(BREAKDOWN_HEADERS))
    return (rank_name(rank), str(steps["count"]), seconds(steps.get("median_wall_s")),
            *breakdown_cells(steps["mean"]))


def _profile_row(p: Mapping[str, Any]) -> tuple[str, ...]:
    steps = p.get("step_count") or 0
    return (str(p.get("label") or p.get("experiment")), seconds(p.get("wall_s")), seconds(p.get("compute_sum_s")),
            seconds(p.get("comm_sum_s")), seconds(p.get("other_sum_s")), str(p.get("compute_visits")),
            str(p.get("comm_visits")), str(steps), seconds(p["step_time_s"] / steps) if steps else "-")


def _scaling(rows: Sequence[Mapping[str, Any]]) -> Table:
    def share(row: Mapping[str, Any]) -> str:
        value = row.get("exposed_comm_share")
        return f"{100 * value:.1f} %" if isinstance(value, (int, float)) else "n/a (sums)"

    return Table(f"Scaling across runs (time = {rows[0].get('basis', '')}; throughput = ranks / time, "
                 "fixed batch per rank)",
                 ("Run", "Ranks", "Time", "Throughput", "Speedup", "Efficiency", "Exposed comm"),
                 [(str(r.get("run")), str(r.get("ranks")), seconds(r.get("time_s")),
                   f"{r.get('throughput', 0):.3g}", f"{r.get('speedup', 0):.2f}x",
                   f"{100 * r.get('efficiency', 0):.0f} %", share(r)) for r in rows])


if __name__ == "__main__":
    raise SystemExit(child(sys.argv[1:]))

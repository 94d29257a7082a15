"""`gpu-doctor timeline PATH [PATH...] [--json] [--step-regex R] [--jobs N] [--rank-range A:B]`,
`gpu-doctor timeline --merge a.json b.json ...`: where the time really goes.

stdout carries the tables (or the JSON document with --json); stderr carries progress and notes
about folders that could not be read. Exit 0 when at least one rank was analysed, 2 when nothing
could be (no experiment folders, only unreadable traces, bad options or documents).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import IO

from doctor.arguments import Parser, UsageError, positive_int
from doctor.timeline import creader
from doctor.timeline.analyse import WINDOWS, analyse
from doctor.timeline.classify import DEFAULT_STEP_REGEX
from doctor.timeline.model import RankRange, TimelineReport


def build_parser() -> Parser:
    from doctor.timeline.parallel import default_jobs

    p = Parser(prog="gpu-doctor timeline", description=(
        "Overlap-aware compute/communication breakdown from Score-P (OTF2) and torch.profiler (Kineto JSON) "
        "traces: per rank and per step, GPU busy, compute, NCCL communication, the part hidden under compute, "
        "the exposed part and idle time, by interval arithmetic on the timeline (and the plain sums a profile "
        "would show); Holistic Trace Analysis' metrics under HTA's names, TensorBoard's split, and stragglers "
        "across steps."))
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="experiment folders, a run folder holding scorep_rank_N/ or *.pt.trace.json files "
                        "(torch.profiler, one per rank), or a folder of runs")
    p.add_argument("--json", action="store_true", help="print the JSON document on stdout")
    p.add_argument("--step-regex", metavar="R",
                   help=f"regex searched in region names to find training steps (default {DEFAULT_STEP_REGEX})")
    p.add_argument("--window", choices=WINDOWS, default="region",
                   help="a step is its region's span (region, default) or runs to the next step's start")
    p.add_argument("--steps", action="store_true", help="also list every step (and each step's last arrival)")
    p.add_argument("--keep-steps", type=int, default=10_000, metavar="N",
                   help="steps per rank kept one by one (totals always cover all steps)")
    p.add_argument("--jobs", type=positive_int, default=default_jobs(), metavar="N",
                   help="experiment folders read side by side, each in a worker process "
                        f"(default: the cores available, here {default_jobs()})")
    p.add_argument("--rank-range", type=_rank_range, metavar="A:B",
                   help="only ranks A <= rank < B (per-rank folders and the processes of a trace); "
                        "combine the parts' --json documents with --merge")
    p.add_argument("--merge", nargs="+", type=Path, metavar="FILE",
                   help="combine `--json` documents of parts of one analysis (e.g. --rank-range) into one report")
    p.add_argument("--reader", choices=creader.READERS, default=creader.AUTO,
                   help="the events' reader: the C extension, the Python one, or auto (C where built)")
    return p


def _rank_range(text: str) -> RankRange:
    import argparse

    try:
        return RankRange.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str]) -> int:
    progress = os.fdopen(os.dup(2), "w", buffering=1)   # the C library's stderr is captured meanwhile
    try:
        return _main(argv, progress)
    finally:
        progress.close()


def _main(argv: list[str], progress: IO[str]) -> int:
    from doctor.timeline.merge import MergeError, merge_files
    from doctor.timeline.progress import StderrProgress

    try:
        args = build_parser().parse_args(argv)
        if args.keep_steps < 0:
            raise UsageError("--keep-steps must be 0 or more")
        if bool(args.merge) == bool(args.paths):
            raise UsageError("give PATHs to analyse, or --merge FILE... to combine documents (not both)")
        if args.merge and (args.rank_range or args.step_regex):
            raise UsageError("--merge combines documents as they were made: --rank-range and --step-regex "
                             "belong to the runs that made them")
        if args.merge:
            report = merge_files(args.merge)
        else:
            with StderrProgress(progress) as show:
                report = analyse([Path(p) for p in args.paths], step_regex=args.step_regex,
                                 window=args.window, keep_steps=args.keep_steps, on_progress=show,
                                 reader=args.reader, jobs=args.jobs, rank_range=args.rank_range)
    except (UsageError, ValueError, MergeError) as exc:
        print(f"gpu-doctor timeline: error: {exc}", file=sys.stderr)
        return 2
    notes = list(report.notes) + [note for run in report.runs for note in run.notes]
    if not args.merge and "python" in report.reader and args.reader == creader.AUTO and not creader.available():
        notes.append(f"{creader.why_not()}; the Python reader was used (same numbers, slower)")
    if not report.analysed:
        reason = notes[0] if notes else "nothing to analyse"
        print(f"gpu-doctor timeline: error: {reason}", file=sys.stderr)
        for note in notes[1:]:
            print(f"gpu-doctor timeline: note: {note}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"gpu-doctor timeline: note: {note}", file=sys.stderr)
    if args.json:
        # One line through json's C encoder: 10,000 steps per rank take seconds with indent=2.
        sys.stdout.write(json.dumps(report.to_json(), default=str) + "\n")
    else:
        _render(report, args.steps)
    return 0


def _render(report: TimelineReport, every_step: bool) -> None:
    from rich.console import Console

    from doctor.timeline.render import render

    # Piped output gets room for the tables; a terminal keeps its own width.
    console = Console(soft_wrap=False) if sys.stdout.isatty() else Console(width=160, soft_wrap=False)
    render(report, console, every_step=every_step)

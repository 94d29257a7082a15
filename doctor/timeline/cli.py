"""`gpu-doctor timeline PATH [PATH...] [--json] [--step-regex R]`: where the time really goes.

stdout carries the tables (or the JSON document with --json); stderr carries notes about
folders that could not be read. Exit 0 when at least one rank was analysed, 2 when nothing
could be (no experiment folders, only unreadable traces, bad options).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from doctor.arguments import Parser, UsageError, print_json
from doctor.timeline.analyse import WINDOWS, analyse
from doctor.timeline.classify import DEFAULT_STEP_REGEX


def build_parser() -> Parser:
    p = Parser(prog="gpu-doctor timeline", description=(
        "Overlap-aware compute/communication breakdown from Score-P traces: per rank and per step, "
        "GPU busy, compute, NCCL communication, the part hidden under compute, the exposed part and "
        "idle time, by interval arithmetic on the timeline (and the plain sums a profile would show)."))
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="experiment folders, a run folder holding scorep_rank_N/, or a folder of runs")
    p.add_argument("--json", action="store_true", help="print the JSON document on stdout")
    p.add_argument("--step-regex", metavar="R",
                   help=f"regex searched in region names to find training steps (default {DEFAULT_STEP_REGEX})")
    p.add_argument("--window", choices=WINDOWS, default="region",
                   help="a step is its region's span (region, default) or runs to the next step's start")
    p.add_argument("--steps", action="store_true", help="also list every step")
    p.add_argument("--keep-steps", type=int, default=10_000, metavar="N",
                   help="steps per rank kept one by one (totals always cover all steps)")
    return p


@contextlib.contextmanager
def c_stderr_captured() -> Iterator[list[str]]:
    """Collect what C libraries write to file descriptor 2 meanwhile (single-threaded CLI use)."""
    lines: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            lines.extend(ln for ln in tmp.read().decode("utf-8", "replace").splitlines() if ln.strip())


def main(argv: list[str]) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.keep_steps < 0:
            raise UsageError("--keep-steps must be 0 or more")
        with c_stderr_captured() as otf2_said:
            report = analyse([Path(p) for p in args.paths], step_regex=args.step_regex,
                             window=args.window, keep_steps=args.keep_steps)
        # The OTF2 C library prints several lines per damaged archive; one note is enough here.
        c_note = (f"the OTF2 library reported {len(otf2_said)} error line(s), e.g. {otf2_said[-1]}"
                  if otf2_said else None)
    except (UsageError, ValueError) as exc:
        print(f"gpu-doctor timeline: error: {exc}", file=sys.stderr)
        return 2
    notes = list(report.notes) + [note for run in report.runs for note in run.notes]
    if c_note:
        notes.append(c_note)
    if not report.analysed:
        reason = notes[0] if notes else "nothing to analyse"
        print(f"gpu-doctor timeline: error: {reason}", file=sys.stderr)
        for note in notes[1:]:
            print(f"gpu-doctor timeline: note: {note}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"gpu-doctor timeline: note: {note}", file=sys.stderr)
    if args.json:
        print_json(report.to_json())
    else:
        from rich.console import Console

        from doctor.timeline.render import render

        # Piped output gets room for the tables; a terminal keeps its own width.
        console = Console(soft_wrap=False) if sys.stdout.isatty() else Console(width=160, soft_wrap=False)
        render(report, console, every_step=args.steps)
    return 0

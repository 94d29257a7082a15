"""`gpu-doctor fleet DIR... [--since DAYS] [--json]`: the Prolog's verdicts across the cluster.

In a terminal it opens the fleet screen (nodes x checks); otherwise, or with `--plain`, it
prints the summary; `--json` prints the document scripts read (`failing_now`, `lemon`,
`flapping`, `exclude`, `nodes`). Exit 0 when the verdicts were read, 2 on bad usage.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from doctor import __version__
from doctor.arguments import Parser, UsageError, print_json, seconds
from doctor.fleet.analysis import Fleet, analyse, fleet_json
from doctor.fleet.drains import Drain, read_drains
from doctor.fleet.history import Reading, read_verdicts
from doctor.sanitize import shown
from doctor.wording import count

SCHEMA_VERSION = "1.0"
MAX_ROWS = 40  # in the printed summary; the screen and --json have every node


def build_parser() -> Parser:
    p = Parser(prog="gpu-doctor fleet", description=(
        "Read the verdict folders the Slurm Prolog writes (job-*.json, node-*.json) and report per node: "
        "failing now, lemon nodes, flapping checks, and an exclude list in Slurm's hostlist syntax."))
    p.add_argument("dirs", nargs="+", metavar="DIR", help="a verdict folder (VERDICT_DIR), or several collected ones")
    p.add_argument("--since", type=seconds(allow_zero=False, unit="days", maximum=36500), metavar="DAYS",
                   help="only verdicts from the last DAYS days")
    p.add_argument("--json", action="store_true", help="print the JSON document on stdout")
    p.add_argument("--plain", action="store_true", help="print the summary even in a terminal")
    p.add_argument("--no-sinfo", action="store_true", help="do not ask Slurm (`sinfo -R`) for drain reasons")
    return p


def document(reading: Reading, fleet: Fleet, drains: list[Drain], drains_note: str | None,
             dirs: Sequence[str], since: float | None, took_s: float) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "gpu-doctor", "version": __version__},
        "generated": datetime.now(UTC).isoformat(),
        "dirs": list(dirs),
        "since_days": since,
        "read": {"files": reading.files, "verdicts": len(reading.verdicts), "duplicates": reading.duplicates,
                 "skipped": dict(sorted(reading.skipped.items())), "seconds": round(took_s, 3)},
        **fleet_json(fleet),
        "drains": [{"node": d.node, "reason": d.reason, "since": d.since, "tag": d.tag, "why": d.why}
                   for d in drains],
        "drains_note": drains_note,
    }


def _plain(text: str) -> str:
    """One line of what a verdict file said, control characters shown escaped."""
    return shown(text, one_line=True)


def summary_lines(doc: dict[str, Any]) -> list[str]:
    read = doc["read"]
    skipped = read["skipped"]
    nodes = doc["nodes"]
    out = [f"gpu-doctor fleet: {count(read['verdicts'], 'verdict')} from {count(len(nodes), 'node')}"
           f" in {read['seconds']:.1f} s"
           + (f"; {count(sum(skipped.values()), 'file')} skipped ("
              + ", ".join(f"{n} {why}" for why, n in skipped.items()) + ")" if skipped else "")]
    if not nodes:
        out.append("no gate documents found: is DIR the Prolog's VERDICT_DIR?")
        return out
    out.append(f"failing now ({len(doc['failing_now'])}):" + ("" if doc["failing_now"] else " none"))
    for f in doc["failing_now"]:
        out.append(f"  {_plain(f['node'])}  {', '.join(f['checks']) or 'exit 1'}: {_plain(f['message'])}"
                   f"  (since {f['since'][:16]})")
    out.append(f"lemon nodes ({len(doc['lemon'])}):" + ("" if doc["lemon"] else " none"))
    out.extend(f"  {_plain(x['node'])}  {_plain(x['evidence'])}" for x in doc["lemon"])
    out.append(f"flapping checks ({len(doc['flapping'])}):" + ("" if doc["flapping"] else " none"))
    out.extend(f"  {_plain(x['node'])}  {x['check']}: {x['changes']} status changes, {x['per_day']:g} a day"
               for x in doc["flapping"])
    out.append(f"exclude: --exclude={_plain(doc['exclude'])}" if doc["exclude"] else "exclude: nothing to exclude")
    if doc["drains"]:
        out.append(f"drained in Slurm ({len(doc['drains'])}):")
        out.extend(f"  {_plain(d['node'])}  \"{_plain(d['reason'])}\" since {_plain(d['since'])}: {d['tag']} "
                   f"({d['why']})" for d in doc["drains"])
    elif doc["drains_note"]:
        out.append(f"drained in Slurm: {doc['drains_note']}")
    shown = [n for n in nodes if n["failed"] or n["flapping"]][:MAX_ROWS]
    if shown:
        out.append(f"{'node':<16} {'runs':>5} {'failed':>6} {'days':>4} {'lemon':>6}  now   failures by check")
        for n in shown:
            checks = ", ".join(f"{k} {v}" for k, v in n["failures_by_check"].items())
            out.append(f"{_plain(n['node']):<16} {n['runs']:>5} {n['failed']:>6} {n['failed_days']:>4} "
                       f"{n['lemon_score']:>6g}  {n['current']['status']:<5} {checks}")
    clean = len(nodes) - len([n for n in nodes if n["failed"] or n["flapping"]])
    out.append(f"{count(clean, 'node')} with no failure and no flapping check")
    return out


def main(argv: Sequence[str]) -> int:
    try:
        args = build_parser().parse_args(list(argv))
        missing = [d for d in args.dirs if not os.path.isdir(d)]
        if missing:
            raise UsageError(f"{missing[0]}: not a folder (give the Prolog's VERDICT_DIR)")
    except UsageError as exc:
        print(f"gpu-doctor fleet: error: {exc}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    reading = read_verdicts(args.dirs, since_days=args.since)
    fleet = analyse(reading.verdicts)
    drains: list[Drain] = []
    note: str | None = "not asked (--no-sinfo)"
    if not args.no_sinfo:
        drains, note = read_drains({n.node: n.current.failed for n in fleet.nodes}, os.environ)
    doc = document(reading, fleet, drains, note, args.dirs, args.since, time.monotonic() - t0)
    if args.json:
        print_json(doc)
        return 0
    if not args.plain and sys.stdin.isatty() and sys.stdout.isatty() and fleet.nodes:
        screen = importlib.import_module("doctor.tui.fleet")  # by name: the engine never imports the app
        return int(screen.run_fleet_app(doc, fleet))
    print("\n".join(summary_lines(doc)))
    return 0

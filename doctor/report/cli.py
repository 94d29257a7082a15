"""`gpu-doctor report [PATH] -o FILE`: run the checks, collect the context, redact, write one file.

Format by extension: .json, .md, .html, .tar.gz (also .tgz). Redaction is on
unless --no-redact; --preview prints what would be redacted and writes nothing.
Exit codes as the gate: 0 no finding at the threshold, 1 findings, 2 could not
report (usage, unwritable output, internal error).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from doctor.arguments import Parser, UsageError, add_case_args, case_from_args, seconds
from doctor.report import bundle
from doctor.report.redact import RULES
from doctor.report.write import (
    ReportError,
    ReportSettings,
    check_writable,
    make_report,
    output_format,
    write_report,
)
from doctor.sanitize import shown
from doctor.verdict import ExitCode
from doctor.wording import count


def build_parser() -> Parser:
    p = Parser(prog="gpu-doctor report", description=(
        "Write one redacted, self-contained report for a support ticket. The format follows FILE's "
        "extension: .json, .md, .html, or .tar.gz (the report plus log excerpts, scorep.cfg files, "
        "the timeline analysis and trace summaries)."))
    add_case_args(p)
    p.add_argument("-o", "--output", metavar="FILE",
                   help="where to write the report (required unless --preview)")
    p.add_argument("--playbook", metavar="NAME",
                   help="which checks to run (default: node without PATH, scorep-ddp with PATH)")
    p.add_argument("--hash-hosts", action="store_true", help="replace host names by a hash")
    p.add_argument("--no-redact", action="store_true",
                   help="keep secrets, user names and the full environment (only for trusted recipients)")
    p.add_argument("--preview", action="store_true",
                   help="print what would be redacted (counts per rule) and write nothing")
    p.add_argument("--max-bundle-mb", type=seconds(allow_zero=False, unit="MiB", maximum=64 * 1024),
                   default=20.0, metavar="N",
                   help="size cap for a .tar.gz bundle in MiB (default 20)")
    p.add_argument("--fail-on", choices=("error", "warning"), default="error",
                   help="the threshold for exit code 1 (default: error)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    return p


def preview_text(summary: dict[str, Any], fmt: str, target: str | None, extra: list[bundle.BundleFile]) -> str:
    head = f"gpu-doctor report preview: nothing written{f' (would write {fmt} to {target})' if target else ''}"
    if not summary["enabled"]:
        lines = [head, "Redaction: OFF (--no-redact); only GPU UUIDs are hashed"]
    else:
        lines = [head, f"Redaction: on; host names {'hashed' if summary['hash_hosts'] else 'kept'}"]
    for rule in summary["rules"]:
        lines.append(f"  {rule:<18} {summary['counts'].get(rule, 0):>5}  {RULES[rule]}")
    if extra:
        lines += ["Bundle files besides the report:"] + [f"  {f.name} ({count(f.size, 'byte')})" for f in extra]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    return run_report(argv)


def run_report(argv: list[str], preset_facts: dict[str, Any] | None = None) -> int:
    """`main` with facts given in advance (tests, and front ends that already probed)."""
    try:
        args = build_parser().parse_args(argv)
        if not args.output and not args.preview:
            raise UsageError("-o FILE is required (or --preview to see what would be redacted)")
        fmt = output_format(args.output) if args.output else "json"
        target = Path(args.output) if args.output else None
        if target is not None and not args.preview:
            check_writable(target)
        settings = ReportSettings(playbook=args.playbook, fail_on=args.fail_on, budget_s=args.timeout,
                                  redact=not args.no_redact, hash_hosts=args.hash_hosts,
                                  max_bundle_mb=args.max_bundle_mb, quiet=args.quiet, argv=tuple(argv))
        case = case_from_args(args)
        if args.preview:
            _, doc, _, extra = make_report(case, settings, fmt, preset_facts)
            print(preview_text(doc["redaction"], fmt, args.output, extra))
            return int(ExitCode.OK)
        assert target is not None
        written = write_report(case, target, settings, preset_facts)
        print(shown(written.summary()))
        return written.exit_code
    except (UsageError, ReportError) as exc:
        print(shown(f"gpu-doctor report: error: {exc}"), file=sys.stderr)
        return int(ExitCode.ERROR)

"""`gpu-doctor report [PATH] -o FILE`: run the checks, collect the context, redact, write one file.

Format by extension: .json, .md, .html, .tar.gz (also .tgz). Redaction is on
unless --no-redact; --preview prints what would be redacted and writes nothing.
Exit codes as the gate: 0 no finding at the threshold, 1 findings, 2 could not
report (usage, unwritable output, internal error).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from doctor.atomic import write_atomic
from doctor.cli import Parser, UsageError, add_case_args, case_from_args, seconds
from doctor.report import bundle, collect, render_html, render_md
from doctor.report.redact import MASK, RULES, Redactor
from doctor.safeopen import UnsafeFile, check_replaceable
from doctor.verdict import ExitCode

FORMATS = {".json": "json", ".md": "md", ".markdown": "md", ".html": "html", ".htm": "html",
           ".tar.gz": "bundle", ".tgz": "bundle"}


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


def output_format(name: str) -> str:
    lower = name.lower()
    for ext, fmt in FORMATS.items():
        if lower.endswith(ext):
            return fmt
    raise UsageError(f"cannot tell the report format from {name!r}: use a name ending in "
                     ".json, .md, .html or .tar.gz")


def check_writable(path: Path) -> None:
    """Fail before any check runs if the report could not be written there."""
    if path.is_dir():
        raise UsageError(f"cannot write {path}: it is a folder")
    try:
        check_replaceable(path)
    except UnsafeFile as exc:
        raise UsageError(f"cannot write {exc}") from None
    parent = path.parent
    if not parent.is_dir():
        raise UsageError(f"cannot write {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write {path}: folder {parent} is not writable")


def report_mode(private: bool) -> int:
    """0600 for an unredacted report, else what the umask allows."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o600 if private else 0o666 & ~umask


def render(fmt: str, doc: dict[str, Any], extra: list[bundle.BundleFile], cap_mb: float,
           clean: Callable[[str], str] = lambda text: text) -> bytes:
    """The bytes to write; for a bundle, drops extra files that do not fit under the cap.

    `clean` runs over every rendered text (the last safety net against leaks).
    """
    if fmt != "bundle":
        return clean(_reports(doc)[f"report.{fmt}"]).encode("utf-8")
    cap = int(cap_mb * 1024 * 1024)
    base = sum(len(t.encode("utf-8")) for t in _reports(doc).values())
    if base + bundle.RESERVE > cap:
        raise UsageError(f"the report alone is {base / 2**20:.1f} MiB, over --max-bundle-mb {cap_mb:g}")
    kept, dropped = bundle.fit(extra, base, cap)
    doc["bundle"] = {"max_mb": cap_mb, "files": [f.name for f in kept], "left_out": dropped}
    kept = [bundle.BundleFile(f.folder, f.label, f.suffix, clean(f.text)) for f in kept]
    reports = {name: clean(text) for name, text in _reports(doc).items()}
    return bundle.pack(reports, kept, dropped)


def _reports(doc: dict[str, Any]) -> dict[str, str]:
    return {"report.json": dumps(doc), "report.md": render_md.render(doc),
            "report.html": render_html.render(doc)}


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n"


def preview_text(summary: dict[str, Any], fmt: str, target: str | None, extra: list[bundle.BundleFile]) -> str:
    head = f"gpu-doctor report preview: nothing written{f' (would write {fmt} to {target})' if target else ''}"
    if not summary["enabled"]:
        lines = [head, "Redaction: OFF (--no-redact); only GPU UUIDs are hashed"]
    else:
        lines = [head, f"Redaction: on; host names {'hashed' if summary['hash_hosts'] else 'kept'}"]
    for rule in summary["rules"]:
        lines.append(f"  {rule:<18} {summary['counts'].get(rule, 0):>5}  {RULES[rule]}")
    if extra:
        lines += ["Bundle files besides the report:"] + [f"  {f.name} ({f.size} bytes)" for f in extra]
    return "\n".join(lines)


def make_report(args: argparse.Namespace, argv: list[str], preset_facts: dict[str, Any] | None = None
                ) -> tuple[int, dict[str, Any], Redactor, list[bundle.BundleFile]]:
    """Run the checks and build the redacted document (and the bundle's extra files)."""
    from doctor.playbook import PlaybookError, load_playbook
    from doctor.runner import run_checks
    from doctor.verdict import exit_code

    case = case_from_args(args)
    try:
        playbook = load_playbook(args.playbook or ("node" if case.root is None else "scorep-ddp"))
    except PlaybookError as exc:
        raise UsageError(str(exc)) from None
    check_ids = list(playbook.checks)
    level = max(case.level, playbook.level)  # as the gate: --level 2 adds the active tests
    if level >= 2:
        check_ids += [c for c in playbook.active_checks if c not in check_ids]
    case = dataclasses.replace(case, level=level)
    if not args.quiet:
        print(f"gpu-doctor report: {len(check_ids)} checks ({playbook.name}) on {case.host}", file=sys.stderr)
    run = run_checks(case, check_ids, budget_s=args.timeout, playbook=playbook.name, mode="report",
                     preset_facts=preset_facts)
    raw = collect.build_document(run, argv, args.fail_on)
    homes, users = collect.homes_and_users()
    redactor = Redactor.for_environments(
        [case.env, raw["environment"]["job"]], enabled=not args.no_redact, hash_hosts=args.hash_hosts,
        homes=homes, users=users, hosts=collect.host_names(run))
    extra: list[bundle.BundleFile] = []
    if args.output and output_format(args.output) == "bundle":
        extra = [f.redacted(redactor.file_text) for f in bundle.gather(raw, case.root)]
    doc = redactor.document(raw)
    doc["redaction"] = redactor.summary()
    return int(exit_code(run, args.fail_on)), doc, redactor, extra


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
        code, doc, redactor, extra = make_report(args, argv, preset_facts)
        if args.preview:
            print(preview_text(doc["redaction"], fmt, args.output, extra))
            return int(ExitCode.OK)
        assert target is not None
        data = render(fmt, doc, extra, args.max_bundle_mb, lambda text: scrub(text, redactor))
        try:
            write_atomic(target, data, report_mode(private=args.no_redact))
        except UnsafeFile as exc:
            raise UsageError(f"cannot write {exc}") from None
        except OSError as exc:
            raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from None
        print(f"gpu-doctor: wrote {target} ({fmt}, {len(data)} bytes); redaction: "
              f"{'on' if redactor.enabled else 'OFF'}, {sum(doc['redaction']['counts'].values())} item(s)")
        return code
    except UsageError as exc:
        print(f"gpu-doctor report: error: {exc}", file=sys.stderr)
        return int(ExitCode.ERROR)


def scrub(text: str, redactor: Redactor) -> str:
    """Last safety net: a known secret that still made it into rendered output is masked."""
    for secret in redactor.leaked(text):
        text = text.replace(secret, MASK)
    return text

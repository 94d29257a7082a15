"""`gpu-doctor fix` and `gpu-doctor undo`.

    gpu-doctor fix [PATH]                  list the remedies for the job's findings
    gpu-doctor fix [PATH] --diff           print the changes as unified diffs
    gpu-doctor fix [PATH] --apply          apply the safe ones, re-check, record `verified`
    gpu-doctor fix [PATH] --apply --unsafe also the ones that edit your code
    gpu-doctor fix [PATH] --only ID ...    only these remedies
    gpu-doctor undo [PATH] [--all]         put the files of the last (or every) apply back

stdout carries the plan, diffs and results; stderr the progress. Exit codes:
0 done (or nothing to do), 1 an applied remedy did not verify, 2 could not run
or refused (a file changed since the plan, a read-only file...), nothing written.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from doctor import registry
from doctor.arguments import (
    Parser,
    UsageError,
    add_case_args,
    case_from_args,
    gather_only,
    job_folder,
    to_stderr,
)
from doctor.diagnosis import JOB_LAYERS
from doctor.model import Evidence, Finding, Status
from doctor.remedy.model import Plan, RemedyError, RemedyPlan, display_path
from doctor.sanitize import shown
from doctor.wording import count

MARK = {"ready": "", "manual": "manual steps", "nothing": "nothing to do", "cannot": "cannot apply here",
        "unknown": "unknown remedy", "skipped": "needs --unsafe"}


def fix_parser() -> Parser:
    p = Parser(prog="gpu-doctor fix", description="Plan, preview and apply the remedies for a job folder's "
               "findings; re-check after applying. Nothing is written without --apply.")
    add_case_args(p, path_default=".")
    p.add_argument("--diff", action="store_true", help="print the planned changes as unified diffs")
    p.add_argument("--apply", action="store_true", help="apply the safe remedies (and unsafe with --unsafe)")
    p.add_argument("--unsafe", action="store_true", help="include remedies that edit your code")
    p.add_argument("--only", action="append", default=[], metavar="ID",
                   help="only these remedy IDs (--only A B, or A,B)")
    p.add_argument("--findings", action="append", default=[], metavar="FILE",
                   help="also use the findings of a gpu-doctor JSON verdict (e.g. a node's GPU003)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    return p


def fix_main(argv: list[str]) -> int:
    registry.load()
    args = fix_parser().parse_args(gather_only(argv, lambda word: word in registry.REMEDIES))
    case = case_from_args(args)
    unknown = [r for r in args.only if r not in registry.REMEDIES]
    if unknown:
        raise UsageError(f"unknown remedy ID {unknown[0]!r} (known: {', '.join(sorted(registry.REMEDIES))})")
    from doctor.remedy.verify import check_and_plan

    imported = [f for name in args.findings for f in read_findings(Path(name), case.root)]
    say = (lambda text: None) if args.quiet else (lambda text: print(shown(text), file=sys.stderr))
    say(f"gpu-doctor fix: checking {case.root} ...")
    run, plan = check_and_plan(case, extra=imported, only=args.only, unsafe=args.unsafe,
                               budget_s=args.timeout)
    if args.apply:
        return apply_and_verify(plan, case, argv, say)
    if args.diff:
        sys.stdout.write(shown(plan.diff()) or "# nothing to change\n")
        for rp in plan.remedies + plan.skipped:
            if rp.status != "ready":
                say(f"  {rp.remedy_id}: {MARK.get(rp.status, rp.status)}{': ' + rp.note if rp.note else ''}")
        return 0
    # the node checks are not probed by fix (their `unknown` is not a finding of this folder)
    open_findings = [f for f in run.findings if f.layer in JOB_LAYERS] + imported
    print(shown(listing(plan, len([f for f in open_findings if f.status not in (Status.PASS, Status.SKIP)]))))
    return 0


def listing(plan: Plan, n_findings: int) -> str:
    rps = list(plan.remedies) + list(plan.skipped)
    if not rps:
        if not n_findings:
            return f"gpu-doctor fix: nothing to fix in {plan.root} (no open finding)"
        return (f"gpu-doctor fix: nothing to fix in {plan.root} ({count(n_findings, 'open finding')}, "
                "none with a remedy)")
    lines = [f"gpu-doctor fix: {count(len(rps), 'remedy')} for {count(n_findings, 'finding')} in {plan.root}"]
    for rp in rps:
        state = MARK.get(rp.status, rp.status)
        lines.append(f"  {rp.safety.value:<7} {rp.remedy_id:<24} {rp.title}  [{', '.join(rp.checks)}]"
                     + (f"  ({state})" if state else ""))
        lines += [f"            {c.kind:<11} {display_path(c.path, plan.root)}"
                  f"{':' + str(c.line) if c.line else ''}  {c.summary}" for c in rp.changes]
        if rp.note and rp.status != "ready":
            lines.append(f"            {rp.note}")
        if rp.status in ("manual", "cannot"):
            lines += _steps(rp)
    ready = [rp for rp in rps if rp.status == "ready"]
    unsafe = [rp for rp in plan.skipped]
    hint = f"gpu-doctor fix {plan.root}"
    if ready:
        lines.append(f"Preview: {hint} --diff   Apply: {hint} --apply"
                     + (" --unsafe" if any(rp.safety.value == "unsafe" for rp in ready) else ""))
    if unsafe:
        lines.append(f"{count(len(unsafe), 'unsafe remedy edits', 'unsafe remedies edit')} your code: "
                     "add --unsafe to include them.")
    return "\n".join(lines)


def _steps(rp: RemedyPlan) -> list[str]:
    out = []
    for i, step in rp.numbered_steps():
        if i is None:  # a code block's line: as written, under its step's text
            out.append(f"               {step}")
            continue
        wrapped = textwrap.wrap(step, 100, subsequent_indent="               ")
        out.append(f"            {i}. {wrapped[0]}")
        out += wrapped[1:]
    return out


def apply_and_verify(plan: Plan, case: Any, argv: list[str], say: Any) -> int:
    from doctor.remedy.apply import apply_plan
    from doctor.remedy.verify import recheck, record, verify_plan

    for rp in list(plan.remedies) + list(plan.skipped):
        if rp.status != "ready":
            say(f"  {rp.remedy_id}: {MARK.get(rp.status, rp.status)}{': ' + rp.note if rp.note else ''}")
    if plan.empty:
        print("gpu-doctor fix: nothing to apply")
        return 0
    try:
        result = apply_plan(plan, ["gpu-doctor", "fix", *argv])
    except RemedyError as exc:
        print(shown(f"gpu-doctor: error: {exc}"), file=sys.stderr)
        return 2
    if result.tx is None:
        print("gpu-doctor fix: already applied: every file holds the planned content; nothing written")
        return 0
    for path in result.written:
        print(shown(f"wrote {display_path(path, plan.root)}"))
    say("gpu-doctor fix: re-running the checks ...")
    checks = verify_plan(plan, recheck(case, plan))
    record(plan, result.tx, checks)
    failed = 0
    for v in checks:
        word = {True: "verified", False: "NOT verified", None: "not verified"}[v.verified]
        print(shown(f"{v.remedy_id}: {word}" + (f" ({v.note})" if v.note else "")))
        failed += v.verified is False
    print(shown(f"gpu-doctor fix: applied {count(len(plan.ready), 'remedy')} ({result.tx}); "
                f"undo with: gpu-doctor undo {plan.root}"))
    return 1 if failed else 0


def read_findings(path: Path, root: Path | None = None) -> list[Finding]:
    """The findings of a gpu-doctor JSON verdict (`--json` / `--json-file` output).

    Every file a finding names must lie inside the job folder `root` (no `..`,
    no symlink, absolute only below the folder): a findings file is input, and
    must not steer a remedy to a file outside the job.
    """
    from doctor.limits import MAX_JSON_BYTES
    from doctor.safeopen import read_regular

    try:
        doc = json.loads(read_regular(path, MAX_JSON_BYTES).decode("utf-8"))
        out = []
        for check in doc["checks"]:
            for f in check.get("findings", []):
                ev = tuple(Evidence(str(e.get("text", "")), e.get("file"), e.get("line"), e.get("label"))
                           for e in f.get("evidence", []))
                out.append(Finding(check["id"], check.get("layer", ""), Status(f["status"]),
                                   str(f.get("message", "")), ev, tuple(f.get("remedies", [])),
                                   dict(f.get("entities", {})), dict(f.get("data", {}))))
    except OSError as exc:
        raise UsageError(f"--findings {path}: cannot read: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"--findings {path}: not a gpu-doctor JSON verdict ({type(exc).__name__}: {exc})") \
            from None
    if root is not None:
        for finding in out:
            _check_named_files(path, finding, root)
    return out


def _check_named_files(source: Path, finding: Finding, root: Path) -> None:
    from doctor.remedy.journal import JournalError, inside

    named = [e.file for e in finding.evidence] + [finding.data.get("file"), finding.data.get("path")]
    for file in named:
        if file is None:
            continue
        text = str(file)
        rel = text
        if Path(text).is_absolute():
            try:
                rel = Path(text).relative_to(root).as_posix()
            except ValueError:
                raise UsageError(f"--findings {source}: {finding.check_id} names {text}, outside the job "
                                 f"folder {root}; refusing it") from None
        try:
            inside(root, rel, "file")
        except JournalError as exc:
            raise UsageError(f"--findings {source}: {finding.check_id}: {exc}") from None


def undo_parser() -> Parser:
    p = Parser(prog="gpu-doctor undo", description="Put back the files that `gpu-doctor fix --apply` changed, "
               "byte for byte, from the backups in PATH/.gpu-doctor/.")
    p.add_argument("path", nargs="?", default=".", metavar="PATH", help="the job folder (default: .)")
    p.add_argument("--all", action="store_true", help="undo every applied fix, newest first")
    p.add_argument("--tx", metavar="ID", help="undo this transaction (see --list)")
    p.add_argument("--force", action="store_true",
                   help="put the old content back even where a file changed after the fix")
    p.add_argument("--list", action="store_true", help="list the applied fixes and stop")
    return p


def undo_main(argv: list[str]) -> int:
    args: argparse.Namespace = undo_parser().parse_args(argv)
    root = job_folder(args.path, to_stderr)
    assert root is not None  # PATH defaults to "."
    from doctor.remedy.apply import undo
    from doctor.remedy.journal import transactions

    try:
        if args.list:
            for t in transactions(root):
                state = "undone" if t.undone else t.end
                print(shown(f"{t.tx}  {state:<11} {', '.join(r['id'] for r in t.remedies)}"))
            return 0
        result = undo(root, tx=args.tx, everything=args.all, force=args.force)
    except RemedyError as exc:
        print(shown(f"gpu-doctor: error: {exc}"), file=sys.stderr)
        return 2
    if not result.txs:
        print(shown(f"gpu-doctor undo: nothing to undo in {root}"))
        return 0
    for path in result.restored:
        print(shown(f"restored {display_path(path, root)}"))
    for path in result.removed:
        print(shown(f"removed {display_path(path, root)}"))
    print(shown(f"gpu-doctor undo: undid {', '.join(result.txs)}"))
    return 0

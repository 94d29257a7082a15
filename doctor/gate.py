"""The headless gate: `gpu-doctor --check-only`.

Bounded time, no prompt, no TUI; one reason line on stdout (or JSON), progress
on stderr, exit 0/1/2. With the default `prologue` playbook it reads no user
files and runs no user code, so it is safe as a Slurm Prolog run as root.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from doctor import registry
from doctor.arguments import UsageError, print_json
from doctor.atomic import UnsafeFile, write_atomic
from doctor.case import Case
from doctor.playbook import Playbook
from doctor.runner import CheckFinished, Event, order_checks, run_checks
from doctor.safeopen import check_replaceable
from doctor.sanitize import shown
from doctor.trust import skipped_line
from doctor.verdict import ExitCode, exit_code, reason_line, run_json
from doctor.wording import count


def _progress(quiet: bool):  # type: ignore[no-untyped-def]
    def on_event(ev: Event) -> None:
        if not quiet and isinstance(ev, CheckFinished):
            r = ev.result
            print(f"  {r.check_id:<7} {r.status.value:<7} {shown(r.message, one_line=True)}", file=sys.stderr)
            for f in r.findings:  # a matrix (P2P001/P2P002) reads better than a message
                if isinstance(f.data.get("matrix"), str):
                    print("\n".join(f"          {shown(ln, one_line=True)}" for ln in f.data["matrix"].splitlines()),
                          file=sys.stderr)
    return on_event


@dataclass(frozen=True)
class GateOptions:
    """How the gate runs and answers: the `--check-only` flags that do not describe the case."""

    budget_s: float = 60.0
    fail_on: str = "error"
    only: tuple[str, ...] = ()  # run just these check IDs (at --level 2)
    json: bool = False  # the JSON document on stdout instead of the reason line
    json_file: str | None = None  # also write the JSON document here
    prometheus: str | None = None  # also write the verdict in Prometheus text format here
    quiet: bool = False  # no progress on stderr
    argv: tuple[str, ...] = ()  # the command line, recorded in the JSON document


def checks_heading(check_ids: list[str]) -> str:
    """"3 checks", or with the checks they depend on: "2 checks (GPU003, and GPU001 it depends on)".

    The count is of every row that follows and that the verdict counts.
    """
    registry.load_checks(check_ids)
    ran = [c.id for c in order_checks(check_ids)]
    deps = [c for c in ran if c not in check_ids]
    head = count(len(ran), "check")
    if not deps:
        return head
    one = len(check_ids) == 1
    return f"{head} ({', '.join(check_ids)}, and {', '.join(deps)} {'it depends' if one else 'they depend'} on)"


def _written(path: str, write: Callable[[Path], None]) -> bool:
    """Run `write` on `path` (its folder made first); False, said in one line, when it cannot."""
    try:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        write(target)
    except UnsafeFile as exc:
        print(shown(f"gpu-doctor: error: cannot write {exc}"), file=sys.stderr)
        return False
    except OSError as exc:
        print(shown(f"gpu-doctor: error: cannot write {path}: {exc.strerror or exc}"), file=sys.stderr)
        return False
    return True


def run_gate(case: Case, playbook: Playbook, options: GateOptions) -> int:
    """Run the playbook's checks on the case; print the verdict; return the exit code."""
    for flag, target in (("--json-file", options.json_file), ("--prometheus", options.prometheus)):
        if target:  # refuse a device, FIFO or symlink before any check runs
            try:
                check_replaceable(target)
            except UnsafeFile as exc:
                raise UsageError(f"{flag}: cannot write {exc}") from None
    if not playbook.reads_user_files:  # the prologue reads no user files, whatever PATH says
        case = dataclasses.replace(case, root=None)
    check_ids = list(playbook.checks)
    if options.only:
        registry.load_checks(options.only)
        unknown = [c for c in options.only if c.upper() not in registry.CHECKS]
        if unknown:
            raise UsageError(f"unknown check ID {unknown[0]!r} (see `gpu-doctor list-checks`)")
        check_ids = [c.upper() for c in options.only]
    # --level 2 (or a playbook that asks for it, or naming checks with --only) runs active tests.
    level = max(case.level, playbook.level, 2 if options.only else 1)
    if level >= 2 and not options.only:
        check_ids += [c for c in playbook.active_checks if c not in check_ids]
    case = dataclasses.replace(case, level=level)
    if not options.quiet:
        print(shown(f"gpu-doctor {playbook.name}: {checks_heading(check_ids)} on {case.host}"
                    f"{f' for {case.root}' if case.root else ''}", one_line=True), file=sys.stderr)
    run = run_checks(case, check_ids, budget_s=options.budget_s, on_event=_progress(options.quiet),
                     playbook=playbook.name, mode="check-only")
    skipped = skipped_line(run.facts.computed())
    if skipped and not options.quiet:  # what did not run because the job's owner could change it
        print(shown(skipped, one_line=True), file=sys.stderr)
    if case.root is not None and (case.root / ".gpu-doctor").is_dir():
        # Which remedies `gpu-doctor fix` applied here, and whether they verified.
        from doctor.remedy.journal import remedy_states

        try:
            run.extra["applied"] = remedy_states(case.root)
        except (OSError, ValueError) as exc:
            print(shown(f"gpu-doctor: note: cannot read the fix journal: {exc}"), file=sys.stderr)
    doc = run_json(run, options.fail_on, list(options.argv))
    if options.json_file and not _written(options.json_file, lambda target: write_atomic(
            target, (json.dumps(doc, indent=2, default=str) + "\n").encode("utf-8"))):
        return ExitCode.ERROR
    if options.prometheus:
        from doctor.prometheus import write_prometheus

        if not _written(options.prometheus, lambda target: write_prometheus(target, doc)):
            return ExitCode.ERROR
    if options.json:
        print_json(doc)
    else:
        print(shown(reason_line(run, options.fail_on), one_line=True))
    return int(exit_code(run, options.fail_on))

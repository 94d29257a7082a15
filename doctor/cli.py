"""The command line: `gpu-doctor [PATH]`, `--check-only`, and the subcommands.

stdout carries data (the verdict line or JSON); stderr carries people-facing
progress and diagnostics. `main() -> int`, exit codes from `ExitCode`.
Only the gate's own modules are imported here; subcommands load lazily. The
argument helpers every front end shares are in `doctor.arguments`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from doctor import __version__
from doctor.arguments import Parser, UsageError, add_case_args, case_from_args, check_path, gather_only
from doctor.sanitize import shown

# Subcommand -> "module:function"; each function is `main(argv) -> int`.
COMMANDS = {
    "list-checks": "doctor.catalogue_cli:list_checks_main",
    "explain": "doctor.catalogue_cli:explain_main",
    "report": "doctor.report.cli:main",
    "launch": "doctor.launch.cli:main",
    "fix": "doctor.remedy_cli:fix_main",
    "undo": "doctor.remedy_cli:undo_main",
    "timeline": "doctor.timeline.cli:main",
    "fleet": "doctor.fleet.cli:main",
    "hang": "doctor.hang.cli:main",
}


CHECK_ID = re.compile(r"[A-Z]{3}[0-9]{3}")


def build_parser() -> Parser:
    p = Parser(prog="gpu-doctor", description=(
        "Find why a GPU job or its Score-P measurement goes wrong, fix it, and launch it. "
        f"Subcommands: {', '.join(COMMANDS)}."))
    add_case_args(p)
    p.add_argument("--check-only", action="store_true",
                   help="headless gate: no TUI; one verdict line (or --json); exit 0/1/2")
    p.add_argument("--playbook", metavar="NAME",
                   help="prologue, scorep-ddp, node, post-run, p2p, or a .toml file (default: prologue for "
                        "--check-only without PATH, scorep-ddp with a PATH and in the app)")
    p.add_argument("--json", action="store_true", help="print the JSON verdict on stdout")
    p.add_argument("--json-file", metavar="FILE", help="also write the JSON verdict to FILE")
    p.add_argument("--prometheus", metavar="FILE",
                   help="also write the verdict in Prometheus text format to FILE (node_exporter's "
                        "textfile collector; replaced atomically)")
    p.add_argument("--fail-on", choices=("error", "warning"), default="error",
                   help="the threshold for exit code 1 (default: error)")
    p.add_argument("--only", action="append", default=[], metavar="ID",
                   help="run only these checks (--only SCP003 SCR002, or SCP003,SCR002)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    p.add_argument("--version", action="version", version=f"gpu-doctor {__version__}")
    return p


def gate_main(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from doctor.gate import GateOptions, run_gate
    from doctor.playbook import PlaybookError, load_playbook

    name = args.playbook or ("prologue" if args.path is None else "scorep-ddp")
    try:
        playbook = load_playbook(name)
    except PlaybookError as exc:
        raise UsageError(str(exc)) from None
    if playbook.reads_user_files and args.path is None:
        args.path = "."
    options = GateOptions(budget_s=args.timeout, fail_on=args.fail_on, only=tuple(args.only),
                          json=args.json, json_file=args.json_file,
                          prometheus=args.prometheus, quiet=args.quiet, argv=tuple(argv))
    return run_gate(case_from_args(args, gate=True), playbook, options)


def tui_main(args: argparse.Namespace) -> int:
    check_path(args.path)  # a missing PATH is a usage error, TTY or not
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print("gpu-doctor: no terminal here, so no interactive app. Use `gpu-doctor --check-only "
              "[PATH]` for a verdict or `gpu-doctor report [PATH] -o FILE` for a report.",
              file=sys.stderr)
        return 2
    try:
        tui = importlib.import_module("doctor.tui.app")
    except ModuleNotFoundError as exc:
        print(f"gpu-doctor: the interactive app is unavailable ({exc}); use --check-only",
              file=sys.stderr)
        return 2
    from doctor.tui.options import Options

    if args.path is None:  # the app examines the current folder by default
        args.path = "."
    notes: list[str] = []  # a file as PATH: said in the app, where it is seen
    case = case_from_args(args, say=notes.append)
    options = Options(playbook=args.playbook or "scorep-ddp", budget_s=args.timeout, fail_on=args.fail_on,
                      notes=tuple(notes))
    return int(tui.main(case, options))


def dispatch(name: str, argv: list[str]) -> int:
    module_name, func = COMMANDS[name].split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            print(f"gpu-doctor: error: `{name}` is not available in this build", file=sys.stderr)
            return 2
        raise
    return int(getattr(module, func)(argv))


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; from the real command line (`argv` None) it never outlives --timeout."""
    if argv is None:
        return leave_stuck_probes(_main(sys.argv[1:]))
    return _main(list(argv))


def leave_stuck_probes(code: int) -> int:
    """Exit now if a probe thread is still busy past the budget (its check already said `timeout`).

    Python joins worker threads at exit; a probe stuck in hostile input (a parser that
    will not return) would hold the process long past --timeout. Its result is no
    longer wanted, so the process ends without waiting for it.
    """
    import threading

    stuck = [t for t in threading.enumerate()
             if t is not threading.current_thread() and t.is_alive() and not t.daemon]
    if stuck:
        from doctor.isolate import kill_live_groups

        kill_live_groups()  # their children and grandchildren go with them, not to init
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    return code


def _main(argv: list[str]) -> int:
    try:
        if argv and argv[0] in COMMANDS:
            return dispatch(argv[0], argv[1:])
        first = argv[0] if argv else ""
        if first and not first.startswith((".", "-", "/", "~")) and "/" not in first and not Path(first).exists():
            raise UsageError(f"{first!r} is neither a subcommand ({', '.join(COMMANDS)}) nor an existing PATH")
        args = build_parser().parse_args(gather_only(argv, lambda w: bool(CHECK_ID.fullmatch(w))))
        if args.check_only or args.json or args.only:
            return gate_main(args, argv)
        return tui_main(args)
    except UsageError as exc:
        print(shown(f"gpu-doctor: error: {exc}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gpu-doctor: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # last resort: one line, never a traceback on the user's screen
        if os.environ.get("GPU_DOCTOR_DEBUG"):
            raise
        print(shown(f"gpu-doctor: internal error: {type(exc).__name__}: {exc} "
                    "(set GPU_DOCTOR_DEBUG=1 for the traceback)"), file=sys.stderr)
        return 2

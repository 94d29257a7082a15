"""The command line: `gpu-doctor [PATH]`, `--check-only`, and the subcommands.

stdout carries data (the verdict line or JSON); stderr carries people-facing
progress and diagnostics. `main() -> int`, exit codes from `ExitCode`.
Only the gate's own modules are imported here; subcommands load lazily.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from doctor import __version__
from doctor.case import Case

# Subcommand -> "module:function"; each function is `main(argv) -> int`.
COMMANDS = {
    "list-checks": "doctor.catalogue_cli:list_checks_main",
    "explain": "doctor.catalogue_cli:explain_main",
    "report": "doctor.report.cli:main",
    "launch": "doctor.launch.cli:main",
    "fix": "doctor.remedy_cli:fix_main",
    "undo": "doctor.remedy_cli:undo_main",
    "timeline": "doctor.timeline.cli:main",
}


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def seconds(*, allow_zero: bool) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds, above zero (or from zero with allow_zero)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if not (value >= 0 if allow_zero else value > 0) or value == float("inf"):
            wanted = "0 or more seconds" if allow_zero else "a positive number of seconds"
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
        return value
    return parse


def whole_number(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least `minimum`."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more, got {text!r}")
        return value
    return parse


positive_float = seconds(allow_zero=False)
non_negative_float = seconds(allow_zero=True)
non_negative_int = whole_number(0)
positive_int = whole_number(1)


def add_case_args(p: argparse.ArgumentParser, path_default: str | None = None) -> None:
    """The options that describe what is examined; shared by the gate, report and fix."""
    p.add_argument("path", nargs="?", default=path_default, metavar="PATH",
                   help="the job folder (default: the current folder for job checks)")
    p.add_argument("--python", metavar="P", help="the job's interpreter (default: the current one)")
    p.add_argument("--script", action="append", default=[], metavar="FILE",
                   help="a training script to analyse (repeatable; overrides discovery)")
    p.add_argument("--launch", action="append", default=[], metavar="FILE",
                   help="a job/launch script to analyse (repeatable; overrides discovery)")
    p.add_argument("--log", action="append", default=[], metavar="FILE",
                   help="a log file to scan (repeatable; overrides discovery)")
    p.add_argument("--expect-gpus", type=non_negative_int, metavar="N",
                   help="GPUs this node must have (default: what Slurm allocated, if anything)")
    p.add_argument("--level", type=int, choices=(1, 2), default=1,
                   help="2 adds active tests (P2P data integrity)")
    p.add_argument("--timeout", type=positive_float, default=60.0, metavar="S",
                   help="global time budget in seconds (default 60)")
    p.add_argument("--p2p-size", type=p2p_size, metavar="SIZE",
                   help="bytes per GPU pair for the --level 2 peer-copy test, e.g. 256M (default 32M)")


def p2p_size(text: str) -> int:
    from doctor.probes.p2p import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def check_path(text: str | None) -> Path | None:
    """Validate PATH: it must exist and be readable."""
    if text is None:
        return None
    path = Path(text)
    if not path.exists():
        raise UsageError(f"PATH {text!r} does not exist")
    if not os.access(path, os.R_OK | (os.X_OK if path.is_dir() else 0)):
        raise UsageError(f"PATH {text!r} is not readable")
    return path.resolve()


def job_folder(text: str | None, say: Callable[[str], None]) -> Path | None:
    """PATH as the job folder: a folder is itself; a file means its folder, and `say` is told so once."""
    path = check_path(text)
    if path is None or path.is_dir():
        return path
    say(f"gpu-doctor: {text} is a file: examining its folder, {path.parent}")
    return path.parent


def to_stderr(text: str) -> None:
    print(text, file=sys.stderr)


def check_file(flag: str, text: str) -> Path:
    """Validate a file named by --script/--launch/--log: it must exist, be a file and be readable."""
    path = Path(text)
    if not path.exists():
        raise UsageError(f"{flag} {text!r} does not exist")
    if path.is_dir():
        raise UsageError(f"{flag} {text!r} is a folder, not a file")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{flag} {text!r} is not readable")
    return path


def check_python(text: str | None) -> str | None:
    """--python must name an interpreter that exists (a path, or a name on PATH)."""
    if text is None:
        return None
    import shutil

    found = shutil.which(text) if "/" not in text else (text if os.access(text, os.X_OK) else None)
    if found is None or Path(found).is_dir():
        raise UsageError(f"--python {text!r}: no such interpreter (not an executable file, not on PATH)")
    return text


def case_from_args(args: argparse.Namespace, gate: bool = False,
                   say: Callable[[str], None] | None = None) -> Case:
    """The Case the options describe; `say` hears the one note on a file given as PATH
    (default: stderr, unless --quiet)."""
    if say is None:
        say = (lambda text: None) if getattr(args, "quiet", False) else to_stderr
    return Case(
        root=job_folder(args.path, say),
        python=check_python(args.python),
        scripts=tuple(check_file("--script", s) for s in args.script),
        launch=tuple(check_file("--launch", s) for s in args.launch),
        logs=tuple(check_file("--log", s) for s in args.log),
        expect_gpus=args.expect_gpus,
        level=args.level,
        gate=gate,
        options={"p2p_size": args.p2p_size} if getattr(args, "p2p_size", None) else {},
    )


def build_parser() -> Parser:
    p = Parser(prog="gpu-doctor", description=(
        "Find why a GPU job or its Score-P measurement goes wrong, fix it, and launch it. "
        f"Subcommands: {', '.join(COMMANDS)}."))
    add_case_args(p)
    p.add_argument("--check-only", action="store_true",
                   help="headless gate: no TUI; one verdict line (or --json); exit 0/1/2")
    p.add_argument("--playbook", metavar="NAME",
                   help="prologue (default for --check-only), scorep-ddp, post-run, p2p, or a .toml file")
    p.add_argument("--json", action="store_true", help="print the JSON verdict on stdout")
    p.add_argument("--json-file", metavar="FILE", help="also write the JSON verdict to FILE")
    p.add_argument("--fail-on", choices=("error", "warning"), default="error",
                   help="the threshold for exit code 1 (default: error)")
    p.add_argument("--only", action="append", default=[], metavar="ID", help="run only these checks")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    p.add_argument("--version", action="version", version=f"gpu-doctor {__version__}")
    return p


def gate_main(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from doctor.gate import run_gate

    return run_gate(args, list(argv))


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
    return int(tui.main(args))


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
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in COMMANDS:
            return dispatch(argv[0], argv[1:])
        first = argv[0] if argv else ""
        if first and not first.startswith((".", "-", "/", "~")) and "/" not in first and not Path(first).exists():
            raise UsageError(f"{first!r} is neither a subcommand ({', '.join(COMMANDS)}) nor an existing PATH")
        args = build_parser().parse_args(argv)
        if args.check_only or args.json or args.only:
            return gate_main(args, argv)
        return tui_main(args)
    except UsageError as exc:
        print(f"gpu-doctor: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gpu-doctor: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # last resort: one line, never a traceback on the user's screen
        if os.environ.get("GPU_DOCTOR_DEBUG"):
            raise
        print(f"gpu-doctor: internal error: {type(exc).__name__}: {exc} "
              "(set GPU_DOCTOR_DEBUG=1 for the traceback)", file=sys.stderr)
        return 2


def print_json(doc: object) -> None:
    json.dump(doc, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")

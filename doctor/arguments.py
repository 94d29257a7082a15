"""The command-line argument helpers every front end shares: one-line usage errors, the case options.

`UsageError` is bad input from the user (one line, exit code 2); `Parser` is argparse raising it;
`add_case_args` and `case_from_args` turn the options that describe what is examined into a `Case`.
Nothing here imports a front end, so the gate, the report, fix, launch and the app all import it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from doctor.case import Case
from doctor.sanitize import shown


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


MAX_SECONDS = 7 * 24 * 3600.0  # a week: beyond it a deadline overflows time_t arithmetic for nothing


def seconds(*, allow_zero: bool, unit: str = "seconds", maximum: float = MAX_SECONDS
            ) -> Callable[[str], float]:
    """An argparse type: a finite number of `unit`, above zero (or from zero), at most `maximum`."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of {unit}: {text!r}") from None
        if not (value >= 0 if allow_zero else value > 0) or value != value:
            wanted = f"0 or more {unit}" if allow_zero else f"a positive number of {unit}"
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum:g} {unit}, got {text!r}")
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
    p.add_argument("--observe", action="store_true",
                   help="read the job scripts the way bash runs them too (the default with a job folder: bash "
                        "runs them in a sandbox, with recording stand-ins for srun, python and the launchers)")
    p.add_argument("--no-observe", action="store_true",
                   help="read the job scripts statically only (nothing of the job runs)")
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
    print(shown(text), file=sys.stderr)


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
        options=_options(args),
    )


OBSERVE_SECONDS = 5.0  # the observed reading's share of --timeout, at most


def _options(args: argparse.Namespace) -> dict[str, object]:
    options: dict[str, object] = {"p2p_size": args.p2p_size} if getattr(args, "p2p_size", None) else {}
    options["observe"] = not getattr(args, "no_observe", False)
    options["observe_seconds"] = min(OBSERVE_SECONDS, float(getattr(args, "timeout", 60.0) or 60.0) / 4)
    return options


def print_json(doc: object) -> None:
    json.dump(doc, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def gather_only(argv: list[str], is_id: Callable[[str], bool]) -> list[str]:
    """`--only A B,C PATH` as `--only A --only B --only C PATH`: the IDs after `--only` (each may be
    comma-separated) run up to the first word that is not one (`is_id`), which stays a positional."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if word == "--":
            out += argv[i - 1:]
            break
        if word != "--only" and not word.startswith("--only="):
            out.append(word)
            continue
        first = word.partition("=")[2] if "=" in word else None
        words = [first] if first is not None else []
        while first is None and i < len(argv) and not argv[i].startswith("-") \
                and (not words or all(is_id(w) for w in argv[i].split(",") if w)):
            words.append(argv[i])
            i += 1
        ids = [w for text in words for w in text.split(",") if w]
        if not ids:
            out.append(word)  # argparse says what is missing
        for rid in ids:
            out += ["--only", rid]
    return out

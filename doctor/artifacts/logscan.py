"""Find the field guide's failure signatures in job logs, fast and in constant memory.

Logs are read in large binary blocks. One combined pattern finds candidate
lines (RE2 when the `google-re2` package is there, else a literal pre-filter
with `bytes.find`); only those lines are decoded and parsed for values. Binary
junk, CRLF, carriage-return progress bars and lines of any length are fine;
memory stays below about three blocks. Command line equivalent:
`grep -n -E -e PATTERN... FILE` (see `grep_patterns()`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doctor.safeopen import open_binary

BLOCK = 1 << 20  # fits in L2/L3 for the search and the newline count that follows
MAX_CARRY = 16 << 20  # a line longer than this is cut (a match across the cut is lost)
MAX_PER_FILE = 50  # matches kept per (file, signature)
FOLLOW_LINES = 4  # how far below its first line a multi-line message may continue
TEXT_CHARS = 400


@dataclass(frozen=True)
class Signature:
    """A known failure message. `pattern` is POSIX ERE (also valid for Python re and RE2),
    `anchors` are literals one of which every match contains (the stdlib pre-filter),
    `values` extracts the evidence values from the matched text.
    `follows` names the signature whose message this line continues (it is not one itself)."""

    name: str
    pattern: str
    anchors: tuple[bytes, ...]
    values: Callable[[str], dict[str, Any]] = field(default=lambda text: {})
    follows: str | None = None


def _ints(rx: str) -> Callable[[str], dict[str, Any]]:
    compiled = re.compile(rx)

    def values(text: str) -> dict[str, Any]:
        m = compiled.search(text)
        if not m:
            return {}
        return {k: int(v) if v and v.isdigit() else v for k, v in m.groupdict().items() if v}
    return values


def _clamp(text: str) -> dict[str, Any]:
    many = "many memory" in text
    return {"wording": "many" if many else "much", "scorep_versions": "7.0-8.1" if many else "8.2+"}


def _watchdog(text: str) -> dict[str, Any]:
    return {"marker": "dummyHasPrimaryContext" if "dummyHasPrimaryContext" in text else "ncclCommWatchdog"}


def _strategies(text: str) -> dict[str, Any]:
    found = {}
    for key, rx in (("eval_strategy", r"Evaluation strategy: ([\w.]+)"), ("save_strategy", r"Save strategy: ([\w.]+)")):
        m = re.search(rx, text)
        if m:
            found[key] = m.group(1)
    return found


def _tpd(text: str) -> dict[str, Any]:
    m = re.search(r"Invalid (\w+) thread", text)
    return {"thread_model": m.group(1)} if m else {}


SIGNATURES: tuple[Signature, ...] = (
    Signature("cupti_dropped", r"\[CUPTI[0-9]* Activity\] Dropped [0-9]+ records",
              (b"Activity] Dropped",),
              _ints(r"Dropped (?P<dropped>\d+) records\.?(?: Current buffer size: (?P<current_buffer>\d+))?")),
    Signature("cupti_proposed", r"Proposed minimum SCOREP_CUDA_BUFFER=[0-9]+", (b"SCOREP_CUDA_BUFFER=",),
              _ints(r"SCOREP_CUDA_BUFFER=(?P<proposed_buffer>\d+)"), follows="cupti_dropped"),
    Signature("memory_clamp", r"Too (much|many) memory requested", (b"memory requested",), _clamp),
    Signature("unknown_option_dashdash", r"Unknown option:? *['\"]--['\"]", (b"Unknown option",)),
    Signature("nccl_watchdog_teardown", r"dummyHasPrimaryContext|ncclCommWatchdog",
              (b"dummyHasPrimaryContext", b"ncclCommWatchdog"), _watchdog),
    Signature("fp16_valueerror", r"FP16 Mixed precision training with AMP or APEX", (b"FP16 Mixed",)),
    Signature("cuda_802", r"cudaErrorSystemNotReady|CUDA_ERROR_SYSTEM_NOT_READY"
              r"|system not yet initiali[sz]ed|[Ee]rror:? ?802\b",
              (b"SystemNotReady", b"SYSTEM_NOT_READY", b"not yet initiali", b"rror 802", b"rror: 802",
               b"rror802", b"rror:802"), lambda text: {"code": 802}),
    Signature("experiment_collision", r"File does already exist", (b"does already exist",),
              _ints(r"does already exist:?\s*(?P<path>[^\s'\"]+)?")),
    Signature("tpd_zero", r"[Tt][Pp][Dd] == 0'", (b"pd == 0'", b"PD == 0'"), _tpd),
    Signature("lbm_conflict", r"load_best_model_at_end requires the save and eval strategy",
              (b"load_best_model_at_end requires",), _strategies),
    Signature("lbm_strategies", r"(Evaluation|Save) strategy: [A-Za-z]", (b" strategy: ",), _strategies,
              follows="lbm_conflict"),
    # Real Score-P 8.4 + scorep 4.5.1 (tests/test_scorep_real.py produces each of these):
    Signature("scorep_oom", r"No free memory page available", (b"No free memory page",),
              _ints(r"increase SCOREP_TOTAL_MEMORY=(?P<total_memory>\d+)")),
    Signature("scorep_cuda_unsupported", r"Unsupported feature '?cuda'? cannot be enabled",
              (b"Unsupported feature",)),
    Signature("scorep_no_config", r"No such file or directory: 'scorep-config'", (b"'scorep-config'",)),
    Signature("scorep_no_compiler", r"CompileError: .*No such file or directory: '(cc|gcc|clang)'",
              (b"CompileError",), _ints(r"directory: '(?P<compiler>\w+)'")),
    Signature("callpath_depth", r"callpath depth limitation of [0-9]+ exceeded", (b"callpath depth limitation",),
              _ints(r"limitation of (?P<max_depth>\d+) exceeded")),
    Signature("callpath_reached", r"SCOREP_PROFILING_MAX_CALLPATH_DEPTH to [0-9]+",
              (b"MAX_CALLPATH_DEPTH to",), _ints(r"DEPTH to (?P<reached_depth>\d+)"), follows="callpath_depth"),
)
BY_NAME = {s.name: s for s in SIGNATURES}
NAMES = tuple(s.name for s in SIGNATURES if s.follows is None)


def grep_patterns() -> list[str]:
    """The patterns as `grep -E -e P ...` takes them (the benchmark's baseline)."""
    return [s.pattern for s in SIGNATURES]


class LogScan(list):  # type: ignore[type-arg]
    """The `logscan` fact: a list of match dicts, plus the files that were scanned."""

    def __init__(self, matches: list[dict[str, Any]], files: list[str], errors: list[str]):
        super().__init__(matches)
        self.files = files
        self.errors = errors


class _Finder:
    """Yields the start offsets of candidate matches in buf[start:end]."""

    def __init__(self) -> None:
        combined = "|".join(f"(?:{s.pattern})" for s in SIGNATURES).encode()
        self.python = re.compile(combined)
        try:
            import re2  # google-re2: a DFA, ~10x faster than `re` on alternations

            self.re2: Any = re2.compile(combined)
        except Exception:
            self.re2 = None
        self.anchors = sorted({a for s in SIGNATURES for a in s.anchors})

    @property
    def engine(self) -> str:
        return "re2" if self.re2 is not None else "bytes.find"

    def candidates(self, buf: bytes, start: int, end: int) -> Iterator[int]:
        if self.re2 is not None:
            pos = start
            while pos < end:
                m = self.re2.search(buf, pos, end)
                if m is None:
                    return
                yield m.start()
                pos = _line_end(buf, m.start(), end) + 1
            return
        hits = sorted({p for a in self.anchors for p in _find_all(buf, a, start, end)})
        last_end = -1
        for p in hits:
            if p <= last_end:
                continue
            line_end = _line_end(buf, p, end)
            line_start = buf.rfind(b"\n", start, p)
            m = self.python.search(buf, start if line_start < 0 else line_start + 1, line_end)
            last_end = line_end
            if m is not None:
                yield m.start()


def _find_all(buf: bytes, needle: bytes, start: int, end: int) -> Iterator[int]:
    pos = buf.find(needle, start, end)
    while pos >= 0:
        yield pos
        pos = buf.find(needle, pos + 1, end)


def _line_end(buf: bytes, pos: int, end: int) -> int:
    nl = buf.find(b"\n", pos, end)
    return end if nl < 0 else nl


_FINDER: _Finder | None = None


def finder() -> _Finder:
    global _FINDER
    if _FINDER is None:
        _FINDER = _Finder()
    return _FINDER


RANK_IN_LINE = re.compile(r"\[[Rr]ank ?(\d+)\]|\b[Rr]ank[ =:]+(\d+)\b")
RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)


class _FileScan:
    """The matches of one file, with multi-line messages joined to their first line."""

    def __init__(self, path: str):
        self.path = path
        self.matches: list[dict[str, Any]] = []
        self.kept: dict[str, int] = {}
        self.open: dict[str, tuple[int, dict[str, Any]]] = {}  # parent name -> (line, match)
        m = RANK_IN_NAME.search(Path(path).name)
        self.file_rank = int(m.group(1)) if m else None

    def line(self, raw: bytes, lineno: int) -> None:
        text = raw.decode("utf-8", errors="replace")
        for sig in SIGNATURES:
            found = _segment(text, sig)
            if found is None:
                continue
            segment, at = found
            values = sig.values(segment)
            if sig.follows is not None:
                self._follow(sig, values, segment, lineno, at)
                continue
            self._add(sig.name, segment, lineno, values, at)

    def _add(self, name: str, segment: str, lineno: int, values: dict[str, Any], at: int) -> None:
        rank = RANK_IN_LINE.search(segment)
        if rank:
            values.setdefault("rank", int(rank.group(1) or rank.group(2)))
        elif self.file_rank is not None:
            values.setdefault("rank", self.file_rank)
        match = {"signature": name, "file": self.path, "line": lineno,
                 "text": _printable(segment, at), "values": values}
        self.open[name] = (lineno, match)
        count = self.kept.get(name, 0)
        self.kept[name] = count + 1
        if count < MAX_PER_FILE:
            self.matches.append(match)

    def _follow(self, sig: Signature, values: dict[str, Any], segment: str, lineno: int, at: int) -> None:
        assert sig.follows is not None
        parent = self.open.get(sig.follows)
        if parent is not None and 0 < lineno - parent[0] <= FOLLOW_LINES:
            for k, v in values.items():
                parent[1]["values"].setdefault(k, v)
        elif sig.follows == "cupti_dropped":  # the proposal alone still names the size to set
            self._add("cupti_dropped", segment, lineno, values, at)


def _segment(text: str, sig: Signature) -> tuple[str, int] | None:
    """The part of the line (between carriage returns) that matches, and where the match is."""
    m = re.search(sig.pattern, text)
    if m is None:
        return None
    start = text.rfind("\r", 0, m.start()) + 1
    end = text.find("\r", m.end())
    return (text[start:] if end < 0 else text[start:end]), m.start() - start


def _printable(segment: str, at: int) -> str:
    """The segment without control characters, cut to TEXT_CHARS around the match."""
    if len(segment) > TEXT_CHARS:
        start = max(0, min(at - TEXT_CHARS // 4, len(segment) - TEXT_CHARS + 6))
        stop = start + TEXT_CHARS - 6
        segment = ("..." if start else "") + segment[start:stop] + ("..." if stop < len(segment) else "")
    return "".join(c if c.isprintable() or c == "\t" else "?" for c in segment.strip())


def _count_newlines(block: bytes) -> int:
    """Newlines in a block: numpy's vectorised compare is ~4x bytes.count when available."""
    try:
        import numpy as np
    except ImportError:
        return block.count(b"\n")
    return int(np.count_nonzero(np.frombuffer(block, np.uint8) == 10))


def scan_file(path: str | Path, deadline: float | None = None) -> list[dict[str, Any]]:
    """All signature matches in one file, in line order. Raises OSError if unreadable,
    TimeoutError (naming how far it got) when the deadline passes."""
    scan = _FileScan(str(path))
    before = 0  # newlines before the current block: the carried line is line before + 1
    offset = 0
    head = b""  # the unfinished line before the current block (no newline in it)
    with open_binary(path) as fh:
        while True:
            block = fh.read(BLOCK)
            if not block:
                _search(scan, head, 0, len(head), _SameLine(before + 1))
                return scan.matches
            first = block.find(b"\n")
            if first < 0 and len(head) + len(block) <= MAX_CARRY:
                head += block
            else:
                # the carried line ends in this block (or is too long to carry: cut it)
                cut = first if first >= 0 else len(block)
                line = head + block[:cut] if head else block[:cut]
                _search(scan, line, 0, len(line), _SameLine(before + 1))
                last = block.rfind(b"\n")
                if first >= 0 and last > first:
                    _search(scan, block, first + 1, last, _InBlock(block, before))
                head = block[last + 1:] if first >= 0 else b""
            before += _count_newlines(block)
            offset += len(block)
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"{path}: stopped after {offset >> 20} MiB (time budget)")


class _SameLine:
    """Line numbers for the carried line: every candidate in it is on the same line."""

    def __init__(self, line: int):
        self.line = line

    def __call__(self, _line_start: int) -> int:
        return self.line


class _InBlock:
    """Line numbers inside one block, counted incrementally up to each matching line."""

    def __init__(self, block: bytes, before: int):
        self.block, self.pos, self.lines = block, 0, before

    def __call__(self, line_start: int) -> int:
        self.lines += self.block.count(b"\n", self.pos, line_start)
        self.pos = line_start
        return self.lines + 1


def _search(scan: _FileScan, buf: bytes, start: int, end: int, line_of: Callable[[int], int]) -> None:
    """Hand every candidate line in buf[start:end] (end: a newline or the end) to `scan`."""
    if end <= start:
        return
    for pos in finder().candidates(buf, start, end):
        line_start = buf.rfind(b"\n", start, pos) + 1 or start
        scan.line(buf[line_start:_line_end(buf, pos, end)].rstrip(b"\r"), line_of(line_start))


LOG_GLOBS = ("*.log", "*.err", "*.out", "slurm-*.out")
LOG_DEPTH = 2
MAX_LOGS = 200


def launch_logs(root: Path, follow_symlinks: bool = True) -> list[Path]:
    """The per-rank logs of the last `gpu-doctor launch` in `root` (`.gpu-doctor/runs/<time>/rank_N.log`).

    Only the latest run counts: an older run's errors may be fixed since."""
    runs = root / ".gpu-doctor" / "runs"
    try:
        if not follow_symlinks and (runs.is_symlink() or runs.parent.is_symlink()):
            return []
        stamps = sorted((d for d in runs.iterdir() if d.is_dir() and (follow_symlinks or not d.is_symlink())),
                        key=lambda d: d.name)
    except OSError:
        return []
    if not stamps:
        return []
    return sorted(p for p in stamps[-1].glob("rank_*.log") if follow_symlinks or not p.is_symlink())


def discover_logs(root: Path, follow_symlinks: bool = True) -> list[Path]:
    """Log files in the job folder and its subfolders (two levels): *.log, *.err, *.out, and the
    per-rank logs of the last `gpu-doctor launch` (`launch_logs`)."""
    from doctor.artifacts.discover import SKIP_DIRS

    found: list[Path] = []
    stack = [(root, 0)]
    while stack and len(found) < MAX_LOGS:
        folder, depth = stack.pop()
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.is_symlink() and not follow_symlinks:
                continue
            try:
                if entry.is_file() and any(entry.match(g) for g in LOG_GLOBS):
                    found.append(entry)
                elif entry.is_dir() and depth < LOG_DEPTH and entry.name not in SKIP_DIRS \
                        and (not entry.name.startswith(".") or entry.name == ".gpu-doctor") \
                        and not (entry / "pyvenv.cfg").exists():
                    stack.append((entry, depth + 1))
            except OSError:
                continue
    found += [p for p in launch_logs(root, follow_symlinks) if p not in found]
    return sorted(found)[:MAX_LOGS]


def scan_logs(paths: list[Path], deadline: float | None = None) -> LogScan:
    """Scan every file; an unreadable one is named in `errors`, never raised."""
    matches: list[dict[str, Any]] = []
    errors: list[str] = []
    for path in paths:
        try:
            matches.extend(scan_file(path, deadline))
        except OSError as exc:
            errors.append(f"{path}: cannot read: {exc.strerror or exc}")
    return LogScan(matches, [str(p) for p in paths], errors)

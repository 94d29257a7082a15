"""What the ranks' logs say about a collective that never finished: ART005's fact `collective_logs`.

torch's spellings (ProcessGroupNCCL, its desync report, ProcessGroupGloo), NCCL's RAS client:

    [rank2]:[E1201 ...] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1043,
        OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600021 milliseconds before timing out.
    [PG ID 0 PG GUID 0(default_pg) Rank 2] Timeout at NCCL work: 1043, last enqueued NCCL work: 1043,
        last completed NCCL work: 1042.
    - To our best knowledge, ranks [1] are the lagging ranks that caused this timeout. They never joined ...
    - [1] joined but didn't finish collective #1043 (count from 1)
    - [1] finished collective #1042, but didn't join collective #1043 (count from 1)
    Rank 1 failed to pass monitoredBarrier in 30000 ms                              (gloo, CPU)
    NCCL RAS lines that name a rank or process as missing, dead or not responding

Each match: `{"kind", "file", "line", "text", "rank", "seq", "op", "lagging"}` (values that the line
gives). Command line equivalent: `grep -n -E 'Watchdog caught|lagging ranks|didn.t (finish|join)
collective|failed to pass monitoredBarrier|Timeout at NCCL work' rank_*.log`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from doctor.safeopen import open_binary

MAX_BYTES = 256 << 20       # per file: a hang's messages are near the end of a log, but logs are read whole
MAX_MATCHES = 200
TEXT_CHARS = 300

_RANK = re.compile(r"\[[Rr]ank ?(\d+)\]|\bRank (\d+)\]|\[rank(\d+)\]")
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("watchdog_timeout", re.compile(r"Watchdog caught collective operation timeout: Work\w*\(SeqNum=(?P<seq>\d+), "
                                    r"OpType=(?P<op>\w+)")),
    ("work_timeout", re.compile(r"Timeout at NCCL work: (?P<seq>\d+), last enqueued NCCL work: (?P<enqueued>-?\d+), "
                                r"last completed NCCL work: (?P<completed>-?\d+)")),
    ("lagging_ranks", re.compile(r"ranks \[(?P<lagging>[\d, ]+)\] are the lagging ranks that caused this timeout")),
    ("not_finished", re.compile(r"\[(?P<lagging>[\d, ]+)\] joined but didn't finish collective #(?P<seq>\d+)")),
    ("not_joined", re.compile(r"\[(?P<lagging>[\d, ]+)\] finished collective #\d+, but didn't join collective "
                              r"#(?P<seq>\d+)")),
    ("monitored_barrier", re.compile(r"Ranks? (?P<lagging>[\d, ]+?) failed to pass monitoredBarrier in (?P<ms>\d+) ms")),
    ("gloo_timeout", re.compile(r"Timed out waiting (?P<ms>\d+)ms for (?P<transport>\w+) operation to complete")),
    ("nccl_ras", re.compile(r"(?i)\bRAS\b.*\b(?:not responding|unresponsive|missing|dead)\b"
                            r"|Missing communicator data from")),
)
ANCHORS = (b"Timed out waiting", b"Watchdog caught", b"Timeout at NCCL work", b"lagging ranks", b"didn't finish collective",
           b"didn't join collective", b"monitoredBarrier", b"RAS", b"Missing communicator data")


def _ranks(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


def scan_line(text: str) -> dict[str, Any] | None:
    for kind, rx in PATTERNS:
        m = rx.search(text)
        if m is None:
            continue
        found: dict[str, Any] = {"kind": kind}
        for key, value in m.groupdict().items():
            if value is None:
                continue
            found[key] = _ranks(value) if key == "lagging" else (int(value) if value.lstrip("-").isdigit() else value)
        who = _RANK.search(text)
        if who:
            found["rank"] = int(next(g for g in who.groups() if g))
        found["text"] = text.strip()[:TEXT_CHARS]
        return found
    return None


def scan_file(path: Path) -> list[dict[str, Any]]:
    """The matches of one file, in line order (raises OSError)."""
    out: list[dict[str, Any]] = []
    m = re.search(r"rank[_-]?(\d+)", path.name, re.IGNORECASE)
    file_rank = int(m.group(1)) if m else None
    with open_binary(path) as fh:
        read = 0
        for lineno, raw in enumerate(fh, 1):
            read += len(raw)
            if read > MAX_BYTES or len(out) >= MAX_MATCHES:
                break
            if not any(a in raw for a in ANCHORS):
                continue
            for segment in raw.decode("utf-8", "replace").split("\r"):
                found = scan_line(segment)
                if found is not None:
                    if "rank" not in found and file_rank is not None:
                        found["rank"] = file_rank
                    out.append({"file": str(path), "line": lineno, **found})
                    break
    return out


class CollectiveLogs(list):  # type: ignore[type-arg]
    """The `collective_logs` fact: the matches, the files read, the files that could not be, and the
    Flight Recorder's reading of the last launch's dumps (`flight.read_run`), when it left any."""

    def __init__(self, matches: list[dict[str, Any]], files: list[str], errors: list[str],
                 flight: dict[str, Any] | None = None):
        super().__init__(matches)
        self.files = files
        self.errors = errors
        self.flight = flight


def flight_lagging(result: dict[str, Any] | None) -> list[int]:
    """The ranks the Flight Recorder shows out of step: those that did not enter the first collective
    the others did, else the minority of the first mismatched collective."""
    for g in (result or {}).get("process_groups", []):
        if g.get("first_unjoined"):
            return list(g["first_unjoined"]["not_joined"])
        mm = g.get("mismatch")
        if mm:
            by_op: dict[str, list[int]] = {}
            for r, v in mm["by_rank"].items():
                by_op.setdefault(f"{v['op']} {v['sizes']} {v['dtypes']}", []).append(int(r))
            major = max(by_op.values(), key=len)
            return sorted(r for rs in by_op.values() if rs is not major for r in rs)
    return []


def scan(paths: Iterable[Path]) -> CollectiveLogs:
    matches: list[dict[str, Any]] = []
    files, errors = [], []
    for p in paths:
        files.append(str(p))
        try:
            matches += scan_file(p)
        except OSError as exc:
            errors.append(f"{p}: cannot read: {exc.strerror or exc}")
    return CollectiveLogs(matches, files, errors)


def lagging(matches: Iterable[dict[str, Any]], world: int | None = None) -> tuple[list[int], dict[str, Any]]:
    """The ranks that did not join, and what says so: the desync report's names first, then the
    monitored barrier's; else, from the watchdog lines, the ranks that printed no timeout while the
    others did (a rank that never entered the collective has no work to time out)."""
    ms = list(matches)
    named = sorted({r for m in ms if m["kind"] in ("lagging_ranks", "not_finished", "not_joined", "monitored_barrier")
                    for r in m.get("lagging", [])})
    timeouts = [m for m in ms if m["kind"] in ("watchdog_timeout", "work_timeout", "gloo_timeout")]
    seqs = sorted({m["seq"] for m in timeouts if "seq" in m})
    ops = sorted({m["op"] for m in timeouts if "op" in m})
    info: dict[str, Any] = {"seq": seqs[0] if seqs else None, "op": ops[0] if ops else None,
                            "timed_out": sorted({m["rank"] for m in timeouts if "rank" in m})}
    if named:
        info["from"] = "report"
        return named, info
    if world and info["timed_out"]:
        info["from"] = "watchdog"
        return [r for r in range(world) if r not in info["timed_out"]], info
    info["from"] = "none"
    return [], info

"""Read the verdict folders the Prolog writes, one gate document at a time.

A folder holds `job-<id>.json` (a job's last node), `job-<id>.<node>.json` (each node's own),
`node-<node>.json` (the node's last failure, a copy of one of those) and whatever else an admin
keeps there. Files are streamed (never the whole folder in memory), each parsed and reduced
to a `Verdict` at once; what is not a gate document is skipped and counted, and the copies of
one run (same host, start and job) are read once.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from doctor.limits import MAX_FILE_BYTES

NAME = re.compile(r"(job|node)-.+\.json\Z")
MAX_DEPTH = 4  # collected folders: DIR/<node>/..., DIR/<date>/<node>/...
FAILING = frozenset({"fail", "timeout"})
NODE_LAYERS = frozenset({"node", "interconnect"})


@dataclass(frozen=True)
class CheckState:
    """One check of one run: its status, whether it made the run fail, its message."""

    id: str
    layer: str
    status: str
    failing: bool
    message: str
    duration_s: float | None = None


@dataclass(frozen=True)
class Verdict:
    """One gate run on one node, as much of its document as the fleet view needs."""

    host: str
    start: datetime
    exit_code: int
    status: str
    job: str | None
    playbook: str
    checks: tuple[CheckState, ...]
    file: str

    @property
    def failed(self) -> bool:
        return self.exit_code == 1

    @property
    def failing(self) -> tuple[CheckState, ...]:
        return tuple(c for c in self.checks if c.failing)


@dataclass
class Reading:
    """What a read found: the verdicts, and the counts of what it skipped and why."""

    verdicts: list[Verdict] = field(default_factory=list)
    files: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    duplicates: int = 0

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


def verdict_files(dirs: Iterable[str]) -> Iterator[str]:
    """The candidate files under each folder (`job-*.json`, `node-*.json`), depth-bounded, in name order."""
    for top in dirs:
        stack = [(top, 0)]
        while stack:
            path, depth = stack.pop()
            try:
                entries = sorted(os.scandir(path), key=lambda e: e.name, reverse=True)
            except OSError:
                continue
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if depth < MAX_DEPTH:
                        stack.append((entry.path, depth + 1))
                elif NAME.match(entry.name) and entry.is_file(follow_symlinks=False):
                    yield entry.path


def _checks(doc: dict, fail_on: str) -> tuple[CheckState, ...]:  # type: ignore[type-arg]
    out = []
    for c in doc.get("checks") or ():
        status, layer = str(c.get("status")), str(c.get("layer"))
        failing = (status in FAILING or (status == "unknown" and layer in NODE_LAYERS)
                   or (fail_on == "warning" and status == "warn"))
        ms = c.get("duration_ms")
        message = "" if status == "pass" else str(c.get("message") or "")  # a pass says nothing the view shows
        out.append(CheckState(str(c.get("id")), layer, status, failing, message,
                              ms / 1000 if isinstance(ms, (int, float)) else None))
    return tuple(out)


def parse(path: str, text: bytes) -> Verdict | str:
    """The verdict in one file's bytes, or why it is not one (a short reason)."""
    try:
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return "not JSON"
    tool = doc.get("tool") if isinstance(doc, dict) else None
    if not isinstance(tool, dict) or tool.get("name") != "gpu-doctor" or not isinstance(doc.get("checks"), list):
        return "not a gate document"
    run = doc.get("run")
    try:
        if not isinstance(run, dict):
            raise TypeError("run")
        start = datetime.fromisoformat(str(run["start"]))
        host = str(run["host"])
        code = int(doc["exit_code"])
        checks = _checks(doc, str(run.get("fail_on") or "error"))
    except (AttributeError, KeyError, TypeError, ValueError):
        return "malformed gate document"
    if start.tzinfo is None:
        start = start.replace(tzinfo=UTC)
    job = run.get("slurm_job_id")
    return Verdict(host, start, code, str(doc.get("status")), str(job) if job is not None else None,
                   str(run.get("playbook") or ""), checks, path)


def read_verdicts(dirs: Iterable[str], since_days: float | None = None,
                  now: datetime | None = None) -> Reading:
    """Every gate document under `dirs` (newer than `since_days` days before `now`), each run once."""
    reading = Reading()
    cutoff = None
    if since_days is not None:
        cutoff = (now or datetime.now(UTC)) - timedelta(days=since_days)
    seen: set[tuple[str, str, str | None]] = set()
    for path in verdict_files(dirs):
        reading.files += 1
        try:
            with open(path, "rb") as fh:
                text = fh.read(MAX_FILE_BYTES + 1)
        except OSError:
            reading.skip("unreadable")
            continue
        if len(text) > MAX_FILE_BYTES:
            reading.skip("too large")
            continue
        got = parse(path, text)
        if isinstance(got, str):
            reading.skip(got)
            continue
        if cutoff is not None and got.start < cutoff:
            reading.skip("older than --since")
            continue
        key = (got.host, got.start.isoformat(), got.job)
        if key in seen:
            reading.duplicates += 1
            continue
        seen.add(key)
        reading.verdicts.append(got)
    return reading

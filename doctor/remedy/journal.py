"""The journal of applied remedies: `<job>/.gpu-doctor/journal.jsonl`.

Layout of `<job>/.gpu-doctor/`:

    journal.jsonl                  append-only, one JSON object per line, fsynced per line
    backups/<tx>/<n>-<name>.bak    each edited file's bytes before transaction <tx>
    lock                           held (flock) while applying or undoing

Every record has `"v": 1`, `"type"`, `"tx"` (the transaction ID) and `"time"`
(ISO 8601, UTC). Types, in the order a transaction writes them:

- `begin`: `root`, `argv`, `remedies` (a list of `{"id", "safety", "title",
  "checks": [check IDs whose findings named it], "files": [paths]}`) and
  `files` (a list of `{"path": absolute path, "action": "edit"|"create",
  "before_sha256": hex|null, "after_sha256": hex, "backup": path relative to
  .gpu-doctor|null, "mode": int|null}`). Written and fsynced after the
  backups and BEFORE the first file is replaced, so a crash between two file
  writes leaves a record of every file that may have changed.
- `commit`: `written` (paths): every file holds its new content.
- `abort`: `reason`, `restored` (paths): applying failed part-way; the files
  already written were put back.
- `verify`: `remedies`: `{id: {"verified": true|false|null, "checks": {check
  ID: status after}, "note": str}}`. `true`: the checks that raised the
  finding no longer name the remedy; `false`: they still do; `null`: could not
  tell (e.g. only a new run can show it).
- `undo`: `restored`, `removed` (paths): the files hold their old content again.

A `begin` without `commit` or `abort` is an interrupted apply: each of its
files holds its old or its new content (a write is one rename), and
`gpu-doctor undo` restores the old. Lines that do not parse (a torn last line
after a crash) are ignored.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doctor.remedy.files import adopt, fsync_dir

STATE_DIR = ".gpu-doctor"
JOURNAL = "journal.jsonl"
VERSION = 1


def state_dir(root: Path) -> Path:
    return root / STATE_DIR


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def append(root: Path, record: dict[str, Any]) -> None:
    """Append one record and fsync it before returning."""
    folder = state_dir(root)
    new = not (folder / JOURNAL).exists()
    line = json.dumps({"v": VERSION, **record, "time": record.get("time") or now()},
                      sort_keys=False, default=str) + "\n"
    fd = os.open(folder / JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    if new:
        adopt(folder / JOURNAL, root)
        fsync_dir(folder)


def records(root: Path) -> list[dict[str, Any]]:
    path = state_dir(root) / JOURNAL
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "tx" in rec and "type" in rec:
            out.append(rec)
    return out


@dataclass
class Transaction:
    """One apply, reassembled from its records."""

    tx: str
    begin: dict[str, Any]
    end: str = "interrupted"  # applied | aborted | interrupted
    undone: bool = False
    verify: dict[str, Any] = field(default_factory=dict)

    @property
    def files(self) -> list[dict[str, Any]]:
        return list(self.begin.get("files", []))

    @property
    def remedies(self) -> list[dict[str, Any]]:
        return list(self.begin.get("remedies", []))

    @property
    def open(self) -> bool:
        """Applied (fully or part-way) and not undone."""
        return self.end in ("applied", "interrupted") and not self.undone


def transactions(root: Path) -> list[Transaction]:
    """Every transaction in the journal, oldest first."""
    txs: dict[str, Transaction] = {}
    for rec in records(root):
        kind, tx = rec["type"], rec["tx"]
        if kind == "begin":
            txs[tx] = Transaction(tx, rec)
            continue
        t = txs.get(tx)
        if t is None:
            continue
        if kind == "commit":
            t.end = "applied"
        elif kind == "abort":
            t.end = "aborted"
        elif kind == "undo":
            t.undone = True
        elif kind == "verify":
            t.verify = dict(rec.get("remedies", {}))
    return list(txs.values())


def remedy_states(root: Path) -> dict[str, dict[str, Any]]:
    """Remedy ID -> {"applied": bool, "verified": bool|None, "tx": ID} for remedies in effect.

    The shape `doctor.verdict` reads from `Run.extra["applied"]`.
    """
    states: dict[str, dict[str, Any]] = {}
    for t in transactions(root):
        if t.end != "applied" or t.undone:
            continue
        for rem in t.remedies:
            v = t.verify.get(rem["id"], {})
            states[rem["id"]] = {"applied": True, "verified": v.get("verified"), "tx": t.tx}
    return states


@contextmanager
def locked(root: Path) -> Iterator[None]:
    """Hold `.gpu-doctor/lock` so two applies (or an apply and an undo) never interleave."""
    folder = state_dir(root)
    if not folder.exists():
        folder.mkdir()
        adopt(folder, root)
    fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    adopt(folder / "lock", root)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            from doctor.remedy.model import RemedyError

            raise RemedyError(f"{folder}: another gpu-doctor fix or undo is running here") from None
        yield
    finally:
        os.close(fd)

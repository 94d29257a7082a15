"""The journal of applied remedies: `<job>/.gpu-doctor/journal.jsonl`.

Layout of `<job>/.gpu-doctor/`:

    journal.jsonl                  append-only, one JSON object per line, fsynced per line
    backups/<tx>/<n>-<name>.bak    each edited file's bytes before transaction <tx>

The journal itself is the lock: `flock` on it is held while applying or
undoing, so two applies (or an apply and an undo) run one after the other,
and the second sees the first one's files.

Every record has `"v": 1`, `"type"`, `"tx"` (the transaction ID) and `"time"`
(ISO 8601, UTC). Types, in the order a transaction writes them:

- `begin`: `root`, `argv`, `remedies` (a list of `{"id", "safety", "title",
  "checks": [check IDs whose findings named it], "files": [paths]}`) and
  `files` (a list of `{"path": path relative to the job folder, "action": "edit"|"create",
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
after a crash) are ignored; any other line that does not parse, or that
has the wrong shape, makes the journal unreadable: `JournalError`, and
nothing is changed.

Trust: the journal is input like any other file in the job folder (it is
copied with the folder, and anyone who can write the folder can write it).
Every path in it is resolved inside the folder `undo` runs on, never
through a symlink, `..` or an absolute path (`inside`); backups only under
`.gpu-doctor/backups/`; the journal is opened without following symlinks.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import json
import os
import re
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from doctor.remedy.files import adopt, fsync_dir
from doctor.remedy.model import RemedyError

STATE_DIR = ".gpu-doctor"
JOURNAL = "journal.jsonl"
BACKUPS = "backups"
VERSION = 1
MAX_JOURNAL_BYTES = 64 * 1024 * 1024
LOCK_WAIT_S = 120.0
KINDS = ("begin", "commit", "abort", "verify", "undo")
_SHA = re.compile(r"^[0-9a-f]{64}$")
_TX = re.compile(r"^[A-Za-z0-9T:._-]{1,80}$")


class JournalError(RemedyError, ValueError):
    """The journal (or a path in it) cannot be trusted or read; nothing was changed."""


def state_dir(root: Path) -> Path:
    return root / STATE_DIR


def checked_state_dir(root: Path, create: bool = False) -> Path | None:
    """`root/.gpu-doctor` if it is a real folder (None if missing and not `create`)."""
    folder = state_dir(root)
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        if not create:
            return None
        try:
            folder.mkdir()
        except FileExistsError:  # another apply made it just now: check what is there now
            return checked_state_dir(root)
        adopt(folder, root)
        return folder
    if stat.S_ISLNK(st.st_mode):
        raise JournalError(f"{folder} is a symlink, not gpu-doctor's state folder; refusing to use it")
    if not stat.S_ISDIR(st.st_mode):
        raise JournalError(f"{folder} is not a folder (gpu-doctor keeps its journal and backups there); "
                           "move it away first")
    return folder


def inside(root: Path, rel: object, what: str = "path") -> Path:
    """`root/rel` for a relative path that stays inside `root` without following a symlink.

    Refuses absolute paths, `..`, empty names and any symlink among the
    components below `root` (the last one included): a journal or a findings
    file is data, and must never make gpu-doctor reach outside the folder.
    """
    if not isinstance(rel, str) or not rel or "\0" in rel:
        raise JournalError(f"{what} {rel!r} in the journal is not a path")
    pure = PurePosixPath(rel)
    if pure.is_absolute():
        raise JournalError(f"{what} {rel!r} is absolute; journal paths are relative to the job folder")
    if any(part == ".." for part in pure.parts) or not pure.parts:
        raise JournalError(f"{what} {rel!r} leaves the job folder")
    cur = root
    for i, part in enumerate(pure.parts):
        cur = cur / part
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            break
        except OSError as exc:
            raise JournalError(f"{cur}: {exc.strerror or exc}") from None
        if stat.S_ISLNK(st.st_mode):
            raise JournalError(f"{what} {rel!r} goes through a symlink ({cur}); refusing to follow it")
        if i < len(pure.parts) - 1 and not stat.S_ISDIR(st.st_mode):
            raise JournalError(f"{what} {rel!r}: {cur} is not a folder")
    return root.joinpath(*pure.parts)


def relative(root: Path, path: Path) -> str:
    """`path` as the journal records it: relative to the job folder (POSIX separators)."""
    return path.relative_to(root).as_posix()


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _open_journal(root: Path, flags: int) -> int:
    folder = checked_state_dir(root, create=bool(flags & os.O_CREAT))
    assert folder is not None
    try:
        return os.open(folder / JOURNAL, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise JournalError(f"{folder / JOURNAL} is a symlink; refusing to write through it") from None
        raise


def _regular(fd: int, path: Path) -> None:
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise JournalError(f"{path} is not a regular file; refusing to use it as the journal")


def append(root: Path, record: dict[str, Any]) -> None:
    """Append one record and fsync it before returning."""
    folder = state_dir(root)
    new = not os.path.lexists(folder / JOURNAL)
    line = json.dumps({"v": VERSION, **record, "time": record.get("time") or now()},
                      sort_keys=False, default=str) + "\n"
    fd = _open_journal(root, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    _regular(fd, folder / JOURNAL)
    try:
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    if new:
        adopt(folder / JOURNAL, root)
        fsync_dir(folder)


def records(root: Path) -> list[dict[str, Any]]:
    """Every record, checked for shape; JournalError names the first bad line."""
    if checked_state_dir(root) is None:
        return []
    path = state_dir(root) / JOURNAL
    try:
        fd = _open_journal(root, os.O_RDONLY)
    except FileNotFoundError:
        return []
    _regular(fd, path)
    try:
        if os.fstat(fd).st_size > MAX_JOURNAL_BYTES:
            raise JournalError(f"{path} is over {MAX_JOURNAL_BYTES >> 20} MiB; not a gpu-doctor journal")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(MAX_JOURNAL_BYTES + 1)
    finally:
        os.close(fd)
    lines = data.decode("utf-8", errors="replace").split("\n")
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        torn = n == len(lines)  # the last line has no newline: a crash while appending
        try:
            rec = json.loads(line)
        except ValueError:
            if torn:
                continue
            raise JournalError(f"{path} line {n} is not JSON; nothing was changed "
                               "(repair or remove the line by hand)") from None
        problem = _shape_problem(rec)
        if problem:
            raise JournalError(f"{path} line {n}: {problem}; nothing was changed")
        out.append(rec)
    return out


def _shape_problem(rec: Any) -> str | None:
    """Why a parsed line is not a journal record (None when it is)."""
    if not isinstance(rec, dict):
        return "not a JSON object"
    if rec.get("type") not in KINDS:
        return f"unknown record type {rec.get('type')!r}"
    if not isinstance(rec.get("tx"), str) or not _TX.match(rec["tx"]):
        return f"bad transaction ID {rec.get('tx')!r}"
    if rec["type"] == "begin":
        files = rec.get("files")
        if not isinstance(files, list) or not isinstance(rec.get("remedies", []), list):
            return "a begin record without a list of files"
        for f in files:
            why = _file_problem(f)
            if why:
                return why
        for r in rec.get("remedies", []):
            if not isinstance(r, dict) or not isinstance(r.get("id"), str):
                return "a remedy entry without an ID"
    if rec["type"] == "verify" and not isinstance(rec.get("remedies", {}), dict):
        return "a verify record whose remedies are not an object"
    return None


def _file_problem(f: Any) -> str | None:
    if not isinstance(f, dict) or not isinstance(f.get("path"), str):
        return "a file entry without a path"
    if f.get("action") not in ("edit", "create"):
        return f"file {f['path']!r}: unknown action {f.get('action')!r}"
    before, after = f.get("before_sha256"), f.get("after_sha256")
    if not (before is None or (isinstance(before, str) and _SHA.match(before))) \
            or not (isinstance(after, str) and _SHA.match(after)):
        return f"file {f['path']!r}: bad SHA-256"
    if (f["action"] == "edit") != isinstance(f.get("backup"), str):
        return f"file {f['path']!r}: an edit needs a backup (and a created file has none)"
    mode = f.get("mode")
    if mode is not None and (not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode <= 0o7777):
        return f"file {f['path']!r}: bad mode {mode!r}"
    return None


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


HISTORY_TYPES = ("begin", "commit", "abort", "undo")


def history(root: Path) -> tuple[str, ...]:
    """`type:tx` of every record that changes files (begin, commit, abort, undo), oldest first.

    A plan takes it before it reads the files; applying compares it under the lock, so a
    plan drafted while another apply or undo was changing the folder is refused.
    """
    try:
        return tuple(f"{r['type']}:{r['tx']}" for r in records(root) if r["type"] in HISTORY_TYPES)
    except (JournalError, OSError):
        return ("unreadable",)  # applying reads it again under the lock, and says what is wrong


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
def locked(root: Path, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold an exclusive `flock` on the journal: applies and undos in one folder take turns."""
    fd = _open_journal(root, os.O_RDWR | os.O_CREAT)
    _regular(fd, state_dir(root) / JOURNAL)
    adopt(state_dir(root) / JOURNAL, root)
    try:
        give_up = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > give_up:
                    raise RemedyError(f"{state_dir(root)}: another gpu-doctor fix or undo has been "
                                      f"running here for over {wait_s:.0f} s; try again later") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)

"""Apply a Plan and undo it, losing nothing.

Apply: refuse if any file differs from what the plan saw; refuse read-only
files and folders before writing anything; write a backup of every file it
edits; append the journal's `begin` record (fsynced) BEFORE the first file is
replaced; replace each file atomically (temp + fsync + rename), keeping its
mode bits and owner; then append `commit`. Files already holding the planned
bytes are left alone, so applying twice is a no-op. Undo puts every file of a
transaction back byte for byte from its backup and removes files it created;
it works on an interrupted transaction as well (see `doctor.remedy.journal`).
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from doctor.remedy import files, journal
from doctor.remedy.model import FileTarget, NotWritable, Plan, RemedyError, StaleFile, sha256
from doctor.safeopen import UnsafeFile, check_replaceable


@dataclass(frozen=True)
class ApplyResult:
    tx: str | None
    written: tuple[Path, ...]
    already: tuple[Path, ...]


@dataclass(frozen=True)
class UndoResult:
    txs: tuple[str, ...]
    restored: tuple[Path, ...]
    removed: tuple[Path, ...]


def _current(path: Path) -> bytes | None:
    try:
        return files.current(path)
    except UnsafeFile as exc:
        raise NotWritable(f"{exc}; nothing was written") from None
    except OSError as exc:
        raise RemedyError(f"cannot read {path}: {exc.strerror or exc}") from None


def _target(root: Path, path: Path) -> Path:
    """`path` checked to lie inside the job folder, reached without a symlink."""
    try:
        rel = journal.relative(root, path)
    except ValueError:
        raise NotWritable(f"{path} is outside the job folder {root}; gpu-doctor only writes inside it "
                          "(nothing was written)") from None
    return journal.inside(root, rel, "file")


def pending_targets(plan: Plan) -> tuple[list[FileTarget], list[FileTarget]]:
    """(files to write, files already holding the planned bytes); StaleFile if one changed."""
    todo, done = [], []
    for t in plan.files:
        cur = _current(t.path)
        cur_sha = None if cur is None else sha256(cur)
        if cur_sha == t.after_sha256:
            done.append(t)
        elif cur_sha != t.before_sha256:
            what = ("appeared" if t.created else "was removed") if (cur is None) != t.created \
                else "changed"
            raise StaleFile(f"{t.path} {what} since the plan was made; nothing was written. "
                            "Run `gpu-doctor fix` again to plan against the current files.")
        else:
            todo.append(t)
    return todo, done


def _preflight(root: Path, todo: list[FileTarget], locked: bool = False) -> None:
    folder = journal.checked_state_dir(root)
    if folder is not None:
        files.probe_folder(folder)
    else:
        files.probe_folder(root)
    for t in todo:
        _target(root, t.path)
        try:
            check_replaceable(t.path, single_link=True)
        except UnsafeFile as exc:
            raise NotWritable(f"{exc}; nothing was written") from None
        if not t.created:
            files.require_writable(t.path)
        files.probe_folder(t.path.parent)
    if not locked:  # an apply running in another process looks interrupted until it commits
        return
    interrupted = [tx for tx in journal.transactions(root) if tx.end == "interrupted" and not tx.undone]
    if interrupted:
        raise RemedyError(f"an earlier apply ({interrupted[-1].tx}) was interrupted; run "
                          "`gpu-doctor undo` to put its files back first")


def _same_history(plan: Plan) -> None:
    """Compare-and-swap on the folder: refuse when another apply or undo ran since the plan read it.

    Its files may hold the same bytes one by one and still be a mix the plan never saw (read while
    the other one was half-way); the plan was drafted from that read, so it is not written.
    """
    if plan.history is None:
        return
    now = journal.history(plan.root)
    if now == plan.history:
        return
    seen = set(plan.history)
    since = {rec.split(":", 1)[1] for rec in now if rec not in seen}
    mine = {journal.relative(plan.root, t.path) for t in plan.files}
    touched = [f["path"] for t in journal.transactions(plan.root) if t.tx in since for f in t.files
               if f.get("path") in mine]
    what = plan.root / touched[0] if touched else plan.root
    raise StaleFile(f"{what} was changed by another gpu-doctor fix or undo since this plan read it; "
                    "nothing was written. Run `gpu-doctor fix` again to plan against the current files.")


def new_tx() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)


def apply_plan(plan: Plan, argv: Sequence[str] = ()) -> ApplyResult:
    """Write the plan's files. Raises StaleFile / NotWritable / RemedyError with nothing changed."""
    root = plan.root
    for t in plan.files:
        _target(root, t.path)
    todo, done = pending_targets(plan)
    if not todo:
        return ApplyResult(None, (), tuple(t.path for t in done))
    _preflight(root, todo)
    with journal.locked(root):  # concurrent applies take turns; the second re-checks below
        todo, done = pending_targets(plan)  # again, under the lock
        if not todo:
            return ApplyResult(None, (), tuple(t.path for t in done))
        _preflight(root, todo, locked=True)  # an interrupted apply is said first: undo it
        _same_history(plan)
        tx = new_tx()
        entries = _backup(root, tx, todo)
        journal.append(root, {"type": "begin", "tx": tx, "root": str(root), "argv": list(argv),
                              "remedies": _remedy_records(plan, root), "files": entries})
        written: list[FileTarget] = []
        try:
            for t, entry in zip(todo, entries, strict=True):
                _install(t, entry, tx)
                written.append(t)
        except (OSError, RemedyError) as exc:
            restored = _roll_back(root, written, entries, tx)
            journal.append(root, {"type": "abort", "tx": tx, "reason": str(exc),
                                  "restored": [journal.relative(root, p) for p in restored]})
            if isinstance(exc, RemedyError):
                raise type(exc)(f"{exc}; the files already written were put back") from None
            raise RemedyError(f"cannot write {getattr(exc, 'filename', '') or 'a file'}: "
                              f"{exc.strerror or exc}; the files already written were put back") from None
        journal.append(root, {"type": "commit", "tx": tx,
                              "written": [journal.relative(root, t.path) for t in todo]})
    return ApplyResult(tx, tuple(t.path for t in todo), tuple(t.path for t in done))


def _remedy_records(plan: Plan, root: Path) -> list[dict[str, object]]:
    return [{"id": rp.remedy_id, "safety": rp.safety.value, "title": rp.title,
             "checks": list(rp.checks), "files": [journal.relative(root, p) for p in rp.files]}
            for rp in plan.ready]


def _backup(root: Path, tx: str, todo: list[FileTarget]) -> list[dict[str, object]]:
    state = journal.checked_state_dir(root, create=True)
    assert state is not None
    folder = journal.inside(state, f"{journal.BACKUPS}/{tx}", "backup folder")
    entries: list[dict[str, object]] = []
    for i, t in enumerate(todo):
        entry: dict[str, object] = {"path": journal.relative(root, t.path),
                                    "action": "create" if t.created else "edit",
                                    "before_sha256": t.before_sha256, "after_sha256": t.after_sha256,
                                    "backup": None, "mode": t.mode}
        if not t.created:
            if not folder.exists():
                folder.mkdir(parents=True)
                files.adopt(folder.parent, root)
                files.adopt(folder, root)
            data = _current(t.path) or b""
            if sha256(data) != t.before_sha256:
                raise StaleFile(f"{t.path} changed while applying; nothing was written")
            backup = folder / f"{i}-{t.path.name}.bak"
            files.write_durable(backup, data, 0o600, tx, files.owner_of(root) if os.geteuid() == 0 else None)
            entry["backup"] = journal.relative(state, backup)
            entry["mode"] = os.lstat(t.path).st_mode & 0o7777
        entries.append(entry)
    return entries


def _install(t: FileTarget, entry: dict[str, object], tx: str) -> None:
    mode = entry.get("mode")
    mode = mode if isinstance(mode, int) else 0o644
    owner = files.owner_of(t.path) if not t.created else files.owner_of(t.path.parent)
    tmp = files.write_temp(t.path, t.after, mode, tx, owner if os.geteuid() == 0 else None)
    try:
        files.swap_in(tmp, t.path, t.before_sha256)  # compare-and-swap: refuses if the user changed it
    finally:
        tmp.unlink(missing_ok=True)


def _roll_back(root: Path, written: list[FileTarget], entries: list[dict[str, object]],
               tx: str) -> list[Path]:
    restored = []
    by_path = {e["path"]: e for e in entries}
    for t in reversed(written):
        entry = by_path[journal.relative(root, t.path)]
        _restore(root, entry, tx, t.after_sha256)
        restored.append(t.path)
    return restored


def _backup_path(root: Path, entry: dict[str, object]) -> Path:
    """The backup of an edited file: only ever under `.gpu-doctor/backups/`."""
    rel = entry.get("backup")
    state = journal.state_dir(root)
    if not isinstance(rel, str) or not rel.startswith(journal.BACKUPS + "/"):
        raise journal.JournalError(f"the backup {rel!r} of {entry.get('path')} is not under "
                                   f"{state}/{journal.BACKUPS}/; nothing was undone")
    return journal.inside(state, rel, "backup")


def _restore_mode(path: Path, recorded: object) -> int:
    """The mode to restore with: never a bit the file does not have now (no setuid from a journal)."""
    try:
        now = os.lstat(path).st_mode & 0o7777
    except FileNotFoundError:
        now = None
    mode = recorded if isinstance(recorded, int) and not isinstance(recorded, bool) else 0o644
    if now is not None:
        if mode & ~now:
            raise journal.JournalError(f"the journal would give {path} mode {mode:o}, with bits it does "
                                       f"not have now ({now:o}); nothing was undone")
        return mode
    return mode & 0o777


def _restore(root: Path, entry: dict[str, object], tx: str, expect: str | None) -> str:
    """Put one file back if it still holds `expect`; returns 'restored', 'removed' or 'unchanged'."""
    path = journal.inside(root, entry["path"], "file")
    cur = _current(path)
    cur_sha = None if cur is None else sha256(cur)
    files.temp_name(path, tx).unlink(missing_ok=True)  # a temp left by a crash
    if cur_sha == entry["before_sha256"]:
        return "unchanged"
    if cur_sha != expect:
        raise StaleFile(f"{path} changed while undoing; it was left as it is")
    if entry["action"] == "create":
        check_replaceable(path, single_link=True)
        files.remove_durable(path)
        return "removed"
    data = files.current(_backup_path(root, entry)) or b""
    mode = _restore_mode(path, entry.get("mode"))
    tmp = files.write_temp(path, data, mode, f"undo-{tx}", files.owner_of(path) if os.geteuid() == 0 else None)
    if cur is None:
        files.swap_in(tmp, path, None)
    else:
        files.swap_in(tmp, path, cur_sha)
    return "restored"


def undo(root: Path, *, tx: str | None = None, everything: bool = False,
         force: bool = False) -> UndoResult:
    """Undo the latest open transaction (or `tx`, or all of them, newest first)."""
    if not journal.transactions(root):  # nothing to undo: no lock (nor journal) is made for that
        if tx is not None:
            raise RemedyError(f"no applied transaction {tx!r} in {journal.state_dir(root)}")
        return UndoResult((), (), ())
    restored: list[Path] = []
    removed: list[Path] = []
    with journal.locked(root):  # chosen under the lock: an apply half-way is not taken for interrupted
        open_txs = [t for t in journal.transactions(root) if t.open]
        if tx is not None:
            chosen = [t for t in open_txs if t.tx == tx]
            if not chosen:
                raise RemedyError(f"no applied transaction {tx!r} in {journal.state_dir(root)}")
        else:
            chosen = list(reversed(open_txs)) if everything else open_txs[-1:]
        for t in chosen:
            r: list[Path] = []
            m: list[Path] = []
            seen = _undo_preflight(root, t, force)
            for entry in reversed(t.files):
                what = _restore(root, entry, t.tx, seen[str(entry["path"])])
                if what == "restored":
                    r.append(root / str(entry["path"]))
                elif what == "removed":
                    m.append(root / str(entry["path"]))
            journal.append(root, {"type": "undo", "tx": t.tx,
                                  "restored": [journal.relative(root, p) for p in r],
                                  "removed": [journal.relative(root, p) for p in m]})
            restored += r
            removed += m
    return UndoResult(tuple(t.tx for t in chosen), tuple(restored), tuple(removed))


def _undo_preflight(root: Path, t: journal.Transaction, force: bool) -> dict[str, str | None]:
    """Check every file of `t` before touching any; returns each file's SHA-256 now."""
    seen: dict[str, str | None] = {}
    for entry in t.files:
        path = journal.inside(root, entry["path"], "file")
        cur = _current(path)
        cur_sha = None if cur is None else sha256(cur)
        seen[str(entry["path"])] = cur_sha
        if entry["action"] == "edit":
            backup = _backup_path(root, entry)
            try:
                data = files.current(backup)
            except OSError:
                data = None
            if data is None or sha256(data) != entry["before_sha256"]:
                raise RemedyError(f"the backup of {path} ({backup}) is missing or damaged; "
                                  "nothing was undone")
        if cur_sha not in (entry["before_sha256"], entry["after_sha256"]) and not force:
            raise StaleFile(f"{path} changed after gpu-doctor applied {t.tx}; nothing was undone "
                            "(use --force to put the old content back anyway)")
        if cur_sha != entry["before_sha256"]:
            try:
                check_replaceable(path, single_link=True)
            except UnsafeFile as exc:
                raise NotWritable(f"{exc}; nothing was undone") from None
            if entry["action"] == "edit":
                _restore_mode(path, entry.get("mode"))
            files.require_writable(path)
            files.probe_folder(path.parent)
    return seen


__all__ = ["ApplyResult", "UndoResult", "apply_plan", "undo", "pending_targets",
           "NotWritable", "StaleFile", "RemedyError"]

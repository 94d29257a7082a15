"""Durable file writes: temp file in the same folder, fsync, rename, fsync the folder.

A reader (or a crash) sees a file's old content or its new content, never a
mix: the new bytes are complete on disk before the rename makes them the file.

`swap_in` is the compare-and-swap a remedy (and undo) uses: the temp file and
the target trade places in one `renameat2(RENAME_EXCHANGE)`, so what the
target held at that instant is never lost: it lies under the temp name and
is checked against the bytes the plan saw; if the user changed it meanwhile,
the two trade back and nothing is written. Where the filesystem cannot
exchange, the file is re-checked right before a plain rename.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import stat
from pathlib import Path
from typing import Any

from doctor.remedy.model import NotWritable, StaleFile
from doctor.safeopen import UnsafeFile, check_replaceable, read_regular

RENAME_EXCHANGE = 2
AT_FDCWD = -100
MAX_TARGET_BYTES = 64 * 1024 * 1024


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_name(path: Path, tag: str) -> Path:
    return path.with_name(f".{path.name}.gpu-doctor-{tag}.tmp")


def write_temp(path: Path, data: bytes, mode: int, tag: str, owner: tuple[int, int] | None = None) -> Path:
    """Write `data` to a temp file next to `path`, with `mode` (and owner), fsynced. Returns it."""
    tmp = temp_name(path, tag)
    tmp.unlink(missing_ok=True)  # a temp left by a crash (or planted): never written through
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if owner is not None and hasattr(os, "chown"):
            try:
                os.chown(tmp, *owner)
            except PermissionError:
                pass
        os.chmod(tmp, mode)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def replace_file(tmp: Path, path: Path) -> None:
    """Make the temp file `path` in one rename, and make the rename durable."""
    check_replaceable(path)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def current(path: Path) -> bytes | None:
    """The bytes of a file a remedy may replace (None if missing); UnsafeFile for anything else."""
    check_replaceable(path)
    try:
        return read_regular(path, MAX_TARGET_BYTES, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


_renameat2: Any = None


def exchange(a: Path, b: Path) -> bool:
    """Swap two names atomically (Linux renameat2); False where the system cannot."""
    global _renameat2
    if _renameat2 is None:
        libc = ctypes.CDLL(None, use_errno=True)
        _renameat2 = getattr(libc, "renameat2", False)
    if not _renameat2:
        return False
    if _renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def swap_in(tmp: Path, path: Path, expect_sha: str | None) -> None:
    """Make `tmp` the file `path` only if `path` still holds `expect_sha` (None: does not exist).

    StaleFile (tmp removed, `path` as the user left it) when it changed.
    """
    stale = StaleFile(f"{path} changed while gpu-doctor was writing it; nothing was written "
                      "there (your change is kept)")
    try:
        if expect_sha is None:  # create: a hard link fails if the name appeared meanwhile
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise stale from None
            return
        check_replaceable(path, single_link=True)
        if exchange(tmp, path):
            try:
                displaced = read_regular(tmp, MAX_TARGET_BYTES, follow_symlinks=False)
            except OSError:
                displaced = None
            if _digest(displaced) != expect_sha:
                exchange(tmp, path)  # give the user's file its name back
                raise stale
            return
        if _digest(current(path)) != expect_sha:
            raise stale
        os.replace(tmp, path)
    except UnsafeFile as exc:
        raise NotWritable(str(exc)) from None
    finally:
        tmp.unlink(missing_ok=True)
        fsync_dir(path.parent)


def write_durable(path: Path, data: bytes, mode: int, tag: str,
                  owner: tuple[int, int] | None = None) -> None:
    replace_file(write_temp(path, data, mode, tag, owner), path)


def remove_durable(path: Path) -> None:
    path.unlink()
    fsync_dir(path.parent)


def owner_of(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_uid, st.st_gid


def adopt(path: Path, root: Path) -> None:
    """As root, give what gpu-doctor writes under `.gpu-doctor/` to the job folder's owner.

    Otherwise the user could not read the backups to undo a fix that root applied.
    """
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        owner = owner_of(root)
        if owner is not None:
            try:
                os.chown(path, *owner)
            except OSError:
                pass


def require_writable(path: Path, *, folder: bool = False) -> None:
    """Refuse a read-only file or folder, by its mode bits as well as by access.

    Root may write anything, so the mode bits decide: a file someone made
    read-only (chmod a-w) is not one gpu-doctor overwrites.
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise NotWritable(f"cannot check {path}: {exc.strerror or exc}") from None
    what = "folder" if folder else "file"
    if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) \
            or not os.access(path, os.W_OK | (os.X_OK if folder else 0)):
        raise NotWritable(f"{path}: the {what} is read-only (mode {stat.filemode(st.st_mode)})")


def probe_folder(folder: Path) -> None:
    """Create and remove a file in `folder`: catches read-only mounts that mode bits do not show."""
    require_writable(folder, folder=True)
    probe = folder / f".gpu-doctor-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise NotWritable(f"{folder}: cannot write in this folder ({exc.strerror or exc})") from None

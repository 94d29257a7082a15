"""Durable file writes: temp file in the same folder, fsync, rename, fsync the folder.

A reader (or a crash) sees a file's old content or its new content, never a
mix: the new bytes are complete on disk before the rename makes them the file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from doctor.remedy.model import NotWritable


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
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
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
    os.replace(tmp, path)
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

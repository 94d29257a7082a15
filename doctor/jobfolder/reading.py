"""Read a user's file safely: bounded size, no FIFOs, no symlink escapes, any bytes.

A file that cannot be analysed is never an exception: `read_source` says
why in one line (`problem`), and what was odd but readable in `notes`.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from doctor import limits
from doctor.safeopen import UnsafeFile, is_inside, read_regular
from doctor.safeopen import peek as peek

MAX_BYTES = limits.MAX_FILE_BYTES  # bigger files are not analysed (say so)
BINARY_PROBE = 8192


@dataclass(frozen=True)
class Source:
    path: str
    text: str | None
    problem: str | None = None
    kind: str | None = None  # unreadable, binary, empty, too-large, outside, missing, not-a-file
    notes: tuple[str, ...] = ()
    size: int = 0


def inside(path: str, root: str) -> bool:
    """Whether `path` (already absolute) lies in `root`."""
    return is_inside(Path(os.path.normpath(path)), Path(os.path.normpath(root)))


def resolve(path: str, root: str | None, no_symlinks: bool) -> tuple[str | None, str | None]:
    """The real path to read, or (None, why not).

    With `no_symlinks` (the gate as root) no component below the root may be a
    symlink; otherwise symlinks are followed, loops are reported.
    """
    path = os.path.abspath(path)
    if no_symlinks:
        if root is None or not inside(path, root):
            return None, "outside the job folder; not read"
        cur = os.path.normpath(root)
        for part in os.path.relpath(path, root).split(os.sep):
            if part in ("", "."):
                continue
            cur = os.path.join(cur, part)
            try:
                if stat.S_ISLNK(os.lstat(cur).st_mode):
                    return None, "a symlink; not followed when running as root"
            except OSError as exc:
                return None, _os_problem(exc)
        return path, None
    try:
        real = os.path.realpath(path, strict=True)
    except OSError as exc:
        return None, _os_problem(exc)
    except RuntimeError:  # older Pythons report loops this way
        return None, "symlink loop"
    return real, None


def _os_problem(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symlink loop"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "unreadable: permission denied"
    if exc.errno == errno.ENOENT:
        return "does not exist"
    return f"unreadable: {exc.strerror or exc}"


def read_bytes(path: str, root: str | None, no_symlinks: bool = False,
               limit: int = MAX_BYTES) -> tuple[bytes | None, str | None, str | None, int]:
    """(data, problem, kind, size): at most `limit` bytes of a regular file, read with
    `safeopen.read_regular` (no FIFO, device or socket; the size cap before reading), so a job
    script or a training script is refused in the same words as any other input."""
    real, why = resolve(path, root, no_symlinks)
    if real is None:
        kind = "outside" if why and "outside" in why else ("missing" if why == "does not exist" else "unreadable")
        return None, why, kind, 0
    try:
        data = read_regular(real, limit, follow_symlinks=not no_symlinks)
    except UnsafeFile as exc:
        return None, exc.why, exc.kind if exc.kind != "symlink" else "unreadable", exc.size
    except OSError as exc:
        return None, _os_problem(exc), "unreadable", 0
    return data, None, None, len(data)


def decode(data: bytes, python: bool) -> tuple[str, tuple[str, ...]]:
    """Text of `data`: PEP 263 coding for Python, else UTF-8; bad bytes replaced and noted."""
    encoding = "utf-8"
    if python:
        import io
        import tokenize

        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        except (SyntaxError, LookupError):
            encoding = "utf-8"
    try:
        return data.decode(encoding), ()
    except (UnicodeDecodeError, LookupError) as exc:
        start = getattr(exc, "start", 0)
        line = data.count(b"\n", 0, start) + 1
        text = data.decode("utf-8", errors="replace")
        return text, (f"not valid {encoding} (byte {start}, line {line}); read with replacement characters",)


def read_source(path: str, root: str | None, no_symlinks: bool = False, python: bool = False,
                limit: int = MAX_BYTES, data: bytes | None = None) -> Source:
    """Read a script for analysis; a file that cannot be read says why, never raises.

    `data`: the file's content as planned (a remedy's draft) instead of what is on disk.
    """
    if data is not None:
        return source_of(path, data, python, limit)
    data, problem, kind, size = read_bytes(path, root, no_symlinks, limit)
    if data is None:
        return Source(path, None, problem, kind, size=size)
    return source_of(path, data, python, limit)


def source_of(path: str, data: bytes, python: bool, limit: int = MAX_BYTES) -> Source:
    """A Source from bytes already read."""
    size = len(data)
    if size > limit:
        return Source(path, None, f"{size / 2**20:.1f} MiB, above the {limit // 2**20} MiB limit for analysis; "
                                  "not analysed", "too-large", size=size)
    if not data.strip():
        return Source(path, "", None, "empty", ("empty file",), size=size)
    if b"\0" in data[:BINARY_PROBE]:
        return Source(path, None, "binary file (NUL bytes), not a script", "binary", size=size)
    text, notes = decode(data, python)
    return Source(path, text, None, None, notes, size)

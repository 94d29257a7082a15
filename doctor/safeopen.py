"""Open a user's file without blocking, and refuse to write over anything that is not a file.

Every reader of a user's file (job scripts, trainer configs, scorep.cfg,
MANIFEST.md, trace definitions, logs) goes through `open_regular`: the file
is opened with O_NONBLOCK (a FIFO with no writer would otherwise block the
open forever), then `fstat` decides: only a regular file is read; a FIFO, a
device, a socket or a folder is refused with an `UnsafeFile` naming it. Size
caps are applied before reading (`read_regular`), so `/dev/zero` behind a
symlink or a 20 GB log cannot exhaust memory.

Every writer of gpu-doctor's own outputs and of remedies calls
`check_replaceable` first: a rename over `/dev/null`, a FIFO or a symlink would
replace the device or the link with a plain file (as root, data loss).

`UnsafeFile` is an `OSError`, so callers that already turn OSError into "cannot
read X: why" keep doing so; `str()` is one line naming the path.
"""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path
from typing import IO

from doctor.limits import MAX_FILE_BYTES


class UnsafeFile(OSError):
    """A path that gpu-doctor will not read or replace: not a regular file, a symlink, too big...

    `kind` says which, for callers that sort problems: "not-a-file", "symlink", "too-large" or
    "unsafe" (a write refused); `size` is the file's size where it was too large.
    """

    def __init__(self, path: str | os.PathLike[str], why: str, kind: str = "unsafe", size: int = 0):
        super().__init__(why)
        self.path = str(path)
        self.why = why
        self.kind = kind
        self.size = size
        self.strerror = why
        self.filename = self.path

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


def kind_of(mode: int) -> str:
    """What a file is, in words ('a FIFO', 'a character device'...)."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: str | os.PathLike[str], *, follow_symlinks: bool = True) -> int:
    """A read-only fd on `path` if it is a regular file; UnsafeFile (or OSError) otherwise.

    Never blocks: O_NONBLOCK makes opening a FIFO return at once, and the fstat
    check refuses it before any read.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow_symlinks and exc.errno == 40:  # ELOOP: the last component is a symlink
            raise UnsafeFile(path, "a symlink; not followed", "symlink") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnsafeFile(path, f"not a regular file but {kind_of(mode)}; not read", "not-a-file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_at_most(fd: int, limit: int) -> bytes:
    """Up to `limit` + 1 bytes from `fd`, in 1 MiB reads: one byte more than `limit` tells the
    caller the file grew past it while being read."""
    chunks: list[bytes] = []
    total = 0
    while total <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def read_regular(path: str | os.PathLike[str], limit: int = MAX_FILE_BYTES, *,
                 follow_symlinks: bool = True) -> bytes:
    """All bytes of a regular file of at most `limit` bytes; UnsafeFile when bigger."""
    fd = open_regular(path, follow_symlinks=follow_symlinks)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise UnsafeFile(path, f"{size / 2**20:.1f} MiB, above the {limit / 2**20:g} MiB limit; not read",
                             "too-large", size)
        data = read_at_most(fd, limit)
        if len(data) > limit:  # grew while reading
            raise UnsafeFile(path, f"above the {limit / 2**20:g} MiB limit; not read", "too-large", len(data))
        return data
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike[str], limit: int = MAX_FILE_BYTES, *, follow_symlinks: bool = True) -> str:
    """`read_regular` decoded as UTF-8 (bad bytes replaced)."""
    return read_regular(path, limit, follow_symlinks=follow_symlinks).decode("utf-8", errors="replace")


def peek(path: str | os.PathLike[str], n: int = 256) -> bytes:
    """The first `n` bytes of a regular file, not through a symlink (b'' for anything else); never blocks."""
    try:
        fd = open_regular(path, follow_symlinks=False)
    except OSError:
        return b""
    try:
        return os.read(fd, n)
    except OSError:
        return b""
    finally:
        os.close(fd)


def open_binary(path: str | os.PathLike[str]) -> IO[bytes]:
    """A buffered binary file object on a regular file (for streaming readers with their own caps)."""
    return os.fdopen(open_regular(path), "rb")


def open_text(path: str | os.PathLike[str], newline: str | None = None) -> IO[str]:
    """A text file object (UTF-8, bad bytes replaced) on a regular file."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8", errors="replace", newline=newline)


def problem(path: str | os.PathLike[str]) -> str | None:
    """Why `path` cannot be read as a regular file (one line naming it), or None if it can."""
    try:
        os.close(open_regular(path))
    except UnsafeFile as exc:
        return str(exc)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    return None


def check_replaceable(path: str | os.PathLike[str], *, single_link: bool = False) -> None:
    """Refuse to replace `path` unless it is missing or a regular file (not a symlink).

    `single_link`: also refuse a file with several hard links, which an atomic
    rename would split from its other names (remedies edit user files in place).
    """
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # nothing there: the write itself says why
        return
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeFile(path, "a symlink; refusing to replace it (name the file it points to instead)")
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeFile(path, f"{kind_of(st.st_mode)}; refusing to replace it with a regular file")
    if single_link and st.st_nlink > 1:
        raise UnsafeFile(path, f"has {st.st_nlink} hard links; refusing to edit it, since replacing "
                               "it would split it from its other names (edit it by hand)")


def is_inside(path: Path, root: Path) -> bool:
    """Whether `path` (absolute, normalised) lies inside `root`."""
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


MAX_TRACE_FILES = 100_000


def trace_problem(anchor: str | os.PathLike[str]) -> str | None:
    """Why an OTF2 archive cannot be handed to the OTF2 library (one line naming the file), or None.

    The C library opens `traces.otf2`, `traces.def` and every `traces/*.evt`/`*.def`
    with blocking reads: a FIFO there would hang it, `/dev/zero` would eat memory.
    """
    anchor = Path(anchor)
    candidates = [anchor, anchor.with_suffix(".def")]
    events = anchor.with_suffix("")
    try:
        with os.scandir(events) as it:
            for n, entry in enumerate(it):
                if n >= MAX_TRACE_FILES:
                    return f"{events}: more than {MAX_TRACE_FILES} files; not read"
                candidates.append(Path(entry.path))
    except FileNotFoundError:
        pass
    except NotADirectoryError:
        return f"{events}: {kind_of(os.lstat(events).st_mode)}, not the folder of event files; not read"
    except OSError as exc:
        return f"{events}: {exc.strerror or exc}"
    for path in candidates:
        if path.parent == events and path.is_dir() and not path.is_symlink():
            continue  # a sub-folder of traces/ (the library opens only the files it names)
        if path == anchor or path.exists() or os.path.islink(path):
            why = problem(path)
            if why is not None:
                return why
    return None

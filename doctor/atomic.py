"""Atomic file replacement for gpu-doctor's own outputs (verdicts, reports).

A temp file in the same folder, fsynced, then renamed over the target: a
reader never sees half a file. Only a regular file (or nothing) is ever
replaced: a rename over `/dev/null`, a FIFO or a symlink would swap the device
or the link for a plain file, so those are refused (`UnsafeFile`, an OSError
whose message names the path) before anything is written. (Remedies use
`doctor.remedy.files`, whose temp names are fixed so that a crash part-way can
be recovered and undone.)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from doctor.safeopen import UnsafeFile, check_replaceable

__all__ = ["UnsafeFile", "write_atomic"]


def write_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    """Replace `path` with `data` in one rename; `mode` None keeps the temp file's 0600."""
    check_replaceable(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        check_replaceable(path)  # again: it may have become a link or a FIFO while we wrote
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

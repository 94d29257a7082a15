"""Unified diffs of byte contents, the way `diff -u` and `git diff` show them.

Line endings are kept as they are (a CRLF file shows CRLF lines), and a last
line without a newline gets the usual `\\ No newline at end of file` marker,
so the output can be fed to `patch -p0` from the job folder.
"""

from __future__ import annotations

import difflib

NO_NEWLINE = "\\ No newline at end of file\n"


def _lines(data: bytes | None) -> list[str]:
    if not data:
        return []
    return data.decode("utf-8", "surrogateescape").splitlines(keepends=True)


def _mark(lines: list[str]) -> list[str]:
    """Give the last line a newline plus the marker if it had none."""
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines = lines[:-1] + [lines[-1] + "\n" + NO_NEWLINE]
    return lines


def unified_diff(before: bytes | None, after: bytes, name: str, context: int = 3) -> str:
    """The unified diff from `before` (None: a new file) to `after`."""
    old = _mark(_lines(before))
    new = _mark(_lines(after))
    fromfile = "/dev/null" if before is None else f"a/{name}"
    out = list(difflib.unified_diff(old, new, fromfile, f"b/{name}", n=context))
    if not out:
        return ""
    text = "".join(out)
    return text if text.endswith("\n") else text + "\n"

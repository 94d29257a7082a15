"""Turn a rank's raw output bytes into the lines a terminal would show.

The log file keeps every byte; this only shapes what the live view gets:
- `\\r` (progress bars) overwrites: of `a\\rb\\rc\\n` only `c` is a line, and an
  unterminated bar is reported as the current line, never accumulated;
- a line longer than `max_pending` bytes without a newline is cut for the
  view (its head is shown, the rest skipped up to the next newline), so memory
  stays bounded however long the child's lines are;
- display lines are cut to `max_line` characters.
"""

from __future__ import annotations

CUT_MARK = " … [cut; full line in the log]"


def _display(raw: bytes, max_line: int) -> str:
    text = raw[: max_line * 4].decode("utf-8", errors="replace")
    if len(text) > max_line or len(raw) > max_line * 4:
        return text[:max_line] + CUT_MARK
    return text


def _terminal_view(part: bytes) -> bytes:
    """What a terminal shows for a line containing carriage returns."""
    if part.endswith(b"\r"):
        part = part.rstrip(b"\r")
    if b"\r" in part:
        for seg in reversed(part.split(b"\r")):
            if seg:
                return seg
        return b""
    return part


class LineSplitter:
    """Incremental splitter: `feed(bytes) -> (lines, current)`.

    `lines` are complete display lines; `current` is the text of an unfinished
    line (e.g. a progress bar redrawn with `\\r`), or None when there is none.
    """

    def __init__(self, max_line: int = 2000, max_pending: int = 64 * 1024):
        self.max_line = max_line
        self.max_pending = max_pending
        self._pending = b""
        self._skipping = False

    def feed(self, data: bytes) -> tuple[list[str], str | None]:
        lines: list[str] = []
        if self._skipping:
            nl = data.find(b"\n")
            if nl < 0:
                return lines, None
            data = data[nl + 1:]
            self._skipping = False
        buf = self._pending + data if self._pending else data
        parts = buf.split(b"\n")
        self._pending = parts.pop()
        for part in parts:
            if len(part) > self.max_pending:
                part = part[: self.max_pending]
            lines.append(_display(_terminal_view(part), self.max_line))
        pending = self._pending
        if b"\r" in pending:
            # Keep only the latest redraw; a trailing \r may still be half of a CRLF.
            cut = pending.rfind(b"\r", 0, len(pending) - 1)
            if cut >= 0:
                pending = self._pending = pending[cut + 1:]
        if len(pending) > self.max_pending:
            lines.append(_display(_terminal_view(pending), self.max_line))
            self._pending = b""
            self._skipping = True
            return lines, None
        current = pending.rstrip(b"\r")
        return lines, (_display(current, self.max_line) if current else None)

    def flush(self) -> list[str]:
        """The unterminated last line at end of output, if any."""
        rest, self._pending = self._pending, b""
        view = _terminal_view(rest)
        return [_display(view, self.max_line)] if view else []

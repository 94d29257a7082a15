"""Minimal textual edits on exact spans of a file, keeping its form.

A `TextDoc` holds a file's bytes decoded losslessly (UTF-8 with surrogate
escapes, so any byte survives), its line-ending style, and a list of span
edits. Only the edited spans change: tabs, CRLF line endings, trailing spaces
and a missing final newline elsewhere stay as they were. Text that an edit
inserts is written with the file's own line endings.

Parsers that do not understand CR see `parse_text`, the text with
each CRLF turned into LF; `to_orig` maps their offsets back.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


@dataclass
class TextDoc:
    data: bytes
    text: str = field(init=False)
    newline: str = field(init=False)
    parse_text: str = field(init=False)
    _cr_before: list[int] = field(init=False, repr=False)
    _edits: list[tuple[int, int, str]] = field(init=False, default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.text = self.data.decode("utf-8", "surrogateescape")
        crlf = self.text.count("\r\n")
        self.newline = "\r\n" if crlf and crlf * 2 >= self.text.count("\n") else "\n"
        # Offsets (in parse_text) of the LFs that had a CR before them.
        self._cr_before = []
        parts = self.text.split("\r\n")
        pos = 0
        for part in parts[:-1]:
            pos += len(part)
            self._cr_before.append(pos)
            pos += 1
        self.parse_text = "\n".join(parts)
        starts = [0]
        for i, ch in enumerate(self.text):
            if ch == "\n":
                starts.append(i + 1)
        self._line_starts = starts

    # -- coordinates -------------------------------------------------------
    def to_orig(self, pos: int) -> int:
        """An offset in `parse_text` as an offset in `text`."""
        return pos + bisect.bisect_left(self._cr_before, pos)

    @property
    def line_count(self) -> int:
        if not self.text:
            return 0
        n = len(self._line_starts)
        return n - 1 if self.text.endswith("\n") else n

    @property
    def ends_with_newline(self) -> bool:
        return self.text.endswith("\n")

    def line_of(self, pos: int) -> int:
        """The 1-based line number of an offset in `text`."""
        return bisect.bisect_right(self._line_starts, pos)

    def line_start(self, line: int) -> int:
        if line > len(self._line_starts):
            return len(self.text)
        return self._line_starts[line - 1]

    def line_end(self, line: int) -> int:
        """Offset of the end of `line`'s content (before its line ending)."""
        end = self._line_starts[line] - 1 if line < len(self._line_starts) else len(self.text)
        if end > 0 and self.text[end - 1:end] == "\r" and self.text[end:end + 1] == "\n":
            end -= 1
        return end

    def line_text(self, line: int) -> str:
        return self.text[self.line_start(line):self.line_end(line)]

    def indent_of(self, line: int) -> str:
        content = self.line_text(line)
        return content[:len(content) - len(content.lstrip(" \t"))]

    # -- edits -------------------------------------------------------------
    def replace(self, start: int, end: int, new: str) -> None:
        """Replace text[start:end] (offsets in `text`) with `new` (LFs become the file's newline)."""
        if self.newline != "\n":
            new = new.replace("\r\n", "\n").replace("\n", self.newline)
        for i, (s, e, old) in enumerate(self._edits):
            if start == end == s == e:  # a second insert at one place goes after the first
                self._edits[i] = (s, e, old + new)
                return
            if start < e and s < end:
                raise ValueError(f"overlapping edits at offset {start}")
        self._edits.append((start, end, new))

    def insert(self, pos: int, new: str) -> None:
        self.replace(pos, pos, new)

    def insert_lines_before(self, line: int, lines: list[str]) -> None:
        """Insert whole lines before `line` (past the end: append, keeping a missing final newline)."""
        if line <= self.line_count:
            self.insert(self.line_start(line), "".join(ln + "\n" for ln in lines))
        elif self.text and not self.ends_with_newline:
            self.insert(len(self.text), "".join("\n" + ln for ln in lines))
        else:
            self.insert(len(self.text), "".join(ln + "\n" for ln in lines))

    def insert_lines_after(self, line: int, lines: list[str]) -> None:
        self.insert_lines_before(line + 1, lines)

    def delete_line(self, line: int) -> None:
        end = self.line_start(line + 1) if line < self.line_count else len(self.text)
        self.replace(self.line_start(line), end, "")

    @property
    def changed(self) -> bool:
        return bool(self._edits) and self.render() != self.data

    def render(self) -> bytes:
        out = self.text
        for start, end, new in sorted(self._edits, key=lambda e: (e[0], e[1]), reverse=True):
            out = out[:start] + new + out[end:]
        return out.encode("utf-8", "surrogateescape")

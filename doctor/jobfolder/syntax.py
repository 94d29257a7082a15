"""Shell source as a tree-sitter-bash syntax tree, with character spans for every node.

tree-sitter reports byte offsets into UTF-8; the rest of gpu-doctor (and the remedy
engine's `TextDoc`) counts characters of the decoded text, so `Source` converts.
A CR before a newline is read as a blank (bash would keep it in the word, which is
a bug of the script, not a different launch), so offsets never move.
tree-sitter tolerates broken scripts: what it cannot read becomes an ERROR node,
which the walker notes and skips.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from doctor import limits
from doctor.jobfolder.model import Span

Node = Any  # tree_sitter.Node


@lru_cache(maxsize=1)
def _parser() -> Any:
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


@dataclass
class Source:
    """One shell file (or a `bash -c` string placed at a line of one) and its tree."""

    path: str
    text: str
    base_line: int = 0  # for a `bash -c` string: the line it starts on, minus one
    base_offset: int = 0  # and its character offset in the file
    base_col: int = 0
    # for a `bash -c "..."` string whose value is not its text character for character (`\\$X` is `$X`):
    # each character's offset in the file, and one past the last
    offsets: list[int] | None = None
    tree: Any = field(init=False, repr=False)
    _byte_to_char: list[int] | None = field(init=False, repr=False, default=None)
    _line_starts: list[int] = field(init=False, repr=False)
    _line_texts: dict[int, str] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        parse_text = self.text.replace("\r\n", " \n")
        data = parse_text.encode("utf-8", "surrogatepass")
        if len(data) != len(parse_text):
            table = []
            for i, ch in enumerate(parse_text):
                table.extend([i] * len(ch.encode("utf-8", "surrogatepass")))
            table.append(len(parse_text))
            self._byte_to_char = table
        self.tree = _parser().parse(data)
        self._line_starts = [0] + [i + 1 for i, ch in enumerate(self.text) if ch == "\n"]

    @property
    def root(self) -> Node:
        return self.tree.root_node

    def char(self, byte: int) -> int:
        return byte if self._byte_to_char is None else self._byte_to_char[min(byte, len(self._byte_to_char) - 1)]

    def start(self, node: Node) -> int:
        return self.char(node.start_byte)

    def end(self, node: Node) -> int:
        return self.char(node.end_byte)

    def text_of(self, node: Node) -> str:
        return self.text[self.start(node):self.end(node)]

    def line(self, pos: int) -> int:
        """1-based line (in the file) of a character offset in this source."""
        return bisect.bisect_right(self._line_starts, pos) + self.base_line

    def col(self, pos: int) -> int:
        k = bisect.bisect_right(self._line_starts, pos) - 1
        return pos - self._line_starts[k] + 1 + (self.base_col if k == 0 else 0)

    def span(self, start: int, end: int) -> Span:
        last = max(start, end - 1)
        if self.offsets is not None:
            return self._file_span(start, end, last)
        return Span(self.path, start + self.base_offset, end + self.base_offset, self.line(start),
                    self.col(start), self.line(last), self.col(last) + (1 if end > start else 0))

    def _file_span(self, start: int, end: int, last: int) -> Span:
        assert self.offsets is not None
        at = self.offsets
        first, stop = at[min(start, len(at) - 1)], (at[min(last, len(at) - 1)] + 1 if end > start else
                                                     at[min(start, len(at) - 1)])

        def col(pos: int) -> int:
            k = bisect.bisect_right(self._line_starts, pos) - 1
            line_start = at[self._line_starts[k]] if k else at[0] - self.base_col  # after a newline: column 1
            return at[min(pos, len(at) - 1)] - line_start + 1

        return Span(self.path, first, stop, self.line(start), col(start), self.line(last),
                    col(last) + (1 if end > start else 0))

    def node_span(self, node: Node) -> Span:
        return self.span(self.start(node), self.end(node))

    def line_text(self, line: int) -> str:
        """The line's text (stripped), at most `limits.MAX_SITE_CHARS` of it, made once per line.

        Every command on a line points at it: `true; true; ...` 200 KB long is one string, not a
        copy per command (memory and time stay linear in the input).
        """
        cached = self._line_texts.get(line)
        if cached is not None:
            return cached
        k = line - self.base_line - 1
        text = ""
        if 0 <= k < len(self._line_starts):
            end = self._line_starts[k + 1] - 1 if k + 1 < len(self._line_starts) else len(self.text)
            text = self.text[self._line_starts[k]:end].strip()
            if len(text) > limits.MAX_SITE_CHARS:
                text = text[:limits.MAX_SITE_CHARS - 1] + "…"
        self._line_texts[line] = text
        return text

    @property
    def lines(self) -> int:
        return len(self._line_starts)


def named(node: Node) -> list[Node]:
    return [c for c in node.children if c.is_named and c.type != "comment"]


def errors(node: Node) -> list[Node]:
    """The outermost ERROR (or missing) nodes under `node`."""
    out: list[Node] = []
    todo = [node]
    while todo:
        n = todo.pop()
        if n.type == "ERROR" or n.is_missing:
            out.append(n)
            continue
        if n.has_error:
            todo.extend(reversed(n.children))
    return out

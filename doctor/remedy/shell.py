"""Job scripts read with a real shell parser (bashlex), down to the exact span of each word.

bashlex does not know every bash construct (arrays, `[[ ]]`, `case`, `$(( ))`).
When it cannot parse a whole script, the script is cut into logical lines
(quotes, comments and backslash continuations respected) and each is parsed on
its own; an opening line such as `for r in ...; do` is parsed with a closing
`done` added, so commands inside blocks are still found. Offsets are in the
`TextDoc`'s text (CRLF files included); the parse never changes the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from doctor.remedy.text import TextDoc

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
EXPORTERS = ("export", "declare", "typeset", "local", "readonly")
CLOSERS = ("fi", "done", "esac", "}")
_SUFFIXES = ("", "\n:\nfi", "\n:\ndone", "\n:\n}", "\nfi", "\ndone")


@dataclass(frozen=True)
class Word:
    """One shell word: `text` after quote removal, `raw` as written, offsets in the doc's text."""

    text: str
    raw: str
    start: int
    end: int


@dataclass(frozen=True)
class Command:
    """One simple command: prefix assignments, then program and arguments."""

    assignments: tuple[Word, ...]
    words: tuple[Word, ...]
    start: int
    end: int
    line: int
    top_line: int
    loops: tuple[str, ...] = ()

    def index(self, text: str, start: int = 0) -> int:
        return next((i for i, w in enumerate(self.words) if i >= start and w.text == text), -1)


@dataclass(frozen=True)
class Assignment:
    """`NAME=value` in a script: `value_start:value_end` is the value's span inside its quotes."""

    name: str
    value: str
    word: Word
    value_start: int
    value_end: int
    how: str
    command: Command
    word_line: int


class ShellScript:
    """The commands of one script, parsed once."""

    def __init__(self, doc: TextDoc):
        self.doc = doc
        self.commands: list[Command] = []
        self.whole_parse = True
        self._limit = len(doc.parse_text)  # commands past it come from an added closing suffix
        try:
            import bashlex

            trees = bashlex.parse(doc.parse_text)
        except Exception:  # bashlex raises several kinds; fall back to line by line
            self.whole_parse = False
            self._parse_by_lines()
        else:
            for tree in trees:
                top_line = doc.line_of(doc.to_orig(tree.pos[0]))
                self._walk(tree, 0, top_line, ())
        self.commands.sort(key=lambda c: c.start)

    # -- parsing -----------------------------------------------------------
    def _word(self, node: Any, offset: int) -> Word:
        start = self.doc.to_orig(node.pos[0] + offset)
        end = self.doc.to_orig(node.pos[1] + offset)
        return Word(node.word, self.doc.text[start:end], start, end)

    def _walk(self, node: Any, offset: int, top_line: int, loops: tuple[str, ...]) -> None:
        kind = getattr(node, "kind", "")
        if kind == "command":
            self._add_command(node, offset, top_line, loops)
            return
        if kind == "for":
            parts = getattr(node, "parts", [])
            if len(parts) > 1 and getattr(parts[1], "kind", "") == "word":
                loops = loops + (parts[1].word,)
        for child in list(getattr(node, "parts", []) or []) + list(getattr(node, "list", []) or []):
            self._walk(child, offset, top_line, loops)

    def _add_command(self, node: Any, offset: int, top_line: int, loops: tuple[str, ...]) -> None:
        assigns: list[Word] = []
        words: list[Word] = []
        for part in node.parts:
            if part.kind == "assignment" and not words:
                assigns.append(self._word(part, offset))
            elif part.kind in ("word", "assignment"):
                words.append(self._word(part, offset))
        items = assigns + words
        if not items or node.pos[0] + offset >= self._limit:
            return
        start, end = items[0].start, items[-1].end
        self.commands.append(Command(tuple(assigns), tuple(words), start, end,
                                     self.doc.line_of(start), top_line, loops))

    def _parse_by_lines(self) -> None:
        import bashlex

        stack: list[tuple[int, str | None]] = []  # (top line, loop variable) of open blocks
        for start, end in logical_lines(self.doc.parse_text):
            chunk = self.doc.parse_text[start:end]
            first = chunk.split(None, 1)[0] if chunk.strip() else ""
            if first.rstrip(";&") in CLOSERS:
                if stack:
                    stack.pop()
                continue
            line = self.doc.line_of(self.doc.to_orig(start))
            for suffix in _SUFFIXES:
                try:
                    trees = bashlex.parse(chunk + suffix)
                except Exception:
                    continue
                top_line = stack[0][0] if stack else line
                loops = tuple(v for _, v in stack if v)
                self._limit = end
                for tree in trees:
                    self._walk(tree, start, top_line, loops)
                if suffix:
                    stack.append((top_line, _for_variable(trees)))
                break

    # -- queries -----------------------------------------------------------
    def assignments(self, name: str | None = None) -> list[Assignment]:
        """Every `NAME=value` the script sets: bare, as a command prefix, via export/declare, via env."""
        found: list[Assignment] = []
        for cmd in self.commands:
            how = "bare" if not cmd.words else "prefix"
            candidates = [(w, how) for w in cmd.assignments]
            if cmd.words and cmd.words[0].text in EXPORTERS:
                candidates += [(w, "export") for w in cmd.words[1:] if not w.text.startswith("-")]
            elif cmd.words and cmd.words[0].text == "env":
                for w in cmd.words[1:]:
                    if w.text.startswith("-"):
                        continue
                    if "=" not in w.text:
                        break
                    candidates.append((w, "env"))
            for word, kind in candidates:
                parsed = parse_assignment(word, kind, cmd, self.doc.line_of(word.start))
                if parsed and (name is None or parsed.name == name):
                    found.append(parsed)
        return found

    def prefix_assignments(self, cmd: Command) -> list[Assignment]:
        """The `NAME=value` words in front of one command."""
        return [a for w in cmd.assignments
                if (a := parse_assignment(w, "prefix", cmd, self.doc.line_of(w.start))) is not None]

    def commands_at(self, line: int) -> list[Command]:
        """Commands that start on, or span, `line`."""
        return [c for c in self.commands
                if c.line <= line <= self.doc.line_of(max(c.start, c.end - 1))]


def _for_variable(trees: list[Any]) -> str | None:
    for tree in trees:
        for node in _nodes(tree):
            if getattr(node, "kind", "") == "for":
                parts = node.parts
                return parts[1].word if len(parts) > 1 and parts[1].kind == "word" else None
    return None


def _nodes(node: Any) -> Iterator[Any]:
    yield node
    for child in list(getattr(node, "parts", []) or []) + list(getattr(node, "list", []) or []):
        yield from _nodes(child)


def parse_assignment(word: Word, how: str, cmd: Command, line: int) -> Assignment | None:
    eq = word.raw.find("=")
    name = word.raw[:eq] if eq > 0 else ""
    if not NAME_RE.fullmatch(name):
        return None
    vstart, vend = word.start + eq + 1, word.end
    raw_value = word.raw[eq + 1:]
    if len(raw_value) >= 2 and raw_value[0] in "\"'" and raw_value[-1] == raw_value[0] \
            and raw_value[0] not in raw_value[1:-1]:
        vstart, vend = vstart + 1, vend - 1
    value = word.text.split("=", 1)[1] if "=" in word.text else ""
    return Assignment(name, value, word, vstart, vend, how, cmd, line)


def logical_lines(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each logical line: quotes, comments and `\\`-newline continuations respected."""
    i, n, start = 0, len(text), 0
    quote = ""
    while i < n:
        ch = text[i]
        if quote == "'":
            if ch == "'":
                quote = ""
        elif ch == "\\":
            i += 2
            continue
        elif quote == '"':
            if ch == '"':
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == start or text[i - 1] in " \t;&|("):
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif ch == "\n":
            if text[start:i].strip():
                yield start, i
            start = i + 1
        i += 1
    if text[start:].strip():
        yield start, n

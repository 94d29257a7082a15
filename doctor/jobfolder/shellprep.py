"""Make a bash script digestible for bashlex without moving a single character.

bashlex parses most of bash but not `$(( ))`, `(( ))`, `for ((;;))`, `[[ ]]`,
arrays, `time` or quoted here-document delimiters. A quote-aware scan
replaces those spans by text of the same length (so every position bashlex
reports still points at the original source) and remembers what they held:
here-document bodies and C-style for headers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from doctor.jobfolder.words import match_close

RESERVED_START = {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "(", "time", "in", "exec"}
META = set(";&|()<> \t\n")


@dataclass(frozen=True)
class Heredoc:
    body: str
    body_start: int  # offset of the body's first character
    delimiter: str
    quoted: bool


@dataclass(frozen=True)
class CFor:
    """`for ((init; cond; step))`: the loop variable and the three clauses."""

    var: str
    init: str
    cond: str
    step: str


@dataclass
class Prepared:
    text: str
    heredocs: dict[int, Heredoc] = field(default_factory=dict)  # key: offset of the `<<`
    cfors: dict[int, CFor] = field(default_factory=dict)  # key: offset of the `((`


_CFOR_INIT = re.compile(r"\s*([A-Za-z_]\w*)\s*=")


class _Scanner:
    def __init__(self, text: str):
        self.src = text
        self.out = list(text)
        self.prep = Prepared(text)
        self.pending: list[tuple[int, str, bool, bool]] = []

    def blank(self, a: int, b: int, fill: str = " ") -> None:
        for k in range(a, min(b, len(self.out))):
            if self.out[k] != "\n":
                self.out[k] = fill

    def put(self, a: int, s: str) -> None:
        for k, ch in enumerate(s):
            if a + k < len(self.out):
                self.out[a + k] = ch

    def scan(self, a: int, b: int, in_case: bool = False) -> int:
        """Rewrite [a, b); in a case arm, stop at its `;;`/`;&` or at `esac` and return where."""
        src = self.src
        i = a
        cmd_start = True
        while i < b:
            c = src[i]
            if in_case and (src.startswith(";;", i) or src.startswith(";&", i)):
                return i
            if in_case and cmd_start and self._keyword(i, b, "esac"):
                return i
            if c == "\n":
                i = self.heredoc_bodies(i + 1, b) if self.pending else i + 1
                cmd_start = True
                continue
            if c in " \t":
                i += 1
                continue
            if c == "#" and (i == a or src[i - 1] in " \t\n;&|()"):
                nl = src.find("\n", i, b)
                i = b if nl < 0 else nl
                continue
            if c in ";&|(){":
                if c == "(" and src.startswith("((", i) and cmd_start:
                    end = match_close(src, i, "(", ")")
                    self.blank(i, end + 1)
                    self.put(i, ":")
                    i = end + 1
                    cmd_start = False
                    continue
                cmd_start = c != ")"
                i += 1
                continue
            if c == "<" and src.startswith("<<", i) and not src.startswith("<<<", i):
                i = self.heredoc_op(i, b)
                continue
            if c in "<>":
                i += 1
                continue
            i, word = self.word(i, b, cmd_start)
            cmd_start = word in RESERVED_START
        return b

    def _keyword(self, i: int, b: int, word: str) -> bool:
        end = i + len(word)
        return self.src.startswith(word, i) and (end >= b or self.src[end] in META)

    def case(self, i: int, b: int) -> int:
        """`case W in p) cmds ;; esac` -> `{ :; cmds ; }` (same length): bashlex has no case."""
        src = self.src
        start = i
        j = i + 4
        while j < b:  # up to and including the `in`
            while j < b and src[j] in " \t\n":
                j += 1
            k = j
            while k < b and src[k] not in " \t\n;":
                k = self.dq(k, b) if src[k] == '"' else (src.find("'", k + 1, b) + 1 or b) if src[k] == "'" else k + 1
            if src[j:k] == "in":
                j = k
                break
            j = k
        self.blank(start, j)
        self.put(start, "{")
        while j < b:
            while j < b and (src[j] in " \t\n" or src[j] == "#"):
                j = (src.find("\n", j, b) if src[j] == "#" else j + 1)
                j = b if j < 0 else j
            if j >= b:
                return b
            if self._keyword(j, b, "esac"):
                self.blank(j, j + 4)
                self.put(j, "}")
                return j + 4
            close = j + (src[j] == "(")
            while close < b and src[close] != ")":
                close = self.dq(close, b) if src[close] == '"' else close + 1
            self.blank(j, close + 1)
            self.put(j, ":;")
            end = self.scan(close + 1, b, in_case=True)
            if end >= b:
                return b
            if src.startswith(";;", end) or src.startswith(";&", end):
                term = 3 if src.startswith(";;&", end) else 2
                body = src[close + 1:end].rstrip(" \t")
                self.blank(end, end + term)
                if body.strip() and not body.endswith(("\n", "&")):  # a `;` must end a command
                    self.put(end, ";")
                j = end + term
            else:
                j = end
        return b

    def word(self, i: int, b: int, cmd_start: bool) -> tuple[int, str]:
        """Scan one word from i; rewrite what bashlex cannot read; return (end, plain word)."""
        src = self.src
        start = i
        if cmd_start and src.startswith("[[", i) and (i + 2 >= b or src[i + 2] in " \t\n"):
            end = self.find_word_seq(i + 2, b, "]]")
            self.blank(i, end + 2)
            self.put(i, "[")
            if end + 1 < len(self.out):
                self.out[end + 1] = "]"
            return end + 2, "[["
        if cmd_start and self._keyword(i, b, "case"):
            return self.case(i, b), "esac"
        if cmd_start and src.startswith("time", i) and (i + 4 >= b or src[i + 4] in " \t"):
            self.blank(i, i + 4)
            return i + 4, "time"
        m = re.match(r"[A-Za-z_]\w*\+?=\(", src[i:b])
        if m:
            open_at = i + m.end() - 1
            end = match_close(src, open_at, "(", ")")
            self.blank(open_at, end + 1, "_")
            i = end + 1
        while i < b:
            c = src[i]
            if c in META:
                break
            if c == "\\":
                i += 2
            elif c == "'":
                j = src.find("'", i + 1, b)
                i = b if j < 0 else j + 1
            elif c == '"':
                i = self.dq(i, b)
            elif c == "$":
                i = self.dollar(i, b)
            elif c == "`":
                j = src.find("`", i + 1, b)
                j = b if j < 0 else j
                self.blank(i + 1, j)
                self.put(i + 1, ":" if j > i + 1 else "")
                i = j + 1
            else:
                i += 1
        word = src[start:i]
        if word == "for" and cmd_start:
            j = i
            while j < b and src[j] in " \t":
                j += 1
            if src.startswith("((", j):
                end = match_close(src, j, "(", ")")
                self.cfor(j, end)
                return end + 1, "for"
        return i, word

    def find_word_seq(self, i: int, b: int, token: str) -> int:
        src = self.src
        while i < b:
            c = src[i]
            if c == "\\":
                i += 2
            elif c == "'":
                j = src.find("'", i + 1, b)
                i = b if j < 0 else j + 1
            elif c == '"':
                i = self.dq(i, b)
            elif src.startswith(token, i) and src[i - 1] in " \t":
                return i
            else:
                i += 1
        return b

    def dq(self, i: int, b: int) -> int:
        src = self.src
        i += 1
        while i < b:
            c = src[i]
            if c == "\\":
                i += 2
            elif c == '"':
                return i + 1
            elif c == "$":
                i = self.dollar(i, b)
            else:
                i += 1
        return b

    def dollar(self, i: int, b: int) -> int:
        src = self.src
        if src.startswith("$((", i):
            end = match_close(src, i + 1, "(", ")")
            self.blank(i, end + 1, "_")
            return end + 1
        if src.startswith("$(", i):
            # bashlex trips over lists inside $( ); their text is read from the original.
            end = match_close(src, i + 1, "(", ")")
            self.blank(i + 2, end)
            self.put(i + 2, ":" if end > i + 2 else "")
            return end + 1
        if src.startswith("${", i):
            return match_close(src, i + 1, "{", "}") + 1
        return i + 1

    def cfor(self, j: int, end: int) -> None:
        header = self.src[j + 2:end - 1]
        parts = header.split(";")
        if len(parts) != 3:
            self.blank(j, end + 1, "_")
            return
        m = _CFOR_INIT.match(parts[0])
        var = m.group(1) if m else "_"
        self.prep.cfors[j] = CFor(var, parts[0].strip(), parts[1].strip(), parts[2].strip())
        self.blank(j, end + 1, "_")
        self.put(j, f"{var} in ")

    def heredoc_op(self, i: int, b: int) -> int:
        src = self.src
        j = i + 2
        strip = False
        if j < b and src[j] == "-":
            strip = True
            j += 1
        while j < b and src[j] in " \t":
            j += 1
        k = j
        delim = ""
        quoted = False
        while k < b and src[k] not in " \t\n;&|()<>":
            ch = src[k]
            if ch in "'\"":
                quoted = True
                close = src.find(ch, k + 1, b)
                close = b if close < 0 else close
                delim += src[k + 1:close]
                self.out[k] = " "
                if close < len(self.out):
                    self.out[close] = " "
                k = close + 1
            elif ch == "\\":
                quoted = True
                self.out[k] = " "
                k += 1
            else:
                delim += ch
                k += 1
        if delim:
            # bashlex wants the delimiter as one word: squeeze what the quotes left.
            self.blank(j, k)
            self.put(j, delim)
            self.pending.append((i, delim, strip, quoted))
        return k

    def heredoc_bodies(self, i: int, b: int) -> int:
        src = self.src
        for op, delim, strip, quoted in self.pending:
            start = i
            while i < b:
                nl = src.find("\n", i, b)
                line_end = b if nl < 0 else nl
                line = src[i:line_end]
                if (line.lstrip("\t") if strip else line) == delim:
                    self.prep.heredocs[op] = Heredoc(src[start:i], start, delim, quoted)
                    self.blank(start, i)
                    i = line_end + 1 if nl >= 0 else b
                    break
                i = line_end + 1 if nl >= 0 else b
            else:
                self.prep.heredocs[op] = Heredoc(src[start:b], start, delim, quoted)
        self.pending = []
        return i


def prepare(text: str) -> Prepared:
    """The same-length rewrite of `text` and what the rewritten spans held."""
    sc = _Scanner(text)
    sc.scan(0, len(text))
    sc.prep.text = "".join(sc.out)
    return sc.prep

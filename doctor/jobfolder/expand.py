"""Shell word expansion, statically, on tree-sitter nodes: quotes, parameters, positional
parameters, arrays, arithmetic, word splitting — and where every character came from.

What cannot be known before the job runs (a command substitution, a variable nobody
set) stays as written and marks the result unknown, so a value is never guessed.
`$(which X)` and `$(command -v X)` expand to `X`: what a launcher line means does not
depend on where X lives. `$(dirname "$0")` and `$(pwd)` are the script's folder and
the working folder.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from doctor.jobfolder.arith import try_arith
from doctor.jobfolder.model import EnvVar, Piece, Site, Span, Word
from doctor.jobfolder.syntax import Node, Source
from doctor.limits import MAX_EXPANSION_DEPTH, MAX_VALUE_CHARS

RANK_VARS = frozenset({
    "RANK", "LOCAL_RANK", "SLURM_PROCID", "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "FLUX_TASK_RANK",
    "PALS_RANKID", "GROUP_RANK",
})
MAX_VALUE = MAX_VALUE_CHARS  # longer expanded values are not followed (a runaway `X="$X$X"`)
MAX_NESTING = MAX_EXPANSION_DEPTH  # `${a:-${b:-${c:-...}}}` deeper than this is not followed

Lookup = Callable[[str], "EnvVar | None"]
Assign = Callable[[str, tuple[Piece, ...], bool], None]  # `${X:=word}` sets X: (name, value pieces, known)
EXPANSIONS = {"simple_expansion", "expansion", "command_substitution", "arithmetic_expansion",
              "process_substitution", "string", "raw_string", "ansi_c_string", "translated_string"}


@dataclass
class Expansion:
    """The fields a word expands to; `known` is False if any part is not statically known."""

    fields: list[list[Piece]] = field(default_factory=list)
    known: bool = True
    refs: list[str] = field(default_factory=list)
    varies: bool = False
    via: list[Site] = field(default_factory=list)

    @property
    def values(self) -> list[str]:
        return ["".join(p.text for p in f) for f in self.fields]

    @property
    def value(self) -> str:
        return " ".join(self.values)

    @property
    def pieces(self) -> tuple[Piece, ...]:
        """All pieces, fields joined by one blank (for a value kept as one string)."""
        out: list[Piece] = []
        for k, f in enumerate(self.fields):
            if k:
                out.append(Piece(" "))
            out.extend(f)
        return tuple(out)

    def words(self, span: Span) -> list[Word]:
        return [Word("".join(p.text for p in f), span, tuple(f), tuple(self.via), self.known, self.varies)
                for f in self.fields]


def sub_span(span: Span, text: str, a: int, b: int) -> Span:
    """The span of text[a:b] where `text` is written at `span` character for character."""
    line, col = span.line, span.col
    for ch in text[:a]:
        line, col = (line + 1, 1) if ch == "\n" else (line, col + 1)
    end_line, end_col = line, col
    for ch in text[a:b]:
        end_line, end_col = (end_line + 1, 1) if ch == "\n" else (end_line, end_col + 1)
    return Span(span.file, span.start + a, span.start + b, line, col, end_line, end_col)


class Expander:
    """Expands the words of one command against the shell's variables and positional parameters."""

    def __init__(self, src: Source, lookup: Lookup, args: tuple[Word, ...] | None, *, split: bool = True,
                 per_task: bool = False, home: str | None = None, cwd: str | None = None,
                 assign: Assign | None = None, spell: bool = False):
        self.assign = assign
        self.spell = spell  # an unknown variable's spelling for `$X`, not `$X` (EnvVar.spelling)
        self.src = src
        self.lookup = lookup
        self.args = args
        self.split = split
        self.per_task = per_task
        self.home = home
        self.cwd = cwd

    def expand(self, node: Node) -> Expansion:
        self.out = Expansion()
        self.cur: list[Piece] = []
        self.started = False
        self.depth = 0
        self.size = 0
        self._node(node, quoted=False, top=True)
        self._flush()
        if self.size > MAX_VALUE:  # bounded: what the job would build is not followed
            self.out = Expansion([[Piece(self.src.text_of(node)[:200], None)]], known=False, refs=self.out.refs)
        return self.out

    # -- pieces -----------------------------------------------------------
    def _lit(self, text: str, span: Span | None) -> None:
        self.size += len(text)
        if text and self.size <= MAX_VALUE:
            self.cur.append(Piece(text, span))
        self.started = True

    def _flush(self) -> None:
        if self.cur or self.started:
            self.out.fields.append(self.cur)
        self.cur = []
        self.started = False

    def _span(self, a: int, b: int) -> Span:
        return self.src.span(a, b)

    def _value(self, pieces: tuple[Piece, ...], quoted: bool) -> None:
        """Insert a parameter's value: as it is when quoted, else split at blanks."""
        if quoted or not self.split:
            for p in pieces:
                self._lit(p.text, p.span)
            self.started = True
            return
        for p in pieces:
            text = p.text
            i = 0
            while i < len(text):
                if text[i] in " \t\n":
                    self._flush_if_any()
                    while i < len(text) and text[i] in " \t\n":
                        i += 1
                    continue
                j = i
                while j < len(text) and text[j] not in " \t\n":
                    j += 1
                self._lit(text[i:j], sub_span(p.span, text, i, j) if p.span else None)
                i = j

    def _flush_if_any(self) -> None:
        if self.cur:
            self._flush()

    def _unknown(self, node: Node) -> None:
        self.out.known = False
        self._lit(self.src.text_of(node), self.src.node_span(node))

    def _unknown_var(self, node: Node, var: EnvVar | None) -> None:
        """`$X` for an X whose value is not known: as written, or (spelling) X's own spelling."""
        if self.spell and var is not None and var.spelling is not None:
            self.out.known = False
            self._lit(var.spelling, None)
        else:
            self._unknown(node)

    # -- nodes ------------------------------------------------------------
    def _node(self, node: Node, quoted: bool, top: bool = False) -> None:
        self.depth += 1
        try:
            if self.depth > MAX_NESTING or self.size > MAX_VALUE:
                self._unknown(node)
                return
            self._dispatch(node, quoted, top)
        finally:
            self.depth -= 1

    def _dispatch(self, node: Node, quoted: bool, top: bool) -> None:
        kind = node.type
        if kind in ("word", "number", "extglob_pattern", "brace_expression", "special_variable_name",
                    "variable_name", "test_operator", "regex"):
            self._literal(self.src.start(node), self.src.end(node), quoted, top)
        elif kind == "concatenation":
            self._parts(node, quoted)
        elif kind == "raw_string":
            a, b = self.src.start(node), self.src.end(node)
            self._lit(self.src.text[a + 1:b - 1], self._span(a + 1, b - 1))
        elif kind == "ansi_c_string":
            a, b = self.src.start(node), self.src.end(node)
            body = self.src.text[a + 2:b - 1]
            if "\\" in body:
                self._lit(body.encode("latin-1", "backslashreplace").decode("unicode_escape", "replace"), None)
            else:
                self._lit(body, self._span(a + 2, b - 1))
        elif kind in ("string", "translated_string"):
            self.started = True
            self._parts(node, quoted=True)
        elif kind == "simple_expansion":
            self._simple(node, quoted)
        elif kind == "expansion":
            self._param(node, quoted)
        elif kind == "command_substitution":
            self._substitution(node, quoted)
        elif kind == "arithmetic_expansion":
            body = self.src.text_of(node)[3:-2]
            value = try_arith(body, self._ref)
            if value is None:
                self._unknown(node)
            else:
                self._value((Piece(str(value)),), quoted)
        else:
            self._unknown(node)

    def _parts(self, node: Node, quoted: bool) -> None:
        """Children in order; the text between them is literal (string content, plain characters)."""
        a, b = self.src.start(node), self.src.end(node)
        if node.type in ("string", "translated_string"):
            a = a + (2 if node.type == "translated_string" else 1)
            b = b - 1 if self.src.text[b - 1:b] == '"' else b
        pos = a
        for child in node.children:
            if not child.is_named or child.type not in EXPANSIONS:
                continue
            cs, ce = self.src.start(child), self.src.end(child)
            if cs < pos:
                continue
            self._literal(pos, cs, quoted)
            self._node(child, quoted)
            pos = ce
        self._literal(pos, b, quoted)

    def _literal(self, a: int, b: int, quoted: bool, top: bool = False) -> None:
        """Plain text [a, b): backslash escapes removed, `~` at the start of a word is HOME."""
        text = self.src.text[a:b]
        if not text:
            return
        i = 0
        if top and not quoted and text[0] == "~" and self.home and (len(text) == 1 or text[1] == "/"):
            self._lit(self.home, None)
            i = 1
        run = i
        while i < len(text):
            c = text[i]
            if c == "\\" and i + 1 < len(text) and (not quoted or text[i + 1] in '$`"\\\n'):
                self._lit(text[run:i], self._span(a + run, a + i))
                nxt = text[i + 1]
                if nxt != "\n":
                    self._lit(nxt, self._span(a + i + 1, a + i + 2))
                i += 2
                run = i
                continue
            i += 1
        self._lit(text[run:], self._span(a + run, b))

    def _ref(self, name: str) -> EnvVar | None:
        self.out.refs.append(name)
        var = self.lookup(name)
        if (var is not None and var.varies) or (self.per_task and name in RANK_VARS):
            self.out.varies = True
        return var

    def _var_pieces(self, var: EnvVar) -> tuple[Piece, ...]:
        assert var.value is not None
        if var.site is not None:
            self.out.via.append(var.site)
        if var.items is not None:
            first = var.items[0] if var.items else ""
            pieces = var.item_pieces[0] if var.item_pieces else ()
            return pieces if "".join(p.text for p in pieces) == first else (Piece(first),)
        if var.pieces and "".join(p.text for p in var.pieces) == var.value:
            return var.pieces
        return (Piece(var.value),)

    def _positional(self, name: str, node: Node, quoted: bool) -> bool:
        """$1..$9, $@, $*, $#: from the caller's arguments when known."""
        if name == "0":
            self._value((Piece(self.src.path),), quoted)
            return True
        if self.args is None:
            return False
        if name == "#":
            self._value((Piece(str(len(self.args))),), quoted)
        elif name.isdigit():
            k = int(name)
            if 0 < k <= len(self.args):
                self._arg(self.args[k - 1], quoted)
            else:
                self.started = self.started or quoted
        elif name in ("@", "*"):
            if name == "*" and quoted:
                for k, arg in enumerate(self.args):
                    if k:
                        self._lit(" ", None)
                    self._arg(arg, quoted=True)
                self.started = True
                return True
            for k, arg in enumerate(self.args):
                if k:
                    self._flush()
                self._arg(arg, quoted)
        else:
            return False
        return True

    def _arg(self, arg: Word, quoted: bool) -> None:
        self.out.known = self.out.known and arg.known
        self.out.varies = self.out.varies or arg.varies
        self.out.via.extend(arg.via)
        self._value(arg.pieces or (Piece(arg.text, arg.span),), quoted)

    def _simple(self, node: Node, quoted: bool) -> None:
        name = self.src.text_of(node)[1:]
        if self._positional(name, node, quoted):
            return
        if not (name[:1].isalpha() or name[:1] == "_"):
            self.out.refs.append(name)
            self._unknown(node)
            return
        var = self._ref(name)
        if var is None or var.value is None:
            self._unknown_var(node, var)
        else:
            self._value(self._var_pieces(var), quoted)

    def _param(self, node: Node, quoted: bool) -> None:
        raw = self.src.text_of(node)
        body = raw[2:-1]
        kids = [c for c in node.children if c.type not in ("${", "}")]
        if body.startswith(("#", "!")) and len(body) > 1:
            name = body[1:]
            if body[0] == "#" and (name.isidentifier() or name.isdigit()):
                var = self._ref(name) if name.isidentifier() else None
                if var is not None and var.value is not None:
                    self._value((Piece(str(len(var.value))),), quoted)
                    return
            self._unknown(node)
            return
        name_len = 0
        if body[:1] in ("@", "*", "#"):
            name_len = 1
        elif body[:1].isdigit():
            while name_len < len(body) and body[name_len].isdigit():
                name_len += 1
        else:
            while name_len < len(body) and (body[name_len].isalnum() or body[name_len] == "_"):
                name_len += 1
        name, rest = body[:name_len], body[name_len:]
        if not name:
            self._unknown(node)
            return
        if rest in ("[@]", "[*]", "[0]") or (rest.startswith("[") and rest[1:-1].isdigit()):
            self._subscript(node, name, rest, quoted)
            return
        positional = name.isdigit() or name in ("@", "*", "#")
        if rest == "":
            if positional and self._positional(name, node, quoted):
                return
            var = None if positional else self._ref(name)
            if var is not None and var.value is not None:
                self._value(self._var_pieces(var), quoted)
            else:
                self._unknown_var(node, var)
            return
        for op in (":-", "-", ":=", "=", ":+", "+"):
            if rest.startswith(op):
                value = self._param_value(name, positional)
                use_default = value is None or (value == "" and ":" in op)
                if op in (":+", "+"):
                    if value is None and not positional and self.lookup(name) is not None:
                        self._unknown(node)  # set, but to something not known statically
                    elif not use_default:
                        self._operand(kids, quoted)
                    else:
                        self.started = self.started or quoted
                    return
                if value is not None and not use_default:
                    self._param_insert(name, positional, quoted)
                elif value is None and not positional and self.lookup(name) is not None:
                    self._unknown(node)  # set, but to something not known statically
                else:
                    fields, at, known = len(self.out.fields), len(self.cur), self.out.known
                    self._operand(kids, quoted)
                    if op in (":=", "=") and not positional and self.assign is not None \
                            and len(self.out.fields) == fields:  # one field: the value X is set to
                        self.assign(name, tuple(self.cur[at:]), known == self.out.known)
                return
        self._unknown(node)

    def _param_value(self, name: str, positional: bool) -> str | None:
        if positional:
            if self.args is None or not name.isdigit():
                return None
            k = int(name)
            return self.args[k - 1].text if 0 < k <= len(self.args) else None
        var = self._ref(name)
        return var.value if var is not None else None

    def _param_insert(self, name: str, positional: bool, quoted: bool) -> None:
        if positional:
            assert self.args is not None
            self._arg(self.args[int(name) - 1], quoted)
            return
        var = self.lookup(name)
        assert var is not None and var.value is not None
        self._value(self._var_pieces(var), quoted)

    def _operand(self, kids: list[Node], quoted: bool) -> None:
        """The word after `:-` in `${X:-word}`, expanded in place."""
        seen_op = False
        for k in kids:
            if not k.is_named:
                seen_op = seen_op or k.type in (":-", "-", ":=", "=", ":+", "+")
                continue
            if seen_op:
                self._node(k, quoted)
        self.started = True

    def _subscript(self, node: Node, name: str, rest: str, quoted: bool) -> None:
        var = self._ref(name)
        if var is None or var.items is None:
            if var is not None and var.value is not None and rest in ("[0]", "[@]", "[*]"):
                self._value(self._var_pieces(var), quoted)
            else:
                self._unknown(node)
            return
        if var.site is not None:
            self.out.via.append(var.site)
        pieces = [var.item_pieces[k] if k < len(var.item_pieces) and
                  "".join(p.text for p in var.item_pieces[k]) == item else (Piece(item),)
                  for k, item in enumerate(var.items)]
        if rest[1:-1].isdigit():
            k = int(rest[1:-1])
            if k < len(pieces):
                self._value(pieces[k], quoted)
            return
        if rest == "[*]" and quoted:
            for k, item in enumerate(pieces):
                if k:
                    self._lit(" ", None)
                self._value(item, True)
            return
        for k, item in enumerate(pieces):
            if k:
                self._flush()
            self._value(item, quoted)

    def _substitution(self, node: Node, quoted: bool) -> None:
        raw = self.src.text_of(node)
        inner = (raw[2:-1] if raw.startswith("$(") else raw[1:-1]).strip()
        words = inner.split()
        flat = inner.replace('"', "").replace("'", "")
        if len(words) == 2 and words[0] == "which":
            self._value((Piece(words[1]),), quoted)
        elif len(words) == 3 and words[:2] in (["command", "-v"], ["type", "-P"]):
            self._value((Piece(words[2]),), quoted)
        elif "dirname" in flat and ("$0" in flat or "BASH_SOURCE" in flat):
            self._value((Piece(os.path.dirname(self.src.path)),), quoted)
        elif flat.strip() == "pwd" and self.cwd:
            self._value((Piece(self.cwd),), quoted)
        else:
            self._unknown(node)


def expand_text(raw: str, lookup: Lookup, *, home: str | None = None, path: str = "<word>") -> Expansion:
    """Expand one shell word given as text (`"$HOME/x"`), as the walker would in a command."""
    src = Source(path, ": " + raw)
    cmd = src.root.children[0] if src.root.children else None
    nodes = [c for c in (cmd.children if cmd is not None else []) if c.is_named and c.type != "command_name"]
    out = Expansion()
    for node in nodes:
        exp = Expander(src, lookup, None, home=home).expand(node)
        out.fields.extend(exp.fields)
        out.known = out.known and exp.known
        out.refs.extend(exp.refs)
    return out

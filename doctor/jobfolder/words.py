"""Shell word expansion, statically: quotes, parameters, arrays, arithmetic, word splitting.

What cannot be known before the job runs (a command substitution, a
variable nobody set) stays as written and marks the result unknown, so a
value is never guessed. `$(which X)` and `$(command -v X)` expand to `X`:
what a launcher line means does not depend on where X lives.
"""

from __future__ import annotations

import ast
import operator
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from doctor.jobfolder.model import EnvVar
from doctor.limits import MAX_EXPANSION_DEPTH, MAX_VALUE_CHARS

RANK_VARS = frozenset({
    "RANK", "LOCAL_RANK", "SLURM_PROCID", "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "FLUX_TASK_RANK",
    "PALS_RANKID", "GROUP_RANK",
})

Lookup = Callable[[str], "EnvVar | None"]


@dataclass
class Expanded:
    """The fields a word expands to; `known` is False if any part is not statically known."""

    fields: list[str] = field(default_factory=list)
    known: bool = True
    refs: list[str] = field(default_factory=list)
    varies: bool = False

    @property
    def value(self) -> str:
        return " ".join(self.fields)


class _Unknown(Exception):
    pass


def match_close(text: str, i: int, open_ch: str, close_ch: str) -> int:
    """Index of the `close_ch` that balances the `open_ch` at `text[i]` (quote-aware); len if none."""
    depth = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "'" and open_ch != "'":
            j = text.find("'", i + 1)
            i = n if j < 0 else j + 1
            continue
        if c == '"' and open_ch != '"':
            i = skip_dq(text, i)
            continue
        if c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return n


def skip_dq(text: str, i: int) -> int:
    """Index just after the double-quoted string starting at text[i]."""
    i += 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            return i + 1
        if c == "$" and text.startswith("$(", i):
            i = match_close(text, i + 1, "(", ")") + 1
            continue
        i += 1
    return n


class Expander:
    """Expands one word against an environment lookup."""

    def __init__(self, lookup: Lookup, per_task: bool = False, split: bool = True,
                 home: str | None = None, script: str | None = None, cwd: str | None = None,
                 depth: int = 0):
        self.lookup = lookup
        self.depth = depth
        self.per_task = per_task
        self.split = split
        self.home = home
        self.script = script
        self.cwd = cwd

    def _script_dir(self, inner: str) -> str | None:
        """`$(dirname "$0")`, `$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)`, `$(pwd)`: known folders."""
        flat = inner.replace('"', "").replace("'", "")
        if self.script and "dirname" in flat and ("$0" in flat or "BASH_SOURCE" in flat):
            return os.path.dirname(self.script)
        if self.cwd and flat.strip() == "pwd":
            return self.cwd
        return None

    def expand(self, raw: str) -> Expanded:
        out = self._expand(raw)
        if any(len(f) > MAX_VALUE_CHARS for f in out.fields):  # `X="$X$X"` in a loop: stop growing
            return Expanded(fields=[raw], known=False, refs=out.refs, varies=out.varies)
        return out

    def _expand(self, raw: str) -> Expanded:
        self.out = Expanded()
        self.cur: list[str] = []
        self.started = False
        i = 0
        n = len(raw)
        while i < n:
            c = raw[i]
            if c == "'":
                j = raw.find("'", i + 1)
                j = n if j < 0 else j
                self._lit(raw[i + 1:j])
                i = j + 1
            elif c == '"':
                end = skip_dq(raw, i)
                self._dq(raw[i + 1:end - 1 if end <= n and raw[end - 1:end] == '"' else end])
                i = end
            elif c == "\\":
                self._lit(raw[i + 1:i + 2])
                i += 2
            elif c == "$":
                i = self._dollar(raw, i, quoted=False)
            elif c == "`":
                j = raw.find("`", i + 1)
                j = n if j < 0 else j
                self._unknown(raw[i:j + 1], quoted=False)
                i = j + 1
            elif c == "~" and i == 0 and self.home and (n == 1 or raw[1] == "/"):
                self._lit(self.home)
                i += 1
            else:
                self._lit(c)
                i += 1
        if self.cur or self.started:
            self.out.fields.append("".join(self.cur))
        return self.out

    # -- pieces -----------------------------------------------------------
    def _lit(self, s: str) -> None:
        self.cur.append(s)
        self.started = True

    def _flush(self) -> None:
        if self.cur or self.started:
            self.out.fields.append("".join(self.cur))
        self.cur = []
        self.started = False

    def _value(self, val: str, quoted: bool) -> None:
        if quoted or not self.split:
            self._lit(val)
            return
        parts = val.split()
        if not parts:
            return
        if val[:1].isspace():
            self._flush()
        self._lit(parts[0])
        for p in parts[1:]:
            self._flush()
            self._lit(p)
        if val[-1:].isspace():
            self._flush()

    def _unknown(self, raw: str, quoted: bool) -> None:
        self.out.known = False
        self._lit(raw)

    def _ref(self, name: str) -> EnvVar | None:
        self.out.refs.append(name)
        var = self.lookup(name)
        if (var is not None and var.varies) or (self.per_task and name in RANK_VARS):
            self.out.varies = True
        return var

    def _dq(self, body: str) -> None:
        self.started = True
        i = 0
        n = len(body)
        while i < n:
            c = body[i]
            if c == "\\" and i + 1 < n and body[i + 1] in '$`"\\\n':
                self._lit(body[i + 1] if body[i + 1] != "\n" else "")
                i += 2
            elif c == "$":
                i = self._dollar(body, i, quoted=True)
            elif c == "`":
                j = body.find("`", i + 1)
                j = n if j < 0 else j
                self._unknown(body[i:j + 1], quoted=True)
                i = j + 1
            else:
                self._lit(c)
                i += 1

    def _dollar(self, s: str, i: int, quoted: bool) -> int:
        n = len(s)
        nxt = s[i + 1] if i + 1 < n else ""
        if s.startswith("$((", i):
            end = match_close(s, i + 1, "(", ")")
            expr = s[i + 3:end - 1]
            try:
                self._value(str(self.arith(expr)), quoted)
            except _Unknown:
                self._unknown(s[i:end + 1], quoted)
            return end + 1
        if nxt == "(":
            end = match_close(s, i + 1, "(", ")")
            inner = s[i + 2:end].strip()
            words = inner.split()
            here = self._script_dir(inner)
            if len(words) == 2 and words[0] in ("which", "command -v"):
                self._value(words[1], quoted)
            elif len(words) == 3 and (words[:2] == ["command", "-v"] or words[:2] == ["type", "-P"]):
                self._value(words[2], quoted)
            elif here is not None:
                self._value(here, quoted)
            else:
                self._unknown(s[i:end + 1], quoted)
            return end + 1
        if nxt == "{":
            end = match_close(s, i + 1, "{", "}")
            self._param(s[i + 2:end], s[i:end + 1], quoted)
            return end + 1
        if nxt == "'" and not quoted:
            j = s.find("'", i + 2)
            j = n if j < 0 else j
            self._lit(s[i + 2:j].encode("latin-1", "backslashreplace").decode("unicode_escape", "replace"))
            return j + 1
        if nxt.isalpha() or nxt == "_":
            j = i + 1
            while j < n and (s[j].isalnum() or s[j] == "_"):
                j += 1
            self._simple(s[i + 1:j], s[i:j], quoted)
            return j
        if nxt and (nxt.isdigit() or nxt in "@*#?$!-"):
            self.out.refs.append(nxt)
            self._unknown(s[i:i + 2], quoted)
            return i + 2
        self._lit("$")
        return i + 1

    def _simple(self, name: str, raw: str, quoted: bool) -> None:
        var = self._ref(name)
        if var is None or var.value is None:
            self._unknown(raw, quoted)
        elif var.items is not None:
            self._value(var.items[0] if var.items else "", quoted)
        else:
            self._value(var.value, quoted)

    def _param(self, body: str, raw: str, quoted: bool) -> None:
        j = 0
        if body.startswith("#"):
            self._unknown(raw, quoted)
            return
        while j < len(body) and (body[j].isalnum() or body[j] == "_"):
            j += 1
        name, rest = body[:j], body[j:]
        if not name:
            self._unknown(raw, quoted)
            return
        var = self._ref(name)
        if rest in ("[@]", "[*]"):
            if var is None or var.items is None:
                self._unknown(raw, quoted)
                return
            if rest == "[*]" and quoted:
                self._lit(" ".join(var.items))
                return
            for k, item in enumerate(var.items):
                if k:
                    self._flush()
                self._value(item, quoted)
            return
        if rest == "":
            if var is not None and var.value is not None:
                self._value(var.items[0] if var.items else var.value, quoted)
            else:
                self._unknown(raw, quoted)
            return
        for op in (":-", "-", ":=", "="):
            if rest.startswith(op):
                if var is not None and var.value is not None and (var.value != "" or ":" not in op):
                    self._value(var.value, quoted)
                elif var is None and self.depth >= MAX_EXPANSION_DEPTH:
                    self._unknown(raw, quoted)  # `${a:-${b:-${c:-...}}}` a thousand deep: not followed
                elif var is None:
                    sub = Expander(self.lookup, self.per_task, split=False, home=self.home,
                                   depth=self.depth + 1).expand(rest[len(op):])
                    self.out.known = self.out.known and sub.known
                    self.out.refs.extend(sub.refs)
                    self.out.varies = self.out.varies or sub.varies
                    self._value(sub.value, quoted)
                else:
                    self._unknown(raw, quoted)
                return
        self._unknown(raw, quoted)

    def arith(self, expr: str) -> int:
        """Integer arithmetic as in `$(( ))`, over variables with known integer values."""
        return arith(expr, lambda name: self._ref(name))


_OPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Mod: lambda a, b: int(__import__("math").fmod(a, b)),
    ast.Div: lambda a, b: int(a / b), ast.FloorDiv: lambda a, b: int(a / b), ast.Pow: operator.pow,
}


def arith(expr: str, lookup: Callable[[str], EnvVar | None]) -> int:
    text = expr.replace("$", "").strip()
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise _Unknown() from None

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            var = lookup(node.id)
            if var is None or var.value is None:
                raise _Unknown()
            try:
                return int(var.value.strip() or "0", 10)
            except ValueError:
                raise _Unknown() from None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and b == 0:
                raise _Unknown()
            if isinstance(node.op, ast.Pow) and (b < 0 or b > 64):
                raise _Unknown()
            return _OPS[type(node.op)](a, b)
        raise _Unknown()

    return ev(tree.body)


def try_arith(expr: str, lookup: Callable[[str], EnvVar | None]) -> int | None:
    try:
        return arith(expr, lookup)
    except _Unknown:
        return None


def expand(raw: str, lookup: Lookup, *, split: bool = True, per_task: bool = False,
           home: str | None = None, script: str | None = None, cwd: str | None = None) -> Expanded:
    """Expand one shell word (its source text, quotes included) in the script `script`."""
    return Expander(lookup, per_task, split, home, script, cwd).expand(raw)

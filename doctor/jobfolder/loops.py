"""How many times a loop runs, when the script says it statically: the rank count of a per-rank loop."""

from __future__ import annotations

import re
from collections.abc import Callable

from doctor.jobfolder.arith import try_arith
from doctor.jobfolder.expand import Expansion, Lookup
from doctor.jobfolder.syntax import Node, Source, named


def words_of(cmd: Node | None) -> list[Node]:
    """The word nodes of a command (its name, then its arguments), without assignments or redirections."""
    if cmd is None:
        return []
    out = []
    for c in cmd.children:
        if c.type == "command_name":
            out.extend(named(c)[:1] or [c])
        elif c.is_named and c.type not in ("variable_assignment", "file_redirect", "herestring_redirect",
                                             "heredoc_redirect", "comment"):
            out.append(c)
    return out


def cfor_count(node: Node, src: Source, lookup: Lookup) -> int | None:
    """Iterations of `for ((i = A; i < B; i++))` when A and B are known."""
    parts = [node.child_by_field_name(f) for f in ("initializer", "condition", "update")]
    if any(p is None for p in parts):
        return None
    init, cond, step = (src.text_of(p) for p in parts)
    m = re.fullmatch(r"\s*\w+\s*=\s*(.+)", init)
    c = re.fullmatch(r"\s*\$?(\w+)\s*(<=|<)\s*(.+)", cond)
    step_ok = re.fullmatch(r"\s*(\+\+\s*\w+|\w+\s*\+\+|\w+\s*\+=\s*1|\w+\s*=\s*\w+\s*\+\s*1)\s*", step)
    if not (m and c and step_ok):
        return None
    lo = try_arith(m.group(1), lookup)
    hi = try_arith(c.group(3), lookup)
    if lo is None or hi is None:
        return None
    return max(0, hi - lo + (1 if c.group(2) == "<=" else 0))


def items_count(items: list[Node], src: Source, lookup: Lookup, expand: Callable[..., Expansion]) -> int | None:
    """Iterations of `for x in ITEMS` (`0 1 2`, `{0..7}`, `$(seq 0 $((N-1)))`, `"${ARR[@]}"`), when known."""
    total = 0
    for item in items:
        raw = src.text_of(item).strip()
        if item.type == "command_substitution":
            inner = named(item)
            cmd = inner[0] if len(inner) == 1 and inner[0].type == "command" else None
            words = [expand(w, split=False) for w in words_of(cmd)] if cmd else []
            if words and words[0].value == "seq":
                nums = [try_arith(a.value, lookup) if a.known else None for a in words[1:]]
                if any(v is None for v in nums) or not 1 <= len(nums) <= 3:
                    return None
                vals = [int(v) for v in nums if v is not None]
                lo, step, hi = (1, 1, vals[0]) if len(vals) == 1 else (
                    (vals[0], 1, vals[1]) if len(vals) == 2 else (vals[0], vals[1], vals[2]))
                total += len(range(lo, hi + 1, step)) if step else 0
                continue
            return None
        brace = re.fullmatch(r"\{(-?\d+)\.\.(-?\d+)\}", raw)
        if brace:
            lo, hi = int(brace.group(1)), int(brace.group(2))
            total += abs(hi - lo) + 1
            continue
        exp = expand(item)
        if not exp.known:
            return None
        total += len(exp.fields)
    return total


_WHILE_TEST = re.compile(r"""\s*(?:\[\[?\s*"?\$\{?([A-Za-z_]\w*)\}?"?\s+-(lt|le|ge|gt)\s+"?([^\s"\]]+)"?\s*\]\]?"""
                         r"""|\(\(\s*\$?([A-Za-z_]\w*)\s*(<=|<|>=|>)\s*([^)]+?)\s*\)\))\s*;?\s*""")
_UNTIL = {"ge": "lt", "gt": "le", ">=": "<", ">": "<="}  # `until [ $i -ge N ]` is `while [ $i -lt N ]`


def counter_loop(cond: str, body: str, lookup: Lookup, until: bool = False) -> tuple[str, int | None] | None:
    """(variable, iterations or None) of `while [ $i -lt N ]` / `while (( i < N ))` / `until [ $i -ge N ]`
    whose body adds 1 to i (`i=$((i+1))`, `((i++))`, `let i++`, `i+=1` in arithmetic); None for any other loop."""
    m = _WHILE_TEST.fullmatch(cond)
    if m is None:
        return None
    var, op, hi_text = (m.group(1), m.group(2), m.group(3)) if m.group(1) else (m.group(4), m.group(5), m.group(6))
    if (op in _UNTIL) != until:
        return None
    op = _UNTIL.get(op, op)
    v = re.escape(var)
    step = re.search(rf"\b{v}=\$\(\(\s*\$?{v}\s*\+\s*1\s*\)\)|\(\(\s*(?:{v}\s*(?:\+\+|\+=\s*1)|\+\+\s*{v})\s*\)\)"
                     rf"|\blet\s+[\"']?(?:{v}\+\+|\+\+{v}|{v}\+=1|{v}={v}\+1)(?!\w)|\$\(\(\s*{v}\s*\+\+\s*\)\)", body)
    if step is None:
        return None
    old = lookup(var)
    lo = try_arith(old.value, lookup) if old is not None and old.value is not None else None
    hi = try_arith(hi_text, lookup)
    if lo is None or hi is None:
        return var, None
    return var, max(0, hi - lo + (1 if op in ("le", "<=") else 0))

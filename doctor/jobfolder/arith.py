"""Shell arithmetic (`$(( ))`, loop bounds) over variables with known integer values, statically."""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable

from doctor import pyast
from doctor.jobfolder.model import EnvVar

_DEFAULT_RE = re.compile(r"\$\{([A-Za-z_]\w*)(:?)-(\d+)\}")


class _Unknown(Exception):
    pass


_OPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Mod: lambda a, b: int(__import__("math").fmod(a, b)),
    ast.Div: lambda a, b: int(a / b), ast.FloorDiv: lambda a, b: int(a / b), ast.Pow: operator.pow,
}


def arith(expr: str, lookup: Callable[[str], EnvVar | None]) -> int:
    """Integer arithmetic as in `$(( ))`, over variables with known integer values."""
    def default(m: re.Match[str]) -> str:  # `${N:-4}`: N's value when set and not empty, else 4
        var = lookup(m.group(1))
        if var is None or (var.value == "" and m.group(2)):
            return m.group(3)
        return m.group(1)

    text = _DEFAULT_RE.sub(default, expr)
    text = text.replace("$", "").replace("{", "").replace("}", "").strip()
    try:
        tree = pyast.parse(text, mode="eval")
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

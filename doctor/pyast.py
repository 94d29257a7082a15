"""`ast.parse` that threads can share.

CPython before 3.12.5/3.13 keeps the AST-to-object conversion's recursion counter per
interpreter, not per thread: two threads parsing at once (the runner gathers facts in
parallel; the app's workers run beside it) can fail with "SystemError: AST constructor
recursion depth mismatch" (CPython gh-106905), which made a check `unknown` at random.
One lock serialises the parses; each is bounded by the size caps of doctor.limits.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_PARSING = threading.Lock()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> Any:
    """`ast.parse(source, filename, mode)`, one thread at a time."""
    with _PARSING:
        return ast.parse(source, filename=filename, mode=mode)

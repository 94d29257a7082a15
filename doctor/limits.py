"""The bounds gpu-doctor puts on hostile or damaged input, in one place.

Readers, parsers and the shell model call these at their entry points, so a
YAML alias bomb, a job script that doubles a variable 60 times, `${...}`
nested a thousand deep or a 4 MB `train.py` becomes a named problem instead
of a hang, a MemoryError or a RecursionError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MAX_FILE_BYTES = 4 * 1024 * 1024        # one user file read whole (scripts, configs, cfg, manifests)
MAX_JSON_BYTES = 16 * 1024 * 1024       # a gpu-doctor JSON verdict given to --findings
MAX_PYTHON_BYTES = 1024 * 1024          # a training script analysed with libcst
MAX_PYTHON_SECONDS = 10.0               # ... and the time its analysis may take
MAX_YAML_NODES = 100_000                # a trainer config, counting every alias's expansion
MAX_VALUE_CHARS = 64 * 1024             # one shell variable's expanded value
MAX_EXPANSION_DEPTH = 64                # nested ${...} / $(...) while expanding one word
MAX_EXPANSIONS = 200_000                # variable expansions while reading one job folder
MAX_SITE_CHARS = 2000                   # the text of one line kept as a command's site (evidence)


class LimitExceeded(Exception):
    """Input over one of the bounds; the message names the bound (and the file, where known)."""


@dataclass
class ExpansionBudget:
    """Shell expansion bounds shared by one job folder's reading: length, depth and count."""

    max_chars: int = MAX_VALUE_CHARS
    max_depth: int = MAX_EXPANSION_DEPTH
    max_count: int = MAX_EXPANSIONS
    count: int = 0
    depth: int = 0

    def value(self, text: str, name: str = "") -> str:
        """`text` if it is within the length bound; LimitExceeded otherwise."""
        self.count += 1
        if self.count > self.max_count:
            raise LimitExceeded(f"more than {self.max_count} variable expansions; not expanded further")
        if len(text) > self.max_chars:
            what = f"${name}" if name else "a value"
            raise LimitExceeded(f"{what} grows past {self.max_chars // 1024} KiB when expanded "
                                "(a variable doubled in a loop?); not expanded")
        return text

    def enter(self) -> None:
        self.depth += 1
        if self.depth > self.max_depth:
            self.depth = 0
            raise LimitExceeded(f"expansions nested more than {self.max_depth} deep; not expanded")

    def leave(self) -> None:
        self.depth = max(0, self.depth - 1)


def bounded_yaml(text: str, max_nodes: int = MAX_YAML_NODES) -> Any:
    """`yaml.safe_load`, refusing documents whose aliases expand past `max_nodes` nodes."""
    import yaml

    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _count_nodes(node, max_nodes)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _count_nodes(root: Any, max_nodes: int) -> None:
    """Total nodes with every alias expanded, computed once per node (an alias bomb is a DAG)."""
    import yaml

    sizes: dict[int, int] = {}
    entered: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:  # iterative post-order: deep nesting must not hit the recursion limit
        node, done = stack.pop()
        if done:
            total = 1 + sum(sizes[id(k)] for k in _children(node, yaml))
            sizes[id(node)] = total
            if total > max_nodes:
                raise LimitExceeded(f"YAML aliases expand to more than {max_nodes} nodes "
                                    "(an alias bomb?); not loaded")
            continue
        if id(node) in sizes:
            continue
        if id(node) in entered:
            raise LimitExceeded("a YAML alias refers to itself (a recursive document); not loaded")
        entered.add(id(node))
        stack.append((node, True))
        for kid in _children(node, yaml):
            if id(kid) not in sizes:
                stack.append((kid, False))


def _children(node: Any, yaml: Any) -> list[Any]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


MAX_SHELL_NESTING = 100                 # if/for/while/case/{ nested in one job script

_OPENERS = frozenset({"if", "for", "while", "until", "case", "select", "{", "(", "function"})
_CLOSERS = frozenset({"fi", "done", "esac", "}", ")"})


def shell_nesting(text: str) -> int:
    """How deep compound commands nest in a shell script (a cheap count of line-leading keywords).

    bashlex recurses once per level: thousands of nested `if` blocks exhaust the
    stack, and the statement-by-statement fallback then takes minutes.
    """
    depth = deepest = 0
    for line in text.splitlines():
        for command in _COMMAND_SEP.split(line):  # `if ...; then ...; fi` on one line opens and closes
            for word in command.split():
                if word in _OPENERS:
                    depth += 1
                    deepest = max(deepest, depth)
                elif word in _CLOSERS:
                    depth = max(0, depth - 1)
                elif word not in ("then", "do", "else", "elif", "!"):
                    break  # only the words that start a command can open or close a block
    return deepest


_COMMAND_SEP = re.compile(r";|&&|\|\||\||&")


_reading: dict[int, str] = {}


def note_reading(path: str) -> None:
    """Record the file this thread is reading now (named if the probe fails or runs out of time)."""
    import threading

    _reading[threading.get_ident()] = path


def reading(thread: int | None = None) -> str | None:
    """The file `thread` (default: this one) was reading last."""
    import threading

    return _reading.get(threading.get_ident() if thread is None else thread)


_BOUND_PROBLEM = re.compile(r"limit for analysis|above the [\d.]+ MiB limit|nested (more than|too)|"
                            r"not a regular file|FIFO|device|socket|a symlink|YAML alias")


def bound_problem(problem: str | None) -> bool:
    """Whether a file was not analysed because it is hostile or over a bound (not merely odd)."""
    return bool(problem) and bool(_BOUND_PROBLEM.search(problem or ""))

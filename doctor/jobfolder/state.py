"""The shell's state while the walker runs a script: variables, functions, arguments, context."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from doctor.jobfolder.model import Command, EnvVar, Loop, Word, Wrapper
from doctor.jobfolder.syntax import Node, Source


@dataclass
class ShellState:
    """The shell's variables, options, functions and positional parameters while a script runs."""

    vars: dict[str, EnvVar]
    cwd: str
    allexport: bool = False
    functions: dict[str, tuple[Node, Source]] = field(default_factory=dict)
    per_task: bool = False
    args: tuple[Word, ...] | None = None  # None: the script's arguments are not known
    parent: Command | None = None
    refs: dict[str, str] = field(default_factory=dict)  # `declare -n REF=NAME`: REF -> NAME
    opaque: EnvVar | None = None  # where the script set variables whose names it did not spell

    def copy(self) -> ShellState:
        return ShellState(dict(self.vars), self.cwd, self.allexport, dict(self.functions), self.per_task,
                          self.args, self.parent, dict(self.refs), self.opaque)


@dataclass
class Ctx:
    src: Source
    state: ShellState
    flow: int
    depth: int = 0
    loop: Loop | None = None
    background: bool = False
    condition: bool = False
    wrappers: tuple[Wrapper, ...] = ()
    heredoc: tuple[str, int, Any] | None = None  # (body, line of its first line, its span) for the command
    top: tuple[str, int] | None = None  # (file, line) of the top-level statement being walked
    nesting: int = 0  # statements the walk is inside

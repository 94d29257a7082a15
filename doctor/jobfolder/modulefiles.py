"""Modulefiles a job loads from its own folder (`module use ./modulefiles; module load scorep-job`):
the variables they set, each at its file:line, without Lmod.

Lmod's Lua (`setenv("SCOREP_TOTAL_MEMORY", "8G")`, `pushenv(...)`) and Tcl (`setenv NAME value`)
spellings; a module is found as `DIR/NAME.lua`, `DIR/NAME` (a file), or the highest version in
`DIR/NAME/` (its `default`, else the last in version order). Only folders inside the job folder are
searched: a system module (`module load cuda`) is not the job's to read.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from doctor.jobfolder.model import Span

_LUA = re.compile(r"""^[ \t]*(?:setenv|pushenv)[ \t]*\([ \t]*(["'])([A-Za-z_]\w*)\1[ \t]*,[ \t]*(["'])(.*?)\3""", re.M)
_TCL = re.compile(r"""^[ \t]*setenv[ \t]+([A-Za-z_]\w*)[ \t]+(?:"([^"\n]*)"|\{([^}\n]*)\}|([^\s;#]+))""", re.M)


@dataclass(frozen=True)
class ModuleSetting:
    """One `setenv` of a modulefile: the name, the value and where the value is written."""

    name: str
    value: str
    line: int
    text: str  # the line
    span: Span


def find(name: str, dirs: list[str]) -> str | None:
    """The modulefile `module load NAME` reads from `dirs` (in MODULEPATH order), or None."""
    for d in dirs:
        stem = os.path.join(d, name)
        for cand in (stem + ".lua", stem):
            if os.path.isfile(cand):
                return os.path.normpath(cand)
        if os.path.isdir(stem):
            try:
                entries = [e for e in os.listdir(stem) if not e.startswith(".")]
            except OSError:
                continue
            files = [e for e in entries if os.path.isfile(os.path.join(stem, e))]
            if not files:
                continue
            pick = "default" if "default" in files else max(files, key=_version_key)
            return os.path.normpath(os.path.join(stem, pick))
    return None


def _version_key(name: str) -> tuple[tuple[int, str], ...]:
    stem = name[:-4] if name.endswith(".lua") else name
    return tuple((int(p), "") if p.isdigit() else (-1, p) for p in re.split(r"[.\-_]", stem))


def settings(path: str, text: str) -> list[ModuleSetting]:
    """The `setenv`s of a modulefile, Lua (`.lua`, or `setenv(` calls) or Tcl."""
    lua = path.endswith(".lua") or re.search(r"^\s*(?:setenv|pushenv)\s*\(", text, re.M) is not None
    out: list[ModuleSetting] = []
    for m in (_LUA if lua else _TCL).finditer(text):
        if lua:
            name, group = m.group(2), 4
        else:
            name = m.group(1)
            group = next(g for g in (2, 3, 4) if m.group(g) is not None)
        start, end = m.start(group), m.end(group)
        out.append(ModuleSetting(name, m.group(group), _line(text, start), _line_text(text, start),
                                 _span(path, text, start, end)))
    return out


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _line_text(text: str, pos: int) -> str:
    a = text.rfind("\n", 0, pos) + 1
    b = text.find("\n", pos)
    return text[a:b if b >= 0 else len(text)]


def _span(path: str, text: str, start: int, end: int) -> Span:
    col = start - (text.rfind("\n", 0, start) + 1) + 1
    end_col = end - (text.rfind("\n", 0, end) + 1) + 1
    return Span(path, start, end, _line(text, start), col, _line(text, end), end_col)

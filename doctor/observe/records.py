"""The shims' records (sh/record.sh), read back: one `Record` per recorded command, in the order
they ran, and the observed launches they make (one per file:line, its tasks grouped)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

MAX_RECORDS = 2000
MAX_RECORD_BYTES = 1024 * 1024
LAUNCHERS = ("python", "pypy", "torchrun", "accelerate", "deepspeed")
CONTROL = ("GD_", "__GD_", "BASH_ENV", "SHLVL", "_", "OLDPWD", "PWD")


@dataclass(frozen=True)
class Record:
    id: str
    tool: str
    own: int  # argv words that are the tool's own; the rest is the command it runs
    file: str
    line: int
    cwd: str
    parent: str
    task: str
    background: bool
    argv: tuple[str, ...]
    approx: bool  # in a `bash -c` string: the line is counted from its caller's, near the right one
    env: dict[str, str] = field(hash=False, compare=False)
    sites: dict[str, tuple[str, int]] = field(hash=False, compare=False)  # variable -> where it was set

    @property
    def launches(self) -> bool:
        return self.tool.startswith(LAUNCHERS)


def _site(text: str) -> tuple[str, int]:
    path, _, line = text.rstrip("~").rpartition(":")
    try:
        return path, int(line)
    except ValueError:
        return text, 0


def parse(data: bytes, rid: str, bindir: str = "") -> Record | None:
    fields = data.split(b"\0")
    if len(fields) < 10 or fields[0] != b"gd1":
        return None
    text = [f.decode("utf-8", "surrogateescape") for f in fields]
    try:
        own, argc = int(text[2]), int(text[8])
    except ValueError:
        return None
    argv = tuple(os.path.basename(a) if bindir and a.startswith(bindir + "/") else a  # `$(which torchrun)`
                 for a in text[9:9 + argc])
    env: dict[str, str] = {}
    for item in text[9 + argc:]:
        name, eq, value = item.partition("=")
        if eq and not name.startswith(CONTROL):
            env[name] = value
    sites: dict[str, tuple[str, int]] = {}
    raw = dict(x.partition("=")[::2] for x in fields_of(text, "__GD_SITES=").split("\x1f") if "=" in x)
    for name, where in raw.items():
        sites[name] = _site(where)
    path, line = _site(text[3])
    return Record(rid, text[1], own, path, line, text[4], text[5], text[6], text[7] == "1", argv,
                  text[3].endswith("~"), env, sites)


def fields_of(text: list[str], prefix: str) -> str:
    return next((t[len(prefix):] for t in text if t.startswith(prefix)), "")


def read_all(recdir: str, bindir: str = "") -> tuple[list[Record], bool]:
    """The records in the order they were made, and whether some were left out (too many)."""
    names = sorted(n for n in os.listdir(recdir) if n.endswith(".rec"))
    cut = len(names) > MAX_RECORDS
    out = []
    for name in names[:MAX_RECORDS]:
        try:
            with open(os.path.join(recdir, name), "rb") as f:
                data = f.read(MAX_RECORD_BYTES)
        except OSError:
            continue
        rec = parse(data, name[:-4], bindir)
        if rec is not None:
            out.append(rec)
    return out, cut


@dataclass
class Observed:
    """One command line as bash ran it: every time it ran (per task, per loop turn)."""

    file: str
    line: int
    head: Record  # the outermost recorded command on that line (its argv is the line's)
    runs: list[Record]  # the innermost launching record of each run (python, torchrun...), else the head's

    @property
    def tasks(self) -> list[str]:
        return sorted({r.task for r in self.runs})


def launches(records: list[Record]) -> list[Observed]:
    """The recorded commands grouped by the line they are written on, in the order they first ran."""
    by_id = {r.id: r for r in records}
    children: dict[str, list[Record]] = {}
    for r in records:
        children.setdefault(r.parent, []).append(r)
    groups: dict[tuple[str, int, bool], Observed] = {}
    for rec in records:
        parent = by_id.get(rec.parent)
        key = (rec.file, rec.line, rec.approx)
        if parent is not None and (parent.file, parent.line, parent.approx) == key:
            continue  # a task of a wrapper on the same line: counted among that wrapper's runs
        obs = groups.get(key)
        if obs is None:
            obs = groups[key] = Observed(rec.file, rec.line, rec, [])
        obs.runs.extend(_innermost(rec, children))
    return [g for g in groups.values() if any(r.launches for r in g.runs) or g.head.tool in
            ("srun", "mpirun", "mpiexec", "orterun")]


def _innermost(rec: Record, children: dict[str, list[Record]]) -> list[Record]:
    """The launching records on the same line that `rec` started (once per task), else `rec` itself."""
    found: list[Record] = []
    todo = [rec]
    while todo:
        cur = todo.pop(0)
        below = [r for r in children.get(cur.id, []) if (r.file, r.line, r.approx) == (rec.file, rec.line, rec.approx)]
        if not below and cur.launches:
            found.append(cur)
        todo.extend(below)
    return found or [rec]

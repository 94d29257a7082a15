"""Edits that several remedies share: which job scripts to touch, sizes, setting a variable.

All of them work on the draft (`RemedyContext`), never on the disk.
"""

from __future__ import annotations

import re
from pathlib import Path

from doctor.remedy.draft import RemedyContext
from doctor.remedy.launchline import ScorepLaunch, scorep_launches
from doctor.remedy.shell import ShellScript, Word
from doctor.remedy.text import TextDoc

SHELL_SUFFIXES = ("", ".sh", ".bash", ".sbatch", ".slurm", ".job", ".pbs", ".env", ".cfg")
NOT_SHELL = (".py", ".json", ".yaml", ".yml", ".toml", ".txt", ".log", ".out", ".err", ".md")
_SIZE_RE = re.compile(r"\s*(\d+)\s*([kmgtpe]?)(b?)\s*", re.IGNORECASE)
_UNITS = "kmgtpe"


def parse_size(text: str) -> int | None:
    """Bytes in a Score-P size (`3500M`, `4G`, `1048576`, `64mb`: powers of 1024), or None."""
    m = _SIZE_RE.fullmatch(text or "")
    if not m:
        return None
    unit = m.group(2).lower()
    return int(m.group(1)) * (1024 ** (_UNITS.index(unit) + 1) if unit else 1)


def shell_files(ctx: RemedyContext) -> list[Path]:
    """The job scripts to edit: those the findings point at, else the case's launch scripts."""
    found = [p for p in ctx.files() if p.suffix.lower() not in NOT_SHELL]
    if found:
        return found
    paths = [p for p in (ctx.resolve(x) for x in ctx.case.launch) if p is not None]
    if not paths and ctx.case.root is not None:
        paths = sorted(p for p in ctx.case.root.iterdir()
                       if p.is_file() and p.suffix in SHELL_SUFFIXES[1:6])
    return paths


def launch_files(ctx: RemedyContext) -> list[tuple[Path, TextDoc, ShellScript, list[ScorepLaunch]]]:
    """(path, doc, parsed script, its `python -m scorep` launches) for each job script with one."""
    out = []
    for path in shell_files(ctx):
        doc = ctx.read_doc(path)
        script = ShellScript(doc)
        launches = scorep_launches(script)
        if launches:
            out.append((path, doc, script, launches))
    return out


def at_lines(launches: list[ScorepLaunch], lines: set[int]) -> list[ScorepLaunch]:
    """The launches on the findings' lines, or all of them where none matches."""
    hit = [la for la in launches if la.cmd.line in lines or la.cmd.top_line in lines]
    return hit or launches


def delete_word(doc: TextDoc, word: Word) -> None:
    """Remove a word with one side's blanks; a word alone on a continued line goes with its line."""
    text = doc.text
    line = doc.line_of(word.start)
    before = text[doc.line_start(line):word.start]
    after = text[word.end:doc.line_end(line)]
    if not before.strip() and after.strip() in ("\\", ""):
        doc.delete_line(line)
        return
    end = word.end
    while end < len(text) and text[end] in " \t":
        end += 1
    if end < len(text) and text[end] not in "\r\n" and end > word.end:
        doc.replace(word.start, end, "")
        return
    start = word.start
    while start > 0 and text[start - 1] in " \t":
        start -= 1
    doc.replace(start, word.end, "")


def insert_export(doc: TextDoc, script: ShellScript, launch: ScorepLaunch, name: str, value: str) -> int:
    """Add `export NAME=value` after the last top-level `export SCOREP_*` before the launch,
    else right before the launch's statement. Returns the new line's number (before insertion)."""
    anchor = None
    for a in script.assignments():
        if a.name.startswith("SCOREP_") and a.how in ("export", "bare") \
                and a.command.line < launch.cmd.top_line and not a.command.loops \
                and a.command.top_line == a.command.line:
            anchor = a.command
    if anchor is not None:
        line = doc.line_of(max(anchor.start, anchor.end - 1))
        doc.insert_lines_after(line, [f"{doc.indent_of(anchor.line)}export {name}={value}"])
        return line + 1
    top = launch.cmd.top_line
    doc.insert_lines_before(top, [f"{doc.indent_of(top)}export {name}={value}"])
    return top


def quote_if_needed(value: str) -> str:
    return value if re.fullmatch(r"[A-Za-z0-9_./:=,+-]+", value) else "'" + value.replace("'", "'\\''") + "'"

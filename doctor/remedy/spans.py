"""Remedies read the job through the checks' own model and edit its spans.

`job_of(ctx)` parses the job folder as the plan has it so far (the draft), with the
same `load_job` the `job` fact uses: a remedy sees exactly what the check saw, plus
the edits planned before it. `SpanEdits` collects edits on `Span`s (character offsets
in a file's text) and writes them to the draft one file at a time. Where a word came
through a variable, its characters carry the assignment's span, so the edit goes to the
assignment; where they have no single span, the remedy cannot edit them and says which
file:line to change by hand.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from doctor.jobfolder.argv import ScorepWords, scorep_words
from doctor.jobfolder.discover import load_job
from doctor.jobfolder.model import Command, EnvVar, Job, Launch, Piece, Span, Word
from doctor.remedy.draft import RemedyContext
from doctor.remedy.model import ENV, CannotPlan
from doctor.remedy.text import TextDoc


def job_of(ctx: RemedyContext) -> Job:
    """The job as it will be after the changes planned so far."""
    planned = {str(p): data for p, data in ctx.draft.snapshot().items()}
    return load_job(ctx.case, planned)


def where(job: Job, span: Span | None, fallback: Command | None = None) -> str:
    if span is not None:
        return f"{job.rel(span.file)}:{span.line}"
    if fallback is not None:
        return f"{job.rel(fallback.site.file)}:{fallback.site.line}"
    return "the job script"


def pieces_span(pieces: tuple[Piece, ...], text: str | None = None) -> Span | None:
    """The one place `pieces` are written literally and contiguously, else None."""
    if text is not None and "".join(p.text for p in pieces) != text:
        return None
    return Word("".join(p.text for p in pieces), Span("", 0, 0, 0, 0, 0, 0), pieces).source if pieces else None


def value_span(var: EnvVar) -> Span | None:
    """Where the value of `var` is written, character for character (an empty value: where it would go)."""
    if var.value == "" and var.span is not None:
        return var.span
    if var.value is None or var.items is not None:
        return None
    return pieces_span(var.pieces, var.value)


def word_span(job: Job, cmd: Command, word: Word, what: str) -> Span:
    """The span of `word`, or CannotPlan naming where it is set."""
    span = word.source
    if span is None or not word.known:
        origin = word.via[-1] if word.via else None
        at = f"{job.rel(origin.file)}:{origin.line}" if origin else where(job, word.span)
        raise CannotPlan(f"{what} is not written as one word gpu-doctor can edit (it comes from {at})",
                         [f"Edit {at} by hand."])
    return span


def at_targets(ctx: RemedyContext, pairs: list[tuple[Command, Launch]]) -> list[tuple[Command, Launch]]:
    """The launches the findings point at (their file:line, or a line of the command), else all."""
    points = {(os.path.realpath(str(t.file)), t.line) for t in ctx.targets() if t.file is not None and t.line}
    hit = []
    for cmd, launch in pairs:
        path = os.path.realpath(cmd.site.file)
        lines = range(cmd.site.line, max(cmd.end_line, cmd.site.line) + 1)
        if any(p == path and ln in lines for p, ln in points) or (path, cmd.statement_line) in points:
            hit.append((cmd, launch))
    return hit or pairs


def chain_root(cmd: Command) -> Command:
    """The outermost launcher of a command that runs in a wrapper script's workers."""
    while cmd.parent is not None:
        cmd = cmd.parent
    return cmd


def in_double_quotes(text: str, offset: int) -> bool:
    """Whether `offset` of shell `text` lies inside a double-quoted string (`bash -c "..."`): text put
    there is expanded by the shell that reads the string, not by the one that runs it, so a `$` in it
    must be written `\\$`."""
    from doctor.jobfolder.syntax import Source

    src = Source("", text)
    data = text[:offset].replace("\r\n", " \n").encode("utf-8", "surrogatepass")
    node = src.root.descendant_for_byte_range(len(data), len(data))
    while node is not None:
        if node.type == "string":
            return True
        if node.type in ("raw_string", "command_substitution", "heredoc_body"):
            return False
        node = node.parent
    return False


def for_double_quotes(shell: str) -> str:
    """`shell` written inside a double-quoted string, to mean what it means on its own."""
    return re.sub(r'([$"`\\])', r"\\\1", shell)


class SpanEdits:
    """Edits on spans, applied to the draft file by file (one TextDoc per file, so offsets hold)."""

    def __init__(self, ctx: RemedyContext):
        self.ctx = ctx
        self.docs: dict[str, TextDoc] = {}
        self.lines: dict[str, int] = {}
        self.seen: set[tuple[str, int, int, str]] = set()

    def doc(self, file: str) -> TextDoc:
        if file not in self.docs:
            doc = self.ctx.read_doc(Path(file))
            if _is_python(file, doc.text):  # a launch read from Python (submitit's CommandFunction words)
                raise CannotPlan(f"{os.path.basename(file)} is Python: a shell edit does not belong there",
                                 [f"Make the change in {os.path.basename(file)} by hand (the words the "
                                  "launch is built from are there)."])
            self.docs[file] = doc
        return self.docs[file]

    def replace(self, span: Span, text: str) -> None:
        key = (span.file, span.start, span.end, text)
        if key in self.seen:  # one assignment that several launches read
            return
        self.seen.add(key)
        self.doc(span.file).replace(span.start, span.end, text)
        self.lines.setdefault(span.file, span.line)

    def insert(self, file: str, offset: int, line: int, text: str) -> None:
        key = (file, offset, offset, text)
        if key in self.seen:
            return
        self.seen.add(key)
        self.doc(file).insert(offset, text)
        self.lines.setdefault(file, line)

    def insert_lines_before(self, file: str, line: int, lines: list[str], indent: str | None = None) -> None:
        """Whole lines before `line`, indented as that line is (or by `indent`)."""
        key = (file, line, -1, "\n".join(lines))
        if key in self.seen:
            return
        self.seen.add(key)
        doc = self.doc(file)
        if indent is None:
            indent = doc.indent_of(line) if line <= doc.line_count else ""
        doc.insert_lines_before(line, [indent + ln if ln else ln for ln in lines])
        self.lines.setdefault(file, line)

    def delete_word(self, span: Span) -> None:
        """Remove a word with one side's blanks; a word alone on a continued line goes with its line."""
        if (span.file, span.start, span.end, "") in self.seen:
            return
        self.seen.add((span.file, span.start, span.end, ""))
        doc = self.doc(span.file)
        text = doc.text
        line = doc.line_of(span.start)
        before = text[doc.line_start(line):span.start]
        after = text[span.end:doc.line_end(line)]
        self.lines.setdefault(span.file, span.line)
        if not before.strip() and after.strip() in ("\\", ""):
            doc.delete_line(line)
            return
        end = span.end
        while end < len(text) and text[end] in " \t":
            end += 1
        if end < len(text) and text[end] not in "\r\n\"'" and end > span.end:
            doc.replace(span.start, end, "")
            return
        start = span.start
        while start > 0 and text[start - 1] in " \t":
            start -= 1
        doc.replace(start, span.end, "")

    def write(self, kind: str, summary: str) -> None:
        for file, doc in self.docs.items():
            self.ctx.write_doc(Path(file), doc, kind, summary, self.lines.get(file))
        self.docs = {}


def _is_python(file: str, text: str) -> bool:
    """A Python source (by name, or a `#!...python` first line): shell edits never go there."""
    if file.endswith((".py", ".pyw")):
        return True
    first = text.split("\n", 1)[0]
    return first.startswith("#!") and "python" in first


def set_values(ctx: RemedyContext, name: str, proposed: Callable[[EnvVar], str | None],
               unchanged: str | None = None) -> int:
    """Give every setting of `name` that the launches read the value `proposed(var)` (None: keep it),
    editing the span where the value is written; where it has none (a value only known when the
    job runs, one from the environment gpu-doctor runs in), a manual step naming file:line.

    Writes the edits as one ENV change; raises CannotPlan with the manual steps when nothing could
    be edited; otherwise the manual steps (or `unchanged`, when nothing needed a change) go to
    `ctx.note`. Returns how many settings were edited.
    """
    from doctor.jobfolder.queries import settings

    job = job_of(ctx)
    edits = SpanEdits(ctx)
    changed: list[str] = []
    manual: list[str] = []
    for var, _cmds in settings(job, name):
        new = proposed(var)
        if new is None or new == var.value:
            continue
        span = value_span(var)
        if var.site is None:
            manual.append(f"{name}={var.raw} comes from the environment gpu-doctor runs in; set {name}={new} "
                          "in the job script")
        elif span is not None:
            edits.replace(span, new)
            changed.append(f"{name}={var.value} -> {new}")
        elif _replace_on_line(edits, var, new):
            changed.append(f"{name}={var.raw} -> {new}")
        else:
            manual.append(f"{job.rel(var.site.file)}:{var.site.line}: {name}={var.raw} is only known when the "
                          f"job runs; set it to {new} there")
    if changed:
        edits.write(ENV, "; ".join(dict.fromkeys(changed)))
    if manual:
        if not changed:
            raise CannotPlan(manual[0], manual)
        ctx.note = "; ".join(manual)
    elif not changed:
        ctx.note = unchanged or f"no {name} setting to change was found"
    return len(changed)


def _replace_on_line(edits: SpanEdits, var: EnvVar, new: str) -> bool:
    """`#SBATCH --export=...,NAME=value`: not a shell word, but a plain NAME=value on its line."""
    if var.site is None or var.value is None:
        return False
    doc = edits.doc(var.site.file)
    if var.site.line > doc.line_count:
        return False
    m = re.search(rf"(?<![A-Za-z0-9_]){re.escape(var.name)}=({re.escape(var.value)})(?=[\s,;\"']|$)",
                  doc.line_text(var.site.line))
    if m is None:
        return False
    start = doc.line_start(var.site.line)
    doc.replace(start + m.start(1), start + m.end(1), new)
    edits.lines.setdefault(var.site.file, var.site.line)
    return True


__all__ = ["ScorepWords", "SpanEdits", "at_targets", "chain_root", "job_of", "pieces_span", "scorep_words",
           "set_values", "value_span", "where", "word_span"]

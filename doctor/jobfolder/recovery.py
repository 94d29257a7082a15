"""Reading a script tree-sitter cannot read whole: a line it cannot read is noted and skipped,
and the rest is parsed again from the next line, so one bad line loses one line."""

from __future__ import annotations

from doctor.jobfolder.model import Note
from doctor.jobfolder.syntax import Source, errors

MAX_RECOVERIES = 200
# Statement nodes: inside an ERROR node these still read fine (the walker walks them).
STATEMENTS = {"command", "redirected_statement", "variable_assignment", "variable_assignments",
              "declaration_command", "unset_command", "for_statement", "c_style_for_statement",
              "while_statement", "if_statement", "case_statement", "function_definition", "list",
              "pipeline", "subshell", "compound_statement", "negated_command"}


def chunks(src: Source, notes: list[Note]) -> list[Source]:
    """The file as parts tree-sitter reads without error: a line it cannot read is noted and
    skipped, and the rest is parsed again from the next line (so one bad line loses one line)."""
    chunks: list[Source] = []
    bad: list[int] = []
    cur = src
    for _ in range(MAX_RECOVERIES):
        first = _first_bad_line(cur)
        if first is None:
            chunks.append(cur)
            break
        starts = [0] + [i + 1 for i, ch in enumerate(src.text) if ch == "\n"]
        k = first - 1  # 0-based line index in the file
        head_start = cur.base_offset
        head_end = starts[k] if k < len(starts) else len(src.text)
        if head_end > head_start:
            chunks.append(Source(src.path, src.text[head_start:head_end], cur.base_line, head_start))
        bad.append(first)
        if k + 1 >= len(starts):
            break
        cur = Source(src.path, src.text[starts[k + 1]:], first, starts[k + 1])
    for a, b in _runs(bad):
        text = src.line_text(a)
        where = f"line {a}" if a == b else f"lines {a}-{b}"
        notes.append(Note(src.path, f"{where} not analysed: the shell parser cannot read "
                                         f"{text[:60]!r}", a, "unparsed"))
    return chunks


def _runs(lines: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for n in lines:
        if out and n == out[-1][1] + 1:
            out[-1] = (out[-1][0], n)
        else:
            out.append((n, n))
    return out


def _first_bad_line(src: Source) -> int | None:
    """The first file line holding something tree-sitter could not read (not a statement inside an ERROR)."""
    best: int | None = None
    todo = errors(src.root)
    while todo:
        err = todo.pop()
        for child in err.children or [err]:
            if child.type == "ERROR" and child is not err:
                todo.append(child)
            elif child.type not in STATEMENTS and child.type != "comment":
                line = src.line(src.start(child))
                best = line if best is None else min(best, line)
    if best is None and errors(src.root):
        best = src.line(src.start(errors(src.root)[0]))
    return best

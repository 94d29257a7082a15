"""Parse job scripts with bashlex: whole files, or statement by statement where bashlex fails.

Also the small readers around it: `#SBATCH` directives, line offsets, and splitting a
command substitution's text into words.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from doctor.jobfolder.model import Note, SbatchOption, Site
from doctor.jobfolder.shellprep import Prepared
from doctor.jobfolder.words import match_close, skip_dq

MAX_CHUNK_LINES = 40
MAX_PARSE_ATTEMPTS = 4000


def split_words(text: str) -> list[str]:
    """Split at blanks outside quotes and parentheses (`seq 0 $((N - 1))` -> 3 words)."""
    words: list[str] = []
    cur = ""
    i = 0
    while i < len(text):
        c = text[i]
        if c in "\"'(":
            end = match_close(text, i, "(", ")") if c == "(" else (
                text.find("'", i + 1) if c == "'" else skip_dq(text, i) - 1)
            end = len(text) - 1 if end < 0 else end
            cur += text[i:end + 1]
            i = end + 1
            continue
        if c.isspace():
            if cur:
                words.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    if cur:
        words.append(cur)
    return words


def line_starts(text: str) -> list[int]:
    starts = [0]
    for m in re.finditer("\n", text):
        starts.append(m.end())
    return starts


_patched = False


def _bashlex() -> Any:
    """bashlex, with its `while COND<newline>do` bug tolerated.

    bashlex 0.18 asserts that a while/until condition is a list node, which it is only
    when a `;` ends it; a newline before `do` (the common layout) makes it a command node.
    The tree is fine either way, so that one assertion is relaxed.
    """
    global _patched
    import bashlex
    import bashlex.parser as bp

    if not _patched:
        strict = bp.handleAssert

        def lenient(p: Any, test: bool) -> None:
            if not test and len(p) > 2 and p[1] in ("while", "until") and \
                    getattr(p[2], "kind", None) in ("command", "pipeline", "compound"):
                return
            strict(p, test)

        bp.handleAssert = lenient
        _patched = True
    return bashlex


def parse_nodes(prep: Prepared, path: str, notes: list[Note]) -> list[tuple[Any, int]]:
    """bashlex nodes of a prepared script as (node, offset); statement by statement on failure."""
    bashlex = _bashlex()

    text = prep.text
    try:
        return [(n, 0) for n in bashlex.parse(text)] if text.strip() else []
    except Exception:  # bashlex raises ParsingError, NotImplementedError and worse
        pass
    starts = line_starts(text)
    out: list[tuple[Any, int]] = []
    skipped: list[tuple[int, str]] = []
    attempts = 0
    k = 0
    nlines = len(starts)
    while k < nlines:
        a = starts[k]
        if not text[a:(starts[k + 1] if k + 1 < nlines else len(text))].strip():
            k += 1
            continue
        parsed = None
        for e in range(k + 1, min(nlines, k + MAX_CHUNK_LINES) + 1):
            b = starts[e] if e < nlines else len(text)
            attempts += 1
            if attempts > MAX_PARSE_ATTEMPTS:
                _note_skipped(path, skipped, notes)
                notes.append(Note(path, f"lines {k + 1}-{nlines} not analysed: too much the shell parser "
                                        "cannot read", k + 1, "unparsed"))
                return out
            try:
                nodes = bashlex.parse(text[a:b])
            except Exception:
                continue
            parsed = (nodes, e)
            break
        if parsed is None:
            line = text[a:(starts[k + 1] if k + 1 < nlines else len(text))].strip()
            if not line.startswith("#"):
                skipped.append((k + 1, line))
            k += 1
            continue
        nodes, e = parsed
        out.extend((n, a) for n in nodes)
        k = e
    _note_skipped(path, skipped, notes)
    return out


def _note_skipped(path: str, skipped: list[tuple[int, str]], notes: list[Note]) -> None:
    """One note per run of consecutive lines the parser could not read."""
    runs: list[list[tuple[int, str]]] = []
    for line, text in skipped:
        if runs and line - runs[-1][-1][0] <= 1:
            runs[-1].append((line, text))
        else:
            runs.append([(line, text)])
    for run in runs:
        first, text = run[0]
        span = f"line {first}" if len(run) == 1 else f"lines {first}-{run[-1][0]}"
        notes.append(Note(path, f"{span} not analysed: the shell parser cannot read {text[:60]!r}", first,
                          "unparsed"))


def sbatch_options(path: str, text: str) -> tuple[SbatchOption, ...]:
    """`#SBATCH` directives (Slurm reads them until the first command)."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        if not s.startswith("#"):
            break
        if not s.startswith("#SBATCH"):
            continue
        try:
            tokens = shlex.split(s[len("#SBATCH"):], comments=True)
        except ValueError:
            tokens = s[len("#SBATCH"):].split()
        i = 0
        while i < len(tokens):
            t = tokens[i]
            if t.startswith("--"):
                name, _, value = t[2:].partition("=")
                if not _ and i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                    value = tokens[i + 1]
                    i += 1
            elif t.startswith("-") and len(t) >= 2:
                name = _SHORT_SBATCH.get(t[1], t[1])
                value = t[2:]
                if not value and i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                    value = tokens[i + 1]
                    i += 1
            else:
                i += 1
                continue
            out.append(SbatchOption(name, value, Site(path, n, s)))
            i += 1
    return tuple(out)


_SHORT_SBATCH = {"x": "exclude", "w": "nodelist", "n": "ntasks", "N": "nodes", "G": "gpus",
                 "p": "partition", "t": "time", "J": "job-name", "c": "cpus-per-task", "o": "output",
                 "e": "error", "A": "account", "D": "chdir"}

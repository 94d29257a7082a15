"""What may reach a terminal or a report: `shown()` and its markup-safe forms.

A file name, an environment value or a log line is the user's text; printed raw,
`ESC ] 0;title BEL` retitles the terminal, `ESC ] 52;c;...` sets the clipboard and
`ESC [2J` clears the screen. `shown()` is the one function that decides what is
escaped: every C0 control but tab and newline, DEL, the C1 controls and the
Unicode bidirectional overrides ("Trojan Source") are written as Python spells
them (`\\x1b`, `\\x9b`, `\\u202e`), so a reader still sees which bytes are there.
A backslash is left as it is: the escapes are for reading, not for parsing back.

The other functions are `shown()` plus one more escape for the medium:
`markup()` for Rich and Textual markup (`[b]` from a folder name stays text),
`html_text()` for HTML and the Markdown report's cells (`<script>` stays text);
`json_text()` keeps a JSON document's data exact and its text free of raw controls.
The CLI, stderr, `fix --diff`, the TUI, the timeline and the reports call these;
none escapes control characters on its own.
"""

from __future__ import annotations

import html
import re

# C0 but tab and newline, DEL, C1; the bidi embeddings, overrides and isolates; the line and
# paragraph separators (a terminal or an editor may break a line there). A carriage return is
# kept only as half of a CRLF line ending (a Windows-saved script's diff stays that file's diff).
_CLASS = "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069"
_CONTROL = re.compile(f"[{_CLASS}]|\r(?!\n)")
_CONTROL_OR_NEWLINE = re.compile(f"[{_CLASS}\t\n\r]")
_MARKUP_OPEN = re.compile(r"(\\*)\[")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: object, *, one_line: bool = False) -> str:
    """`text` with every control character written as its escape (`\\x1b`); tab and newline kept.

    `one_line`: tab and newline escaped too (a table cell, a title, a status line).
    """
    value = text if isinstance(text, str) else str(text)
    return (_CONTROL_OR_NEWLINE if one_line else _CONTROL).sub(_escape, value)


def markup(text: object, *, one_line: bool = False) -> str:
    """`shown(text)` for Rich markup: every `[` is a literal bracket, never a tag.

    Textual's markup reads it the same, except a backslash just before a `[`; the app shows the
    user's text as `rich.text.Text` (never markup), so that case never reaches it.
    """
    return _MARKUP_OPEN.sub(lambda m: m.group(1) * 2 + "\\[", shown(text, one_line=one_line))


def html_text(text: object, *, one_line: bool = False, quote: bool = True) -> str:
    """`shown(text)` for HTML and Markdown: `<`, `>`, `&` (and with `quote`, quotes) as entities.

    Markdown text outside attributes needs no quotes escaped (`quote=False` keeps `'` readable).
    """
    return html.escape(shown(text, one_line=one_line), quote=quote)


def json_text(document: str) -> str:
    """A JSON document's text with the controls `json.dumps(ensure_ascii=False)` leaves raw (C1, bidi)
    as `\\u` escapes: the same data, and `cat report.json` shows no live control either."""
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group(0)):04x}", document)


__all__ = ["shown", "markup", "html_text", "json_text"]

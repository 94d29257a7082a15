"""Where an observed value or command is written: the job folder's own path for the sandbox's, a
generated script's here-document, the text of a line, and a value's literal span on it."""

from __future__ import annotations

import os
import re

from doctor.jobfolder.model import Site, Span


class Places:
    def __init__(self, root: str, generated: dict[str, Span] | None = None):
        self.root = os.path.realpath(root)
        self.shown_root = root
        self.generated = generated or {}  # scripts the job writes (`cat > task.sh <<'EOF'`): where the text is
        self.lines: dict[str, list[str]] = {}

    def path(self, rec_file: str, cwd: str) -> str:
        path = os.path.normpath(os.path.join(cwd, rec_file))
        if path == self.root or path.startswith(self.root + os.sep):
            path = self.shown_root + path[len(self.root):]
        return path

    def place(self, rec_file: str, line: int, cwd: str) -> tuple[str, int]:
        """Where a recorded line is written: a script the job generated is its here-document's lines."""
        path = self.path(rec_file, cwd)
        span = self.generated.get(path)
        if span is not None and not os.path.exists(path):
            return span.file, span.line + line - 1
        return path, line

    def text(self, path: str, line: int) -> str:
        if path not in self.lines:
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    self.lines[path] = f.read().splitlines()
            except OSError:
                self.lines[path] = []
        lines = self.lines[path]
        return lines[line - 1] if 0 < line <= len(lines) else ""

    def literal(self, site: Site | None, value: str) -> Span | None:
        """Where `value` is written on the line that set it, when it is there once, character for character
        (`printf -v X '%s' 8G`, `read -r X <<< "8G"`, `ref=8G`): a remedy can edit it there."""
        if site is None or not value or site.text.count(value) != 1:
            return None
        lines = self.lines.get(site.file) or []
        col = site.text.index(value)
        start = sum(len(x) + 1 for x in lines[:site.line - 1]) + col
        return Span(site.file, start, start + len(value), site.line, col + 1, site.line, col + 1 + len(value))

    def data_line(self, name: str, value: str) -> tuple[Site, Span] | None:
        """The one line of a small text file in the job folder that gives NAME this value (`NAME=value`,
        `NAME value`, `NAME: value`, a modulefile's `setenv("NAME", "value")`): where a script read it from
        data, or the string it `eval`s."""
        pattern = re.compile(rf"(?<![\w$]){re.escape(name)}[\"']?\s*(?:[=:,]|\s)\s*[\"']?({re.escape(value)})(?![\w.])")
        hits: list[tuple[Site, Span]] = []
        for path in self._data_files():
            self.text(path, 1)
            for n, text in enumerate(self.lines.get(path) or [], 1):
                m = pattern.search(text)
                if m:
                    span = self.literal(Site(path, n, text), value)
                    if span is not None:
                        hits.append((Site(path, n, text), span))
        return hits[0] if len(hits) == 1 else None

    def written_at(self, name: str) -> Site | None:
        """For a value set in a file the job writes as it runs: the one line of the job folder's files that
        writes `NAME=` (the here-document that makes the file), where the user can change it."""
        pattern = re.compile(rf"(?<![\w$]){re.escape(name)}=")
        hits: list[Site] = []
        for path in self._data_files():
            self.text(path, 1)
            hits += [Site(path, n, text.strip()) for n, text in enumerate(self.lines.get(path) or [], 1)
                     if pattern.search(text)]
        return hits[0] if len(hits) == 1 else None

    def _data_files(self) -> list[str]:
        out: list[str] = []
        for folder, dirs, files in os.walk(self.shown_root):
            dirs[:] = [d for d in dirs if not d.startswith((".", "scorep")) and folder == self.shown_root]
            for f in sorted(files):
                path = os.path.join(folder, f)
                if not f.endswith((".py", ".pyc")) and os.path.isfile(path) and os.path.getsize(path) < 65536:
                    out.append(path)
        return out[:50]

    def site(self, path: str, line: int) -> Site:
        return Site(path, line, self.text(path, line))

    def span(self, path: str, line: int) -> Span:
        lines = self.lines.get(path) or []
        start = sum(len(x) + 1 for x in lines[:line - 1])
        width = len(lines[line - 1]) if 0 < line <= len(lines) else 0
        return Span(path, start, start + width, line, 1, line, width + 1)

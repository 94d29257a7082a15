"""What a plan function works on: the findings it answers, and a draft of the files.

The `Draft` is a virtual view of the job's files: what each would hold after
the changes planned so far. Plan functions read and write it, never the disk,
so several remedies can change one file, each starting where the one before
ended, and nothing is touched until the plan is applied.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doctor.case import Case
from doctor.model import Finding, Status
from doctor.remedy.files import current
from doctor.remedy.model import CREATE, CannotPlan, Change
from doctor.remedy.text import TextDoc
from doctor.safeopen import UnsafeFile


class Draft:
    """File contents as planned so far; the first read of each file remembers its original.

    `seen`: the bytes the findings were drawn from (the parsed job's `reads`, by real path).
    A file among them is drafted from those bytes, never from a second read: the spans the
    checks found are offsets into exactly that text, and applying compares the file on disk
    with their hash (a file saved in between is refused, not edited at stale offsets).
    """

    def __init__(self, seen: Mapping[str, bytes] | None = None) -> None:
        self.original: dict[Path, bytes | None] = {}
        self.modes: dict[Path, int] = {}
        self._current: dict[Path, bytes | None] = {}
        self._seen = dict(seen or {})

    def read(self, path: Path) -> bytes | None:
        """The planned content of `path`, or None where it does not exist (yet)."""
        if path not in self.original:
            try:  # never through a symlink, never a FIFO or a device: a plan only edits files
                data: bytes | None = self._seen.get(str(path))
                if data is None:
                    data = current(path)
                else:
                    current(path)  # the same refusals (a FIFO, a symlink) as a fresh read
                if data is not None:
                    self.modes[path] = os.lstat(path).st_mode & 0o7777
            except UnsafeFile as exc:
                raise CannotPlan(str(exc)) from None
            except (IsADirectoryError, NotADirectoryError):
                raise CannotPlan(f"{path} is not a file") from None
            except OSError as exc:
                raise CannotPlan(f"cannot read {path}: {exc.strerror or exc}") from None
            self.original[path] = data
            self._current[path] = data
        return self._current[path]

    def write(self, path: Path, data: bytes, mode: int | None = None) -> None:
        self.read(path)
        self._current[path] = data
        if mode is not None and self.original[path] is None:
            self.modes[path] = mode

    def snapshot(self) -> dict[Path, bytes | None]:
        return dict(self._current)

    def restore(self, snap: dict[Path, bytes | None]) -> None:
        for path in list(self._current):
            if path in snap:
                self._current[path] = snap[path]
            else:  # first read during the failed remedy: forget it
                del self._current[path]
                self.original.pop(path, None)
                self.modes.pop(path, None)

    def map_line(self, path: Path, line: int | None) -> int | None:
        """Where `line` of the file as it was on disk is in the draft now (None: it was changed)."""
        if line is None or path not in self.original:
            return line
        before, now = self.original[path], self._current[path]
        if before is None or now is None or before == now:
            return line
        import difflib

        old = before.decode("utf-8", "surrogateescape").splitlines()
        new = now.decode("utf-8", "surrogateescape").splitlines()
        for tag, i1, i2, j1, _j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
            if i1 < line <= i2:
                return j1 + (line - i1) if tag == "equal" else None
        return None

    def touched(self) -> list[Path]:
        return [p for p, data in self._current.items() if data != self.original[p]]


@dataclass(frozen=True)
class Target:
    """Where a finding points: a file, a line, the offending text, and the check's data."""

    file: Path | None
    line: int | None
    text: str
    data: Mapping[str, Any]
    check_id: str


@dataclass
class RemedyContext:
    """What a plan function gets. It records changes with `write_doc`/`create` or raises CannotPlan."""

    case: Case
    remedy_id: str
    findings: tuple[Finding, ...]
    all_findings: tuple[Finding, ...]
    draft: Draft
    facts: Any = None
    planned: tuple[str, ...] = ()
    changes: list[Change] = field(default_factory=list)
    note: str = ""

    @property
    def root(self) -> Path:
        return self.case.root or Path.cwd()

    def resolve(self, name: Any) -> Path | None:
        if not name:
            return None
        path = Path(str(name)).expanduser()
        path = path if path.is_absolute() else self.root / path
        return Path(os.path.realpath(path))

    def targets(self) -> list[Target]:
        """One target per evidence item (or per finding without evidence) of the findings.

        Lines are where the finding's line is in the draft now: an earlier remedy
        of the same plan may have moved it.
        """
        out = []
        for t in self._raw_targets():
            if t.file is not None and t.line is not None:
                t = Target(t.file, self.draft.map_line(t.file, t.line), t.text, t.data, t.check_id)
            out.append(t)
        return out

    def _raw_targets(self) -> list[Target]:
        out = []
        for f in self.findings:
            data = dict(f.data)
            evidence = f.evidence or ()
            if not evidence:
                out.append(Target(self.resolve(data.get("file") or data.get("path")),
                                  _int(data.get("line")), str(data.get("text", "")), data, f.check_id))
            for ev in evidence:
                file = data.get("file") or data.get("path") or ev.file
                line = _int(data.get("line")) if data.get("line") is not None else ev.line
                out.append(Target(self.resolve(file), line, ev.text, data, f.check_id))
        return out

    def files(self, suffixes: tuple[str, ...] = ()) -> list[Path]:
        """The distinct files the findings point at (optionally only these suffixes).

        A finding about what a run left (the artifacts layer) points at experiment folders and
        logs, not at files to edit: its remedy finds the job's own files (`shell_files`).
        """
        left_by_run = {f.check_id for f in self.findings if f.layer == "artifacts"}
        seen: dict[Path, None] = {}
        for t in self._raw_targets():
            if t.file is not None and t.check_id not in left_by_run and (not suffixes or t.file.suffix in suffixes):
                seen.setdefault(t.file, None)
        return list(seen)

    def entry_scripts(self) -> list[Path]:
        """The training scripts the job's ranks run, from the parsed job folder (none without it)."""
        job = self.facts.get("job") if self.facts is not None else None
        scripts = getattr(job, "entry_scripts", None)
        return [p for p in (self.resolve(s.path) for s in scripts()) if p is not None] if callable(scripts) else []

    def read_doc(self, path: Path) -> TextDoc:
        data = self.draft.read(path)
        if data is None:
            raise CannotPlan(f"{path} does not exist")
        return TextDoc(data)

    def write(self, path: Path, after: bytes, kind: str, summary: str, line: int | None = None) -> None:
        before = self.draft.read(path)
        if before == after:
            return
        self.draft.write(path, after)
        self.changes.append(Change(kind, path, before, after, summary, line))

    def write_doc(self, path: Path, doc: TextDoc, kind: str, summary: str, line: int | None = None) -> None:
        self.write(path, doc.render(), kind, summary, line)

    def create(self, path: Path, text: str, summary: str, mode: int = 0o644) -> None:
        if self.draft.read(path) is not None:
            raise CannotPlan(f"{path} already exists")
        data = text.encode("utf-8")
        self.draft.write(path, data, mode)
        self.changes.append(Change(CREATE, path, None, data, summary, None, mode))

    def findings_of(self, *check_ids: str) -> list[Finding]:
        """Findings of these checks among everything the plan was given (not only this remedy's)."""
        return [f for f in self.all_findings if f.check_id in check_ids
                and f.status not in (Status.PASS, Status.SKIP)]


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None

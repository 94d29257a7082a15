"""The values of the remedy engine: changes, per-remedy plans, the whole plan, and its errors.

A `Plan` is made before anything is touched. It names every file it would
write, the SHA-256 that file had when the plan was made (or that it did not
exist), and the bytes it would hold afterwards; each remedy's part of it is a
list of `Change`s that render as unified diffs. Stdlib only.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from doctor.model import Finding, Safety

# What a change is, in the user's words (all of them end up as file writes).
EDIT = "edit"            # a code or config edit
CREATE = "create"        # a new file
ENV = "env"              # an environment setting in a job script
SCRIPT_LINE = "script-line"  # a line added to or changed in a job script
KINDS = (EDIT, CREATE, ENV, SCRIPT_LINE)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class RemedyError(Exception):
    """A remedy could not be planned, applied or undone; the message says why, in one line."""


class StaleFile(RemedyError):
    """A file changed between planning and applying (or after applying, for undo)."""


class NotWritable(RemedyError):
    """A file or folder the plan needs to write is read-only."""


class CannotPlan(Exception):
    """Raised by a plan function: this remedy cannot be turned into changes here.

    `steps` are what the user can do by hand instead.
    """

    def __init__(self, reason: str, steps: tuple[str, ...] | list[str] = ()):
        super().__init__(reason)
        self.reason = reason
        self.steps = tuple(steps)


@dataclass(frozen=True)
class Change:
    """One concrete change to one file, as one remedy sees it.

    `before` is the file's content before this change (None: the change creates
    the file); `after` is its content afterwards. Several remedies may change
    the same file: each change then starts where the previous one ended.
    """

    kind: str
    path: Path
    before: bytes | None
    after: bytes
    summary: str
    line: int | None = None
    mode: int | None = None

    def diff(self, root: Path | None = None) -> str:
        from doctor.remedy.diff import unified_diff

        return unified_diff(self.before, self.after, display_path(self.path, root))


@dataclass(frozen=True)
class RemedyPlan:
    """One remedy's part of a plan.

    `status` is `ready` (changes to apply), `manual` (steps to follow by hand),
    `nothing` (already fixed, or covered by an earlier remedy of this plan),
    `cannot` (automatic, but not possible here: `note` says why, `steps` what to do),
    or `unknown` (no remedy of that ID is registered).
    """

    remedy_id: str
    safety: Safety
    title: str
    checks: tuple[str, ...]
    findings: tuple[Finding, ...] = ()
    changes: tuple[Change, ...] = ()
    steps: tuple[str, ...] = ()
    note: str = ""
    status: str = "ready"

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(dict.fromkeys(c.path for c in self.changes))

    def numbered_steps(self) -> list[tuple[int | None, str]]:
        """The steps as the user reads them: (number, text) for each step, (None, text) for a line
        that continues the step above (it starts with a space: a code block's lines)."""
        out: list[tuple[int | None, str]] = []
        n = 0
        for step in self.steps:
            if step.startswith(" ") and n:
                out.append((None, step))
            else:
                n += 1
                out.append((n, step))
        return out


@dataclass(frozen=True)
class FileTarget:
    """One file the plan writes: its state when planned and the bytes it will hold.

    `before_sha256` is None when the file did not exist (the plan creates it).
    """

    path: Path
    before_sha256: str | None
    after: bytes
    mode: int | None = None

    @property
    def created(self) -> bool:
        return self.before_sha256 is None

    @property
    def after_sha256(self) -> str:
        return sha256(self.after)


@dataclass(frozen=True)
class Plan:
    """Everything a `fix` would do, before it does it."""

    root: Path
    remedies: tuple[RemedyPlan, ...]
    files: tuple[FileTarget, ...] = ()
    skipped: tuple[RemedyPlan, ...] = field(default=())
    # `journal.history` when the files were read (None: not known; only the files' hashes are compared).
    history: tuple[str, ...] | None = None

    @property
    def ready(self) -> tuple[RemedyPlan, ...]:
        return tuple(r for r in self.remedies if r.status == "ready")

    @property
    def empty(self) -> bool:
        return not self.files

    def diff(self) -> str:
        """All changes, remedy by remedy, as unified diffs."""
        parts = []
        for rp in self.ready:
            parts.append(f"# {rp.remedy_id} ({rp.safety.value}): {rp.title}\n")
            parts.extend(c.diff(self.root) for c in rp.changes)
        return "".join(parts)


def display_path(path: Path, root: Path | None) -> str:
    """`path` relative to the job folder where it lies inside it, else absolute."""
    if root is not None:
        try:
            return str(path.relative_to(root))
        except ValueError:
            pass
    return str(path)

"""Fix flow: choose remedies (safe ones preselected), preview, apply, see verification, undo."""

from __future__ import annotations

from doctor.case import Case
from doctor.model import CheckResult


def preview_text(case: Case, results: list[CheckResult]) -> str:
    """The unified diff the remedies for `results` would apply (empty when none)."""
    return ""


def undo_all(case: Case) -> str:
    return "nothing to undo"


class FixScreen:  # replaced once the remedy engine lands
    pass

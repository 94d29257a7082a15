"""What the interactive app was asked for: built by the command line, read by every screen.

Plain values only (no Textual), so the command line can build them before the app is imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Options:
    """What the app was asked for on the command line."""

    playbook: str = "scorep-ddp"
    budget_s: float = 60.0
    fail_on: str = "error"
    extra: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # said once when the app opens (a file given as PATH...)

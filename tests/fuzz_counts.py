"""The fuzz suite's counters, printed at the end of the session (tests/conftest.py)."""

from __future__ import annotations

from collections import Counter

KEYS = ("runs", "tracebacks", "hangs", "outside_changes", "lost_edits", "orphans", "planted_secrets",
        "race_runs", "mangled")
COUNTS: Counter[str] = Counter(dict.fromkeys(KEYS, 0))

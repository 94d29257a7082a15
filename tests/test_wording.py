"""Counts in the user's words, and a guard that no user-facing text falls back to "(s)"."""

from __future__ import annotations

import re
from pathlib import Path

from doctor.wording import count, noun_for, plural

REPO = Path(__file__).resolve().parent.parent


def test_one_is_singular_and_every_other_number_plural() -> None:
    assert count(1, "remedy") == "1 remedy" and count(2, "remedy") == "2 remedies"
    assert count(0, "finding") == "0 findings" and count(1, "finding") == "1 finding"
    assert count(3, "process") == "3 processes" and count(1, "process") == "1 process"
    assert count(4, "GPU") == "4 GPUs" and count(2, "experiment folder") == "2 experiment folders"
    assert count(2, "remedy needs", "remedies need") == "2 remedies need"
    assert count(2, "day") == "2 days" and plural("batch") == "batches"
    assert noun_for(1, "rank") == "rank" and noun_for(3, "rank") == "ranks"


def test_no_user_facing_text_counts_with_a_parenthesised_plural() -> None:
    """`{n} rank(s)` / `{n} file(s)` read wrong for every n; use doctor.wording.count."""
    pattern = re.compile(r"\}\s*[A-Za-z ]*\((s|es)\)")
    found = []
    for folder in ("doctor", "checks", "remedies"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if path.name == "wording.py" or "jobfolder" in path.parts:  # jobfolder/processes.py: the model's own
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if pattern.search(line):
                    found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert found == []

"""The README's check-ID ranges follow the catalogue (`GPU_DOCTOR_REGENERATE=1` rewrites them)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from doctor import registry

README = Path(__file__).resolve().parent.parent / "README.md"
RANGE = re.compile(r"\b([A-Z][A-Z0-9]{2})(\d{3})-(\d{3})\b")
SENTENCE = "The checks have stable IDs ("


def catalogue_ranges() -> dict[str, tuple[int, int]]:
    """Prefix -> (first, last) number of the registered checks."""
    numbers: dict[str, list[int]] = {}
    for chk in registry.all_checks():
        numbers.setdefault(chk.id[:3], []).append(int(chk.id[3:]))
    for prefix, found in numbers.items():
        gaps = sorted(set(range(min(found), max(found) + 1)) - set(found))
        assert not gaps, f"{prefix} IDs skip {gaps}: a range in the README would name checks that do not exist"
    return {prefix: (min(found), max(found)) for prefix, found in numbers.items()}


def id_sentence(text: str) -> tuple[int, int]:
    """Where the README's sentence of ID ranges is (it wraps over lines)."""
    start = text.index(SENTENCE)
    return start, text.index(")", start)


def readme_ranges(text: str) -> dict[str, tuple[int, int]]:
    start, end = id_sentence(text)
    return {m.group(1): (int(m.group(2)), int(m.group(3))) for m in RANGE.finditer(text[start:end])}


def regenerated(text: str, wanted: dict[str, tuple[int, int]]) -> str:
    """The text with each range of the sentence set to the catalogue's (a new prefix needs words: by hand)."""
    start, end = id_sentence(text)

    def one(m: re.Match[str]) -> str:
        first, last = wanted.get(m.group(1), (int(m.group(2)), int(m.group(3))))
        return f"{m.group(1)}{first:03d}-{last:03d}"

    return text[:start] + RANGE.sub(one, text[start:end]) + text[end:]


def test_readme_id_ranges_match_the_catalogue():
    text = README.read_text(encoding="utf-8")
    wanted = catalogue_ranges()
    if os.environ.get("GPU_DOCTOR_REGENERATE") and readme_ranges(text) != wanted:
        text = regenerated(text, wanted)
        README.write_text(text, encoding="utf-8")
    assert readme_ranges(text) == wanted, (
        "README.md's check-ID ranges are stale: GPU_DOCTOR_REGENERATE=1 pytest tests/test_catalogue_docs.py "
        "rewrites them (a new prefix needs its layer's words added by hand)")


def test_one_more_check_makes_the_ranges_stale_and_regenerating_fixes_them():
    """The test above can fail: one more SCP check and the README's SCP range is stale until rewritten."""
    text = README.read_text(encoding="utf-8")
    first, last = catalogue_ranges()["SCP"]
    extra = f"SCP{last + 1:03d}"
    registry.check(extra, "scorep", "test only: one more Score-P check")(lambda facts: [])
    try:
        wanted = catalogue_ranges()
        assert readme_ranges(text) != wanted
        fixed = regenerated(text, wanted)
        assert readme_ranges(fixed) == wanted
        assert f"SCP{first:03d}-{last + 1:03d} Score-P" in fixed.replace("\n", " ")
        assert len(fixed) == len(text)  # only the numbers changed
    finally:
        registry.CHECKS.pop(extra)

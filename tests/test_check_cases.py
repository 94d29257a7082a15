"""One real check per fixture folder: findings, the fix's diff, the findings after it (tests/cases/)."""

from __future__ import annotations

from pathlib import Path

import pytest
from check_cases import CheckCase, all_cases, compare, produce

from doctor import registry

ALL = all_cases()


@pytest.mark.parametrize("case", ALL, ids=[c.id for c in ALL])
def test_check_case(case: CheckCase, tmp_path: Path) -> None:
    stale = compare(case, produce(case, tmp_path))
    assert not stale, (f"{case.id}: {', '.join(stale)} differ from what the code gives now. If that is an "
                       "improvement: GPU_DOCTOR_REGENERATE=1 pytest tests/test_check_cases.py, then read "
                       "`git diff tests/cases`")


def test_every_check_has_a_fixture_folder() -> None:
    registry.load()
    covered = {c.check_id for c in ALL}
    assert sorted(set(registry.CHECKS) - covered) == [], "add tests/cases/<ID>/<case>/job/ (see CONTRIBUTING.md)"
    assert sorted(covered - set(registry.CHECKS)) == [], "fixture folders of checks that do not exist"


def test_every_check_with_a_fixable_remedy_has_a_stored_fix_diff() -> None:
    registry.load()
    fixable = {c.id for c in registry.CHECKS.values()
               if any((r := registry.REMEDIES.get(rid)) is not None and r.plan is not None for rid in c.remedies)}
    with_diff = {c.check_id for c in ALL if (c.folder / "fix.diff").is_file()}
    assert sorted(fixable - with_diff) == []


def test_a_changed_expectation_is_reported_not_blessed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The case test can fail: a stored diff that no longer matches what the remedy plans is named."""
    import shutil

    import check_cases

    monkeypatch.setattr(check_cases, "REGENERATE", False)
    [original] = [c for c in ALL if c.id == "SCP003/total-memory-4g"]
    folder = tmp_path / "case"
    shutil.copytree(original.folder, folder)
    (folder / "fix.diff").write_text((folder / "fix.diff").read_text().replace("3500M", "3000M"))
    copy = CheckCase(original.check_id, original.name, folder, original.config)
    assert compare(copy, produce(copy, tmp_path / "run")) == ["fix.diff"]


def test_every_automatic_remedy_has_a_stored_fix_diff() -> None:
    """Per remedy, not per check: SCP010 had a diff for scorep-callpath-depth while its other
    remedy, scorep-filter-file, had none (its diff was never shown to anyone)."""
    import re

    registry.load()
    automatic = {r.id for r in registry.REMEDIES.values() if r.plan is not None}
    shown = {m.group(1) for c in ALL if (c.folder / "fix.diff").is_file()
             for m in re.finditer(r"^# (\S+) \((?:safe|unsafe)\): ", (c.folder / "fix.diff").read_text(), re.M)}
    assert sorted(automatic - shown) == []

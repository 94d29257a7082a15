"""Adding a check or a remedy touches its own module: the lists around it are derived.

The remedy order comes from the phase each `@remedy` declares, a playbook's job layers take every
check of the layer, and the job-folder suites cover what the catalogue holds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from jobfolder_util import JOB_CHECKS

from doctor import registry
from doctor.model import Phase, Safety, passed
from doctor.playbook import PlaybookError, load_playbook
from doctor.remedy.planner import planning_order


@pytest.fixture
def catalogue():
    registry.load()
    checks, remedies = dict(registry.CHECKS), dict(registry.REMEDIES)
    yield registry
    registry.CHECKS.clear()
    registry.CHECKS.update(checks)
    registry.REMEDIES.clear()
    registry.REMEDIES.update(remedies)


def test_remedies_are_planned_phase_by_phase_whatever_order_the_findings_name_them(catalogue):
    wanted = ["lazy-scorep-import", "scorep-per-rank-dirs", "cuda-warmup", "per-rank-launch", "manual-second-cupti",
              "scorep-add-cuda", "trainer-lbm-off", "exclude-node", "scorep-drop-dashdash"]
    order = planning_order(wanted)
    phases = [registry.REMEDIES[r].phase for r in order]
    assert phases == sorted(phases, key=list(Phase).index)
    assert order[:3] == ["scorep-add-cuda", "trainer-lbm-off", "scorep-drop-dashdash"]  # as named, in FLAGS
    # per-rank-launch first in its phase: the others look at what it planned (ctx.planned)
    assert order[3:7] == ["per-rank-launch", "scorep-per-rank-dirs", "cuda-warmup", "exclude-node"]
    assert order[7:] == ["lazy-scorep-import", "manual-second-cupti"]


def test_a_new_remedy_is_ordered_by_the_phase_it_declares(catalogue):
    catalogue.remedy("tst-flag", Safety.SAFE, "a new flag fix (test)", phase=Phase.FLAGS)(lambda ctx: None)
    catalogue.remedy("tst-code", Safety.UNSAFE, "a new code fix (test)", phase="code")(lambda ctx: None)
    assert planning_order(["tst-code", "per-rank-launch", "tst-flag", "no-such-remedy"]) == \
        ["tst-flag", "per-rank-launch", "tst-code", "no-such-remedy"]


def test_a_plan_remedy_must_declare_its_phase(catalogue):
    with pytest.raises(TypeError):
        catalogue.remedy("tst-nophase", Safety.SAFE, "no phase (test)")(lambda ctx: None)  # type: ignore[call-arg]


def test_every_after_names_a_remedy_of_the_same_phase():
    registry.load()
    for rem in registry.REMEDIES.values():
        for first in rem.after:
            assert first in registry.REMEDIES, (rem.id, first)
            assert registry.REMEDIES[first].phase == rem.phase, (rem.id, first)
    manual = [r for r in registry.REMEDIES.values() if r.safety == Safety.MANUAL]
    assert manual and all(r.phase == Phase.MANUAL for r in manual)


def test_a_new_check_of_a_job_layer_joins_the_playbook_without_editing_it(catalogue):
    catalogue.check("SCR990", "script", "a new script check (test)")(lambda facts: passed("fine"))
    assert "SCR990" in load_playbook("scorep-ddp").checks
    assert "SCR990" not in load_playbook("prologue").checks  # node playbooks name their checks


def test_the_job_folder_suites_cover_every_check_of_the_job_layers():
    registry.load()
    assert set(JOB_CHECKS) == {c.id for c in registry.CHECKS.values()
                               if c.layer in ("scorep", "launcher", "script", "trainer")}
    assert {"SCP001", "LNC001", "SCR004", "TRN002"} <= set(JOB_CHECKS)


def test_a_playbook_that_lists_remedies_is_told_fix_does_not_read_them(tmp_path: Path):
    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\nlayers = ["script"]\nremedies = ["lazy-scorep-import"]\n')
    with pytest.raises(PlaybookError, match="'remedies' is not read"):
        load_playbook(str(path))


def test_a_playbook_naming_an_unknown_layer_is_one_clear_error(tmp_path: Path):
    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\nlayers = ["scorep", "gpu"]\n')
    with pytest.raises(PlaybookError, match="unknown layers: gpu"):
        load_playbook(str(path))


def test_the_check_is_the_one_place_that_links_it_to_its_remedies(catalogue):
    """A remedy does not say which checks it fixes (that list drifted from the checks' own, read by
    nothing): `@remedy` refuses it, and every registered remedy is named by some check, so `fix`
    can offer it."""
    with pytest.raises(TypeError):
        catalogue.remedy("tst-fixes", Safety.SAFE, "names its checks (test)", phase=Phase.FLAGS,
                         fixes=["SCP003"])(lambda ctx: None)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        catalogue.manual_remedy("tst-manual", "names its checks (test)", ["a step"],
                                fixes=["SCP003"])  # type: ignore[call-arg]
    named = {r for c in registry.CHECKS.values() for r in c.remedies}
    assert set(registry.REMEDIES) - named == set()
    assert named - set(registry.REMEDIES) == set()

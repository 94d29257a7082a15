"""Real Score-P output from public projects (../shared/fixtures/scorep), read by the artifacts area."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from doctor.artifacts.discover import discover
from doctor.artifacts.experiments import Experiment, summarize
from doctor.case import Case
from doctor.model import Status
from doctor.runner import run_checks

FIXTURES = Path(__file__).parents[1].parent / "shared" / "fixtures" / "scorep"

pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"real Score-P fixtures absent: {FIXTURES}")


def one(folder: Path) -> Experiment:
    [exp] = summarize(str(folder), discover(folder), 60).folders
    return exp


def test_lulesh_profile_shows_cuda_locations_and_cuda_regions() -> None:
    exp = one(FIXTURES / "cuda-profile-lulesh")
    assert exp.trace is None and exp.profile is not None and exp.profile.ok
    assert exp.profile.creator == "Score-P 8.0-dev"
    assert exp.processes == 1
    assert [loc.name for loc in exp.cuda_locations] == ["CUDA[0:7]", "CUDA[0:15]"]
    assert exp.cuda_regions == 74
    assert exp.profile.gpu_kernels > 0
    assert [row["type"] for row in exp.profile.by_type] == ["ALL", "CUDA", "USR", "SCOREP"]
    assert exp.profile.by_type[1]["percent"] > 80  # COMPUTE IDLE and the CUDA API dominate
    assert exp.cuda_setting is not None and "kernel" in exp.cuda_setting[0]


def test_lulesh_passes_art002_because_cuda_was_recorded() -> None:
    run = run_checks(Case(root=FIXTURES / "cuda-profile-lulesh", env={}), ["ART001", "ART002"],
                     budget_s=60, preset_facts={"logscan": []})
    assert [r.status for r in run.results] == [Status.PASS, Status.PASS]
    assert "2 CUDA locations, 74 CUDA regions" in run.results[1].message


@pytest.mark.parametrize("name", ["mpi-pingpong-trace", "mpi-pingpong-trace-papi"])
def test_mpi_pingpong_trace_shows_two_ranks(name: str) -> None:
    exp = one(FIXTURES / name)
    assert exp.trace is not None and exp.trace.ok
    assert exp.trace.processes == ("MPI Rank 0", "MPI Rank 1")
    assert exp.processes == 2
    assert exp.trace.creator == "Score-P 7.1"
    assert exp.trace.paradigms["mpi"] > 0
    assert not exp.gpu_locations and not exp.launcher_only


def test_hip_trace_has_gpu_locations_that_are_not_cuda() -> None:
    exp = one(FIXTURES / "hip-trace-mi300")
    trace = exp.trace
    assert trace is not None and trace.ok and trace.creator == "Score-P 9.0"
    assert [loc.name for loc in exp.gpu_locations] == ["HIP[0:0]", "HIP[1:0]"]
    assert {loc.accelerator for loc in exp.gpu_locations} == {"HIP"}
    assert exp.cuda_locations == [] and exp.cuda_regions == 0
    assert trace.locations_total == 32 and len(trace.cpu_threads) == 1
    assert trace.events == 72670  # from the location definitions, no event read
    assert trace.paradigms["hip"] > 0 and trace.gpu_kernels > 0


def test_hip_trace_is_not_mistaken_for_cuda_by_art002(tmp_path: Path) -> None:
    folder = tmp_path / "scorep_rank_0"
    shutil.copytree(FIXTURES / "hip-trace-mi300", folder)
    cfg = folder / "scorep.cfg"
    cfg.chmod(0o644)
    cfg.write_text(cfg.read_text() + "SCOREP_CUDA_ENABLE='kernel'\n")
    run = run_checks(Case(root=tmp_path, env={}), ["ART002"], budget_s=60, preset_facts={"logscan": []})
    res = run.results[0]
    assert res.status == Status.FAIL
    assert any("not CUDA: HIP[0:0], HIP[1:0]" in e.text for e in res.evidence)


@pytest.mark.parametrize("source,processes", [("kripke.p8.d2.g32.r1__profile.cubex", 8),
                                              ("blast.p64.r1__profile.cubex", 64),
                                              ("time.p4.n2000.x1.r0__profile.cubex", 4)])
def test_cpu_profiles_count_their_processes(tmp_path: Path, source: str, processes: int) -> None:
    shutil.copy(FIXTURES / "cpu-profiles" / source, tmp_path / "profile.cubex")
    exp = one(tmp_path)
    assert exp.profile is not None and exp.profile.ok and exp.processes == processes
    assert exp.profile.score_error is None
    assert "MPI" in {row["type"] for row in exp.profile.by_type}


def test_a_profile_without_time_metrics_still_gives_its_definitions(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "cpu-profiles" / "test_only_files__cube-values_example.cubex",
                tmp_path / "profile.cubex")
    exp = one(tmp_path)
    assert exp.profile is not None and exp.profile.ok
    assert exp.processes == 2 and exp.profile.locations_total == 4
    assert exp.profile.score_error == "the profile has no time/visits metrics"

"""Experiment folders written with the real OTF2 writer, and damaged ones, through the ART checks."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import tracegen as tg  # noqa: E402

from doctor.artifacts import summary  # noqa: E402
from doctor.artifacts.discover import discover  # noqa: E402
from doctor.artifacts.experiments import Experiments, summarize  # noqa: E402
from doctor.case import Case  # noqa: E402
from doctor.model import Status  # noqa: E402
from doctor.runner import run_checks  # noqa: E402

pytest.importorskip("otf2")
pytest.importorskip("pycubexr")


def read(root: Path) -> Experiments:
    return summarize(str(root), discover(root), 60)


def art(root: Path, *ids: str, job: Any = None) -> dict[str, Any]:
    """Run ART checks over root; {id: CheckResult}."""
    preset = {"job": job, "logscan": []} if job is not None else {"logscan": []}
    run = run_checks(Case(root=root, env={}), list(ids), budget_s=60, preset_facts=preset)
    return {r.check_id: r for r in run.results}


def fake_job(world_size: int) -> SimpleNamespace:
    """The bits of the job fact ART003 reads: WORLD_SIZE on the instrumented command."""
    var = SimpleNamespace(value=str(world_size), site=SimpleNamespace(file="job.sh", line=7))
    cmd = SimpleNamespace(instrumented=object(), var=lambda name: var if name == "WORLD_SIZE" else None,
                          tasks=None, launch=None, site=None, text="python -m scorep train.py")
    return SimpleNamespace(commands=[cmd], env={})


def test_launcher_only_trace_and_profile_fail_art001_with_evidence(tmp_path: Path) -> None:
    folder = tg.launcher_only(tmp_path, profile=True)
    [exp] = read(tmp_path).folders
    assert exp.processes == 1 and exp.launcher_only
    assert not exp.gpu_locations
    assert any("LocalElasticAgent._invoke_run" in r for r in exp.agent_regions)
    res = art(tmp_path, "ART001")["ART001"]
    assert res.status == Status.FAIL
    assert res.remedies == ("per-rank-launch",)
    text = " | ".join(str(e) for e in res.evidence)
    assert str(folder) in text and "_invoke_run" in text and "0 GPU location" in text
    assert "USR 99.9%" in text  # the scorep-score view of the profile


def test_per_rank_traces_with_cuda_pass_art001_to_art003(tmp_path: Path) -> None:
    tg.per_rank_job(tmp_path, 4)
    exps = read(tmp_path)
    assert [e.dir.rank for e in exps.folders] == [0, 1, 2, 3]
    exp = exps.folders[0]
    assert [loc.name for loc in exp.cuda_locations] == ["CUDA[0:7]", "CUDA[0:20]"]
    assert exp.nccl_kernels == ["ncclKernel_AllReduce_RING_LL_Sum_float"]
    assert exp.trace is not None and exp.trace.events == 1000
    res = art(tmp_path, "ART001", "ART002", "ART003", job=fake_job(4))
    assert {k: r.status for k, r in res.items()} == {"ART001": Status.PASS, "ART002": Status.PASS,
                                                      "ART003": Status.PASS}
    assert "NCCL kernels" in res["ART002"].findings[0].message


def test_per_rank_without_cuda_while_scorep_cfg_asks_fails_art002(tmp_path: Path) -> None:
    tg.rank_without_cuda(tmp_path, 0, profile=True)
    tg.rank_without_cuda(tmp_path, 1)
    res = art(tmp_path, "ART001", "ART002")
    assert res["ART001"].status == Status.PASS
    art002 = res["ART002"]
    assert art002.status == Status.FAIL and len(art002.findings) == 2
    assert art002.remedies == ("scorep-add-cuda",)
    first = art002.findings[0].evidence[0]
    assert first.text == "SCOREP_CUDA_ENABLE=kernel,memcpy,sync"
    assert first.file.endswith("scorep_rank_0/scorep.cfg") and first.line == 5


def test_no_cuda_asked_and_none_recorded_skips_art002(tmp_path: Path) -> None:
    tg.experiment(tmp_path / "scorep_rank_0", tg.Scenario(config={}))
    assert art(tmp_path, "ART002")["ART002"].status == Status.SKIP


def test_three_of_four_ranks_fail_art003_naming_the_missing_rank(tmp_path: Path) -> None:
    tg.per_rank_job(tmp_path, 4, missing=(2,))
    res = art(tmp_path, "ART003", job=fake_job(4))["ART003"]
    assert res.status == Status.FAIL
    assert "3 of 4 ranks" in res.message and "rank 2" in res.message
    assert res.remedies == ("destroy-process-group",)
    assert res.findings[0].entities["ranks"] == [2]
    assert any(e.file == "job.sh" and e.line == 7 for e in res.evidence)


def test_a_gap_in_rank_numbering_fails_art003_without_the_job(tmp_path: Path) -> None:
    tg.per_rank_job(tmp_path, 4, missing=(1,))
    res = art(tmp_path, "ART003")["ART003"]
    assert res.status == Status.FAIL and "rank 1" in res.message


def test_rank_with_only_scorep_cfg_is_a_rank_that_died(tmp_path: Path) -> None:
    tg.per_rank_job(tmp_path, 2)
    tg.rank_died(tmp_path, 2)
    res = art(tmp_path, "ART003", job=fake_job(3))["ART003"]
    assert res.status == Status.FAIL and "2 of 3" in res.message
    assert any("only MANIFEST.md, scorep.cfg" in e.text for e in res.evidence)


def test_leftover_measurement_tmp_fails_art003(tmp_path: Path) -> None:
    tg.per_rank_job(tmp_path, 1)
    tmp = tmp_path / "scorep-measurement-tmp"
    tg.scorep_cfg(tmp, {})
    res = art(tmp_path, "ART003")["ART003"]
    assert res.status == Status.FAIL
    assert "scorep-measurement-tmp left behind" in res.message
    assert res.findings[0].entities == {"folder": str(tmp)}


def test_scorep_failed_folder_counts_as_leftover(tmp_path: Path) -> None:
    (tmp_path / "scorep-failed-20240501_1200_1").mkdir()
    exps = read(tmp_path)
    assert [e.dir.kind for e in exps.leftovers] == ["failed"]


@pytest.mark.parametrize("damage", ["truncate-def", "garbage-anchor", "empty-anchor", "no-def"])
def test_damaged_archives_are_a_clear_finding_not_a_crash(tmp_path: Path, damage: str) -> None:
    folder = tg.rank_with_cuda(tmp_path, 0)
    if damage == "truncate-def":
        data = (folder / "traces.def").read_bytes()
        (folder / "traces.def").write_bytes(data[: len(data) // 2])
    elif damage == "garbage-anchor":
        (folder / "traces.otf2").write_bytes(b"\x13\x37" * 500)
    elif damage == "empty-anchor":
        (folder / "traces.otf2").write_bytes(b"")
    else:
        (folder / "traces.def").unlink()
    [exp] = read(tmp_path).folders
    assert exp.trace is not None and not exp.trace.ok
    assert exp.problems and "traces.otf2 is unreadable" in exp.problems[0]
    res = art(tmp_path, "ART001", "ART003")
    assert res["ART001"].status == Status.UNKNOWN  # could not measure: never a pass
    assert res["ART003"].status == Status.FAIL
    assert "unreadable" in " ".join(e.text for e in res["ART003"].evidence)


def test_an_empty_folder_and_a_cfg_only_folder_are_findings(tmp_path: Path) -> None:
    (tmp_path / "scorep-20240501_1200_7").mkdir()
    tg.scorep_cfg(tmp_path / "exp_a", {"SCOREP_CUDA_ENABLE": "yes"})
    exps = read(tmp_path)
    problems = {e.dir.name: e.problems[0] for e in exps.folders}
    assert problems["scorep-20240501_1200_7"].startswith("empty folder")
    assert problems["exp_a"].startswith("no trace or profile, only MANIFEST.md, scorep.cfg")
    res = art(tmp_path, "ART001", "ART002", "ART003")
    assert res["ART001"].status == Status.UNKNOWN and res["ART002"].status == Status.UNKNOWN
    assert res["ART003"].status == Status.FAIL and len(res["ART003"].findings) == 2


def test_a_reader_that_aborts_becomes_an_error_for_that_archive(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The OTF2 C library may abort() on bad input: the child dies, gpu-doctor does not."""
    folder = tg.rank_with_cuda(tmp_path, 0)
    monkeypatch.setattr(summary, "reader_argv", lambda items, isolated: [
        sys.executable, "-c", "import os, sys; sys.stderr.write('[OTF2] boom\\n'); os.abort()"])
    [exp] = read(tmp_path).folders
    assert exp.trace is not None and not exp.trace.ok
    assert "SIGABRT" in (exp.trace.error or "") and "[OTF2] boom" in (exp.trace.error or "")
    assert str(folder) in exp.path


def test_trace_summary_reads_definitions_only(tmp_path: Path) -> None:
    """Delete every event file: the summary (event counts included) does not change."""
    tg.experiment(tmp_path / "scorep_rank_0", tg.Scenario(
        [tg.Process(threads=2, gpu_streams=("CUDA[0:7]",), cuda=True)], tg.CUDA_CFG, events=20000))
    before = read(tmp_path).folders[0].trace
    for evt in (tmp_path / "scorep_rank_0" / "traces").glob("*.evt"):
        evt.unlink()
    after = read(tmp_path).folders[0].trace
    assert before is not None and after is not None and after.ok
    assert after.events == before.events == 20000
    assert after.to_json() == before.to_json()


def test_a_folder_with_trace_and_profile_uses_both(tmp_path: Path) -> None:
    tg.rank_with_cuda(tmp_path, 0, profile=True)
    [exp] = read(tmp_path).folders
    assert exp.trace is not None and exp.profile is not None and exp.profile.ok
    assert [row["type"] for row in exp.profile.by_type] == ["ALL", "CUDA", "USR", "SCOREP"]
    assert exp.profile.by_type[0]["percent"] == pytest.approx(100.0)
    top = {row["region"]: row for row in exp.profile.top_regions}
    assert top["ncclKernel_AllReduce_RING_LL_Sum_float"]["type"] == "CUDA"
    assert sum(row["time"] for row in exp.profile.by_type[1:]) == pytest.approx(exp.profile.total_time)
    assert len(exp.cuda_locations) == 2


def test_hip_gpu_locations_do_not_satisfy_a_cuda_request(tmp_path: Path) -> None:
    tg.experiment(tmp_path / "scorep_rank_0", tg.Scenario(
        [tg.Process(gpu_streams=("HIP[0:0]",))], tg.CUDA_CFG))
    res = art(tmp_path, "ART002")["ART002"]
    assert res.status == Status.FAIL
    assert any("GPU locations are not CUDA: HIP[0:0]" in e.text for e in res.evidence)


def test_experiments_fact_serialises_to_json(tmp_path: Path) -> None:
    import json

    tg.launcher_only(tmp_path)
    doc = json.loads(json.dumps(read(tmp_path).to_json()))
    [folder] = doc["folders"]
    assert folder["launcher_only"] is True and folder["kind"] == "dated"
    assert folder["config"]["SCOREP_CUDA_ENABLE"] == "kernel,memcpy,sync"
    assert folder["trace"]["processes"] == ["Process"]


def test_no_experiment_folders_skips(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print()\n")
    res = art(tmp_path, "ART001", "ART003")
    assert {r.status for r in res.values()} == {Status.SKIP}


def test_symlinked_experiment_folders_are_not_followed_as_root_in_the_gate(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere"
    tg.per_rank_job(real, 1)
    job = tmp_path / "job"
    job.mkdir()
    (job / "results").symlink_to(real)
    assert discover(job, follow_symlinks=False) == []
    assert [e.rank for e in discover(job)] == [0]
    shutil.rmtree(real)


def test_cuda_api_without_gpu_streams_warns_that_kernels_were_not_recorded(tmp_path: Path) -> None:
    tg.experiment(tmp_path / "scorep_rank_0", tg.Scenario(
        [tg.Process(cuda=True)], {"SCOREP_CUDA_ENABLE": "'runtime'"}))
    res = art(tmp_path, "ART002")["ART002"]
    assert res.status == Status.WARN
    assert "no GPU activity" in res.message
    assert res.evidence[0].text == "SCOREP_CUDA_ENABLE=runtime"
    assert res.remedies

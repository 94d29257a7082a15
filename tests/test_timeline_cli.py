"""`gpu-doctor timeline`: what a user sees on stdout/stderr, the JSON document, exit codes,
scaling across runs, profiles, bad input, and the real Score-P output in ../shared/fixtures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from timeline_tracegen import compute, write_rank_trace

from doctor.cli import main as gpu_doctor
from doctor.timeline import analyse
from doctor.timeline.cli import main

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "scorep"
MS = 1000


def needs_fixture(name: str) -> Path:
    path = FIXTURES / name
    if not path.is_dir():
        pytest.skip(f"real Score-P output {path} is absent (see ../shared/fixtures/scorep/PROVENANCE.md)")
    return path


def ddp_rank(folder: Path, step: int, exposed: int, steps: int = 3) -> Path:
    """A DDP rank: per step, `step - exposed` ms of compute, then an AllReduce that overlaps
    compute by half of the compute time and sticks out by `exposed` ms."""
    from timeline_tracegen import comm

    kernels, windows = [], []
    work = step - exposed
    for i in range(steps):
        t = i * step
        kernels.append(compute(7, t, t + work))
        if exposed:
            kernels.append(comm(20, t + work // 2, t + step))
        windows.append((t, t + step))
    return write_rank_trace(folder, kernels, windows, device=int(folder.name.rsplit("_", 1)[-1]) % 8,
                            resolution=MS)


def test_table_shows_the_hidden_and_exposed_communication(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ddp_rank(tmp_path / "scorep_rank_0", step=1100, exposed=100)
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Per step, per rank" in out and "exposed" in out
    assert ("NCCL kernels Σ 1.800 s in steps; on the timeline 1.800 s, of which 1.500 s hidden under compute "
            "and 300 ms exposed = 9.1 % of the wall time") in out
    assert "Σ compute + Σ comm = 4.800 s exceeds the wall time 3.300 s" in out


def test_json_document_has_the_documented_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ddp_rank(tmp_path / "scorep_rank_0", step=1100, exposed=100)
    assert main([str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "gpu-doctor.timeline/1" and doc["window"] == "region"
    rank = doc["runs"][0]["rank_timelines"][0]
    assert rank["rank"] == 0 and rank["gpu_locations"] == ["CUDA[0:7]", "CUDA[0:20]"]
    steps = rank["steps"]
    assert steps["count"] == 3 and steps["median_wall_s"] == 1.1 and len(steps["list"]) == 3
    mean = steps["mean"]
    assert (mean["comm_s"], mean["hidden_comm_s"], mean["exposed_comm_s"]) == (0.6, 0.5, 0.1)
    assert mean["summed"] == {"compute_s": 1.0, "comm_s": 0.6, "other_s": 0.0}
    assert rank["whole_run"]["wall_s"] == 3.3 and rank["whole_run"]["idle_s"] == 0.0


def test_scaling_table_across_runs_at_different_rank_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ddp_rank(tmp_path / "run_1gpu" / "scorep_rank_0", step=1000, exposed=0)
    for r in range(4):
        ddp_rank(tmp_path / "run_4gpu" / f"scorep_rank_{r}", step=1100, exposed=100)
    report = analyse([tmp_path])
    rows = [(row.run, row.ranks, row.time, round(row.speedup, 4), round(row.efficiency, 4),
             round(row.exposed_comm_share or 0, 4)) for row in report.scaling]
    assert rows == [("run_1gpu", 1, 1.0, 1.0, 1.0, 0.0), ("run_4gpu", 4, 1.1, 3.6364, 0.9091, 0.0909)]
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Scaling" in out and "91 %" in out and "3.64x" in out


def test_runs_given_as_several_paths_make_a_scaling_table(tmp_path: Path) -> None:
    ddp_rank(tmp_path / "a" / "scorep_rank_0", step=1000, exposed=0)
    ddp_rank(tmp_path / "b" / "scorep_rank_0", step=1200, exposed=200)
    ddp_rank(tmp_path / "b" / "scorep_rank_1", step=1200, exposed=200)
    report = analyse([tmp_path / "b", tmp_path / "a"])
    assert [(row.run, row.ranks, round(row.efficiency, 4)) for row in report.scaling] == \
        [("a", 1, 1.0), ("b", 2, 0.8333)]


def test_no_experiment_folders_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "logs").mkdir()
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no Score-P experiment folders" in err


def test_missing_path_and_bad_regex_are_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "nope")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    assert main([str(tmp_path), "--step-regex", "(unclosed"]) == 2
    assert "invalid --step-regex" in capsys.readouterr().err


def test_corrupt_trace_is_named_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "scorep_rank_0"
    broken.mkdir()
    (broken / "traces.otf2").write_bytes(b"\x00garbage, not an OTF2 anchor file\n")
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu-doctor timeline: error: ") and "traces.otf2" in err
    assert "Traceback" not in err


def test_truncated_events_are_a_note_and_the_other_ranks_still_count(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    ddp_rank(tmp_path / "scorep_rank_0", step=1100, exposed=100)
    bad = ddp_rank(tmp_path / "scorep_rank_1", step=1100, exposed=100)
    for evt in (bad / "traces").glob("*.evt"):
        evt.write_bytes(evt.read_bytes()[:7])
    assert main([str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "scorep_rank_1" in captured.err and "cannot read the events" in captured.err
    assert "Traceback" not in captured.err + captured.out


def test_rank_that_died_before_flushing_is_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ddp_rank(tmp_path / "scorep_rank_0", step=1000, exposed=0)
    (tmp_path / "scorep-measurement-tmp").mkdir()
    assert main([str(tmp_path), "--json"]) == 0
    captured = capsys.readouterr()
    assert "scorep-measurement-tmp: no traces.otf2 or profile.cubex" in captured.err
    assert "scorep-measurement-tmp" in json.loads(captured.out)["runs"][0]["notes"][0]


def test_every_step_listing_and_the_gpu_doctor_entry_point(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    ddp_rank(tmp_path / "scorep_rank_0", step=1100, exposed=100)
    assert gpu_doctor(["timeline", str(tmp_path), "--steps", "--window", "iteration"]) == 0
    out = capsys.readouterr().out
    assert "every step" in out and "2.200" in out  # the third step starts at 2.2 s


def test_profile_only_experiment_is_labelled_as_sums(capsys: pytest.CaptureFixture[str]) -> None:
    lulesh = needs_fixture("cuda-profile-lulesh")
    report = analyse([lulesh], step_regex=r"CalcVolumeForceForElems$")
    profile = report.runs[0].profiles[0]
    assert report.runs[0].source == "profile" and not report.runs[0].ranks
    assert profile.compute_visits > 0 and profile.comm_sum == 0 and 0 < profile.compute_sum < profile.wall
    assert profile.step_count == 45
    assert main([str(lulesh), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["runs"][0]["profiles"][0]["kind"] == "sums, no overlap information"
    assert main([str(lulesh)]) == 0
    assert "sums, no overlap information" in capsys.readouterr().out


def test_real_hip_trace_has_gpu_locations_that_are_not_cuda() -> None:
    hip = needs_fixture("hip-trace-mi300")
    rank = analyse([hip]).runs[0].ranks[0]
    assert rank.gpu_locations == ("HIP[0:0]", "HIP[1:0]") and rank.devices == (0, 1)
    b = rank.whole_run
    # heavy_kernel on HIP[0:0] and light_kernel on HIP[1:0], one after the other.
    assert (b.compute, b.compute_sum, b.busy, b.comm) == (23_545_488_043, 23_545_488_043, 23_545_488_043, 0)
    assert b.wall == 26_664_065_725 and b.resolution == 3_699_958_577


def test_real_mpi_trace_without_gpus_gives_two_ranks_and_says_why_nothing_is_busy() -> None:
    pingpong = needs_fixture("mpi-pingpong-trace")
    ranks = analyse([pingpong]).runs[0].ranks
    assert [r.rank for r in ranks] == [0, 1]
    assert all(r.whole_run.busy == 0 and "no GPU locations" in r.notes[0] for r in ranks)


def test_the_timeline_package_imports_no_heavy_library() -> None:
    code = ("import sys, doctor.timeline, doctor.timeline.cli; "
            "print(sorted(m for m in ('otf2', '_otf2', 'pycubexr', 'rich', 'textual', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

"""The timeline breakdown on traces whose right answer is known by construction.

Every trace here is written with the `otf2` writer, shaped like Score-P's per-rank CUDA output
(`CUDA[dev:stream]` GPU locations, kernels as regions, `train_step` on the CPU thread), with a
timer of 1000 ticks per second, so one tick is one millisecond and every expected number is exact.
Every test runs twice, once through each reader (the C extension and the Python callbacks):
both must give these exact numbers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from timeline_tracegen import (
    GEMM,
    Kernel,
    Process,
    comm,
    compute,
    require_c_reader,
    write_rank_trace,
    write_trace,
)

from doctor.timeline import Breakdown, RankTimeline, analyse

MS = 1000  # ticks per second: one tick = 1 ms


@pytest.fixture(autouse=True, params=["c", "python"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The reader `analyse` picks by default ("auto") for the test."""
    if request.param == "c":
        require_c_reader()
    monkeypatch.setenv("GPU_DOCTOR_TIMELINE_READER", request.param)
    return str(request.param)


def only_rank(folder: Path, **kwargs: object) -> RankTimeline:
    report = analyse([folder], **kwargs)  # type: ignore[arg-type]
    ranks = [rank for run in report.runs for rank in run.ranks]
    assert len(ranks) == 1, report
    assert ranks[0].reader == os.environ["GPU_DOCTOR_TIMELINE_READER"]
    return ranks[0]


def figures(b: Breakdown) -> dict[str, int]:
    return {"wall": b.wall, "busy": b.busy, "idle": b.idle, "compute": b.compute, "comm": b.comm,
            "hidden": b.hidden, "exposed": b.exposed, "compute_sum": b.compute_sum, "comm_sum": b.comm_sum}


def test_fully_overlapped_communication_is_not_exposed(tmp_path: Path) -> None:
    # Backward compute on the default stream CUDA[0:7], the AllReduce buckets on CUDA[0:20]
    # entirely inside it: the seed's 8-GPU picture.
    kernels = [compute(7, 0, 300, GEMM), compute(7, 300, 600), compute(7, 600, 1000, GEMM),
               comm(20, 100, 500), comm(20, 500, 900)]
    rank = only_rank(write_rank_trace(tmp_path / "scorep_rank_0", kernels, [(0, 1000)], resolution=MS))
    assert figures(rank.whole_run) == {"wall": 1000, "busy": 1000, "idle": 0, "compute": 1000, "comm": 800,
                                       "hidden": 800, "exposed": 0, "compute_sum": 1000, "comm_sum": 800}
    assert rank.whole_run.compute_kernels == 3 and rank.whole_run.comm_kernels == 2


def test_summed_view_double_counts_what_the_timeline_shows_hidden(tmp_path: Path) -> None:
    # Lesson 8: summed kernel time exceeds the wall time, and the summed NCCL time is far more
    # than the communication that really costs wall time.
    kernels = [compute(7, 0, 1000), comm(20, 50, 950)]
    b = only_rank(write_rank_trace(tmp_path / "r", kernels, [(0, 1000)], resolution=MS)).whole_run
    assert b.compute_sum + b.comm_sum == 1900 > b.wall == 1000
    assert b.comm_sum == 900 and b.exposed == 0
    assert b.busy == 1000  # the timeline's busy time never exceeds the wall


def test_fully_serial_communication_is_all_exposed(tmp_path: Path) -> None:
    kernels = [compute(7, 0, 400), comm(20, 400, 1000)]
    rank = only_rank(write_rank_trace(tmp_path / "r", kernels, [(0, 1000)], resolution=MS))
    assert figures(rank.whole_run) == {"wall": 1000, "busy": 1000, "idle": 0, "compute": 400, "comm": 600,
                                       "hidden": 0, "exposed": 600, "compute_sum": 400, "comm_sum": 600}


def test_serial_communication_on_the_same_stream_is_all_exposed(tmp_path: Path) -> None:
    kernels = [compute(7, 0, 250), comm(7, 250, 500), compute(7, 500, 750), comm(7, 750, 1000)]
    b = only_rank(write_rank_trace(tmp_path / "r", kernels, resolution=MS)).whole_run
    assert (b.comm, b.hidden, b.exposed, b.busy) == (500, 0, 500, 1000)


def test_partial_overlap_splits_communication_into_hidden_and_exposed(tmp_path: Path) -> None:
    kernels = [compute(7, 0, 600), comm(20, 400, 1000)]
    rank = only_rank(write_rank_trace(tmp_path / "r", kernels, [(0, 1000)], resolution=MS))
    assert figures(rank.whole_run) == {"wall": 1000, "busy": 1000, "idle": 0, "compute": 600, "comm": 600,
                                       "hidden": 200, "exposed": 400, "compute_sum": 600, "comm_sum": 600}


def test_multiple_streams_are_united_not_summed(tmp_path: Path) -> None:
    # Two compute streams overlapping each other, two NCCL streams overlapping each other.
    kernels = [compute(7, 0, 500), compute(13, 250, 750), comm(20, 600, 900), comm(21, 700, 1000)]
    rank = only_rank(write_rank_trace(tmp_path / "r", kernels, [(0, 1000)], resolution=MS))
    assert figures(rank.whole_run) == {"wall": 1000, "busy": 1000, "idle": 0, "compute": 750, "comm": 400,
                                       "hidden": 150, "exposed": 250, "compute_sum": 1000, "comm_sum": 600}
    assert rank.gpu_locations == ("CUDA[0:7]", "CUDA[0:13]", "CUDA[0:20]", "CUDA[0:21]")
    assert rank.devices == (0,)


def test_idle_gaps_are_wall_minus_busy(tmp_path: Path) -> None:
    kernels = [compute(7, 100, 300), comm(20, 500, 600), compute(7, 800, 900)]
    rank = only_rank(write_rank_trace(tmp_path / "r", kernels, [(0, 450), (450, 1000)], program=(0, 1000),
                                      resolution=MS))
    assert figures(rank.whole_run) == {"wall": 1000, "busy": 400, "idle": 600, "compute": 300, "comm": 100,
                                       "hidden": 0, "exposed": 100, "compute_sum": 300, "comm_sum": 100}
    assert rank.steps is not None and rank.steps.count == 2
    first, second = (step.breakdown for step in rank.steps.kept)
    assert (first.wall, first.busy, first.idle, first.comm) == (450, 200, 250, 0)
    assert (second.wall, second.busy, second.idle, second.exposed) == (550, 200, 350, 100)


def test_steps_split_kernels_that_cross_their_boundary(tmp_path: Path) -> None:
    kernels = [compute(7, 400, 600), comm(20, 450, 700)]
    rank = only_rank(write_rank_trace(tmp_path / "r", kernels, [(0, 500), (500, 1000)], resolution=MS))
    assert rank.steps is not None
    first, second = (step.breakdown for step in rank.steps.kept)
    assert (first.compute, first.compute_sum, first.comm, first.hidden) == (100, 100, 50, 50)
    assert (second.compute, second.comm, second.hidden, second.exposed) == (100, 200, 100, 100)
    assert rank.steps.total.comm == rank.whole_run.comm == 250
    assert (rank.steps.median_wall, rank.steps.min_wall, rank.steps.max_wall) == (0.5, 0.5, 0.5)
    assert [step.start for step in rank.steps.kept] == [0, 500]


def test_iteration_window_keeps_the_gpu_work_that_outlives_the_step_region(tmp_path: Path) -> None:
    # The CPU leaves train_step at 300 while its kernels run until 450; the next step starts at 500.
    kernels = [compute(7, 100, 450), compute(7, 550, 700)]
    folder = write_rank_trace(tmp_path / "r", kernels, [(0, 300), (500, 800)], program=(0, 1000), resolution=MS)
    by_region = only_rank(folder).steps
    by_iteration = only_rank(folder, window="iteration").steps
    assert by_region is not None and by_iteration is not None
    assert [(s.breakdown.wall, s.breakdown.compute) for s in by_region.kept] == [(300, 200), (300, 150)]
    assert [(s.breakdown.wall, s.breakdown.compute) for s in by_iteration.kept] == [(500, 350), (300, 150)]


def test_steps_found_by_python_binding_names_and_nested_matches_count_once(tmp_path: Path) -> None:
    # HF Trainer: `transformers.trainer:Trainer.training_step` inside the user's `__main__:train_step`.
    folder = write_rank_trace(tmp_path / "r", [compute(7, 0, 100)], [(0, 400), (500, 900)],
                              step_region="__main__:train_step", program=(0, 1000), resolution=MS,
                              cpu_regions=[("transformers.trainer:Trainer.training_step", 10, 390),
                                           ("transformers.trainer:Trainer.training_step", 510, 890)])
    steps = only_rank(folder).steps
    assert steps is not None and steps.count == 2
    assert [s.breakdown.wall for s in steps.kept] == [400, 400]


def test_step_regex_picks_the_users_region(tmp_path: Path) -> None:
    folder = write_rank_trace(tmp_path / "r", [compute(7, 0, 100)], [(0, 250), (250, 500)],
                              step_region="my_iteration", program=(0, 1000), resolution=MS)
    default = only_rank(folder)
    assert default.steps is None and any("no step region matches" in note for note in default.notes)
    custom = only_rank(folder, step_regex=r"^my_iteration$").steps
    assert custom is not None and custom.count == 2 and custom.region == "my_iteration"


def test_idle_markers_are_not_gpu_work_and_copies_are_not_compute(tmp_path: Path) -> None:
    kernels = [Kernel(7, 0, 500, "COMPUTE IDLE"), compute(7, 500, 700),
               Kernel(9, 600, 900, "[CUDA memcpy HtoD]"), comm(20, 800, 1000)]
    b = only_rank(write_rank_trace(tmp_path / "r", kernels, resolution=MS)).whole_run
    assert (b.busy, b.compute, b.other, b.comm, b.hidden, b.exposed) == (500, 200, 300, 200, 0, 200)


def test_score_p_9_accelerator_groups_and_legacy_process_groups_agree(tmp_path: Path) -> None:
    kernels = [compute(7, 0, 600), comm(20, 400, 1000)]
    new = only_rank(write_rank_trace(tmp_path / "new", kernels, resolution=MS)).whole_run
    old = only_rank(write_rank_trace(tmp_path / "old", kernels, resolution=MS, legacy_groups=True)).whole_run
    assert new == old and new.exposed == 400


def test_one_trace_with_several_processes_gives_one_timeline_per_rank(tmp_path: Path) -> None:
    processes = [Process((compute(7, 0, 600), comm(20, 400, 1000)), ((0, 1000),), device=0, name="MPI Rank 0"),
                 Process((compute(7, 0, 1000), comm(20, 400, 1000)), ((0, 1000),), device=1, name="MPI Rank 1")]
    report = analyse([write_trace(tmp_path / "mpi", processes, resolution=MS)])
    ranks = report.runs[0].ranks
    assert {rank.reader for rank in ranks} == {os.environ["GPU_DOCTOR_TIMELINE_READER"]}
    assert [(r.rank, r.devices, r.whole_run.exposed, r.whole_run.hidden) for r in ranks] == \
        [(0, (0,), 400, 200), (1, (1,), 0, 600)]


def test_timer_resolution_converts_ticks_to_seconds(tmp_path: Path) -> None:
    # 1 GHz ticks: 2.375 s of AllReduce hidden under 2.5 s of backward compute.
    kernels = [compute(7, 0, 2_500_000_000), comm(20, 100_000_000, 2_475_000_000)]
    rank = only_rank(write_rank_trace(tmp_path / "r", kernels))
    doc = rank.whole_run.to_json()
    assert doc["summed"]["comm_s"] == 2.375 and doc["exposed_comm_s"] == 0.0
    assert doc["wall_s"] == 2.5 and doc["exposed_comm_share"] == 0.0


@pytest.mark.parametrize("window", ["region", "iteration"])
def test_a_rank_without_gpu_locations_says_cuda_was_not_recorded(tmp_path: Path, window: str) -> None:
    rank = only_rank(write_rank_trace(tmp_path / "r", [], [(0, 500)], program=(0, 1000), resolution=MS),
                     window=window)
    assert rank.whole_run.busy == 0 and rank.whole_run.idle == 1000
    assert "--cuda" in rank.notes[0]

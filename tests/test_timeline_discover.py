"""Which folders `gpu-doctor timeline` reads, and how it groups them into runs."""

from __future__ import annotations

from pathlib import Path

from timeline_tracegen import Process, compute, write_rank_trace, write_trace

from doctor.timeline import analyse
from doctor.timeline.discover import group_runs


def rank(folder: Path) -> Path:
    return write_rank_trace(folder, [compute(7, 0, 10)], resolution=1000)


def test_per_rank_folders_form_one_run_in_rank_order_and_other_experiments_their_own(tmp_path: Path) -> None:
    for r in (10, 2, 0, 1):
        rank(tmp_path / f"scorep_rank_{r}")
    (tmp_path / "scorep-failed-xyz").mkdir()
    write_trace(tmp_path / "scorep-20240101_1200_42",
                [Process((compute(7, 0, 10),), name="MPI Rank 0"), Process((compute(7, 0, 10),), name="MPI Rank 1")])
    (tmp_path / "scorep_rank_0" / "traces" / "scorep_rank_9").mkdir()  # never descend into an experiment
    runs = group_runs([tmp_path])
    assert [(run.label, [e.name for e in run.experiments]) for run in runs] == [
        ("scorep-20240101_1200_42", ["scorep-20240101_1200_42"]),
        (tmp_path.name, ["scorep-failed-xyz", "scorep_rank_0", "scorep_rank_1", "scorep_rank_2", "scorep_rank_10"]),
    ]


def test_runs_in_nested_folders_are_labelled_by_their_path(tmp_path: Path) -> None:
    rank(tmp_path / "scaling" / "run_1gpu" / "scorep_rank_0")
    for r in range(2):
        rank(tmp_path / "scaling" / "run_2gpu" / f"scorep_rank_{r}")
    (tmp_path / "scaling" / "logs").mkdir()
    runs = group_runs([tmp_path])
    assert [(run.label, len(run.experiments)) for run in runs] == \
        [("scaling/run_1gpu", 1), ("scaling/run_2gpu", 2)]


def test_path_may_be_the_anchor_file_or_the_experiment_itself(tmp_path: Path) -> None:
    folder = rank(tmp_path / "scorep_rank_3")
    for path in (folder / "traces.otf2", folder):
        report = analyse([path])
        assert [(r.rank, r.whole_run.compute) for run in report.runs for r in run.ranks] == [(3, 10)]

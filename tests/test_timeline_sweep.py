"""The counter sweep against plain interval arithmetic, and its handling of broken streams."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from timeline_tracegen import Kernel, comm, compute, write_rank_trace

from doctor.timeline import analyse
from doctor.timeline.classify import Kind
from doctor.timeline.sweep import RankSweep

Interval = tuple[int, int]


def union(intervals: list[Interval]) -> list[Interval]:
    """Merge overlapping intervals (the textbook way: sort, then sweep)."""
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def length(intervals: list[Interval]) -> int:
    return sum(end - start for start, end in union(intervals))


def intersection(a: list[Interval], b: list[Interval]) -> list[Interval]:
    return [(max(s1, s2), min(e1, e2)) for s1, e1 in union(a) for s2, e2 in union(b) if max(s1, s2) < min(e1, e2)]


def clip(intervals: list[Interval], window: Interval) -> list[Interval]:
    return [(max(s, window[0]), min(e, window[1])) for s, e in intervals if max(s, window[0]) < min(e, window[1])]


def random_stream(rng: random.Random, stream: int, kind: str, horizon: int) -> list[Kernel]:
    """Back-to-back or gapped kernels on one stream (a stream runs one kernel at a time)."""
    kernels: list[Kernel] = []
    t = rng.randrange(0, 50)
    while True:
        start = t + rng.choice([0, 0, rng.randrange(1, 80)])
        end = start + rng.randrange(1, 120)
        if end > horizon:
            return kernels
        kernels.append(comm(stream, start, end) if kind == "comm" else compute(stream, start, end))
        t = end


@pytest.mark.parametrize("seed", range(12))
def test_sweep_matches_interval_arithmetic_on_random_traces(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    horizon = 2000
    kernels = []
    streams = [(7, "compute"), (20, "comm")] + rng.sample([(13, "compute"), (21, "comm")], rng.randrange(0, 3))
    for stream, kind in streams:
        kernels += random_stream(rng, stream, kind, horizon)
    cuts = sorted(rng.sample(range(1, horizon), 5))
    steps = [(cuts[0], cuts[1]), (cuts[2], cuts[3])]
    folder = write_rank_trace(tmp_path / "r", kernels, steps, program=(0, horizon), resolution=1000)
    rank = analyse([folder]).runs[0].ranks[0]

    comp = [(k.start, k.end) for k in kernels if not k.name.startswith("nccl")]
    nccl = [(k.start, k.end) for k in kernels if k.name.startswith("nccl")]
    for window, got in [((0, horizon), rank.whole_run)] + [
            (w, s.breakdown) for w, s in zip(steps, rank.steps.kept if rank.steps else [], strict=True)]:
        c, m = clip(comp, window), clip(nccl, window)
        assert got.wall == window[1] - window[0]
        assert got.busy == length(c + m)
        assert got.compute == length(c)
        assert got.comm == length(m)
        assert got.hidden == length(intersection(c, m))
        assert got.exposed == length(m) - length(intersection(c, m))
        assert got.compute_sum == sum(e - s for s, e in c)
        assert got.comm_sum == sum(e - s for s, e in m)


def test_unmatched_leave_and_unclosed_kernel_are_noted_not_fatal() -> None:
    sweep = RankSweep(start=0, resolution=1000)
    sweep.kernel_leave(10, Kind.COMPUTE)         # the trace began inside a kernel
    sweep.kernel_enter(20, Kind.COMM)
    notes = sweep.finish(100)                     # ... and ends inside another one
    b = sweep.whole_run()
    assert (b.wall, b.comm, b.exposed) == (100, 80, 80)
    assert any("never left" in n for n in notes) and any("without a matching Enter" in n for n in notes)


def test_events_that_go_back_in_time_are_not_counted_twice() -> None:
    sweep = RankSweep(start=0, resolution=1000)
    sweep.kernel_enter(0, Kind.COMPUTE)
    sweep.kernel_leave(100, Kind.COMPUTE)
    sweep.kernel_enter(50, Kind.COMPUTE)          # a clock jump backwards
    sweep.kernel_leave(150, Kind.COMPUTE)
    notes = sweep.finish(150)
    assert sweep.whole_run().compute == 150
    assert any("earlier than the one before" in n for n in notes)


def test_a_step_cut_off_by_the_end_of_the_trace_is_left_out() -> None:
    sweep = RankSweep(start=0, resolution=1000)
    sweep.step_enter(0)
    sweep.step_leave(40)
    sweep.step_enter(50)
    notes = sweep.finish(100)
    steps = sweep.steps("train_step")
    assert steps is not None and steps.count == 1
    assert any("no end" in n for n in notes)


def test_only_the_first_steps_are_kept_one_by_one_but_totals_cover_all() -> None:
    sweep = RankSweep(start=0, resolution=1000, keep_steps=3)
    for i in range(10):
        sweep.step_enter(i * 10)
        sweep.kernel_enter(i * 10, Kind.COMPUTE)
        sweep.kernel_leave(i * 10 + 4, Kind.COMPUTE)
        sweep.step_leave(i * 10 + 8)
    notes = sweep.finish(100)
    steps = sweep.steps("train_step")
    assert steps is not None
    assert (steps.count, len(steps.kept), steps.total.compute, steps.total.wall) == (10, 3, 40, 80)
    assert steps.mean.compute == 4 and steps.median_wall == 0.008
    assert any("the first 3 are listed" in n for n in notes)

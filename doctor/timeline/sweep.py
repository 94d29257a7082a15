"""Interval arithmetic over a time-ordered event stream, with counters instead of interval lists.

The OTF2 global event reader merges every location's (time-sorted) events into one
time-ordered stream. For one rank we keep, per category, how many kernels are running right
now across all its GPU streams; between two events nothing changes, so the time since the last
event is added to

    busy     if any kernel runs                  (union of all GPU activity)
    compute  if a compute kernel runs            (union of compute kernels)
    comm     if a communication kernel runs      (union of NCCL kernels)
    hidden   if both run                         (|comm ∩ compute|)
    *_sum    count x time                        (the plain sum of kernel durations)

Exposed communication is comm - hidden, idle is wall - busy. Memory is O(1) per rank whatever
the trace size. Step windows take a snapshot of the running totals at their edges, so a step's
breakdown is a difference of two snapshots.
"""

from __future__ import annotations

from array import array
from typing import Any

from doctor.timeline.classify import Kind
from doctor.timeline.model import STEP_ROW, Breakdown, StepSummary
from doctor.wording import count

# Order of the running totals in a snapshot (Breakdown's fields after `resolution` and `wall`).
_COMPUTE, _COMM = int(Kind.COMPUTE), int(Kind.COMM)
_TOTALS = ("busy", "compute", "comm", "hidden", "other", "compute_sum", "comm_sum", "other_sum",
           "compute_kernels", "comm_kernels")


class RankSweep:
    """Running state of one rank while its events stream by."""

    def __init__(self, start: int, resolution: int, window: str = "region", keep_steps: int = 10_000):
        self.origin = start
        self.last = start
        self.resolution = resolution
        self.window = window
        self.keep_steps = keep_steps
        self.active = [0, 0, 0, 0]             # running kernels per Kind
        self.totals = [0] * len(_TOTALS)
        self.unmatched_leaves = 0
        self.out_of_order = 0
        self.step_depth = 0
        self.step_open: tuple[int, list[int]] | None = None   # (time, totals) at the step's start
        self.step_closed: tuple[int, list[int]] | None = None  # (time, totals) at its end
        self.step_count = 0
        self.step_total = [0] * (len(_TOTALS) + 1)
        self.step_walls = array("q")
        self.kept = array("q")                 # StepSummary.rows: STEP_ROW values per kept step

    @classmethod
    def restore(cls, start: int, resolution: int, window: str, keep_steps: int,
                state: dict[str, Any]) -> RankSweep:
        """A sweep in the state the C reader (`_sweep.c`) left it in, ready for `finish`."""
        sweep = cls(start, resolution, window, keep_steps)
        sweep.last = state["last"]
        sweep.active = list(state["active"])
        sweep.totals = list(state["totals"])
        sweep.unmatched_leaves = state["unmatched_leaves"]
        sweep.out_of_order = state["out_of_order"]
        sweep.step_depth = state["step_depth"]
        sweep.step_open = _snapshot(state["step_open"])
        sweep.step_closed = _snapshot(state["step_closed"])
        sweep.step_count = state["step_count"]
        sweep.step_total = list(state["step_total"])
        sweep.step_walls = array("q")
        sweep.step_walls.frombytes(state["step_walls"])
        sweep.kept = array("q")
        sweep.kept.frombytes(state["kept"])
        return sweep

    def advance(self, t: int) -> None:
        """Account the time from the last event to `t` to whatever was running."""
        dt = t - self.last
        if dt <= 0:
            if dt < 0:
                self.out_of_order += 1
            return
        self.last = t
        _, compute, comm, other = self.active
        if compute or comm or other:
            totals = self.totals
            totals[0] += dt
            if compute:
                totals[1] += dt
                totals[5] += compute * dt
            if comm:
                totals[2] += dt
                totals[6] += comm * dt
                if compute:
                    totals[3] += dt
            if other:
                totals[4] += dt
                totals[7] += other * dt

    def kernel_enter(self, t: int, kind: int) -> None:
        self.advance(t)
        self.active[kind] += 1
        if kind == _COMPUTE:
            self.totals[8] += 1
        elif kind == _COMM:
            self.totals[9] += 1

    def kernel_leave(self, t: int, kind: int) -> None:
        self.advance(t)
        if self.active[kind]:
            self.active[kind] -= 1
        else:
            self.unmatched_leaves += 1

    def step_enter(self, t: int) -> None:
        self.step_depth += 1
        if self.step_depth > 1:       # a nested match: only the outermost step counts
            return
        self.advance(t)
        if self.window == "iteration" and self.step_open is not None:
            self._close_step(self.last, self.totals)
        self.step_open = (self.last, list(self.totals))

    def step_leave(self, t: int) -> None:
        if self.step_depth == 0:
            self.unmatched_leaves += 1
            return
        self.step_depth -= 1
        if self.step_depth or self.step_open is None:
            return
        self.advance(t)
        if self.window == "iteration":
            self.step_closed = (self.last, list(self.totals))
        else:
            self._close_step(self.last, self.totals)

    def _close_step(self, end: int, totals: list[int]) -> None:
        assert self.step_open is not None
        start, before = self.step_open
        self.step_open = None
        self.step_closed = None
        values = [end - start] + [a - b for a, b in zip(totals, before, strict=True)]
        for i, v in enumerate(values):
            self.step_total[i] += v
        self.step_walls.append(values[0])
        if len(self.kept) < self.keep_steps * STEP_ROW:
            self.kept.append(self.step_count)
            self.kept.append(start - self.origin)
            self.kept.extend(values)
        self.step_count += 1

    def finish(self, end: int) -> list[str]:
        """Close the sweep at the trace's end; returns notes about what did not add up."""
        notes = []
        running = sum(self.active)
        self.advance(max(end, self.last))
        if self.window == "iteration" and self.step_open is not None and self.step_closed is not None:
            self._close_step(*self.step_closed)
        if self.step_open is not None:
            notes.append("the last step has no end (the trace stops inside it); it is left out")
        if running:
            notes.append(f"{count(running, 'kernel')} never left; counted up to the end of the trace")
        if self.unmatched_leaves:
            notes.append(f"{count(self.unmatched_leaves, 'Leave record')} without a matching Enter ignored")
        if self.out_of_order:
            notes.append(f"{count(self.out_of_order, 'event')} earlier than the one before them (clock "
                         "trouble); their time was not counted twice")
        if self.step_count > len(self.kept) // STEP_ROW:
            notes.append(f"{count(self.step_count, 'step')}; the first {len(self.kept) // STEP_ROW} are listed one by one")
        return notes

    def whole_run(self) -> Breakdown:
        return Breakdown(self.resolution, self.last - self.origin, *self.totals)

    def steps(self, region: str) -> StepSummary | None:
        if not self.step_count:
            return None
        walls = sorted(self.step_walls)
        mid = len(walls) // 2
        median = walls[mid] if len(walls) % 2 else (walls[mid - 1] + walls[mid]) / 2
        r = self.resolution
        return StepSummary(region, self.step_count, Breakdown(r, *self.step_total), median / r,
                           walls[0] / r, walls[-1] / r, self.kept)


def _snapshot(value: tuple[int, list[int]] | None) -> tuple[int, list[int]] | None:
    return None if value is None else (value[0], list(value[1]))

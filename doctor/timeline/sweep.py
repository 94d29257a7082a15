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
the trace size (plus one value per step). Step windows take a snapshot of the running totals at
their edges, so a step's breakdown is a difference of two snapshots.

Beside that, for Holistic Trace Analysis' metrics (`model.HtaView`): the first kernel's start,
the end of the last busy stretch, the idle gaps between consecutive kernels of each stream
(host wait / kernel wait / other, as HTA sorts them), and a snapshot of all of it at the start
of the last step (HTA leaves the last profiler step out); for stragglers, the start of each
step's last NCCL kernel (absolute ticks); for CPU-only runs, the exclusive time and visits of
every region entered on the CPU threads.

Every running total is a 64-bit integer in the C reader: a sum that would overflow sets
`overflow` (and stops growing) in both readers, and the trace is refused rather than shown.
"""

from __future__ import annotations

from array import array
from typing import Any

from doctor.timeline.classify import Kind
from doctor.timeline.model import STEP_ROW, Breakdown, HtaCut, StepSummary
from doctor.wording import count

# Order of the running totals in a snapshot (Breakdown's fields after `resolution` and `wall`).
_COMPUTE, _COMM = int(Kind.COMPUTE), int(Kind.COMM)
_TOTALS = ("busy", "compute", "comm", "hidden", "other", "compute_sum", "comm_sum", "other_sum",
           "compute_kernels", "comm_kernels")
INT64_MAX = (1 << 63) - 1
HOST_WAIT, KERNEL_WAIT, OTHER_WAIT = 0, 1, 2


class RankSweep:
    """Running state of one rank while its events stream by."""

    def __init__(self, start: int, resolution: int, window: str = "region", keep_steps: int = 10_000,
                 gap_threshold: int = 0):
        self.origin = start
        self.last = start
        self.resolution = resolution
        self.window = window
        self.keep_steps = keep_steps
        self.gap_threshold = gap_threshold    # gaps shorter than this are kernel waits (HTA: 30 ns)
        self.active = [0, 0, 0, 0]             # running kernels per Kind
        self.totals = [0] * len(_TOTALS)
        self.unmatched_leaves = 0
        self.out_of_order = 0
        self.overflow = False
        self.step_depth = 0
        self.step_open: tuple[int, list[int]] | None = None   # (time, totals) at the step's start
        self.step_closed: tuple[int, list[int]] | None = None  # (time, totals) at its end
        self.step_count = 0
        self.step_total = [0] * (len(_TOTALS) + 1)
        self.step_walls = array("q")
        self.kept = array("q")                 # StepSummary.rows: STEP_ROW values per kept step
        self.first_kernel = -1                 # absolute ticks of the first kernel's start
        self.busy_end = -1                     # absolute ticks when the GPU last went idle
        self.gaps = [0, 0, 0]                  # host wait, kernel wait, other (ticks)
        self.prev_end: dict[int, int] = {}     # per stream: its last kernel's end
        self.cut: tuple[int, list[int], int, list[int]] | None = None  # at the last step's start
        self.comm_last = -1                    # start of the open step's last NCCL kernel
        self.comm_starts = array("q")          # per step: its last NCCL kernel's start (-1: none)
        self.regions: dict[int, list[int]] = {}    # CPU region -> [exclusive ticks, visits]
        self.stacks: dict[int, tuple[list[int], list[int]]] = {}  # CPU location -> (regions, [last])
        self.events = 0

    @classmethod
    def restore(cls, start: int, resolution: int, window: str, keep_steps: int,
                state: dict[str, Any], region_refs: list[int] | None = None) -> RankSweep:
        """A sweep in the state the C reader (`_sweep.c`) left it in, ready for `finish`."""
        sweep = cls(start, resolution, window, keep_steps)
        for name in ("last", "unmatched_leaves", "out_of_order", "step_depth", "step_count", "first_kernel",
                     "busy_end", "events", "comm_last"):
            setattr(sweep, name, state[name])
        sweep.overflow = bool(state["overflow"])
        sweep.active = list(state["active"])
        sweep.totals = list(state["totals"])
        sweep.gaps = list(state["gaps"])
        sweep.step_open = _snapshot(state["step_open"])
        sweep.step_closed = _snapshot(state["step_closed"])
        cut = state["cut"]
        sweep.cut = None if cut is None else (cut[0], list(cut[1]), cut[2], list(cut[3]))
        sweep.step_total = list(state["step_total"])
        for name in ("step_walls", "kept", "comm_starts"):
            values = array("q")
            values.frombytes(state[name])
            setattr(sweep, name, values)
        refs = region_refs or []
        sweep.regions = {refs[i] if 0 <= i < len(refs) else -1: [excl, visits] for i, excl, visits in state["regions"]}
        return sweep

    def _add(self, i: int, value: int) -> None:
        total = self.totals[i] + value
        if total > INT64_MAX:
            self.overflow = True
            total = INT64_MAX
        self.totals[i] = total

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
            add = self._add
            add(0, dt)
            if compute:
                add(1, dt)
                add(5, compute * dt)
            if comm:
                add(2, dt)
                add(6, comm * dt)
                if compute:
                    add(3, dt)
            if other:
                add(4, dt)
                add(7, other * dt)

    def kernel_enter(self, t: int, kind: int, stream: int = 0, launch: int | None = None) -> None:
        """A kernel starts on `stream`; `launch` is when the CPU launched it (Kineto's runtime
        event), None where the trace does not say (OTF2)."""
        self.advance(t)
        if self.first_kernel < 0:
            self.first_kernel = t
        previous = self.prev_end.get(stream)
        if previous is not None:
            gap = t - previous
            category = (HOST_WAIT if launch is not None and launch > previous
                        else KERNEL_WAIT if gap < self.gap_threshold else OTHER_WAIT)
            self.gaps[category] += gap
        self.active[kind] += 1
        if kind == _COMPUTE:
            self.totals[8] += 1
        elif kind == _COMM:
            self.totals[9] += 1
            self.comm_last = t

    def kernel_leave(self, t: int, kind: int, stream: int = 0) -> None:
        self.advance(t)
        self.prev_end[stream] = t
        if self.active[kind]:
            self.active[kind] -= 1
            if not (self.active[1] or self.active[2] or self.active[3]):
                self.busy_end = t
        else:
            self.unmatched_leaves += 1

    def region_enter(self, t: int, region: int, location: int) -> None:
        """A region entered on a CPU thread: exclusive time goes to the region on top."""
        stack, last = self.stacks.setdefault(location, ([], [t]))
        if stack:
            self.regions[stack[-1]][0] += max(t - last[0], 0)
        stack.append(region)
        last[0] = t
        entry = self.regions.setdefault(region, [0, 0])
        entry[1] += 1

    def region_leave(self, t: int, location: int) -> None:
        stack, last = self.stacks.setdefault(location, ([], [t]))
        if stack:
            self.regions[stack.pop()][0] += max(t - last[0], 0)
        last[0] = t

    def step_enter(self, t: int) -> None:
        self.step_depth += 1
        if self.step_depth > 1:       # a nested match: only the outermost step counts
            return
        self.advance(t)
        if self.window == "iteration" and self.step_open is not None:
            self._close_step(self.last, self.totals)
        self.step_open = (self.last, list(self.totals))
        running = self.active[1] or self.active[2] or self.active[3]
        self.cut = (self.last, list(self.totals), self.last if running else self.busy_end, list(self.gaps))
        self.comm_last = -1

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
        self.comm_starts.append(self.comm_last)
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
        if any(v > INT64_MAX for v in self.step_total):
            self.overflow = True
        return notes

    def whole_run(self) -> Breakdown:
        return Breakdown(self.resolution, self.last - self.origin, *self.totals)

    def hta_cut(self) -> HtaCut:
        """What HTA's metrics need: the running figures at the last step's start when there are
        two steps or more (HTA leaves the last profiler step out), else at the trace's end."""
        if self.step_count >= 2 and self.cut is not None:
            time, totals, busy_end, gaps = self.cut
        else:
            time, totals, busy_end, gaps = self.last, self.totals, self.busy_end, self.gaps
        last_end = busy_end if busy_end >= 0 else time
        return HtaCut(self.resolution, self.first_kernel, last_end, totals[0], totals[1], totals[2], totals[3],
                      gaps[0], gaps[1], gaps[2], self.step_count >= 2 and self.cut is not None)

    def steps(self, region: str) -> StepSummary | None:
        if not self.step_count:
            return None
        walls = sorted(self.step_walls)
        mid = len(walls) // 2
        median = walls[mid] if len(walls) % 2 else (walls[mid - 1] + walls[mid]) / 2
        r = self.resolution
        return StepSummary(region, self.step_count, Breakdown(r, *self.step_total), median / r,
                           walls[0] / r, walls[-1] / r, self.kept, self.comm_starts)


def _snapshot(value: tuple[int, list[int]] | None) -> tuple[int, list[int]] | None:
    return None if value is None else (value[0], list(value[1]))

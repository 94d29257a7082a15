"""Stream one experiment's OTF2 trace into per-rank timelines.

Definitions are read whole (they are small); events are streamed through the OTF2 global event
reader, which merges every selected location's events in time order, into one `RankSweep` per
rank: by the C reader (`_sweep.c`: the same sweep inside OTF2's callbacks, handing back each
rank's state) or by the Python one (one Python call per Enter/Leave record). Only the locations
that matter are read: the GPU locations, plus the CPU threads when a step region exists.
Memory stays bounded whatever the trace's size.

Command line equivalent (roughly): `otf2-print traces.otf2 | grep -E 'ENTER|LEAVE'`, then
adding up by hand what Vampir's Master Timeline shows.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doctor.safeopen import trace_problem
from doctor.timeline import creader
from doctor.timeline.classify import Kind, cpu_category, gpu_device, region_kind, role_name
from doctor.timeline.creader import Selection
from doctor.timeline.model import RankTimeline, RegionTime
from doctor.timeline.sweep import RankSweep
from doctor.wording import count

BATCH = 100_000
_RANK_IN_FOLDER = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
_RANK_IN_GROUP = re.compile(r"(?:rank|process)\s*(\d+)", re.IGNORECASE)


# keep_rank(rank number or None, index among the trace's processes, their count) -> read it?
RankFilter = Callable[[int | None, int, int], bool]


class TraceError(Exception):
    """The trace cannot be read: the message names the problem, one line."""


@dataclass
class _Rank:
    group: Any
    slot: int
    gpu_locations: list[str] = field(default_factory=list)
    devices: list[int | str] = field(default_factory=list)
    location_refs: set[int] = field(default_factory=set)


def read_trace(experiment: Path, step_regex: re.Pattern[str], window: str = "region",
               keep_steps: int = 10_000, reader: str = "auto",
               keep_rank: RankFilter | None = None,
               on_events: Callable[[int], None] | None = None) -> list[RankTimeline]:
    """One `RankTimeline` per process (rank) in `experiment/traces.otf2`; raises TraceError.

    `reader` is "c" (the C extension), "python" or "auto" (C where built); `keep_rank(number,
    index, count)` picks ranks (by number, or by position among the trace's `count`
    processes); `on_events` is told the records read so far, every batch."""
    import _otf2
    import otf2

    path = creader.choose(reader)
    anchor = experiment / "traces.otf2"
    _refuse_special_files(experiment)
    try:
        trace = otf2.reader.Reader(str(anchor))
    except Exception as exc:  # the otf2 package raises its own and ctypes errors alike
        raise TraceError(f"{anchor}: cannot read the trace definitions ({_reason(exc)})") from None
    try:
        return _read(trace, experiment, step_regex, window, keep_steps, path, keep_rank, on_events, _otf2)
    except TraceError:
        raise
    except Exception as exc:
        raise TraceError(f"{anchor}: cannot read the events ({_reason(exc)})") from None
    finally:
        trace.close()


def _read(trace: Any, experiment: Path, step_regex: re.Pattern[str], window: str, keep_steps: int,
          path: str, keep_rank: RankFilter | None,
          on_events: Callable[[int], None] | None, _otf2: Any) -> list[RankTimeline]:
    defs = trace.definitions
    clock = defs.clock_properties
    resolution = int(clock.timer_resolution) or 1
    start, end = int(clock.global_offset), int(clock.global_offset) + int(clock.trace_length)
    ranks, selection = _select(defs, experiment, step_regex, start, end, resolution, keep_rank)
    threshold = gap_threshold(resolution)
    sweeps = [RankSweep(start, resolution, window, keep_steps, threshold) for _ in ranks]
    out_of_range: dict[int, int] = {}
    _check_with_system_library(experiment / "traces.otf2")
    if selection.locations:
        if path == creader.C:
            try:
                states = creader.stream(experiment / "traces.otf2", selection, window, keep_steps, len(ranks),
                                        on_events, threshold)
            except RuntimeError as exc:   # the OTF2 library's own words
                raise TraceError(f"{experiment / 'traces.otf2'}: cannot read the events ({exc})") from None
            sweeps = [RankSweep.restore(start, resolution, window, keep_steps, state, selection.refs)
                      for state in states]
            for state in states:
                out_of_range.update(dict(state["out_of_range"]))
        else:
            out_of_range = _stream(trace, selection, sweeps, on_events, _otf2)
    region_name = ", ".join(sorted(set(selection.step_regions.values()))) or ""
    timelines = []
    for (number, label), rank in ranks:
        sweep = sweeps[rank.slot]
        notes = sweep.finish(end)
        if sweep.overflow:
            raise TraceError(f"{experiment / 'traces.otf2'}: {label}: the time sums overflow 64 bits (a damaged "
                             "timestamp or clock?); no figures are given for it")
        for ref, n in sorted(out_of_range.items()):
            if ref in rank.location_refs:
                notes.append(f"{count(n, 'event')} on location {selection.names.get(ref, ref)!r} lie outside the "
                             f"trace's clock range ({start}..{end} ticks): damaged timestamps, not counted")
        if not rank.gpu_locations:
            notes.insert(0, "no GPU locations in this rank: CUDA was not recorded (python -m scorep "
                            "needs --cuda; see SCP002/ART002)")
        if not selection.step_regions:
            notes.append(f"no step region matches /{step_regex.pattern}/; only whole-run figures")
        steps = sweep.steps(region_name)
        timelines.append(RankTimeline(
            label=label, rank=number, experiment=experiment, devices=tuple(rank.devices),
            gpu_locations=tuple(rank.gpu_locations), resolution=resolution, events=sweep.events,
            whole_run=sweep.whole_run(), steps=steps, notes=tuple(notes), reader=path,
            hta=sweep.hta_cut() if rank.gpu_locations else None,
            regions=top_regions(sweep, selection.region_names, resolution),
            hints=otf2_hints(bool(rank.gpu_locations), steps is not None)))
    return timelines


TOP_REGIONS = 8


def gap_threshold(resolution: int) -> int:
    """HTA's consecutive_kernel_delay in ticks: gaps between a stream's kernels shorter than it
    are kernel waits. HTA's default is 30, documented as nanoseconds and compared with Kineto's
    timestamps, which are microseconds: 30 µs is what HTA does, so that is what this does."""
    return max(1, round(30e-6 * resolution))


def top_regions(sweep: RankSweep, names: dict[int, str], resolution: int) -> tuple[RegionTime, ...]:
    """The CPU regions with the most exclusive time (all of them, for the categories, above a
    TOP_REGIONS cut they are folded into one "other regions" entry)."""
    rows = sorted(((names.get(ref, "(regions without a definition)"), excl, visits) for ref, (excl, visits) in sweep.regions.items()),
                  key=lambda r: (-r[1], r[0]))
    out = [RegionTime(name, excl / resolution, visits, cpu_category(name)) for name, excl, visits in rows]
    if len(out) <= TOP_REGIONS:
        return tuple(out)
    rest: dict[str, list[float]] = {}
    for r in out[TOP_REGIONS:]:
        entry = rest.setdefault(r.category, [0.0, 0])
        entry[0] += r.exclusive
        entry[1] += r.visits
    folded = [RegionTime(f"({count(int(v), 'visit')} in other {category.replace('_', ' ')} regions)", t, int(v),
                         category) for category, (t, v) in rest.items()]
    return (*out[:TOP_REGIONS], *folded)


def otf2_hints(gpu: bool, steps: bool) -> tuple[str, ...]:
    """What to turn on for more, when the trace lacks GPU streams or steps."""
    hints = []
    if not gpu:
        hints.append("no GPU streams: measure CUDA with `python -m scorep --cuda` (a Score-P built with CUDA) "
                     "and SCOREP_ENABLE_TRACING=true")
    if not steps:
        hints.append("no training steps: wrap each iteration in a `train_step` user region "
                     "(`with scorep.user.region(\"train_step\"):`), or pass --step-regex")
    return tuple(hints)


def _select(defs: Any, experiment: Path, step_regex: re.Pattern[str], start: int, end: int, resolution: int,
            keep_rank: RankFilter | None) -> tuple[list[tuple[tuple[int | None, str], _Rank]], Selection]:
    """The ranks (by identity, in rank order) and the locations whose events matter. The event
    counts in the definitions are a hint (a low-level writer leaves them 0): never a filter."""
    import otf2

    region_names = {region._ref: region.name for region in defs.regions}
    kinds = {region._ref: int(region_kind(region.name, role_name(region.region_role))) for region in defs.regions}
    step_regions = {ref: name for ref, name in region_names.items() if step_regex.search(name)}
    processes = [g for g in defs.location_groups
                 if g.location_group_type == otf2.LocationGroupType.PROCESS]
    wanted = []
    groups: dict[int, Any] = {}
    for location in defs.locations:
        is_gpu = _is_gpu(location, otf2)
        if is_gpu or location.type == otf2.LocationType.CPU_THREAD:
            group = _process_of(location.group, processes, otf2)
            groups.setdefault(_sort_key(group), group)
            wanted.append((location, _sort_key(group), is_gpu))
    ordered = sorted(groups)
    ranks: list[tuple[tuple[int | None, str], _Rank]] = []
    by_group: dict[int, _Rank] = {}
    for index, key in enumerate(ordered):
        identity = _rank_identity(experiment, groups[key], index, len(ordered))
        if keep_rank is None or keep_rank(identity[0], index, len(ordered)):
            by_group[key] = _Rank(groups[key], len(ranks))
            ranks.append((identity, by_group[key]))
    selected = []
    names = {}
    for location, key, is_gpu in wanted:
        rank = by_group.get(key)
        if rank is None:
            continue
        if is_gpu:
            rank.gpu_locations.append(location.name)
            device = gpu_device(location.name)
            device_id: int | str = device if device is not None else location.group.name
            if device_id not in rank.devices:
                rank.devices.append(device_id)
        selected.append((location, rank.slot, is_gpu))
        rank.location_refs.add(location._ref)
        names[location._ref] = location.name
    return ranks, Selection(selected, kinds, step_regions, start, resolution, end, names, region_names)


def _check_with_system_library(anchor: Path) -> None:
    """The otf2 package bundles its own OTF2 library: a file the system's library (the one
    otf2-print and the C reader use) rejects is rejected by both readers, where the C reader is
    built; the anchor's counts are checked as otf2-print checks them."""
    problem = creader.system_check(anchor)
    if problem:
        raise TraceError(f"{anchor}: the system's OTF2 library rejects it ({problem})")


def _stream(trace: Any, selection: Selection, sweeps: list[RankSweep],
            on_events: Callable[[int], None] | None, _otf2: Any) -> dict[int, int]:
    """The Python reader: run the selected locations' Enter/Leave records through the sweeps;
    returns the count of records outside the clock range, per location ref."""
    handle = trace.handle
    default = int(Kind.COMPUTE)
    kinds, step_regions = selection.kinds, selection.step_regions
    first, last = selection.start, selection.end
    gpu_rank = {loc._ref: sweeps[slot] for loc, slot, is_gpu in selection.locations if is_gpu}
    cpu_rank = {loc._ref: sweeps[slot] for loc, slot, is_gpu in selection.locations if not is_gpu}
    outside: dict[int, int] = {}
    defined = selection.region_names

    def on_enter(location: int, time: int, _data: Any, _attributes: Any, region: int) -> None:
        if time < first or time > last:
            outside[location] = outside.get(location, 0) + 1
            return
        sweep = gpu_rank.get(location)
        if sweep is not None:
            sweep.events += 1
            kind = kinds.get(region, default)
            if kind:
                sweep.kernel_enter(time, kind, location)
            return
        sweep = cpu_rank[location]
        sweep.events += 1
        sweep.region_enter(time, region if region in defined else -1, location)
        if region in step_regions:
            sweep.step_enter(time)

    def on_leave(location: int, time: int, _data: Any, _attributes: Any, region: int) -> None:
        if time < first or time > last:
            outside[location] = outside.get(location, 0) + 1
            return
        sweep = gpu_rank.get(location)
        if sweep is not None:
            sweep.events += 1
            kind = kinds.get(region, default)
            if kind:
                sweep.kernel_leave(time, kind, location)
            return
        sweep = cpu_rank[location]
        sweep.events += 1
        sweep.region_leave(time, location)
        if region in step_regions:
            sweep.step_leave(time)

    global_reader = _open_events(handle, [loc for loc, _, _ in selection.locations], _otf2)
    try:
        callbacks = _otf2.GlobalEvtReaderCallbacks_New()
        # Each callback must be its own function object: the binding keeps the C thunk alive
        # as an attribute of the Python function it wraps.
        _otf2.GlobalEvtReaderCallbacks_SetEnterCallback(callbacks, on_enter)
        _otf2.GlobalEvtReaderCallbacks_SetLeaveCallback(callbacks, on_leave)
        _otf2.GlobalEvtReader_SetCallbacks(global_reader, callbacks, None)
        _otf2.GlobalEvtReaderCallbacks_Delete(callbacks)
        done = BATCH
        total = 0
        while done == BATCH:
            done = _otf2.GlobalEvtReader_ReadEvents(global_reader, BATCH)
            total += done
            if on_events is not None:
                on_events(total)
    finally:
        _otf2.Reader_CloseGlobalEvtReader(handle, global_reader)
        _otf2.Reader_CloseEvtFiles(handle)
    return outside


def _refuse_special_files(experiment: Path) -> None:
    """The OTF2 library would wait forever on a FIFO (or read a device without end): every file
    of the archive must be a regular one (`doctor.safeopen.trace_problem`)."""
    unsafe = trace_problem(experiment / "traces.otf2")
    if unsafe is not None:
        raise TraceError(f"{unsafe}; the trace is not read")


def _open_events(handle: Any, locations: list[Any], _otf2: Any) -> Any:
    """Select `locations` and open the global event reader over them (OTF2's reader example)."""
    for location in locations:
        _otf2.Reader_SelectLocation(handle, location._ref)
    def_files = _try(lambda: _otf2.Reader_OpenDefFiles(handle))
    _try(lambda: _otf2.Reader_OpenEvtFiles(handle))
    for location in locations:
        if def_files:
            def_reader = _otf2.Reader_GetDefReader(handle, location._ref)
            if def_reader:
                _otf2.Reader_ReadAllLocalDefinitions(handle, def_reader)
                _otf2.Reader_CloseDefReader(handle, def_reader)
        _otf2.Reader_GetEvtReader(handle, location._ref)
    if def_files:
        _otf2.Reader_CloseDefFiles(handle)
    return _otf2.Reader_GetGlobalEvtReader(handle)


def _try(call: Callable[[], object]) -> bool:
    """Optional files (local definitions) may be missing; OTF2 reports that as an error."""
    import _otf2

    try:
        call()
    except _otf2.Error:
        return False
    return True


def _is_gpu(location: Any, otf2: Any) -> bool:
    """Type GPU, or (metric locations aside) in an accelerator group or named `CUDA[dev:stream]`."""
    if location.type == otf2.LocationType.GPU:
        return True
    return location.type != otf2.LocationType.METRIC and (
        location.group.location_group_type == otf2.LocationGroupType.ACCELERATOR
        or gpu_device(location.name) is not None)


def _process_of(group: Any, processes: list[Any], otf2: Any) -> Any:
    """The process (rank) a location group belongs to: itself, or the one that created it."""
    seen = 0
    while group is not None and group.location_group_type != otf2.LocationGroupType.PROCESS and seen < 8:
        creator = group.creating_location_group
        if creator is None:
            break
        group, seen = creator, seen + 1
    if group is not None and group.location_group_type == otf2.LocationGroupType.PROCESS:
        return group
    return processes[0] if len(processes) == 1 else group


def _sort_key(group: Any) -> int:
    return group._ref if group is not None else -1


def _rank_identity(experiment: Path, group: Any, index: int, count: int) -> tuple[int | None, str]:
    """Rank number and label: from `scorep_rank_N` for per-rank folders, else the process's name."""
    folder = _RANK_IN_FOLDER.search(experiment.name)
    if count == 1:
        number = int(folder[1]) if folder else None
        return number, experiment.name
    name = group.name if group is not None else "?"
    match = _RANK_IN_GROUP.search(name)
    number = int(match[1]) if match else index
    return number, f"{experiment.name}/{name}" if name else f"{experiment.name}/{index}"


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__

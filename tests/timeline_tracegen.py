"""OTF2 traces shaped like Score-P's per-rank CUDA output, for the timeline tests and bench.

One experiment folder per rank (`scorep_rank_N/traces.otf2`), as gpu-doctor's launcher makes
them: a `Process` location group holding the `Master thread`, and GPU locations named
`CUDA[dev:stream]`. Score-P 9 puts GPU locations in an ACCELERATOR location group ("CUDA Context
N") whose creating group is the process; older versions put them in the process group
(`legacy_groups=True`). Kernels are KERNEL regions of the CUDA paradigm, entered and left on the
GPU location; training steps are USER regions on the CPU thread. Times are integer ticks of
`resolution` ticks per second, so expected answers are exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

NCCL_ALLREDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float"
ELEMENTWISE = "void at::native::elementwise_kernel<128, 4>"
GEMM = "ampere_sgemm_128x64_tn"


@dataclass(frozen=True)
class Kernel:
    """One kernel execution on stream `stream`, from tick `start` to tick `end`."""

    stream: int
    start: int
    end: int
    name: str = ELEMENTWISE


def comm(stream: int, start: int, end: int) -> Kernel:
    return Kernel(stream, start, end, NCCL_ALLREDUCE)


def compute(stream: int, start: int, end: int, name: str = ELEMENTWISE) -> Kernel:
    return Kernel(stream, start, end, name)


@dataclass(frozen=True)
class Process:
    """One process (rank) inside a trace: its kernels, its steps, its device."""

    kernels: tuple[Kernel, ...]
    steps: tuple[tuple[int, int], ...] = ()
    device: int = 0
    name: str = "Process"
    cpu_regions: tuple[tuple[str, int, int], ...] = ()   # extra (name, enter, leave) on the CPU thread


def write_rank_trace(folder: Path, kernels: Iterable[Kernel], steps: Sequence[tuple[int, int]] = (),
                     *, device: int = 0, step_region: str = "train_step",
                     program: tuple[int, int] | None = None, resolution: int = 1_000_000_000,
                     legacy_groups: bool = False,
                     cpu_regions: Sequence[tuple[str, int, int]] = ()) -> Path:
    """Write one rank's experiment folder (one process); returns the folder.

    `steps` are (enter, leave) ticks of `step_region` on the CPU thread, inside a `main` region
    spanning `program` (default: from the earliest to the latest time given).
    """
    return write_trace(folder, [Process(tuple(kernels), tuple(steps), device, cpu_regions=tuple(cpu_regions))],
                       step_region=step_region, program=program, resolution=resolution,
                       legacy_groups=legacy_groups)


def write_trace(folder: Path, processes: Sequence[Process], *, step_region: str = "train_step",
                program: tuple[int, int] | None = None, resolution: int = 1_000_000_000,
                legacy_groups: bool = False, first_region_ref: int | None = None,
                clock: tuple[int, int] | None = None, event_counts: dict[str, int] | None = None) -> Path:
    """Write an experiment folder holding several processes (an MPI-style single trace).

    Damage, as broken writers leave it: `first_region_ref` numbers the regions from there (refs
    near 2^32), `clock` sets the clock range (first, last tick) the definitions announce whatever
    the events say, `event_counts` the event counter of the locations named (0: what a
    low-level writer leaves)."""
    import otf2
    from otf2.enums import LocationGroupType, LocationType, Paradigm, RegionRole

    times = [t for p in processes for k in p.kernels for t in (k.start, k.end)]
    times += [t for p in processes for s in p.steps for t in s]
    times += [t for p in processes for _, a, b in p.cpu_regions for t in (a, b)]
    begin, end = program if program is not None else (min(times, default=0), max(times, default=0))
    folder.mkdir(parents=True, exist_ok=True)
    with otf2.writer.open(str(folder), "traces", timer_resolution=resolution) as trace:
        defs = trace.definitions
        if first_region_ref is not None:
            defs.regions._ref = first_region_ref - 1
        machine = defs.system_tree_node("machine")
        node = defs.system_tree_node("node0", parent=machine)
        main_region = defs.region("main", region_role=RegionRole.FUNCTION, paradigm=Paradigm.USER)
        step = defs.region(step_region, region_role=RegionRole.FUNCTION, paradigm=Paradigm.USER)
        regions: dict[str, object] = {}
        for p in processes:
            process = defs.location_group(p.name, location_group_type=LocationGroupType.PROCESS,
                                          system_tree_parent=node)
            gpu_group = process
            if not legacy_groups:
                gpu_node = defs.system_tree_node(f"{p.name} GPU {p.device}", class_name="CUDA Device",
                                                 parent=node)
                gpu_group = defs.location_group(f"CUDA Context {p.device} of {p.name}",
                                                location_group_type=LocationGroupType.ACCELERATOR,
                                                system_tree_parent=gpu_node, creating_location_group=process)
            cpu = trace.event_writer(f"Master thread of {p.name}", type=LocationType.CPU_THREAD, group=process)
            cpu.enter(begin, main_region)
            _write_nested(cpu, p.steps, step, p.cpu_regions, defs)
            cpu.leave(end, main_region)
            for stream in sorted({k.stream for k in p.kernels}):
                writer = trace.event_writer(f"CUDA[{p.device}:{stream}]", type=LocationType.GPU, group=gpu_group)
                for k in sorted((k for k in p.kernels if k.stream == stream), key=lambda k: (k.start, k.end)):
                    if k.name not in regions:
                        role = RegionRole.ARTIFICIAL if k.name.endswith("IDLE") else RegionRole.KERNEL
                        regions[k.name] = defs.region(k.name, region_role=role, paradigm=Paradigm.CUDA)
                    writer.enter(k.start, regions[k.name])
                    writer.leave(k.end, regions[k.name])
        for w in trace._event_writers.values():
            if w._location.name in (event_counts or {}):
                w._location._number_of_events_written = (event_counts or {})[w._location.name]
        if clock is not None:
            trace._first_timestamp, trace._last_timestamp = clock
    return folder


def _write_nested(cpu: object, steps: Sequence[tuple[int, int]], step: object,
                  extra: Sequence[tuple[str, int, int]], defs: object) -> None:
    """Write step and extra CPU regions in time order; at equal times, leaves before enters
    and outer regions enter first (an interval that starts earlier or ends later is outer)."""
    from otf2.enums import Paradigm, RegionRole

    spans = [(a, b, step) for a, b in steps]
    spans += [(a, b, defs.region(name, region_role=RegionRole.FUNCTION, paradigm=Paradigm.USER))  # type: ignore[attr-defined]
              for name, a, b in extra]
    records = [(a, 1, -b, "enter", r) for a, b, r in spans] + [(b, 0, -a, "leave", r) for a, b, r in spans]
    for time, _, _, what, region in sorted(records, key=lambda x: x[:3]):
        getattr(cpu, what)(time, region)


def write_bench_trace(folder: Path, steps: int, kernels_per_step: int = 48,
                      resolution: int = 1_000_000_000) -> int:
    """A large synthetic DDP rank: per step, compute kernels on CUDA[0:7] and AllReduce
    buckets on CUDA[0:20] overlapping the second half. Written through the low-level writer
    calls (the event objects of the high-level writer would dominate generation time).
    Returns the number of events written.
    """
    import _otf2
    import otf2
    from otf2.enums import LocationGroupType, LocationType, Paradigm, RegionRole

    folder.mkdir(parents=True, exist_ok=True)
    step_ticks = kernels_per_step * 20_000 + 50_000
    written = 0
    with otf2.writer.open(str(folder), "traces", timer_resolution=resolution) as trace:
        defs = trace.definitions
        node = defs.system_tree_node("node0")
        process = defs.location_group("Process", location_group_type=LocationGroupType.PROCESS,
                                      system_tree_parent=node)
        main_region = defs.region("main", region_role=RegionRole.FUNCTION, paradigm=Paradigm.USER)
        step_region = defs.region("train_step", region_role=RegionRole.FUNCTION, paradigm=Paradigm.USER)
        kernel_regions = [defs.region(f"void at::native::kernel_{i}<float>", region_role=RegionRole.KERNEL,
                                      paradigm=Paradigm.CUDA) for i in range(8)]
        nccl = defs.region(NCCL_ALLREDUCE, region_role=RegionRole.KERNEL, paradigm=Paradigm.CUDA)
        cpu = trace.event_writer("Master thread", type=LocationType.CPU_THREAD, group=process)
        compute_w = trace.event_writer("CUDA[0:7]", type=LocationType.GPU, group=process)
        comm_w = trace.event_writer("CUDA[0:20]", type=LocationType.GPU, group=process)
        enter, leave = _otf2.EvtWriter_Enter, _otf2.EvtWriter_Leave
        end = steps * step_ticks + 10
        enter(cpu.handle, None, 0, main_region._ref)
        for s in range(steps):
            base = s * step_ticks + 5
            enter(cpu.handle, None, base, step_region._ref)
            for i in range(kernels_per_step):
                t = base + 1_000 + i * 20_000
                region = kernel_regions[i % 8]._ref
                enter(compute_w.handle, None, t, region)
                leave(compute_w.handle, None, t + 15_000, region)
                if i >= kernels_per_step // 2 and i % 4 == 0:
                    enter(comm_w.handle, None, t + 5_000, nccl._ref)
                    leave(comm_w.handle, None, t + 45_000, nccl._ref)
                    written += 2
            leave(cpu.handle, None, base + step_ticks - 10, step_region._ref)
            written += 2 + 2 * kernels_per_step
        leave(cpu.handle, None, end, main_region._ref)
        written += 2
        for writer, count in ((cpu, 2 + 2 * steps), (compute_w, 2 * steps * kernels_per_step),
                              (comm_w, written - 2 - 2 * steps - 2 * steps * kernels_per_step)):
            writer._location._number_of_events_written = count
        trace._update_timestamps(0)
        trace._update_timestamps(end)
    return written


def require_c_reader() -> None:
    """Skip a C-reader test where the extension is not built; in CI (CI=true) it must be."""
    import os

    import pytest

    from doctor.timeline import creader

    if creader.available():
        return
    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(f"CI must build the C reader: {creader.why_not()}")
    pytest.skip(creader.why_not())


# -- the planted DDP run, as torch.profiler (Kineto) traces and as OTF2 -----------------------------
#
# 8 ranks, 21 profiler steps of 10 ms. Per step, on stream 7: 8 forward kernels (300 µs, gaps of
# 20 µs: kernel waits), a 200 µs host wait, 8 backward kernels (400 µs, gaps of 50 µs: "other");
# on stream 20: two AllReduce buckets under the backward pass (hidden), then the step's last
# AllReduce after it (exposed), which every rank leaves together once the last one has arrived,
# then two optimizer kernels. Rank 5 arrives 800 µs late in 14 of the first 20 steps (HTA, and
# gpu-doctor with it, leave the last step out): a straggler share and stability of 0.70.

PLANTED_RANKS = 8
PLANTED_STEPS = 21
STEP_US = 10_000
STRAGGLER = 5
LATE_STEPS = frozenset({0, 1, 2, 4, 5, 7, 8, 9, 11, 12, 14, 15, 17, 18})   # 14 of steps 0..19
DELAY_US = 800
T0_US = 1_700_000_000_000


@dataclass(frozen=True)
class PlantedKernel:
    stream: int
    start: int       # µs, absolute
    end: int
    name: str
    launch: int      # µs: when the CPU launched it


def _jitter(rank: int, step: int) -> int:
    return (rank * 7 + step * 3) % 11


def planted_kernels(rank: int) -> list[PlantedKernel]:
    out = []
    for i in range(PLANTED_STEPS):
        base = T0_US + i * STEP_US
        for k in range(8):
            s = base + 200 + k * 320
            out.append(PlantedKernel(7, s, s + 300, ELEMENTWISE, s - 100))
        for k in range(8):
            s = base + 2940 + k * 450
            out.append(PlantedKernel(7, s, s + 400, GEMM, s - 10 if k == 0 else s - 100))
        for s in (base + 3400, base + 4800):
            out.append(PlantedKernel(20, s, s + 900, NCCL_ALLREDUCE, s - 100))
        late = rank == STRAGGLER and i in LATE_STEPS
        arrivals = [(DELAY_US if i in LATE_STEPS else 0) if r == STRAGGLER else _jitter(r, i)
                    for r in range(PLANTED_RANKS)]
        start = base + 6600 + arrivals[rank]
        end = base + 6600 + max(arrivals) + 400
        out.append(PlantedKernel(20, start, end, NCCL_ALLREDUCE, start - (10 if late else 100)))
        for s in (end + 50, end + 300):
            out.append(PlantedKernel(7, s, s + 200, GEMM, s - 100))
    return out


def planted_steps() -> list[tuple[int, int]]:
    return [(T0_US + i * STEP_US, T0_US + i * STEP_US + STEP_US - 10) for i in range(PLANTED_STEPS)]


def cpu_profile(folder: Path) -> Path:
    """A real torch.profiler trace of a tiny model on the CPU, PLANTED_STEPS steps (its CPU events)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(8, 16)
    folder.mkdir(parents=True, exist_ok=True)
    # Without a schedule this torch records no ProfilerStep#N of its own: the loop writes them
    # as the profiler does (a record_function, category user_annotation).
    with profile(activities=[ProfilerActivity.CPU],
                 on_trace_ready=torch.profiler.tensorboard_trace_handler(str(folder))) as prof:
        for i in range(PLANTED_STEPS):
            with torch.profiler.record_function(f"ProfilerStep#{i + 1}"):
                optimizer.zero_grad()
                model(data).sum().backward()
                optimizer.step()
            prof.step()
    return next(folder.glob("*.pt.trace.json"))


def write_planted_kineto(folder: Path, cpu_trace: Path, kernel_name: str = NCCL_ALLREDUCE) -> list[Path]:
    """One `*.pt.trace.json` per rank: the CPU events of `cpu_trace`, each profiler step moved
    onto the planted step's window, plus the planted kernels and their cudaLaunchKernel records
    in the JSON Kineto writes for CUDA activity."""
    import json

    source = json.loads(cpu_trace.read_text())
    cpu_events = [e for e in source["traceEvents"] if e.get("ph") == "X" and "ts" in e]
    steps_real = sorted((e for e in cpu_events if str(e.get("name", "")).startswith("ProfilerStep#")),
                        key=lambda e: e["ts"])[:PLANTED_STEPS]
    planted = planted_steps()
    pid = next((e["pid"] for e in steps_real), 1)
    tid = next((e["tid"] for e in steps_real), 1)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(PLANTED_RANKS):
        events: list[dict[str, object]] = [e for e in source["traceEvents"] if e.get("ph") == "M"]
        for i, step in enumerate(steps_real):
            a, b = float(step["ts"]), float(step["ts"]) + float(step["dur"])
            base, _ = planted[i]
            scale = (STEP_US - 40) / max(b - a, 1e-3)
            events.append({**step, "name": f"ProfilerStep#{i + 1}", "ts": base, "dur": STEP_US - 10})
            for e in cpu_events:
                if e is step or str(e.get("name", "")).startswith("ProfilerStep#") or not a <= e["ts"] < b:
                    continue
                ts = base + 10 + int((float(e["ts"]) - a) * scale)
                stop = base + 10 + int((min(float(e["ts"]) + float(e.get("dur", 0)), b) - a) * scale)
                events.append({**e, "ts": ts, "dur": max(stop - ts, 0)})
        for n, k in enumerate(planted_kernels(rank)):
            correlation = 1_000_000 + n
            name = kernel_name if k.name == NCCL_ALLREDUCE else k.name
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid,
                           "tid": tid + 1, "ts": k.launch, "dur": 5,
                           "args": {"correlation": correlation, "External id": correlation}})
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": k.stream, "ts": k.start,
                           "dur": k.end - k.start,
                           "args": {"External id": correlation, "device": 0, "stream": k.stream,
                                    "correlation": correlation, "registers per thread": 32, "grid": [1, 1, 1],
                                    "block": [128, 1, 1]}})
        doc = {"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": PLANTED_RANKS},
               **{key: value for key, value in source.items() if key not in ("traceEvents", "distributedInfo")},
               "traceEvents": events}
        path = folder / f"node0_{4000 + rank}.{1700000000 + rank}.pt.trace.json"
        path.write_text(json.dumps(doc))
        paths.append(path)
    return paths


def write_planted_otf2(folder: Path) -> list[Path]:
    """The same planted run as Score-P-shaped OTF2, one `scorep_rank_N` per rank (ns ticks)."""
    paths = []
    for rank in range(PLANTED_RANKS):
        kernels = [Kernel(k.stream, k.start * 1000, k.end * 1000, k.name) for k in planted_kernels(rank)]
        steps = [(a * 1000, b * 1000) for a, b in planted_steps()]
        paths.append(write_rank_trace(folder / f"scorep_rank_{rank}", kernels, steps))
    return paths

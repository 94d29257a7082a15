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
                legacy_groups: bool = False) -> Path:
    """Write an experiment folder holding several processes (an MPI-style single trace)."""
    import otf2
    from otf2.enums import LocationGroupType, LocationType, Paradigm, RegionRole

    times = [t for p in processes for k in p.kernels for t in (k.start, k.end)]
    times += [t for p in processes for s in p.steps for t in s]
    times += [t for p in processes for _, a, b in p.cpu_regions for t in (a, b)]
    begin, end = program if program is not None else (min(times, default=0), max(times, default=0))
    folder.mkdir(parents=True, exist_ok=True)
    with otf2.writer.open(str(folder), "traces", timer_resolution=resolution) as trace:
        defs = trace.definitions
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

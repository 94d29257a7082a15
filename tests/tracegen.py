"""Write real Score-P-like experiment folders: OTF2 traces (the `otf2` writer), Cube profiles,
scorep.cfg and MANIFEST.md. Used by the artifacts tests and by bench/bench_trace_summary.py.

Shapes from the field guide: the launcher-only trace of `python -m scorep torchrun`
(one process, elastic-agent regions, no GPU), per-rank traces with `CUDA[dev:stream]`
locations and NCCL kernels, per-rank traces without CUDA, and folders a dying rank
leaves behind (only scorep.cfg, `scorep-measurement-tmp`).
"""

from __future__ import annotations

import io
import struct
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

AGENT_REGIONS = (
    "torch.distributed.run:main",
    "torch.distributed.elastic.agent.server.api:SimpleElasticAgent.run",
    "torch.distributed.elastic.agent.server.api:LocalElasticAgent._invoke_run",
    "torch.distributed.elastic.agent.server.local_elastic_agent:LocalElasticAgent._monitor_workers",
    "time:sleep",
)
TRAIN_REGIONS = ("__main__:<module>", "__main__:train", "torch.nn.modules.module:Module._call_impl",
                 "torch.optim.adamw:AdamW.step")
CUDA_API = ("cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize")
KERNELS = ("ncclKernel_AllReduce_RING_LL_Sum_float", "at::native::elementwise_kernel<128, 4>",
           "at::native::unrolled_elementwise_kernel")


@dataclass(frozen=True)
class Process:
    """One Score-P process: CPU threads and GPU streams (`CUDA[0:7]`, `HIP[0:0]`)."""

    name: str = "Process"
    threads: int = 1
    gpu_streams: tuple[str, ...] = ()
    user_regions: tuple[str, ...] = TRAIN_REGIONS
    cuda: bool = False  # CUDA API and kernel regions


@dataclass
class Scenario:
    """What `experiment()` writes into one folder."""

    processes: list[Process] = field(default_factory=lambda: [Process()])
    config: dict[str, str] = field(default_factory=dict)
    trace: bool = True
    profile: bool = False
    events: int = 1000  # trace events in total, spread over the locations


def scorep_cfg(folder: Path, settings: dict[str, str]) -> None:
    """scorep.cfg as Score-P writes it (every variable, strings and sets quoted)."""
    base = {"SCOREP_ENABLE_PROFILING": "true", "SCOREP_ENABLE_TRACING": "true",
            "SCOREP_TOTAL_MEMORY": "16000K", "SCOREP_EXPERIMENT_DIRECTORY": f"'{folder.name}'"}
    base.update(settings)
    lines = [f"{k}={v}" for k, v in base.items()]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scorep.cfg").write_text("\n".join(lines) + "\n")
    explicit = "\n".join(f"    {k}" for k in settings)
    (folder / "MANIFEST.md").write_text(
        "# Experiment directory overview\n\nThe result directory of this measurement should contain "
        "the following files:\n\n# List of Score-P variables that were explicitly set for this "
        f"measurement\n\nThe complete list of Score-P variables used, incl. current default values,\n"
        f"can be found in `scorep.cfg`.\n\n{explicit}\n")


def write_trace(folder: Path, processes: list[Process], events: int = 1000) -> None:
    """An OTF2 archive (traces.otf2, traces.def, traces/) with `events` events in total."""
    import otf2
    from otf2.enums import LocationGroupType, LocationType, Paradigm, RegionRole

    with otf2.writer.open(str(folder), timer_resolution=10**9) as w:
        d = w.definitions
        machine = d.system_tree_node("machine Linux")
        node = d.system_tree_node("node n01", parent=machine)
        writers = []
        for proc in processes:
            group = d.location_group(proc.name, system_tree_parent=node)
            user = [d.region(n, paradigm=Paradigm.USER) for n in proc.user_regions]
            for t in range(proc.threads):
                name = "Master thread" if t == 0 else f"Pthread thread {t}"
                writers.append((w.event_writer_from_location(d.location(name, group=group)), user))
            if proc.cuda:
                api = [d.region(n, paradigm=Paradigm.CUDA, region_role=RegionRole.WRAPPER) for n in CUDA_API]
                writers[-1][1].extend(api)
            if proc.gpu_streams:
                kind = "CUDA" if proc.gpu_streams[0].startswith("CUDA") else "HIP"
                ctx = d.location_group(f"{kind} Context 0", location_group_type=LocationGroupType.ACCELERATOR,
                                       system_tree_parent=node, creating_location_group=group)
                paradigm = Paradigm.CUDA if kind == "CUDA" else Paradigm.HIP
                kernels = [d.region(n, paradigm=paradigm, region_role=RegionRole.KERNEL) for n in KERNELS]
                for stream in proc.gpu_streams:
                    loc = d.location(stream, type=LocationType.GPU, group=ctx)
                    writers.append((w.event_writer_from_location(loc), kernels))
        _fill(writers, events)


def _fill(writers: list, events: int) -> None:  # type: ignore[type-arg]
    """Enter/leave pairs round-robin over the locations until `events` are written."""
    pairs = max(1, events // 2)
    per = [pairs // len(writers) + (1 if i < pairs % len(writers) else 0) for i in range(len(writers))]
    for (ew, regions), count in zip(writers, per, strict=True):
        enter, leave, n = ew.enter, ew.leave, len(regions)
        for i in range(count):
            region = regions[i % n]
            enter(2 * i, region)
            leave(2 * i + 1, region)


def write_profile(folder: Path, processes: list[Process], seconds: float = 10.0) -> None:
    """A minimal Cube 4 profile.cubex (visits, time) with a flat call tree per region."""
    regions: list[tuple[str, str, str]] = [("python", "measurement", "artificial")]
    for proc in processes[:1]:
        regions += [(n, "user", "function") for n in proc.user_regions]
        if proc.cuda:
            regions += [(n, "cuda", "wrapper") for n in CUDA_API]
        if proc.gpu_streams:
            regions += [(n, "cuda", "function") for n in KERNELS]
    locations = [(p.name, ["Master thread"] + [f"Pthread thread {t}" for t in range(1, p.threads)]
                  + list(p.gpu_streams)) for p in processes]
    nlocs = sum(len(locs) for _, locs in locations)
    n = len(regions)
    share = seconds / max(1, n - 1)
    times = [seconds + 0.01] + [share] * (n - 1)  # inclusive: the root holds its children
    visits = [1] + [100 * (i + 1) for i in range(n - 1)]
    members = {
        "anchor.xml": _anchor_xml(regions, locations).encode(),
        "0.index": _index(n), "0.data": b"CUBEX.DATA" + struct.pack(f"<{n * nlocs}Q", *[
            v for v in visits for _ in range(nlocs)]),
        "1.index": _index(n), "1.data": b"CUBEX.DATA" + struct.pack(f"<{n * nlocs}d", *[
            t / nlocs for t in times for _ in range(nlocs)]),
    }
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(folder / "profile.cubex", "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _index(n: int) -> bytes:
    return b"CUBEX.INDEX" + struct.pack("<ihbi", 1, 0, 0, n) + struct.pack(f"<{n}i", *range(n))


def _anchor_xml(regions: list[tuple[str, str, str]], locations: list[tuple[str, list[str]]]) -> str:
    out = ['<?xml version="1.0" encoding="UTF-8"?>', '<cube version="4.4">',
           '<attr key="Creator" value="Score-P 8.4"/>', "<metrics>"]
    for mid, (uniq, kind, dtype) in enumerate((("visits", "EXCLUSIVE", "UINT64"), ("time", "INCLUSIVE", "DOUBLE"))):
        out.append(f'<metric id="{mid}" type="{kind}"><disp_name>{uniq}</disp_name><uniq_name>{uniq}'
                   f"</uniq_name><dtype>{dtype}</dtype><uom>sec</uom><url></url><descr></descr></metric>")
    out += ["</metrics>", "<program>"]
    for rid, (name, paradigm, role) in enumerate(regions):
        mod = "CUDA_KERNEL" if paradigm == "cuda" and role == "function" else ""
        out.append(f'<region id="{rid}" mod="{mod}" begin="-1" end="-1"><name>{escape(name)}</name>'
                   f"<mangled_name>{escape(name)}</mangled_name><paradigm>{paradigm}</paradigm>"
                   f"<role>{role}</role><url></url><descr></descr></region>")
    children = "".join(f'<cnode id="{i}" calleeId="{i}"></cnode>' for i in range(1, len(regions)))
    out += [f'<cnode id="0" calleeId="0">{children}</cnode>', "</program>", "<system>",
            '<systemtreenode Id="0"><name>machine Linux</name><class>machine</class>',
            '<systemtreenode Id="1"><name>node n01</name><class>node</class>']
    lid = 0
    for gid, (group, locs) in enumerate(locations):
        out.append(f'<locationgroup Id="{gid}"><name>{escape(group)}</name><rank>{gid}</rank>'
                   "<type>process</type>")
        for name in locs:
            kind = "gpu" if "[" in name else "thread"
            out.append(f'<location Id="{lid}"><name>{escape(name)}</name><rank>{lid}</rank>'
                       f"<type>{kind}</type></location>")
            lid += 1
        out.append("</locationgroup>")
    out += ["</systemtreenode></systemtreenode>", "</system>", "</cube>"]
    return "\n".join(out)


def experiment(folder: Path, scenario: Scenario) -> Path:
    """One experiment folder: scorep.cfg + MANIFEST.md, and a trace and/or a profile."""
    scorep_cfg(folder, scenario.config)
    if scenario.trace:
        write_trace(folder, scenario.processes, scenario.events)
    if scenario.profile:
        write_profile(folder, scenario.processes)
    return folder


# --- the field guide's shapes -------------------------------------------------------------

CUDA_CFG = {"SCOREP_CUDA_ENABLE": "'kernel','memcpy','sync'", "SCOREP_CUDA_BUFFER": "1M"}


def launcher_only(root: Path, profile: bool = True) -> Path:
    """`python -m scorep torchrun ...`: one unnamed experiment holding the elastic agent."""
    proc = Process(user_regions=AGENT_REGIONS)
    return experiment(root / "scorep-20240501_1200_1234567", Scenario([proc], CUDA_CFG, profile=profile))


def rank_with_cuda(root: Path, rank: int, profile: bool = False) -> Path:
    proc = Process(threads=2, gpu_streams=("CUDA[0:7]", "CUDA[0:20]"), cuda=True)
    return experiment(root / f"scorep_rank_{rank}", Scenario([proc], CUDA_CFG, profile=profile))


def rank_without_cuda(root: Path, rank: int, profile: bool = False) -> Path:
    """SCOREP_CUDA_ENABLE set but `--cuda` missing: Python regions only."""
    return experiment(root / f"scorep_rank_{rank}", Scenario([Process()], CUDA_CFG, profile=profile))


def rank_died(root: Path, rank: int) -> Path:
    """A rank that aborted at teardown: only MANIFEST.md and scorep.cfg."""
    folder = root / f"scorep_rank_{rank}"
    scorep_cfg(folder, CUDA_CFG)
    return folder


def per_rank_job(root: Path, ranks: int, cuda: bool = True, missing: tuple[int, ...] = ()) -> Path:
    for r in range(ranks):
        if r not in missing:
            (rank_with_cuda if cuda else rank_without_cuda)(root, r)
    return root

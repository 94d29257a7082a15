"""Definition-level summaries of traces and profiles, read in a child process.

What ART001/ART002 ask is answered by definitions alone: the processes
(location groups), the locations by type (CPU threads; GPU streams such as
`CUDA[0:7]` or `HIP[0:0]`), and the regions with their paradigms. The child
(`read_defs.py`) never reads events, so a multi-GB trace costs what its
definitions cost. Command line equivalent: `otf2-print -G traces.otf2`,
`scorep-score profile.cubex`.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GPU_PARADIGMS = {"cuda", "hip", "opencl", "openacc", "kokkos", "openmp_target"}
NCCL_KERNEL = re.compile(r"^(nccl|rccl)", re.IGNORECASE)
AGENT_REGION = re.compile(r"_invoke_run|ElasticAgent|launch_agent|_monitor_workers|elastic_launch"
                          r"|torch\.distributed\.run\b")
SAMPLES = 5


@dataclass(frozen=True)
class Location:
    """One location: `kind` is cpu, gpu, metric or other."""

    name: str
    kind: str
    group: str
    events: int | None = None

    @property
    def accelerator(self) -> str | None:
        """'CUDA', 'HIP', ... for a GPU location named like `CUDA[0:7]`."""
        if self.kind != "gpu":
            return None
        m = re.match(r"^\s*([A-Za-z][A-Za-z0-9_ ]*?)\s*\[", self.name)
        if m:
            return m.group(1).upper()
        return "CUDA" if self.group.upper().startswith("CUDA") else "GPU"


@dataclass(frozen=True)
class DataSummary:
    """What one trace or profile defines. `ok` False means it could not be read."""

    source: str  # "trace" or "profile"
    path: str
    ok: bool
    error: str | None = None
    creator: str | None = None
    processes: tuple[str, ...] = ()
    locations: tuple[Location, ...] = ()
    locations_total: int = 0
    events: int | None = None
    regions_total: int = 0
    paradigms: Mapping[str, int] = field(default_factory=dict)
    samples: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    gpu_kernels: int = 0
    nccl_kernels: tuple[str, ...] = ()
    agent_regions: tuple[str, ...] = ()
    by_type: tuple[Mapping[str, Any], ...] = ()
    top_regions: tuple[Mapping[str, Any], ...] = ()
    module_visits: tuple[Mapping[str, Any], ...] = ()   # region visits per top-level Python module
    total_time: float | None = None
    score_error: str | None = None

    @property
    def gpu_locations(self) -> list[Location]:
        return [loc for loc in self.locations if loc.kind == "gpu"]

    @property
    def cuda_locations(self) -> list[Location]:
        return [loc for loc in self.gpu_locations if loc.accelerator == "CUDA"]

    @property
    def cpu_threads(self) -> list[Location]:
        return [loc for loc in self.locations if loc.kind == "cpu"]

    @property
    def cuda_regions(self) -> int:
        return int(self.paradigms.get("cuda", 0))

    def to_json(self) -> dict[str, Any]:
        doc = {k: v for k, v in self.__dict__.items() if k != "locations"}
        doc["locations"] = [loc.__dict__ for loc in self.locations]
        doc["paradigms"] = dict(self.paradigms)
        doc["samples"] = {k: list(v) for k, v in self.samples.items()}
        return doc


_LOC_KIND = {"cpu_thread": "cpu", "thread": "cpu", "gpu": "gpu", "accelerator_stream": "gpu",
             "accelerator": "gpu", "metric": "metric"}


def from_child(doc: Mapping[str, Any]) -> DataSummary:
    """Build a summary from one JSON line of the reader child."""
    source, path = str(doc.get("kind")), str(doc.get("path"))
    if not doc.get("ok"):
        return DataSummary(source, path, False, error=str(doc.get("error") or "unreadable"))
    groups = [(str(g[0]), str(g[1])) for g in doc.get("location_groups", [])]
    locations = tuple(
        Location(str(name), _LOC_KIND.get(str(kind).lower(), "other"),
                 groups[gi][0] if 0 <= gi < len(groups) else "", events)
        for name, kind, gi, events in doc.get("locations", []))
    paradigms: dict[str, int] = {}
    samples: dict[str, list[str]] = {}
    kernels, nccl, agent = 0, [], []
    for name, paradigm, role, source_file in doc.get("regions", []):
        paradigms[paradigm] = paradigms.get(paradigm, 0) + 1
        if len(samples.setdefault(paradigm, [])) < SAMPLES and role != "artificial":
            samples[paradigm].append(name)
        if paradigm in GPU_PARADIGMS and (role == "kernel" or source_file.endswith("_KERNEL")):
            kernels += 1
            if NCCL_KERNEL.match(name):
                nccl.append(name)
        if AGENT_REGION.search(name):
            agent.append(name)
    events = doc.get("events")
    return DataSummary(
        source, path, True, creator=doc.get("creator"),
        processes=tuple(name for name, kind in groups if kind == "process"),
        locations=locations, locations_total=int(doc.get("locations_total", len(locations))),
        events=int(events) if events is not None else None,
        regions_total=int(doc.get("regions_total", 0)), paradigms=paradigms,
        samples={k: tuple(v) for k, v in samples.items() if v},
        gpu_kernels=kernels, nccl_kernels=tuple(nccl[:20]), agent_regions=tuple(agent[:20]),
        by_type=tuple(doc.get("by_type", ())), top_regions=tuple(doc.get("top_regions", ())),
        module_visits=tuple(doc.get("module_visits", ())),
        total_time=doc.get("total_time"), score_error=doc.get("score_error"),
    )


def reader_argv(items: list[tuple[str, str]], isolated: bool) -> list[str]:
    """The child command for (kind, path) items; -I when running as root (no user imports)."""
    script = str(Path(__file__).with_name("read_defs.py"))
    flags = ["-I"] if isolated else []
    return [sys.executable, *flags, script, *(x for item in items for x in item)]


def read_summaries(items: list[tuple[str, str]], timeout: float,
                   isolated: bool = False) -> list[DataSummary]:
    """Read (kind, path) items in one child; a crash or timeout becomes an error per item."""
    from doctor.isolate import run_isolated
    from doctor.safeopen import problem, trace_problem

    # A FIFO or a device in the archive would hang or flood the OTF2 library: named, not read.
    unsafe = {item: (trace_problem(item[1]) if item[0] == "trace" else problem(item[1])) for item in items}
    refused = [DataSummary(k, p, False, error=unsafe[(k, p)] or "") for k, p in items if unsafe[(k, p)]]
    items = [item for item in items if not unsafe[item]]
    if not items:
        return refused
    if timeout <= 0:
        return refused + [DataSummary(k, p, False, error="no time left to read it") for k, p in items]
    res = run_isolated(reader_argv(items, isolated), timeout)
    got: dict[tuple[str, str], DataSummary] = {}
    for line in res.stdout.splitlines():
        try:
            summary = from_child(json.loads(line))
        except (ValueError, TypeError, KeyError, IndexError):
            continue
        got[(summary.source, summary.path)] = summary
    why = _child_failure(res)
    return refused + [got.get(item) or DataSummary(item[0], item[1], False, error=why) for item in items]


def _child_failure(res: Any) -> str:
    if res.timed_out:
        return f"reading it took longer than {res.duration_s:.0f} s (stopped)"
    last = next((ln.strip() for ln in reversed(res.stderr.splitlines()) if ln.strip()), "")
    how = f"was killed by {res.signal_name}" if res.signal_name else f"exited with {res.returncode}"
    return f"the reader {how}" + (f": {last[:200]}" if last else "")

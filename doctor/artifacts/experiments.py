"""The `experiments` fact: every experiment folder with its trace and profile summaries."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from doctor.artifacts.discover import ExperimentDir, cuda_requested
from doctor.artifacts.summary import DataSummary, Location, read_summaries

PER_FOLDER_TIMEOUT = 30.0


@dataclass(frozen=True)
class Experiment:
    """One experiment folder and what its trace and profile define."""

    dir: ExperimentDir
    trace: DataSummary | None = None
    profile: DataSummary | None = None

    @property
    def path(self) -> str:
        return self.dir.path

    @property
    def readable(self) -> list[DataSummary]:
        return [s for s in (self.trace, self.profile) if s is not None and s.ok]

    @property
    def problems(self) -> list[str]:
        """Why this folder is not a complete measurement (empty when it is)."""
        out = list(self.dir.problems)
        for s in (self.trace, self.profile):
            if s is not None and not s.ok:
                name = "traces.otf2" if s.source == "trace" else "profile.cubex"
                out.append(f"{name} is unreadable (truncated or corrupt?): {s.error}")
        return out

    @property
    def processes(self) -> int:
        return max((len(s.processes) for s in self.readable), default=0)

    @property
    def gpu_locations(self) -> list[Location]:
        """GPU locations of the trace or the profile, whichever defines more."""
        return max((s.gpu_locations for s in self.readable), key=len, default=[])

    @property
    def cuda_locations(self) -> list[Location]:
        return max((s.cuda_locations for s in self.readable), key=len, default=[])

    @property
    def cuda_regions(self) -> int:
        return max((s.cuda_regions for s in self.readable), default=0)

    @property
    def nccl_kernels(self) -> list[str]:
        return sorted({k for s in self.readable for k in s.nccl_kernels})

    @property
    def agent_regions(self) -> list[str]:
        return sorted({r for s in self.readable for r in s.agent_regions})

    @property
    def launcher_only(self) -> bool:
        """One process, elastic-agent regions, no GPU locations and no CUDA regions."""
        return (bool(self.readable) and self.processes == 1 and bool(self.agent_regions)
                and not self.gpu_locations and self.cuda_regions == 0)

    @property
    def cuda_setting(self) -> tuple[str, str, int] | None:
        """(value, scorep.cfg path, line) when scorep.cfg asks for CUDA recording."""
        cfg = self.dir.config
        value = cfg.get("SCOREP_CUDA_ENABLE") if cfg else None
        if cfg is None or not cuda_requested(value):
            return None
        return value or "", cfg.path, cfg.lines.get("SCOREP_CUDA_ENABLE", 0)

    def to_json(self) -> dict[str, Any]:
        d = self.dir
        return {
            "path": d.path, "kind": d.kind, "rank": d.rank, "files": list(d.files),
            "manifest": d.manifest, "explicitly_set": list(d.explicit),
            "config": dict(d.config.values) if d.config else None,
            "problems": self.problems, "processes": self.processes,
            "launcher_only": self.launcher_only,
            "trace": self.trace.to_json() if self.trace else None,
            "profile": self.profile.to_json() if self.profile else None,
        }


@dataclass(frozen=True)
class Experiments:
    """All experiment folders found under the job folder (`root`)."""

    root: str | None
    folders: tuple[Experiment, ...] = ()

    @property
    def rank_folders(self) -> list[Experiment]:
        return [e for e in self.folders if e.dir.kind == "rank"]

    @property
    def leftovers(self) -> list[Experiment]:
        """`scorep-measurement-tmp` / `scorep-failed-*`: runs that never finished."""
        return [e for e in self.folders if e.dir.kind in ("tmp", "failed")]

    def to_json(self) -> dict[str, Any]:
        return {"root": self.root, "folders": [e.to_json() for e in self.folders]}


def summarize(root: str | None, dirs: list[ExperimentDir], budget_s: float,
              isolated: bool = False) -> Experiments:
    """Read every folder's trace/profile definitions, a few folders at a time."""
    deadline = time.monotonic() + budget_s

    def one(d: ExperimentDir) -> Experiment:
        items = [(k, p) for k, p in (("trace", d.trace_anchor), ("profile", d.profile)) if p]
        left = min(PER_FOLDER_TIMEOUT, deadline - time.monotonic())
        got = {s.source: s for s in read_summaries(items, left, isolated)}
        return Experiment(d, got.get("trace"), got.get("profile"))

    workers = max(1, min(4, os.cpu_count() or 1, len(dirs)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="scorep-read") as pool:
        folders = tuple(pool.map(one, dirs))
    return Experiments(root, folders)

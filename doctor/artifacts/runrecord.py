"""What a `gpu-doctor launch` run was started with: its own record, `launch.json` beside its rank logs.

A log line proves a cause only where the run that wrote it had the cause's
precondition: Score-P loaded (`--instrument scorep`), its CUDA adapter
(`--cuda` among the flags the launch really used), the node (the host the
ranks ran on). A log with no record beside it (a Slurm job's `slurm-*.out`)
is the job script's run: the job model says how it ran.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from doctor import safeopen
from doctor.limits import MAX_FILE_BYTES

RECORD = "launch.json"


@dataclass(frozen=True)
class RunRecord:
    """The spec a `gpu-doctor launch` run started with (after its own changes, such as a dropped --cuda)."""

    path: str
    instrument: str
    scorep_flags: tuple[str, ...]
    hosts: tuple[str, ...]      # where its ranks ran; () for a record older than the host field
    python: str | None
    workdir: str | None
    experiments: tuple[str, ...] = ()  # the ranks' Score-P experiment folders (absolute)
    world_size: int | None = None

    @property
    def scorep(self) -> bool:
        return self.instrument == "scorep"

    @property
    def cuda(self) -> bool:
        return self.scorep and "--cuda" in self.scorep_flags

    def ran_on(self, host: str) -> bool | None:
        """Whether a rank ran on `host` (None: the record does not say)."""
        return (host in self.hosts) if self.hosts else None

    def preconditions(self, host: str) -> dict[str, bool | None]:
        """What a cause needs of the run that wrote a log: `scorep`, `cuda`, `node` (this host)."""
        return {"scorep": self.scorep, "cuda": self.cuda, "node": self.ran_on(host)}

    def describe(self) -> str:
        if not self.scorep:
            return "gpu-doctor launch without Score-P"
        return f"gpu-doctor launch under python -m scorep {' '.join(self.scorep_flags)}".rstrip()


def read_record(path: Path) -> RunRecord | None:
    """A run folder's launch.json, or None when it is missing, unreadable or not one."""
    try:
        doc = json.loads(safeopen.read_text(path, MAX_FILE_BYTES))
    except (OSError, ValueError):
        return None
    spec = doc.get("spec") if isinstance(doc, dict) else None
    if not isinstance(spec, dict):
        return None
    flags = spec.get("scorep_flags")
    nodes = doc.get("nodes")  # a multi-node run: rank -> node; else every rank ran where it was launched
    hosts = sorted({str(n) for n in nodes.values() if n}) if isinstance(nodes, dict) else []
    if not hosts and isinstance(doc.get("host"), str) and doc["host"]:
        hosts = [doc["host"]]
    return RunRecord(str(path), str(spec.get("instrument") or "none"),
                     tuple(str(f) for f in flags) if isinstance(flags, list) else (),
                     tuple(hosts), _text(spec.get("python")), _text(spec.get("workdir")), _experiments(doc),
                     _world_size(spec))


def _world_size(spec: dict[str, Any]) -> int | None:
    nproc, nnodes = spec.get("nproc"), spec.get("nnodes") or 1
    return nproc * nnodes if isinstance(nproc, int) and isinstance(nnodes, int) and nproc > 0 else None


def _experiments(doc: dict[str, Any]) -> tuple[str, ...]:
    out = []
    for rank in doc.get("ranks") or ():
        env = rank.get("env") if isinstance(rank, dict) else None
        name = env.get("SCOREP_EXPERIMENT_DIRECTORY") if isinstance(env, dict) else None
        if isinstance(name, str) and name and isinstance(rank.get("cwd"), str):
            out.append(str(Path(rank["cwd"], name)))
    return tuple(out)


def launched_experiments(root: Path | None) -> dict[str, RunRecord]:
    """Experiment folder -> the record of the newest `gpu-doctor launch` run that wrote it."""
    record = latest_run(root)
    return {os.path.realpath(path): record for path in record.experiments} if record is not None else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def record_for_log(log: str | Path) -> RunRecord | None:
    """The record of the run that wrote `log` (a rank log beside its launch.json)."""
    return read_record(Path(log).parent / RECORD)


def latest_run(root: Path | None) -> RunRecord | None:
    """The record of the newest run under `root/.gpu-doctor/runs/`."""
    if root is None:
        return None
    runs = Path(root) / ".gpu-doctor" / "runs"
    try:
        stamps = sorted((d for d in runs.iterdir() if (d / RECORD).is_file()), key=lambda d: d.name)
    except OSError:
        return None
    return read_record(stamps[-1] / RECORD) if stamps else None


def had(run: Any, precondition: str) -> bool:
    """Whether the run a log match came from (its `run`, see `RunRecord.preconditions`) had
    `precondition`; a log without a record, or a record that does not say, is not ruled out."""
    return not isinstance(run, dict) or run.get(precondition) is not False

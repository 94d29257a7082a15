"""What a `gpu-doctor launch` run was started with: its own record, `launch.json` beside its rank logs.

A log line proves a cause only where the run that wrote it had the cause's
precondition: Score-P loaded (`--instrument scorep`), its CUDA adapter
(`--cuda` among the flags the launch really used), the node (the host the
ranks ran on). A Slurm output file with no record beside it (`slurm-*.out`) is
the job script's run: the job model says how it ran. Any other log without a
record is judged by what it says itself (`[Score-P]` lines: Score-P was loaded,
with CUDA/CUPTI in them its CUDA adapter); what it does not say stays unknown
(`None`, with `unknown` saying why), and a cause chain through it says so.
Score-P prints nothing in a run that goes well, so no line never means no Score-P.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from doctor import safeopen
from doctor.limits import MAX_FILE_BYTES

RECORD = "launch.json"
SLURM_OUTPUT = ("slurm-*.out", "slurm-*.err")   # what Slurm writes for the job script itself
SAYS_BYTES = 4 << 20                            # what a log is read for its Score-P lines: head and tail
SCOREP_LINE = re.compile(rb"\[Score-P\][^\n]*")
CUDA_WORDS = re.compile(rb"cuda|cupti", re.I)
WHAT = {"scorep": "Score-P loaded", "cuda": "Score-P's CUDA adapter (--cuda)", "node": "ran on this host"}


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


def log_says(log: str | Path) -> dict[str, bool | None]:
    """What a log says of its run by its own lines: Score-P loaded (a `[Score-P]` line), its CUDA
    adapter (a `[Score-P]` line about CUDA or CUPTI); None where it does not say."""
    try:
        with safeopen.open_binary(log) as fh:   # a regular file only: never blocks on a FIFO
            size = os.fstat(fh.fileno()).st_size
            data = fh.read(SAYS_BYTES)
            if size > 2 * SAYS_BYTES:
                fh.seek(size - SAYS_BYTES)
                data += b"\n" + fh.read(SAYS_BYTES)
    except OSError:
        return {"scorep": None, "cuda": None}
    lines = SCOREP_LINE.findall(data)
    return {"scorep": True if lines else None,
            "cuda": True if any(CUDA_WORDS.search(line) for line in lines) else None}


def run_of_log(log: str | Path, host: str) -> dict[str, Any] | None:
    """What the run that wrote `log` had (`scorep`, `cuda`, `node`: True, False, or None for not
    known, with `unknown` saying why and `log` naming the file): its launch record's word, else
    the log's own; None for a Slurm output file of the job (the job model says how it ran)."""
    record = record_for_log(log)
    if record is not None:
        return {**record.preconditions(host), "log": Path(log).name,
                "unknown": f"its launch record ({RECORD}) does not say where the ranks ran"}
    name = Path(log).name
    if any(fnmatch.fnmatch(name, pattern) for pattern in SLURM_OUTPUT):
        return None
    said = log_says(log)
    why = "no launch record beside it, " + ("and its [Score-P] lines do not mention CUDA" if said["scorep"]
                                             else "no [Score-P] line in it")
    return {**said, "node": None, "log": name, "unknown": why}


def unsure(run: Any, precondition: str) -> str | None:
    """Why it is not known whether the run a log match came from had `precondition` (None: known,
    or the job's own run, which the job model describes)."""
    if not isinstance(run, dict) or run.get(precondition) is not None:
        return None
    return (f"not known whether the run that wrote {run.get('log') or 'the log'} had "
            f"{WHAT.get(precondition, precondition)}: {run.get('unknown') or 'its record does not say'}")


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

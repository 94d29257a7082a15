"""What to launch: the spec, and the exact command and environment of each rank.

Shell equivalent of one instrumented rank (what the field guide's fix does by hand):

    RANK=1 LOCAL_RANK=1 WORLD_SIZE=4 LOCAL_WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 \\
    MASTER_PORT=29500 SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_1 \\
    python -m scorep --cuda --thread=pthread train.py --args

Note: no `--` after the Score-P flags: the wrapper forwards it to
`scorep-config`, which rejects it (SCP005).
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_SCOREP_FLAGS = ("--cuda", "--thread=pthread")

# Variables a rank must not inherit: they would make `python -m scorep` skip its
# re-exec or preload Score-P into a process that is meant to be outside it.
SCOREP_INHERITED = ("SCOREP_PYTHON_BINDINGS_INITIALISED",)


@dataclass(frozen=True)
class LaunchSpec:
    """One launch on this node (or, with `slurm`, across an allocation)."""

    script: str
    args: tuple[str, ...] = ()
    nproc: int = 1
    python: str = sys.executable
    workdir: Path = field(default_factory=Path.cwd)
    instrument: str = "none"                      # "scorep" or "none"
    scorep_flags: tuple[str, ...] = DEFAULT_SCOREP_FLAGS
    env: Mapping[str, str] | None = None          # base environment; default: os.environ at start
    master_addr: str = "127.0.0.1"
    master_port: int | None = None                # None: a free port, chosen at start
    warmup: bool = True
    warmup_budget_s: float = 300.0
    grace_s: float = 5.0                          # after a rank fails, before the others are stopped
    kill_after_s: float = 5.0                     # after SIGTERM, before SIGKILL
    rendezvous_timeout_s: float | None = 300.0
    run_dir: Path | None = None                   # default <script's folder>/.gpu-doctor/runs/<timestamp>
    nnodes: int = 1
    slurm_hosts: tuple[str, ...] = ()             # set: launch through srun over these hosts
    socket_ifname: str = "auto"                   # across nodes: auto (route to MASTER_ADDR), off, or a name
    canary: int = 0                               # compare the DDP replicas every N optimizer steps; 0 = off
    canary_action: str = "fail"                   # on a mismatch: fail (exit 3 at the end), stop, warn
    canary_timeout_s: float = 60.0                # how long a canary check waits for the other ranks
    canary_optimizer_state: bool = False          # the canary hashes the optimizer's state too
    stall_s: float = 300.0                        # no rank advanced this long: sample them (doctor.hang); 0 off
    stall_action: str = "wait"                    # after the stall verdict: wait, or stop every rank
    flight_recorder: bool = False                 # torch's Flight Recorder on in every rank (doctor.hang.flight)

    @property
    def instrumented(self) -> bool:
        return self.instrument == "scorep"

    @property
    def cuda_required(self) -> bool:
        """Score-P is asked to record CUDA, so a node without CUDA cannot do this run."""
        return self.instrumented and "--cuda" in self.scorep_flags

    @property
    def world_size(self) -> int:
        return self.nproc * max(1, self.nnodes)

    def base_env(self) -> dict[str, str]:
        env = dict(os.environ if self.env is None else self.env)
        for name in SCOREP_INHERITED:
            env.pop(name, None)
        return env


@dataclass(frozen=True)
class RankPlan:
    """The exact process of one rank: argv, the variables set for it, its log."""

    rank: int
    argv: tuple[str, ...]
    rank_env: Mapping[str, str]         # what the launcher sets on top of the base environment
    cwd: str
    log_path: str

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        merged = dict(base)
        merged.update(self.rank_env)
        return merged


def free_port(addr: str = "127.0.0.1") -> int:
    """A TCP port that nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr if addr not in ("localhost",) else "127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_command(spec: LaunchSpec) -> tuple[str, ...]:
    """`python [-m scorep <flags>] script args` — the same for every rank."""
    if spec.instrumented:
        return (spec.python, "-m", "scorep", *spec.scorep_flags, spec.script, *spec.args)
    return (spec.python, spec.script, *spec.args)


def experiment_dir(rank: int) -> str:
    return f"scorep_rank_{rank}"


def rank_env(spec: LaunchSpec, rank: int, master_port: int, base: Mapping[str, str]) -> dict[str, str]:
    """The variables torchrun would set for a rank, plus Score-P's per-rank folder."""
    env = {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank % spec.nproc),
        "WORLD_SIZE": str(spec.world_size),
        "LOCAL_WORLD_SIZE": str(spec.nproc),
        "MASTER_ADDR": spec.master_addr,
        "MASTER_PORT": str(master_port),
    }
    if spec.instrumented:
        env["SCOREP_EXPERIMENT_DIRECTORY"] = experiment_path(spec, rank)
        memory = total_memory_to_set(spec, base)
        if memory:
            env["SCOREP_TOTAL_MEMORY"] = memory
    if "PYTHONUNBUFFERED" not in base:
        env["PYTHONUNBUFFERED"] = "1"   # live status needs lines as they are printed
    return env


def total_memory_to_set(spec: LaunchSpec, base: Mapping[str, str]) -> str | None:
    """SCOREP_TOTAL_MEMORY for each rank when the user set none: Score-P's default 16000k
    aborts a rank whose Python instrumenter traces `import torch` (SCP009)."""
    if not spec.instrumented or "SCOREP_TOTAL_MEMORY" in base:
        return None
    from doctor.scorep_memory import PROPOSED

    return PROPOSED


def memory_warning(spec: LaunchSpec, base: Mapping[str, str]) -> str | None:
    """Before starting: one line when the user's SCOREP_TOTAL_MEMORY will not hold the measurement."""
    value = base.get("SCOREP_TOTAL_MEMORY")
    if not spec.instrumented or value is None:
        return None
    from doctor.jobfolder.scorep_values import TOTAL_MEMORY_LIMIT, SizeError, parse_size
    from doctor.scorep_memory import PROPOSED, instrumenter_on, judge

    try:
        if parse_size(value) > TOTAL_MEMORY_LIMIT:
            return (f"SCOREP_TOTAL_MEMORY={value} is 4 GiB or more: Score-P reduces it to its maximum "
                    "('Too much memory requested', SCP003); use 3500M")
    except SizeError:
        pass
    verdict = judge(value, instrumenter_on(spec.scorep_flags), imports_torch=True)
    if verdict.enough:
        return None
    return (f"{verdict.reason} (SCP009); unset it to let gpu-doctor set {PROPOSED} per rank, or set "
            f"SCOREP_TOTAL_MEMORY={PROPOSED}")


def job_folder(spec: LaunchSpec) -> Path:
    """The folder of the training script: where `gpu-doctor --check-only` and post-run look for the
    run's record, also when the launch was started from a folder above it (`-- job/train.py`)."""
    script = Path(spec.workdir) / spec.script
    return script.parent.resolve() if script.is_file() else Path(spec.workdir)


def experiment_path(spec: LaunchSpec, rank: int) -> str:
    """SCOREP_EXPERIMENT_DIRECTORY of a rank: `scorep_rank_N` in the ranks' folder, or, for a launch
    started above the job folder, that folder's `scorep_rank_N` (where post-run on the job looks)."""
    base = experiment_base(spec)
    return experiment_dir(rank) if base is None else str(Path(base) / experiment_dir(rank))


def experiment_base(spec: LaunchSpec) -> str | None:
    """The folder the ranks' `scorep_rank_N` go into when it is not their working folder: the job
    folder of a launch started above it (`-- job/train.py`); None: their working folder."""
    folder = job_folder(spec)
    return None if folder == Path(spec.workdir).resolve() else str(folder)


def default_run_dir(workdir: Path, now: dt.datetime | None = None) -> Path:
    stamp = (now or dt.datetime.now()).strftime("%Y%m%d-%H%M%S")
    base = workdir / ".gpu-doctor" / "runs"
    path = base / stamp
    n = 1
    while path.exists():
        n += 1
        path = base / f"{stamp}-{n}"
    return path


def plan_ranks(spec: LaunchSpec, master_port: int, run_dir: Path) -> list[RankPlan]:
    """One plan per local rank (single node)."""
    base = spec.base_env()
    argv = rank_command(spec)
    extra: dict[str, str] = {}
    if spec.canary:
        from doctor.canary.launch import rank_env as canary_env

        extra = canary_env(spec.canary, spec.canary_timeout_s, run_dir, base, spec.canary_optimizer_state)
    if spec.flight_recorder:
        from doctor.hang.flight import flight_recorder_env

        extra.update(flight_recorder_env(base, run_dir))
    return [RankPlan(rank=r, argv=argv, rank_env={**rank_env(spec, r, master_port, base), **extra},
                     cwd=str(spec.workdir), log_path=str(run_dir / f"rank_{r}.log"))
            for r in range(spec.nproc)]

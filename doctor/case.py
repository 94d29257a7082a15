"""The Case: what is examined, and the options a run was asked for."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Case:
    """A job folder (or none: node-only), the environment, and the run options.

    `env` is the environment gpu-doctor runs in; the job's own environment
    (what its scripts export) is a fact derived from the job folder.
    """

    root: Path | None = None
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    python: str | None = None
    scripts: tuple[Path, ...] = ()
    launch: tuple[Path, ...] = ()
    logs: tuple[Path, ...] = ()
    expect_gpus: int | None = None
    level: int = 1
    gate: bool = False
    host: str = field(default_factory=socket.gethostname)
    options: Mapping[str, object] = field(default_factory=dict)

    @property
    def as_root(self) -> bool:
        return hasattr(os, "geteuid") and os.geteuid() == 0

    @property
    def job_python(self) -> str:
        """The interpreter the job runs with: --python, else the current one."""
        import sys

        return self.python or sys.executable

    @property
    def gpus_expected(self) -> int | None:
        """GPUs the job expects: --expect-gpus, else what Slurm allocated, else None."""
        if self.expect_gpus is not None:
            return self.expect_gpus
        for name in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES"):
            value = self.env.get(name, "").strip()
            if value and value not in ("NoDevFiles", "-1"):
                return len([v for v in value.split(",") if v.strip()])
        return None

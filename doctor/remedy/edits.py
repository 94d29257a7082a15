"""What several remedies share beyond the job model: which job scripts the findings name, quoting.

All of it works on the draft (`RemedyContext`), never on the disk.
"""

from __future__ import annotations

import re
from pathlib import Path

from doctor.remedy.draft import RemedyContext

SHELL_SUFFIXES = ("", ".sh", ".bash", ".sbatch", ".slurm", ".job", ".pbs", ".env", ".cfg")
NOT_SHELL = (".py", ".json", ".yaml", ".yml", ".toml", ".txt", ".log", ".out", ".err", ".md")


def shell_files(ctx: RemedyContext) -> list[Path]:
    """The job scripts to edit: those the findings point at, else the case's launch scripts."""
    found = [p for p in ctx.files() if p.suffix.lower() not in NOT_SHELL]
    if found:
        return found
    paths = [p for p in (ctx.resolve(x) for x in ctx.case.launch) if p is not None]
    if not paths and ctx.case.root is not None:
        paths = sorted(p for p in ctx.case.root.iterdir()
                       if p.is_file() and p.suffix in SHELL_SUFFIXES[1:6])
    return paths


def quote_if_needed(value: str) -> str:
    return value if re.fullmatch(r"[A-Za-z0-9_./:=,+@%-]+", value) else "'" + value.replace("'", "'\\''") + "'"

"""Find the Score-P experiment folders under the PATHs and group them into runs.

An experiment folder holds `traces.otf2` or `profile.cubex`, or is named like one
(`scorep_rank_N`, `scorep-YYYYMMDD_HHMM_*`, `scorep-measurement-tmp`, `scorep-failed-*`).
The per-rank folders that share a parent folder (`scorep_rank_0`, `scorep_rank_1`, ... as the
launcher writes them, with the `scorep-measurement-tmp` / `scorep-failed-*` a dying rank leaves)
are one run; any other experiment folder (`scorep-20240101_1200_...`, one
MPI-style trace holding every process) is a run of its own. Several runs under one PATH
(`run_1gpu/`, `run_4gpu/`) or several PATHs make a scaling table.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

_EXPERIMENT_NAME = re.compile(r"^scorep[-_]", re.IGNORECASE)
# Folders that belong with their siblings: per-rank folders, and what a dying rank leaves.
_PER_RANK_NAME = re.compile(r"rank[-_]?\d+$|^scorep-measurement-tmp$|^scorep-failed", re.IGNORECASE)
_DIGITS = re.compile(r"(\d+)")
MAX_DEPTH = 5
KINETO_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")   # one file per rank: the folder is the run
VIRTUAL = frozenset({"/proc", "/sys", "/dev", "/run"})  # never hold traces; /proc alone is huge


@dataclass(frozen=True)
class RunFolder:
    """One run: its folder, a label, and its experiment folders in rank order."""

    path: Path
    label: str
    experiments: tuple[Path, ...]


def natural_key(path: Path) -> list[object]:
    """`scorep_rank_2` before `scorep_rank_10`."""
    return [int(part) if part.isdigit() else part for part in _DIGITS.split(path.name)]


def is_experiment(path: Path) -> bool:
    try:
        return ((path / "traces.otf2").is_file() or (path / "profile.cubex").is_file()
                or bool(_EXPERIMENT_NAME.match(path.name)))
    except OSError:  # a folder we may not look into (`timeline /` walks /proc): not an experiment
        return False


def find_experiments(root: Path, max_depth: int = MAX_DEPTH) -> list[Path]:
    """Experiment folders at or below `root` (a folder, or a `traces.otf2`/`profile.cubex` file),
    and torch.profiler traces (`*.pt.trace.json` files, one per rank: each is an experiment)."""
    from doctor.timeline.kineto import is_kineto, kineto_files

    try:
        if root.is_file():
            if is_kineto(root):
                return [root]
            return [root.parent] if root.name in ("traces.otf2", "profile.cubex") else []
        has_data = (root / "traces.otf2").is_file() or (root / "profile.cubex").is_file()
    except OSError:
        return []
    if has_data:
        return [root]
    kineto = kineto_files(root)
    if kineto:
        return kineto
    found: list[Path] = []
    _walk(root, max_depth, found)
    # only named like one (`examples/scorep-ddp-trace` holding scorep_rank_N/): its experiments count
    return found or ([root] if is_experiment(root) else [])


def _walk(folder: Path, depth: int, found: list[Path]) -> None:
    try:
        entries = sorted((Path(e.path) for e in os.scandir(folder)
                          if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")
                          and e.path not in VIRTUAL), key=natural_key)
    except OSError:
        return
    from doctor.timeline.kineto import kineto_files

    for entry in entries:
        kineto = kineto_files(entry)
        if kineto:
            found.extend(kineto)
        elif is_experiment(entry):
            found.append(entry)       # never descend into an experiment (its traces/ may be huge)
        elif depth > 1:
            _walk(entry, depth - 1, found)


def group_runs(roots: list[Path]) -> list[RunFolder]:
    """Runs under the PATHs, in the order given (then natural order within a PATH)."""
    runs: dict[Path, list[Path]] = {}
    labels: dict[Path, str] = {}
    for root in roots:
        for experiment in find_experiments(root):
            per_rank = _PER_RANK_NAME.search(experiment.name) or experiment.name.endswith(KINETO_SUFFIXES)
            key = experiment.parent if per_rank else experiment
            runs.setdefault(key, []).append(experiment)
            labels.setdefault(key, _label(root, key))
    return [RunFolder(key, labels[key], tuple(sorted(set(exps), key=natural_key)))
            for key, exps in runs.items()]


def _label(root: Path, parent: Path) -> str:
    base = root.parent if root.is_file() else root
    try:
        relative = parent.relative_to(base)
    except ValueError:
        return parent.name or str(parent)
    return str(relative) if str(relative) != "." else (parent.name or str(parent))

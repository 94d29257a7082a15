"""After an instrumented run: did every rank leave a measurement, and was CUDA recorded?

The per-rank folders are counted here (cheap, no trace reading); what is in
them is judged by the artifacts checks ART001-ART004 through the runner, when
this build has them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from doctor.case import Case
from doctor.launch.events import RunSummary
from doctor.launch.spec import LaunchSpec, experiment_dir, job_folder
from doctor.model import CheckResult, Status
from doctor.wording import count

ART_CHECKS = ("ART001", "ART002", "ART003", "ART004")
MEASUREMENT_FILES = ("profile.cubex", "traces.otf2")


@dataclass(frozen=True)
class RankFolder:
    rank: int
    path: str
    state: str          # measured | incomplete | stale | missing | why the trace is unreadable

    @property
    def measured(self) -> bool:
        return self.state == "measured"


@dataclass(frozen=True)
class Verification:
    folders: tuple[RankFolder, ...]
    cuda: str                              # yes | no | not asked | unknown (...)
    results: tuple[CheckResult, ...] = ()
    unavailable: tuple[str, ...] = ()      # ART checks this build does not have

    @property
    def measured(self) -> int:
        return sum(f.measured for f in self.folders)

    def verdict_line(self) -> str:
        return f"{self.measured}/{count(len(self.folders), 'rank')} measured, CUDA recorded: {self.cuda}"

    def problems(self) -> list[str]:
        out = [f"rank {f.rank}: {f.path}: {f.state}" for f in self.folders if not f.measured]
        out += [f"{r.check_id} {r.status.value}: {r.message}" for r in self.results
                if r.status not in (Status.PASS, Status.SKIP)]
        return out


def rank_folder(workdir: Path, rank: int, since: float) -> RankFolder:
    path = workdir / experiment_dir(rank)
    if not path.is_dir():
        return RankFolder(rank, str(path), "missing")
    if not any((path / name).exists() for name in MEASUREMENT_FILES):
        return RankFolder(rank, str(path), "incomplete")
    if path.stat().st_mtime < since - 1.0:
        return RankFolder(rank, str(path), "stale")
    return RankFolder(rank, str(path), "measured")


@dataclass(frozen=True)
class ArtRun:
    results: tuple[CheckResult, ...]
    missing: tuple[str, ...]
    experiments: Any = None        # the `experiments` fact when the checks computed it


def run_art_checks(case: Case, budget_s: float = 60.0) -> ArtRun:
    """The ART checks this build has, run over the case; and the IDs it lacks."""
    from doctor import registry
    from doctor.runner import run_checks

    registry.load()
    have = [cid for cid in ART_CHECKS if cid in registry.CHECKS]
    missing = tuple(cid for cid in ART_CHECKS if cid not in registry.CHECKS)
    if not have:
        return ArtRun((), missing)
    run = run_checks(case, have, budget_s=budget_s, mode="post-launch")
    return ArtRun(tuple(r for r in run.results if r.check_id in ART_CHECKS), missing,
                  run.facts.peek("experiments"))


def judged_by_artifacts(folders: tuple[RankFolder, ...], experiments: Any) -> tuple[RankFolder, ...]:
    """Where the artifacts reader summarised the folders, a rank counts as measured only
    if its folder holds a readable trace or profile (not just the file names)."""
    rank_folders = getattr(experiments, "rank_folders", None)
    if not isinstance(rank_folders, list):
        return folders
    complete = {e.dir.rank for e in rank_folders if e.readable and not e.problems}
    problems = {e.dir.rank: e.problems[0] for e in rank_folders if e.problems}
    return tuple(f if not f.measured or f.rank in complete else
                 RankFolder(f.rank, f.path, problems.get(f.rank, "unreadable"))
                 for f in folders)


def cuda_recorded(spec: LaunchSpec, results: tuple[CheckResult, ...]) -> str:
    if not spec.cuda_required:
        return "not asked (no --cuda)"
    art002 = next((r for r in results if r.check_id == "ART002"), None)
    if art002 is None:
        return "unknown (ART002 not available)"
    if art002.status == Status.PASS:
        return "yes"
    if art002.status in (Status.FAIL, Status.WARN):
        return "no"
    return f"unknown (ART002 {art002.status.value})"


def verify(spec: LaunchSpec, summary: RunSummary, started_wall: float,
           budget_s: float = 60.0) -> Verification:
    folders = tuple(rank_folder(job_folder(spec), r, started_wall) for r in range(summary.world_size))
    case = Case(root=job_folder(spec), env=spec.base_env(), python=spec.python,
                logs=tuple(Path(r.log_path) for r in summary.ranks),
                options={"launch": {"world_size": summary.world_size, "instrument": spec.instrument,
                                    "scorep_flags": list(spec.scorep_flags),
                                    "experiment_dirs": [f.path for f in folders],
                                    "rank_nodes": {r.rank: r.node for r in summary.ranks if r.node},
                                    "run_dir": summary.run_dir}})
    try:
        art = run_art_checks(case, budget_s)
    except Exception as exc:  # the verification must not turn a finished run into a traceback
        return Verification(folders, f"unknown (trace checks failed: {type(exc).__name__}: {exc})")
    return Verification(judged_by_artifacts(folders, art.experiments), cuda_recorded(spec, art.results),
                        art.results, art.missing)

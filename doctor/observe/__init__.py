"""The observed reading of a job: the job scripts run under the real bash, in a sandbox.

`sandbox` (bubblewrap, else unshare; limits; nothing left running), `stage` (the copy of the job
folder, the PATH of recording shims in `sh/`, the `#SBATCH` environment), `run` (each job script
once, within its time), `records` (what the shims recorded, grouped per command line) and `merge`
(the observed processes into the one job model: where the readings differ the observed one wins,
and `job.differences` says so). Nothing of the user's runs outside the sandbox.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from doctor.case import Case
from doctor.jobfolder.model import Command, Job


@dataclass
class Observation:
    """The observed reading as the job model carries it."""

    line: str
    differences: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def observe_commands(case: Case, job: Job, walker: Any, planned: Mapping[str, bytes | None] | None
                     ) -> tuple[list[Command], Observation]:
    """The walked commands of `job` with what bash ran in the sandbox merged in (merge.py)."""
    from doctor.observe.merge import Merger, merge
    from doctor.observe.run import observe

    seconds = float(case.options.get("observe_seconds", 5.0))  # type: ignore[arg-type]
    try:
        reading = observe(case, job, planned, seconds)
    except (OSError, ValueError, UnicodeError) as exc:  # the static reading stands; say why
        return list(job.commands), Observation(f"static reading only: the observed reading could not run ({exc})")
    commands = list(job.commands)
    obs = Observation(reading.line, notes=[text for _file, text in reading.notes])
    if reading.sandbox is None or job.root is None:
        return commands, obs
    merger = Merger(job.root, reading.base_env, walker.resolve, walker.resolve_module, walker.generated)
    merged = merge(commands, reading.records, reading.complete, merger)
    obs.differences = merger.differences
    return merged, obs

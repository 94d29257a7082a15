"""Run each job script of a folder once in the sandbox and read back what it started."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from doctor.case import Case
from doctor.jobfolder.model import Job
from doctor.jobfolder.sbatch import sbatch_exports
from doctor.observe import records as recmod
from doctor.observe import sandbox, stage

SECONDS = 5.0  # for all the job scripts of a folder together
MAX_TASKS = 4  # tasks simulated per srun/mpirun/torchrun --no-python (the count itself is read as written)
_DROP = ("BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "LD_PRELOAD", "LD_AUDIT", "PROMPT_COMMAND", "CDPATH",
         "GLOBIGNORE", "IFS", "POSIXLY_CORRECT", "BASH_XTRACEFD", "TMOUT")


@dataclass
class Reading:
    """What the observed reading saw, and how it went."""

    sandbox: str | None
    records: list[recmod.Record] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)  # (file, what happened)
    complete: dict[str, bool] = field(default_factory=dict)  # job script -> ran to its end
    seconds: float = 0.0
    base_env: dict[str, str] = field(default_factory=dict)  # what the job scripts started with

    failed: str = ""  # the sandbox itself could not start (its own error line)

    @property
    def line(self) -> str:
        if self.failed and not self.records:
            return f"static reading only: the sandbox could not start ({self.failed})"
        if self.sandbox is None:
            return "static reading only: no sandbox here (neither bubblewrap nor unshare works)"
        return f"observed: bash ran the job scripts in a sandbox ({sandbox.NAMES[self.sandbox]})"


def top_scripts(job: Job) -> list[str]:
    """The job scripts the static reading started from (one flow each), in its order."""
    out: list[str] = []
    for cmd in job.commands:
        for f in job.shell_files:
            if f.role == "job" and f.path == cmd.site.file and f.path not in out:
                out.append(f.path)
    out += [f.path for f in job.shell_files if f.role == "job" and f.analysed and f.path not in out]
    return out


def _env(case: Case, job: Job, script: str, bindir: str, stage_dir: str, root: str) -> dict[str, str]:
    env = {k: v for k, v in case.env.items() if k not in _DROP and not k.startswith(("BASH_FUNC_", "GD_", "__GD_"))}
    f = next((s for s in job.shell_files if s.path == script), None)
    if f is not None and f.sbatch:
        env.update(stage.slurm_env(f.sbatch))
        env.update({k: v.value or "" for k, v in sbatch_exports(f.sbatch).items()})
    env.update(PATH=os.path.join(stage_dir, "bin"), BASH_ENV=os.path.join(bindir, "prelude.sh"), GD_BIN=bindir,
               GD_REC=os.path.join(stage_dir, "rec"), GD_ROOT=root, GD_STDIN=os.path.join(bindir, "stdin"),
               GD_MAX_TASKS=str(MAX_TASKS), PWD=root, SLURM_SUBMIT_DIR=root,
               GD_GPUS=str(_gpus(case, job)))
    return env


def _tasks(rec: recmod.Record) -> int | None:
    """The tasks a recorded srun/mpirun/torchrun --no-python asked for, when it says."""
    from doctor.jobfolder.argv import parse_spawner, strip_wrappers

    if rec.tool in ("srun", "mpirun", "mpiexec", "orterun"):
        wrappers = strip_wrappers([*rec.argv[:rec.own], "true"])[0]
        n = wrappers[0].tasks if wrappers else None
        return n if n is not None or rec.tool != "srun" else _int(rec.env.get("SLURM_NTASKS"))
    if rec.tool == "torchrun" and any(a in ("--no-python", "--no_python") for a in rec.argv):
        return parse_spawner("torchrun", list(rec.argv[1:]), lambda p: None)[0].nproc
    return None


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def _gpus(case: Case, job: Job) -> int:
    from doctor.jobfolder.queries import sbatch_gpus

    return sbatch_gpus(job) or case.gpus_expected or 4


def observe(case: Case, job: Job, planned: Mapping[str, bytes | None] | None = None,
            seconds: float = SECONDS) -> Reading:
    """Run the job scripts of `job` (as the static reading found them) in the sandbox."""
    kind = sandbox.kind()
    reading = Reading(kind)
    if kind is None or job.root is None:
        return reading
    root = os.path.realpath(job.root)
    start = time.monotonic()
    stage_dir = stage.make_stage()
    try:
        bindir = stage.make_bin(stage_dir)
        overlays = stage.overlays(bindir, case.env.get("PATH", ""))
        for path in top_scripts(job):
            left = seconds - (time.monotonic() - start)
            rel = job.rel(path)
            if left < 0.2:
                reading.notes.append((path, f"{rel} not run: the observed reading's {seconds:g} s were spent"))
                continue
            copy = stage.copy_folder(root, os.path.join(stage_dir, f"run{len(reading.complete)}"), planned or {})
            env = _env(case, job, os.path.realpath(path), bindir, stage_dir, root)
            reading.base_env.update(env)
            out = sandbox.run(kind, root, copy, stage_dir, os.path.realpath(path), env, [bindir],
                              [os.path.join(stage_dir, "rec")], overlays, left,
                              os.path.join(stage_dir, f"out{len(reading.complete)}.log"))
            reading.complete[path] = out.rc == 0 and not out.timed_out
            if out.timed_out:
                reading.notes.append((path, f"{rel} still running after {left:.1f} s: stopped; what it "
                                            "started until then is read"))
            elif out.rc is None:
                reading.notes.append((path, f"{rel}: {out.output_tail}"))
            elif out.rc > 128 or out.rc < 0:
                sig = out.rc - 128 if out.rc > 128 else -out.rc
                why = {25: " (its error output passed the file size limit)", 9: " (killed)", 24: " (the CPU time limit)"}
                reading.notes.append((path, f"{rel} ended by signal {sig}{why.get(sig, '')}"))
            elif out.rc != 0:
                sandbox_error = next((ln for ln in out.output_tail.splitlines() if ln.startswith(("bwrap:", "unshare:",
                                                                                                   "mount:"))), "")
                reading.notes.append((path, f"{rel} ended with exit status {out.rc}"
                                            f"{f' ({sandbox_error})' if sandbox_error else ''}"))
                reading.failed = reading.failed or sandbox_error
            if out.output_cut:
                reading.notes.append((path, f"{rel} wrote more than {sandbox.OUTPUT_BYTES // 2 ** 20} MiB: "
                                            "cut there"))
        reading.records, cut = recmod.read_all(os.path.join(stage_dir, "rec"), bindir)
        if cut:
            reading.notes.append((job.root, f"more than {recmod.MAX_RECORDS} commands recorded: the rest "
                                            "not read"))
        for rec in reading.records:
            asked = _tasks(rec)
            if asked is not None and asked > MAX_TASKS:
                reading.notes.append((rec.file, f"{job.rel(rec.file)}:{rec.line}: {rec.tool} starts {asked} tasks; "
                                                f"the first {MAX_TASKS} were run to read what each task runs"))
            if rec.tool == "module-missing":
                reading.notes.append((rec.file, f"{job.rel(rec.file)}:{rec.line}: module "
                                                f"{' '.join(rec.argv[2:])!r} not found (MODULEPATH, job folder)"))
    finally:
        shutil.rmtree(stage_dir, ignore_errors=True)
    reading.seconds = time.monotonic() - start
    return reading

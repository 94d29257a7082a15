"""Questions the checks ask of a `Job`: settings per launch, rank counts, evidence."""

from __future__ import annotations

import os
import re
from typing import Any

from doctor.jobfolder.model import Command, EnvVar, Job, Launch, PyScript, Site
from doctor.limits import bound_problem
from doctor.model import Evidence, Outcome, unknown


def ev(job: Job, site: Site, label: str | None = None, text: str | None = None) -> Evidence:
    return site.evidence(job.root, label, text)


def var_evidence(job: Job, var: EnvVar, label: str | None = None) -> Evidence:
    if var.site is None:
        return Evidence(f"{var.name}={var.raw}", None, None, label or "inherited from the environment")
    return ev(job, var.site, label or "set here")


def var_data(var: EnvVar) -> dict[str, Any]:
    d: dict[str, Any] = {"var": var.name, "value": var.value, "raw": var.raw, "inherited": var.site is None}
    if var.site is not None:
        d.update(var.site.data())
    return d


def command_data(cmd: Command) -> dict[str, Any]:
    return {"file": cmd.site.file, "line": cmd.site.line, "end_line": cmd.end_line or cmd.site.line,
            "text": cmd.site.text, "command": cmd.text, "argv": list(cmd.argv)}


def settings(job: Job, name: str) -> list[tuple[EnvVar, list[Command]]]:
    """Each distinct setting of `name` the instrumented launches run with (else the job's own)."""
    groups: dict[tuple[Any, ...], tuple[EnvVar, list[Command]]] = {}
    for cmd, _launch in job.instrumented:
        var = cmd.var(name)
        if var is None:
            continue
        key = (var.site.file, var.site.line, var.raw) if var.site else ("env", var.raw)
        groups.setdefault(key, (var, []))[1].append(cmd)
    if not groups and not job.instrumented:
        var = job.env.get(name)
        if var is not None and var.site is not None:
            groups[("job",)] = (var, [])
    return list(groups.values())


def snippet_for(job: Job, cmd: Command) -> PyScript | None:
    return next((s for s in job.scripts if s.role == "snippet" and s.snippet_of == cmd.site), None)


def code_of(job: Job, cmd: Command) -> PyScript | None:
    """The Python a command runs: its `-c`/here-document snippet, or its script."""
    if cmd.launch is None:
        return None
    if cmd.launch.kind in ("code", "stdin"):
        return snippet_for(job, cmd)
    return job.script(cmd.launch.script)


def sbatch(job: Job, flow: int | None = None) -> list[Any]:
    opts: list[Any] = []
    for f in job.shell_files:
        opts.extend(f.sbatch)
    return opts


def sbatch_gpus(job: Job) -> int | None:
    """GPUs per node the sbatch directives ask for (--gres=gpu[:type]:N, --gpus-per-node, --ntasks-per-node)."""
    for opt in sbatch(job):
        if opt.name == "gres":
            m = re.search(r"gpu(?::[\w.-]+)?:(\d+)", opt.value)
            if m:
                return int(m.group(1))
        if opt.name in ("gpus-per-node", "ntasks-per-node"):
            m = re.search(r"(\d+)$", opt.value)
            if m:
                return int(m.group(1))
    return None


def ranks(job: Job, cmd: Command, launch: Launch) -> tuple[int | None, str]:
    """(ranks this command starts on a node, how that was found); None when unknown."""
    outer = cmd.launch
    if outer is not None and outer.inner is launch and outer.spawner is not None:
        return outer.spawner.nproc, f"{outer.spawner.name} --nproc_per_node={outer.spawner.nproc_text}"
    spawned = spawned_by(cmd)
    if spawned is not None:
        return spawned
    if launch.spawner is not None:
        return launch.spawner.nproc, f"{launch.spawner.name} --nproc_per_node={launch.spawner.nproc_text}"
    n = cmd.tasks
    if cmd.loop is not None and cmd.background:
        return n, f"{_loop_words(cmd)} at line {cmd.loop.site.line}"
    if any(w.name in ("srun", "mpirun", "mpiexec") for w in cmd.wrappers):
        return n, "srun/mpirun tasks"
    return 1, "one process"


def spawned_by(cmd: Command) -> tuple[int | None, str] | None:
    """(workers, how) when `cmd` runs in each worker of a `torchrun --no-python` wrapper script."""
    parent = cmd.parent
    sp = parent.launch.spawner if parent is not None and parent.launch is not None else None
    if parent is None or sp is None:
        return None
    return sp.nproc, (f"{sp.name} --no-python at {os.path.basename(parent.site.file)}:{parent.site.line} "
                      f"runs it in each of {sp.nproc_text or '?'} workers")


def _loop_words(cmd: Command) -> str:
    assert cmd.loop is not None
    if cmd.loop.count is None:
        return "a backgrounded loop whose length is known only when the job runs"
    return f"a backgrounded loop of {cmd.loop.count}"


def multi_rank(job: Job, cmd: Command, launch: Launch) -> tuple[bool, str]:
    """Whether several measured processes start from this command at once, and why."""
    outer = cmd.launch
    if outer is not None and outer.inner is launch and outer.spawner is not None:
        n = outer.spawner.nproc
        return (n is None or n > 1), f"{outer.spawner.name} --no-python starts {outer.spawner.nproc_text or '?'} " \
                                     "instrumented workers"
    spawned = spawned_by(cmd)
    if spawned is not None:
        return (spawned[0] is None or spawned[0] > 1), spawned[1]
    if cmd.loop is not None and cmd.background:
        count = cmd.loop.count
        return (count is None or count > 1), f"starts in {_loop_words(cmd)} at line {cmd.loop.site.line}"
    for w in cmd.wrappers:
        if w.name in ("srun", "mpirun", "mpiexec", "orterun", "jsrun", "aprun"):
            if w.tasks is None:
                n = _sbatch_tasks(job)
                if n is not None and n > 1:
                    return True, f"{w.name} starts one task per allocated task ({n})"
                return False, ""
            return w.tasks > 1, f"{w.name} starts {w.tasks} tasks"
    return False, ""


def _sbatch_tasks(job: Job) -> int | None:
    total = None
    for opt in sbatch(job):
        m = re.fullmatch(r"(\d+)", opt.value.strip())
        if opt.name in ("ntasks", "ntasks-per-node") and m:
            total = max(total or 0, int(m.group(1)))
    return total


def problem_evidence(job: Job, script: PyScript) -> Evidence:
    """Why `script` could not be analysed, at the line of its syntax error where there is one."""
    problem = script.problem or "not analysed"
    at = re.match(r"syntax error at line (\d+)", problem)
    return Evidence(problem, job.rel(script.path), int(at.group(1)) if at else None, "not analysed")


def script_problems(job: Job, scripts: list[PyScript], check_id: str) -> list[Outcome]:
    """`unknown` outcomes for scripts that could not be analysed."""
    out = []
    for s in scripts:
        if s.problem is not None:
            bound = {"bound": "not analysed"} if bound_problem(s.problem) else {}
            out.append(unknown(f"cannot analyse {job.rel(s.path)}: {s.problem}", problem_evidence(job, s),
                               entities={"file": job.rel(s.path), **bound},
                               data={"file": s.path, "problem": s.problem}))
    return out


def worker_scripts(job: Job) -> list[PyScript]:
    """The training scripts and every local module they import (at any level)."""
    seen: dict[str, PyScript] = {}
    for entry in job.entry_scripts():
        for s in job.import_closure(entry, import_time_only=False):
            seen.setdefault(s.path, s)
    return list(seen.values())


def launches_of(job: Job, script: PyScript) -> list[tuple[Command, Launch]]:
    """The commands whose workers run `script`."""
    out = []
    for cmd in job.commands:
        launch = cmd.launch
        while launch is not None:
            if launch.training_script == script.path:
                out.append((cmd, launch))
                break
            launch = launch.inner
    return out


def is_ddp(job: Job, entry: PyScript) -> tuple[bool, str]:
    """Whether the workers of `entry` form a process group, and the evidence for it."""
    closure = job.import_closure(entry, import_time_only=False)
    hf = any(s.uses_hf or s.trainer_train for s in closure)
    for cmd, launch in launches_of(job, entry):
        n, how = ranks(job, cmd, launch)
        several, why = multi_rank(job, cmd, launch)
        how = why or how
        spawned = launch.spawner is not None or (cmd.launch is not None and cmd.launch.spawner is not None) \
            or cmd.parent is not None
        if spawned or several or (n is not None and n > 1):
            if hf or spawned or any(s.init_pg or s.ddp_wrap for s in closure):
                return True, f"started as several ranks by {job.rel(cmd.site.file)}:{cmd.site.line} ({how})"
    for s in closure:
        if s.init_pg:
            return True, f"init_process_group at {job.rel(s.path)}:{s.init_pg[0].site.line}"
    for s in closure:
        if s.ddp_wrap:
            return True, f"DistributedDataParallel at {job.rel(s.path)}:{s.ddp_wrap[0].site.line}"
    if hf and not launches_of(job, entry):
        return True, "an HF Trainer script (DDP when started by torchrun or per rank)"
    return False, "no process group (no init_process_group, no DDP launch)"


def unfollowed(job: Job) -> list[Any]:
    """The links the walker could not follow: scripts outside the folder, command substitutions."""
    return [n for n in job.notes if n.kind in ("outside", "unresolved")]


def link_unknown(job: Job, what: str) -> Outcome | None:
    """`unknown` naming the link that hides `what`, when there is one (never a pass or a skip)."""
    links = unfollowed(job)
    if not links:
        return None
    first = links[0]
    return unknown(f"{what} not found, and gpu-doctor cannot follow {job.rel(first.file)}:{first.line or '?'}: "
                   f"{first.text}",
                   [Evidence(n.text, job.rel(n.file), n.line, "not followed") for n in links[:5]],
                   data={"unfollowed": [{"file": n.file, "line": n.line, "text": n.text} for n in links]})


def origin_evidence(job: Job, cmd: Command, index: int | None, label: str = "written here") -> Evidence | None:
    """Where argv word `index` of `cmd` is written when that is not the command itself
    (`PYTHON_SCOREP="python -m scorep"` two lines up, the caller's argument for `"$@"`)."""
    word = cmd.word_at(index) if index is not None else None
    span = word.source if word is not None else None
    if word is None or span is None:
        return None
    if span.file == cmd.site.file and cmd.site.line <= span.line <= max(cmd.end_line, cmd.site.line):
        return None
    site = next((s for s in reversed(word.via) if s.file == span.file and s.line == span.line), None) or next(
        (c.site for c in job.commands if c.site.file == span.file and c.site.line == span.line), None)  # a caller
    return Evidence(site.text if site is not None else word.text, job.rel(span.file), span.line, label)


# Each task's own rank, as the shell of a task that srun or mpirun starts spells it: Slurm's, and
# Open MPI's, else MPICH/Hydra's (PMI).
_MPI_RANK = "${OMPI_COMM_WORLD_RANK:-${PMI_RANK}}"
TASK_RANKS = {"srun": "${SLURM_PROCID}", "mpirun": _MPI_RANK, "mpiexec": _MPI_RANK, "orterun": _MPI_RANK}


def rank_spelling(cmd: Command) -> str | None:
    """How a measured process's own rank is written so that it differs per rank: the loop
    variable of a backgrounded loop, the RANK the command sets, RANK in a torchrun worker,
    the RANK a per-task wrapper exports from its launcher's rank, SLURM_PROCID in an srun task, Open
    MPI's or PMI's rank in an mpirun task. SCP006's proposal and its remedy both use it."""
    if cmd.loop is not None and cmd.loop.var and cmd.background:
        return "${" + cmd.loop.var + "}"
    rank = cmd.env.get("RANK")
    if rank is not None and rank in cmd.inline and rank.raw:  # `RANK=$r ...`, or one `RANK=0 ... &` each
        return rank.raw
    if cmd.parent is not None:
        return "${RANK}"
    if not cmd.per_task:
        return None
    if rank is not None and rank.varies and rank.site is not None:  # a per-task wrapper's `export RANK=$PMI_RANK`
        return "${RANK}"
    names = {w.name for w in cmd.wrappers}
    if "srun" in names:
        return TASK_RANKS["srun"]
    mpi = {n for n in TASK_RANKS if n != "srun"}
    if names & mpi and not any(os.path.basename(a) in mpi for a in cmd.argv):
        # inside the script mpirun starts per rank (on the mpirun line itself, the outer shell would
        # expand it once)
        return TASK_RANKS["mpirun"]
    return None

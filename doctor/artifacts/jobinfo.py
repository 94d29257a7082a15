"""What the ART checks take from the `job` fact (the parsed job folder), read defensively.

The job fact is optional here: without it the checks fall back to what the
experiment folders themselves say (rank folder numbering, scorep.cfg).
"""

from __future__ import annotations

from typing import Any

from doctor.model import Evidence


def _commands(job: Any) -> list[Any]:
    """The instrumented commands first, then the others."""
    commands = list(getattr(job, "commands", ()) or ())
    return ([c for c in commands if getattr(c, "instrumented", None) is not None]
            + [c for c in commands if getattr(c, "instrumented", None) is None])


def _site_evidence(var: Any, text: str) -> Evidence:
    site = getattr(var, "site", None)
    if site is None:
        return Evidence(text, label="job environment")
    return Evidence(text, getattr(site, "file", None), getattr(site, "line", None), "job script")


def _var(cmd: Any, name: str) -> Any:
    try:
        return cmd.var(name)
    except (AttributeError, TypeError):
        return None


def launch_ranks(options: Any) -> tuple[int, Evidence] | None:
    """The rank count `gpu-doctor launch` ran (it knows best: its WORLD_SIZE), if it ran this."""
    launch = options.get("launch") if isinstance(options, dict) else None
    world = launch.get("world_size") if isinstance(launch, dict) else None
    if isinstance(world, int) and world > 0:
        return world, Evidence(f"gpu-doctor launch ran WORLD_SIZE={world}", label="launch")
    return None


def rank_nodes(options: Any) -> dict[int, str]:
    """rank -> node of a multi-node `gpu-doctor launch` (empty when not known)."""
    launch = options.get("launch") if isinstance(options, dict) else None
    nodes = launch.get("rank_nodes") if isinstance(launch, dict) else None
    if not isinstance(nodes, dict):
        return {}
    return {int(r): str(n) for r, n in nodes.items() if str(r).isdigit() and n}


def expected_ranks(job: Any) -> tuple[int, Evidence] | None:
    """How many ranks the job runs, and where that was read: WORLD_SIZE on the
    instrumented command, else its task count (srun -n, a backgrounded loop), else
    the spawner's --nproc_per_node, else WORLD_SIZE in the job's environment."""
    if job is None:
        return None
    try:
        for cmd in _commands(job):
            ws = _var(cmd, "WORLD_SIZE")
            value = getattr(ws, "value", None)
            if isinstance(value, str) and value.strip().isdigit() and int(value) > 0:
                return int(value), _site_evidence(ws, f"WORLD_SIZE={value}")
            world = _world(job, cmd)
            if world is not None:
                return world
            tasks = getattr(cmd, "tasks", None)
            if isinstance(tasks, int) and tasks > 1 and getattr(cmd, "launch", None) is not None:
                text = f"{tasks} copies run at once: {getattr(cmd, 'text', '')}"
                return tasks, _site_evidence(cmd, text[:200])
            spawner = getattr(getattr(cmd, "launch", None), "spawner", None)
            nproc = getattr(spawner, "nproc", None)
            if isinstance(nproc, int) and nproc > 0:
                return nproc, _site_evidence(cmd, f"--nproc_per_node {nproc}")
        env = getattr(job, "env", None) or {}
        ws = env.get("WORLD_SIZE") if hasattr(env, "get") else None
        value = getattr(ws, "value", None)
        if isinstance(value, str) and value.strip().isdigit() and int(value) > 0:
            return int(value), _site_evidence(ws, f"WORLD_SIZE={value}")
    except (AttributeError, TypeError, ValueError):
        return None
    return None


def _world(job: Any, cmd: Any) -> tuple[int, Evidence] | None:
    """The ranks over every node, where the launch runs on several (nodes × tasks per node)."""
    if type(job).__module__ != "doctor.jobfolder.model":  # not the job model: nothing to import for it
        return None
    from doctor.jobfolder.model import Command, Job
    from doctor.jobfolder.queries import layout

    if not isinstance(job, Job) or not isinstance(cmd, Command) or cmd.launch is None:
        return None
    lay = layout(job, cmd, cmd.instrumented or cmd.launch)
    world = lay.world
    if not lay.several_nodes or world is None:
        return None
    return world, _site_evidence(cmd, f"{world} ranks ({lay.words()}, {lay.how}): {cmd.text}"[:200])


def job_cuda_enable(job: Any) -> tuple[str, Evidence] | None:
    """SCOREP_CUDA_ENABLE as the job sets it for its instrumented run, if it does."""
    if job is None:
        return None
    try:
        for cmd in _commands(job):
            var = _var(cmd, "SCOREP_CUDA_ENABLE")
            if var is not None and getattr(var, "value", None) is not None:
                return var.value, _site_evidence(var, f"SCOREP_CUDA_ENABLE={var.value}")
        env = getattr(job, "env", None) or {}
        var = env.get("SCOREP_CUDA_ENABLE") if hasattr(env, "get") else None
        if var is not None and getattr(var, "value", None) is not None:
            return var.value, _site_evidence(var, f"SCOREP_CUDA_ENABLE={var.value}")
    except (AttributeError, TypeError):
        return None
    return None

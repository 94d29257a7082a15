"""The job as a tree of processes, as gpu-doctor understood it: what `--json` prints as
`job.processes` and the TUI shows as "how gpu-doctor read your launch".

One node per job script, then one per command that starts Python or spawns workers
(srun step, launcher, `--no-python` wrapper, `python -m scorep`, the program), nested
where a launcher's workers run a wrapper script. Every value says the file:line it
came from, so a reader can check it against the scripts. Each says which reading produced it
(`read`: "observed" where bash ran it in the sandbox, doctor.observe, else "static"); the job
says how it was read (`reading`) and where the readings differ (`differences`).
"""

from __future__ import annotations

import os
import re
from typing import Any

from doctor.jobfolder.model import Command, EnvVar, Job, Launch
from doctor.jobfolder.queries import layout, multi_rank, ranks
from doctor.wording import count

# The environment values checks read; the others are not shown.
SHOWN_ENV = ("SCOREP_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
             "PYTHONPATH", "CUDA_VISIBLE_DEVICES", "KINETO_USE_DAEMON", "SLURM_PROCID")
MAX_NODES = 200
_POSITIONAL = re.compile(r"\$\{?([@*#]|[1-9][0-9]*)\}?")


def _env_json(job: Job, var: EnvVar) -> dict[str, Any]:
    spelled = {"spelling": var.spelling} if var.spelling is not None else {}  # known only when the job runs
    return {"value": var.value, "raw": var.raw, **spelled, "varies": var.varies,
            "file": job.rel(var.site.file) if var.site else None, "line": var.site.line if var.site else None}


def _shown(name: str) -> bool:
    return name.startswith(SHOWN_ENV[0]) or name in SHOWN_ENV[1:]


def placeholders(job: Job, cmd: Command) -> list[dict[str, Any]]:
    """The words of `cmd` known only when the job runs, each where it is written and what it stands
    for: `"$@"` in a job script is the arguments the script is started with (none with a plain
    `sbatch job.sbatch`)."""
    out: dict[tuple[str, str, int], dict[str, Any]] = {}
    for word in cmd.argv_words:
        if word.known:
            continue
        for piece in word.pieces or ():
            if "$" not in piece.text and "`" not in piece.text:
                continue
            span = piece.span or word.span
            name = os.path.basename(span.file)
            m = _POSITIONAL.fullmatch(piece.text)
            if m:
                which = {"@": "arguments", "*": "arguments, as one word", "#": "argument count"}.get(
                    m.group(1), f"argument {m.group(1)}")
                means = (f"the {which} {name} is started with (none with a plain `sbatch {name}` or "
                         f"`bash {name}`); gpu-doctor reads the launch without them")
            else:
                means = "known only when the job runs"
            out.setdefault((piece.text, span.file, span.line),
                           {"text": piece.text, "means": means, "file": job.rel(span.file), "line": span.line})
    return list(out.values())


def _innermost(launch: Launch) -> Launch:
    while launch.inner is not None:
        launch = launch.inner
    return launch


def command_json(job: Job, cmd: Command) -> dict[str, Any]:
    launch = cmd.launch
    measured = cmd.instrumented
    program = _innermost(launch) if launch is not None else None
    n: int | None = 1
    how = "one process"
    lay = layout(job, cmd, measured or launch)
    if launch is not None:
        n, how = ranks(job, cmd, measured or launch)
        several, why = multi_rank(job, cmd, measured or launch)
        if several and why and (measured or launch).spawner is None:
            how = why
    spawner = launch.spawner if launch is not None else None
    return {
        "kind": "command",
        "file": job.rel(cmd.site.file), "line": cmd.site.line, "text": cmd.site.text,
        "argv": list(cmd.argv),
        "cwd": job.rel(cmd.cwd) if cmd.cwd else None,
        "ranks": n, "ranks_how": how,
        "nodes": lay.nodes, "tasks_per_node": lay.tasks_per_node,
        "wrappers": [w.name for w in cmd.wrappers],
        "launcher": spawner.kind if spawner is not None else None,
        "measured": measured is not None,
        "scorep_flags": list(measured.scorep.flags) if measured is not None and measured.scorep else [],
        "program": job.rel(program.training_script) if program is not None and program.training_script else None,
        "target": program.training_target if program is not None else None,
        "module": program.training_target if program is not None and program.kind == "module" else None,
        "env_used": {k: _env_json(job, v) for k, v in sorted(cmd.env.items()) if _shown(k)},
        "placeholders": placeholders(job, cmd),
        "steps": _steps(job, cmd, program),
        "read": cmd.read,
        "children": [],
    }


def _steps(job: Job, cmd: Command, program: Launch | None) -> list[str]:
    """What starts what, in the order it runs: srun → python -m scorep → the launcher → the program."""
    steps = [w.name for w in cmd.wrappers]
    launch = cmd.launch
    while launch is not None:
        if launch.scorep is not None:
            steps.append(" ".join(["python -m scorep", *launch.scorep.flags]))
        if launch.spawner is not None:
            steps.append(launch.spawner.name)
        launch = launch.inner
    if program is not None and program.training_script:
        steps.append(job.rel(program.training_script))
    elif program is not None and (program.training_target or program.target):
        steps.append(str(program.training_target or program.target))
    else:
        steps.append(" ".join(cmd.argv[:3]))
    return steps


def processes(job: Job) -> list[dict[str, Any]]:
    """The process tree of `job`: one node per job script, the commands it starts nested in it."""
    roots: dict[int, dict[str, Any]] = {}
    nodes: dict[int, dict[str, Any]] = {}
    files = {f.path: f for f in job.shell_files}
    count = 0
    for cmd in job.commands:
        if cmd.launch is None and cmd.parent is None:
            continue
        count += 1
        if count > MAX_NODES:
            break
        node = command_json(job, cmd)
        nodes[id(cmd)] = node
        parent = nodes.get(id(cmd.parent)) if cmd.parent is not None else None
        if parent is not None:
            parent["children"].append(node)
            continue
        root = roots.get(cmd.flow)
        if root is None:
            top = _flow_file(job, cmd.flow) or cmd.site.file
            f = files.get(top)
            root = roots[cmd.flow] = {"kind": "script", "file": job.rel(top), "line": 1, "text": "",
                                      "argv": [], "cwd": job.rel(job.root) if job.root else None,
                                      "ranks": 1, "ranks_how": "the job script",
                                      "nodes": 1, "tasks_per_node": 1,  # the batch shell: the first node
                                      "sbatch": {o.name: o.value for o in f.sbatch} if f else {},
                                      "children": []}
        root["children"].append(node)
    for root in roots.values():
        root["read"] = "observed" if any(c.get("read") == "observed" for c in root["children"]) else "static"
    return list(roots.values())


def _flow_file(job: Job, flow: int) -> str | None:
    """The job script a flow starts from (its first command's file, when a top-level script)."""
    for f in job.shell_files:
        if f.role == "job" and any(c.flow == flow and c.site.file == f.path for c in job.commands):
            return f.path
    return None


def unresolved(job: Job) -> list[dict[str, Any]]:
    """The links gpu-doctor could not follow (a script outside the folder, a command substitution)."""
    return [{"file": job.rel(n.file), "line": n.line, "text": n.text} for n in job.notes
            if n.kind in ("outside", "unresolved", "recursive")]


def job_json(job: Job) -> dict[str, Any]:
    return {"processes": processes(job), "unresolved": unresolved(job), "reading": job.reading,
            "differences": [{**d, "file": job.rel(str(d["file"]))} for d in job.differences],
            "observed_notes": list(job.observed_notes)}


def launch_lines(job: Job, node: dict[str, Any] | None = None, depth: int = 0) -> list[str]:
    """The tree as indented lines of text (the TUI's "how gpu-doctor read your launch")."""
    out: list[str] = []
    for n in ([node] if node is not None else processes(job)):
        pad = "  " * depth
        if n["kind"] == "script":
            out.append(f"{pad}{n['file']} (job script)")
        else:
            how_many = count(n["ranks"], "rank") if n["ranks"] else "? ranks"
            over = f" on {n['nodes']} nodes" if (n.get("nodes") or 1) > 1 else ""
            out.append(f"{pad}- {n['file']}:{n['line']} runs " + " → ".join(p for p in n["steps"] if p)
                       + f"  [{how_many}{over}: {n['ranks_how']}]"
                       + (" (observed)" if n.get("read") == "observed" else ""))
            for name, v in n["env_used"].items():
                where = f"{v['file']}:{v['line']}" if v["file"] else "inherited"
                value = v["value"] if v["value"] is not None else f"{v.get('spelling') or v['raw']} (known when it runs)"
                out.append(f"{pad}    {name}={value}{' (per rank)' if v['varies'] else ''}  ← {where}")
            for p in n.get("placeholders", []):
                out.append(f"{pad}    {p['text']}: {p['means']}  ← {p['file']}:{p['line']}")
        for child in n["children"]:
            out.extend(launch_lines(job, child, depth + 1))
    if depth == 0 and node is None:
        out.insert(0, f"read: {job.reading}")
        for d in job.differences:
            out.append(f"the readings differ at {job.rel(str(d['file']))}:{d['line']}: {d['what']}: static "
                       f"{d['static']!r}, observed {d['observed']!r}{' (' + str(d['why']) + ')' if d.get('why') else ''}")
        out.extend(f"observed reading: {n}" for n in job.observed_notes)
        for u in unresolved(job):
            out.append(f"not followed: {u['file']}:{u['line']}: {u['text']}")
    return out

"""Questions the checks ask of a `Job`: settings per launch, rank counts, evidence."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
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
    """(ranks this command starts over all its nodes, how that was found); None when unknown."""
    n, how = _ranks_on_a_node(job, cmd, launch)
    lay = layout(job, cmd, launch)
    if lay.several_nodes:
        world = lay.world
        return world, f"{how}, on each of {lay.nodes} nodes ({lay.words()})"
    if n is None and lay.world is not None and lay.how != "one process":
        return lay.world, f"{how}: {lay.words()} ({lay.how})"
    return n, how


def _ranks_on_a_node(job: Job, cmd: Command, launch: Launch) -> tuple[int | None, str]:
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
        if n is not None:
            lay = layout(job, cmd, launch)
            if lay.several_nodes:
                return lay.tasks_per_node, "srun/mpirun tasks"
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
    """Whether several measured processes start from this command at once (on one node or over
    several), and why."""
    lay = layout(job, cmd, launch)
    over = f" on each of {lay.nodes} nodes ({lay.world or '?'} in all)" if lay.several_nodes else ""
    outer = cmd.launch
    if outer is not None and outer.inner is launch and outer.spawner is not None:
        n = outer.spawner.nproc
        return (n is None or n > 1 or lay.several_nodes), (
            f"{outer.spawner.name} --no-python starts {outer.spawner.nproc_text or '?'} instrumented workers{over}")
    spawned = spawned_by(cmd)
    if spawned is not None:
        return (spawned[0] is None or spawned[0] > 1 or lay.several_nodes), spawned[1] + over
    if cmd.loop is not None and cmd.background:
        count = cmd.loop.count
        return (count is None or count > 1), f"starts in {_loop_words(cmd)} at line {cmd.loop.site.line}"
    if launch.spawner is not None and not launch.spawner.no_python:
        lay = task_layout(job, cmd)  # the measured processes are the launchers, one per task
    for w in cmd.wrappers:
        if w.name in ("srun", "mpirun", "mpiexec", "orterun", "jsrun", "aprun"):
            world = lay.world
            if lay.several_nodes or w.tasks is None:
                if world is not None and world > 1:
                    return True, f"{w.name} starts {world} tasks ({lay.words()}{_how(lay)})"
                if lay.several_nodes:
                    return True, f"{w.name} starts tasks on {lay.nodes} nodes"
                return False, ""
            return w.tasks > 1, f"{w.name} starts {w.tasks} tasks"
    return False, ""


def _how(lay: Layout) -> str:
    return f", from {lay.how}" if lay.how not in ("srun", "one process") else ""


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
    return [n for n in job.notes if n.kind in ("outside", "unresolved", "recursive")]


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


# -- nodes and tasks per node ---------------------------------------------------------------------
# Each launch runs on some nodes with some tasks on each. Read from what starts it: torchrun's
# --nnodes/--nproc_per_node, srun's -N/-n/--ntasks-per-node, mpirun's hosts (-H, --hostfile) and
# -npernode/--map-by ppr, the #SBATCH header srun inherits, and a Python launcher's own settings
# (submitit's slurm_nodes/tasks_per_node, Lightning's Trainer(num_nodes=, devices=)).

@dataclass(frozen=True)
class Layout:
    """Where one launch's processes run: `nodes` × `tasks_per_node` (None: known only when the job runs)."""

    nodes: int | None
    tasks_per_node: int | None
    how: str

    @property
    def world(self) -> int | None:
        """Every process the launch starts over all its nodes."""
        if self.nodes is None or self.tasks_per_node is None:
            return None
        return self.nodes * self.tasks_per_node

    @property
    def several_nodes(self) -> bool:
        return self.nodes is not None and self.nodes > 1

    def words(self) -> str:
        """'2 nodes × 4 tasks' ('? nodes' where unknown)."""
        nodes = "?" if self.nodes is None else str(self.nodes)
        tasks = "?" if self.tasks_per_node is None else str(self.tasks_per_node)
        return f"{nodes} node{'' if self.nodes == 1 else 's'} × {tasks} task{'' if self.tasks_per_node == 1 else 's'}"


def count_of(text: str | None) -> int | None:
    """A node or task count as written: `2`, `2-4` (the first), `1:4` (torchrun's elastic max: the second)."""
    if text is None:
        return None
    text = text.strip().strip("'\"")
    m = re.fullmatch(r"(\d+):(\d+)", text)
    if m:
        return int(m.group(2))
    m = re.fullmatch(r"(\d+)(?:-\d+)?(?:\(x\d+\))?", text)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class SbatchLayout:
    nodes: int | None = None
    ntasks: int | None = None
    tasks_per_node: int | None = None
    gpus_per_node: int | None = None


def sbatch_layout(job: Job) -> SbatchLayout:
    """The allocation the #SBATCH header asks for: --nodes/-N, --ntasks/-n, --ntasks-per-node,
    --gpus-per-node (or --gres=gpu:N)."""
    found: dict[str, int | None] = {}
    for opt in sbatch(job):
        if opt.name == "gres":
            m = re.search(r"gpu(?::[\w.-]+)?:(\d+)", opt.value)
            if m:
                found.setdefault("gpus-per-node", int(m.group(1)))
            continue
        if opt.name in ("nodes", "ntasks", "ntasks-per-node", "gpus-per-node"):
            value = opt.value.split(":")[-1] if opt.name == "gpus-per-node" else opt.value
            found[opt.name] = count_of(value)
    return SbatchLayout(found.get("nodes"), found.get("ntasks"), found.get("ntasks-per-node"),
                        found.get("gpus-per-node"))


def _options(argv: tuple[str, ...] | list[str]) -> dict[str, str]:
    """`--key=value`, `--key value`, `-Nvalue`, `-N value` of a launcher's own options (last wins)."""
    out: dict[str, str] = {}
    for i, a in enumerate(argv):
        if not a.startswith("-"):
            continue
        if "=" in a and a.startswith("--"):
            k, v = a.split("=", 1)
            out[k] = v
        elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            out[a] = argv[i + 1]
        elif re.fullmatch(r"-[nN]\d+", a):
            out[a[:2]] = a[2:]
        else:
            out.setdefault(a, "")
    return out


def _per_node(total: int | None, nodes: int | None) -> int | None:
    if total is None or nodes is None or nodes < 1:
        return None
    return -(-total // nodes)


def srun_layout(job: Job, argv: tuple[str, ...]) -> Layout:
    """What one `srun` step starts: its own -N/-n/--ntasks-per-node, else the allocation's."""
    opts = _options(argv[1:])
    alloc = sbatch_layout(job)
    nodes_text = opts.get("--nodes", opts.get("-N"))
    nodes = _alloc_count(nodes_text, alloc.nodes) if nodes_text is not None else (alloc.nodes or 1)
    ntasks = _alloc_count(opts.get("--ntasks", opts.get("-n")), alloc.nodes)
    per_node_text = opts.get("--ntasks-per-node")
    where = "srun"
    if per_node_text is not None:
        per_node = count_of(per_node_text)
    elif ntasks is not None:
        per_node = _per_node(ntasks, nodes)
    elif nodes_text is None and alloc.tasks_per_node is not None:
        per_node, where = alloc.tasks_per_node, "#SBATCH"
    elif nodes_text is None and alloc.ntasks is not None:
        per_node, where = _per_node(alloc.ntasks, nodes), "#SBATCH"
    else:
        per_node = 1  # srun's default: one task per node of the step
        where = "srun" if nodes_text is not None else "#SBATCH"
    if nodes_text is None and where == "srun":
        where = "srun in the #SBATCH allocation"
    return Layout(nodes, per_node, where)


def mpirun_hosts(job: Job, opts: dict[str, str]) -> dict[str, int] | None:
    """The hosts mpirun runs on and the slots of each: -H/--host a:4,b:4, or a --hostfile in the job folder."""
    hosts: dict[str, int] = {}
    spec = opts.get("-H") or opts.get("--host") or opts.get("-host") or opts.get("-hosts")
    if spec:
        for item in spec.split(","):
            name, _, count = item.strip().partition(":")
            if name:
                hosts[name] = hosts.get(name, 0) + (int(count) if count.isdigit() else 1)
        return hosts or None
    path = next((opts[k] for k in ("--hostfile", "-hostfile", "-machinefile", "--machinefile", "-f")
                 if opts.get(k)), None)
    if path is None or "$" in path or job.root is None:
        return None
    from doctor import safeopen
    from doctor.limits import MAX_FILE_BYTES

    try:
        text = safeopen.read_text(os.path.join(job.root, path), MAX_FILE_BYTES)
    except (OSError, ValueError):
        return None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        first, *rest = line.split()
        host, _, colon = first.partition(":")
        said = [int(m.group(1)) for m in (re.fullmatch(r"(?:max[-_])?slots=(\d+)", r) for r in rest) if m]
        slots = said[0] if said else (int(colon) if colon.isdigit() else 1)
        hosts[host] = hosts.get(host, 0) + slots
    return hosts or None


def mpirun_layout(job: Job, argv: tuple[str, ...]) -> Layout:
    """What `mpirun`/`mpiexec` starts: its hosts (-H, --hostfile) and -np, -npernode, --map-by ppr:N:node."""
    opts = _options(argv[1:])
    hosts = mpirun_hosts(job, opts)
    np = count_of(opts.get("-np", opts.get("-n", opts.get("--np"))))
    ppn_text = opts.get("-npernode") or opts.get("--npernode") or opts.get("-ppn") or opts.get("-N")
    m = re.fullmatch(r"ppr:(\d+):node.*", opts.get("--map-by", ""))
    per_node = count_of(ppn_text) if ppn_text else (int(m.group(1)) if m else None)
    alloc = sbatch_layout(job)
    if hosts is not None:
        nodes: int | None = len(hosts)
        how = f"{argvmod_name(argv)} hosts {','.join(hosts)}"
        if per_node is None:
            per_node = _per_node(np, nodes) if np is not None else max(hosts.values())
    else:
        nodes = alloc.nodes or 1
        how = f"{argvmod_name(argv)} in the #SBATCH allocation" if alloc.nodes else argvmod_name(argv)
        if per_node is None:
            per_node = _per_node(np, nodes) if np is not None else alloc.tasks_per_node
    if np is not None and nodes is not None and per_node is not None and np < nodes * per_node:
        nodes = _per_node(np, per_node)  # -np 4 over 2 hosts of 4 slots: one node filled
    return Layout(nodes, per_node, how)


# Ranks that count from 0 on every node, and what names a node: a folder named only by the first
# repeats on every node (the job folder is usually on a filesystem all nodes share).
LOCAL_RANKS = frozenset({"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                         "PALS_LOCAL_RANKID", "MV2_COMM_WORLD_LOCAL_RANK"})
NODE_NAMES = frozenset({"SLURM_NODEID", "SLURMD_NODENAME", "HOSTNAME", "HOST", "GROUP_RANK", "NODE_RANK",
                        "SLURM_TOPOLOGY_ADDR", "OMPI_COMM_WORLD_NODE_RANK"})


def same_on_every_node(var: EnvVar) -> bool:
    """Whether a per-rank value repeats on each node: it names the node-local rank (LOCAL_RANK,
    SLURM_LOCALID...) but neither a global rank nor the node (SLURM_NODEID, $(hostname))."""
    refs = set(var.refs)
    if not refs & LOCAL_RANKS or "hostname" in var.raw:
        return False
    from doctor.jobfolder.expand import RANK_VARS

    return not refs & (RANK_VARS - LOCAL_RANKS) and not refs & NODE_NAMES


def argvmod_name(argv: tuple[str, ...]) -> str:
    return os.path.basename(argv[0]) if argv else "mpirun"


_NODE_COUNT_VARS = re.compile(r"\$\{?SLURM_(JOB_NUM_NODES|NNODES)\}?")


def _alloc_count(text: str | None, alloc_nodes: int | None) -> int | None:
    """A count as written, where `$SLURM_JOB_NUM_NODES`/`$SLURM_NNODES` is the allocation's node count."""
    if text is not None and _NODE_COUNT_VARS.fullmatch(text.strip("'\"")):
        return alloc_nodes or 1
    return count_of(text)


def _spawner_nodes(job: Job, sp: Any) -> int | None:
    opts = _options(sp.argv)
    key = {"accelerate": "--num_machines", "deepspeed": "--num_nodes"}.get(sp.kind, "--nnodes")
    text = opts.get(key, opts.get(key.replace("_", "-")))
    if text is None:
        return 1
    return _alloc_count(text, sbatch_layout(job).nodes)


def script_layout(job: Job, cmd: Command) -> Layout | None:
    """A Python launcher's own node and task counts: submitit's `update_parameters(slurm_nodes=8,
    tasks_per_node=4)` / `AutoExecutor`, Lightning's `Trainer(num_nodes=2, devices=4)`, in the
    script the command runs or a module it imports."""
    launch = cmd.launch
    while launch is not None and launch.inner is not None:
        launch = launch.inner
    script = job.script(launch.training_script) if launch is not None else None
    if launch is None or script is None:
        return None
    return launcher_layout(job.import_closure(script, import_time_only=False), launch.training_args, job.rel)


def launcher_layout(closure: list[PyScript], args: tuple[str, ...], rel: Callable[[str], str]) -> Layout | None:
    """The node and task counts the layout calls of `closure` (a launcher and what it imports) ask
    for, started with `args`. A count written as a name (`nodes=nodes`, `tasks_per_node=num_gpus_per_node`)
    or an option (`nodes=args.nodes`) is what the name is set to, and the option's value on the
    command line, else its argparse default."""
    nodes: int | None = None
    unknown_nodes = False
    per_node: int | None = None
    how = ""
    for s in closure:
        for call in s.layout_calls:
            at = f"at {rel(s.path)}:{call.site.line}"
            for key in ("slurm_nodes", "nodes", "num_nodes"):
                found = _layout_value(rel, call, key, closure, args)
                if found is not None:
                    nodes, how = found[0], f"{call.name}({key}={found[1]}) {at}{found[2]}"
                elif key in call.exprs:  # `nodes=args.nodes` with `--nodes $N`: known when the job runs
                    unknown_nodes, how = True, f"{call.name}({key}={call.exprs[key]}) {at}"
            tasks_keys = ("tasks_per_node", "slurm_ntasks_per_node", "ntasks_per_node", "devices")
            for key in (*tasks_keys, "gpus_per_node", "slurm_gpus_per_node"):
                found = _layout_value(rel, call, key, closure, args)
                if found is not None and (per_node is None or key in tasks_keys):
                    per_node = found[0]
                    how = how or f"{call.name}({key}={found[1]}) {at}{found[2]}"
    if nodes is None and per_node is None and not unknown_nodes:
        return None
    return Layout(None if nodes is None and unknown_nodes else nodes or 1, per_node or 1, how)


def _layout_value(rel: Callable[[str], str], call: Any, key: str, closure: list[Any],
                  args: tuple[str, ...]) -> tuple[int, str, str] | None:
    """(count, as written, where it comes from) of one layout keyword: a literal; a name set to one
    (`num_gpus_per_node = 4`, or to an option); an option `args.nodes`: `--nodes 8` on the command
    line, else `add_argument("--nodes", type=int, default=2)`."""
    value = call.kwargs.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value, str(value), ""
    expr = call.exprs.get(key)
    text = expr
    for _ in range(4):  # `n = args.nodes` then `nodes=n`
        if text is None:
            return None
        named = next((s.int_names[text] for s in closure if text in s.int_names), None)
        if isinstance(named, int):
            return named, str(expr), f" ({text} = {named})"
        if named is None:
            break
        text = named
    option = re.fullmatch(r"\w+\.(\w+)", text or "")
    if option is None:
        return None
    dest = option.group(1)
    for i, word in enumerate(args):
        flag, eq, given = word.partition("=")
        if flag.startswith("--") and flag[2:].replace("-", "_") == dest:
            given = given if eq else (args[i + 1] if i + 1 < len(args) else "")
            return (int(given), str(expr), f" ({flag} {given} on the command line)") if given.isdigit() else None
    default = next((s.int_options[dest] for s in closure if dest in s.int_options), None)
    if default is None:
        return None
    return default[0], str(expr), f" (--{dest} defaults to {default[0]} at {rel(default[1].file)}:{default[1].line})"


def submitted(job: Job, launch: Launch) -> Any:
    """The submitit `executor.submit(fn)` of the script a launch runs (a Submit), else None: that
    process only queues the job; `fn` runs in the tasks Slurm starts, in interpreters of their own."""
    if launch.spawner is not None or not launch.training_script:
        return None
    script = job.script(launch.training_script)
    return script.submits[0] if script is not None and script.submits else None


def task_layout(job: Job, cmd: Command) -> Layout:
    """The tasks the command's srun/mpirun starts (a launcher it runs counts once per task)."""
    task = next((w for w in reversed(cmd.wrappers) if w.name in TASK_RANKS), None)
    if task is None:
        return Layout(1, 1, "one process")
    return srun_layout(job, task.argv) if task.name == "srun" else mpirun_layout(job, task.argv)


def one_script_for_all_nodes(job: Job, cmd: Command) -> bool:
    """Whether the script of `cmd` runs once for all its nodes (a Slurm batch script over several
    nodes, or srun/mpirun starting the tasks), rather than once on each node (`torchrun
    --nnodes=2 --node_rank=$NODE_RANK ...` started by hand on every node)."""
    if any(w.name in TASK_RANKS for w in cmd.wrappers):
        return True
    return (sbatch_layout(job).nodes or 1) > 1


def layout(job: Job, cmd: Command, launch: Launch | None = None) -> Layout:
    """The nodes and tasks per node the processes of `cmd` run on (`launch`: the one asked about,
    e.g. the instrumented inner launch of `torchrun --no-python`).

    A spawner's workers are its tasks on each node (torchrun --nproc_per_node, --nnodes; under
    srun one agent per node); else the task launcher's (srun, mpirun), else a backgrounded loop's
    copies on one node, else the Python launcher's own settings, else one process."""
    outer = cmd.launch
    sp = None
    if outer is not None and outer.spawner is not None:
        sp = outer.spawner
    elif cmd.parent is not None and cmd.parent.launch is not None:
        sp = cmd.parent.launch.spawner
    elif launch is not None and launch.spawner is not None:
        sp = launch.spawner
    task = next((w for w in reversed(cmd.wrappers) if w.name in TASK_RANKS), None)
    if cmd.parent is not None and task is None:
        task = next((w for w in reversed(cmd.parent.wrappers) if w.name in TASK_RANKS), None)
    if sp is not None:
        nodes = _spawner_nodes(job, sp)
        if task is not None and task.name == "srun" and (nodes is None or nodes == 1):
            nodes = srun_layout(job, task.argv).nodes or nodes  # one agent per node of the step
        return Layout(nodes, sp.nproc, f"{sp.kind} --nnodes × --nproc_per_node")
    if task is not None:
        tasks = srun_layout(job, task.argv) if task.name == "srun" else mpirun_layout(job, task.argv)
        return replace(tasks, how=task.how) if task.how else tasks
    if cmd.loop is not None and cmd.background:
        return Layout(1, cmd.loop.count, "a backgrounded loop")
    found = script_layout(job, cmd)
    if found is not None:
        return found
    return Layout(1, 1, "one process")

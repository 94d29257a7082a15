"""Remedies for how the job is launched (LNC001-LNC003, and the node's GPU003/GPU004).

- `per-rank-launch` (unsafe: it changes how the ranks start) writes a per-rank
  launch script next to the job script (one `python -m scorep` per rank, field
  guide error 8) and makes the job script call it instead of torchrun; over
  several nodes, the srun form (`run_rank.sh` per srun task) or the torchrun form
  (`torchrun --no-python ./scorep_rank.sh`), see `_multi_node`.
- `cuda-warmup` (safe) puts the field guide's warm-up loop (errors 1-3) before
  the instrumented launch: a real CUDA op in try/except, outside Score-P; over
  several nodes as one step with one task per node.
- `exclude-node` (safe) adds the node that failed GPU003 to `#SBATCH --exclude=`.
"""

from __future__ import annotations

import os
import re
import shlex
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from doctor.jobfolder import argv as argvmod
from doctor.jobfolder.model import Command, Job, Launch, Span, Word
from doctor.jobfolder.queries import layout, one_script_for_all_nodes, sbatch_layout, submitted
from doctor.model import Phase, Safety, Status
from doctor.registry import remedy
from doctor.remedy.draft import RemedyContext
from doctor.remedy.edits import quote_if_needed, shell_files
from doctor.remedy.model import SCRIPT_LINE, CannotPlan
from doctor.remedy.spans import SpanEdits, at_targets, chain_root, job_of
from doctor.remedy.text import TextDoc
from remedies.scorep_env import experiment_base

TEMPLATE = Path(__file__).with_name("per_rank_launch.sh")
LAUNCH_NAME = "run_ranks.sh"
WARMUP_MARK = "gpu-doctor: cuda-warmup"
RANK_VARS = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
             "NPROC", "SCOREP_EXPERIMENT_DIRECTORY"}
_VAR_RE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


def warmup_block(python: str, indent: str = "") -> list[str]:
    """The warm-up loop of the field guide (error 3): a real CUDA op, retried, outside Score-P."""
    lines = [
        f"# {WARMUP_MARK}: initialise the CUDA runtime before python -m scorep preloads",
        "# its CUDA adapter (a runtime that is not ready then stays broken for that process).",
        "cuda_ready=0",
        'for attempt in $(seq 1 "${WARMUP_ATTEMPTS:-30}"); do',
        f'    if {python} -c "',
        "import sys, torch",
        "try:",
        "    torch.zeros(1).cuda()",
        "except Exception:",
        "    sys.exit(1)",
        '" 2>/dev/null; then',
        '        echo "CUDA runtime ready after $attempt attempt(s)."',
        "        cuda_ready=1",
        "        break",
        "    fi",
        '    echo "CUDA runtime not ready (attempt $attempt/${WARMUP_ATTEMPTS:-30}), '
        'sleeping ${WARMUP_SLEEP:-10}s..."',
        '    sleep "${WARMUP_SLEEP:-10}"',
        "done",
        'if [ "$cuda_ready" != 1 ]; then',
        '    echo "CUDA runtime never became ready on $(hostname): exclude this node '
        '(gpu-doctor GPU003)" >&2',
        "    exit 1",
        "fi",
    ]
    # Lines inside the python -c string keep column 0: Python reads them.
    inside = range(5, 11)
    return [ln if i in inside or not ln else indent + ln for i, ln in enumerate(lines)]


@remedy("cuda-warmup", Safety.SAFE,
        "Warm up the CUDA runtime outside Score-P before the instrumented launch",
        phase=Phase.LAUNCH, after=["per-rank-launch"])
def cuda_warmup(ctx: RemedyContext) -> None:
    """Before the statement that starts the instrumented run (the outer launcher's, when a
    wrapper script runs `python -m scorep` per worker), once per job script."""
    job = job_of(ctx)
    launches = at_targets(ctx, job.instrumented)
    queued = [(c, lch) for c, lch in launches if submitted(job, lch) is not None]
    if launches and len(queued) == len(launches):
        raise CannotPlan(f"{job.rel(queued[0][0].site.file)}:{queued[0][0].site.line} only queues the job through "
                         "submitit: a warm-up there warms the submitting host, not the nodes the tasks run on",
                         ["In the command each submitit task runs (its scorep_task.sh), before `exec python -m "
                          "scorep`, retry a real CUDA op until it succeeds: the loop `gpu-doctor explain LNC002` "
                          "shows."])
    if not launches:
        if "per-rank-launch" in ctx.planned:
            ctx.note = "the per-rank launch script warms CUDA up before its ranks"
            return
        raise CannotPlan("no `python -m scorep` launch found to put a warm-up before",
                         ["Before the instrumented launch, run a real CUDA op until it succeeds; "
                          "see the loop in the field guide (error 3) or `gpu-doctor explain LNC002`."])
    edits = SpanEdits(ctx)
    done: set[str] = set()
    summary = "CUDA warm-up loop before the instrumented launch"
    for cmd, launch in launches:
        root = chain_root(cmd)
        lay = layout(job, cmd, launch)
        file, line = root.site.file, root.statement_line or root.site.line
        # a per-task script (not the job script's own line, nor a `bash -c` on its srun line)
        in_a_task = root.per_task and root.site.file not in {f.path for f in job.shell_files if f.role == "job"}
        caller = _task_caller(job, root, edits) if lay.several_nodes and in_a_task else None
        if caller is not None:  # before the srun line that starts the per-task script
            (file, line), in_a_task = caller, False
        if file in done:
            continue
        done.add(file)
        first_node_only = any(t.data.get("warmup_nodes") for t in ctx.targets())
        if WARMUP_MARK in edits.doc(file).text and not first_node_only:
            where = job.rel(file)
            ctx.note = (f"{where}, which per-rank-launch writes, warms CUDA up before its ranks"
                        if not os.path.exists(file) else
                        f"{where} already warms CUDA up before the instrumented launch")
            continue
        python = launch.interpreter if not launch.interpreter.startswith("$") else "python"
        doc = edits.doc(file)
        if lay.several_nodes and one_script_for_all_nodes(job, cmd) and not in_a_task:
            step, how = _one_task_per_node(job, cmd, lay.nodes)
            block = node_warmup_block(python, doc.indent_of(line), step)
            summary = f"CUDA warm-up on each of the {lay.nodes} nodes ({how}) before the launch"
        else:
            block = warmup_block(python, doc.indent_of(line))
            summary = "CUDA warm-up loop before the instrumented launch"
        edits.insert_lines_before(file, comment_top(doc, line), block, indent="")
    edits.write(SCRIPT_LINE, summary)


SRUN_PER_NODE = 'srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1'


def _one_task_per_node(job: Job, cmd: Command, nodes: int | None) -> tuple[str, str]:
    """(the command that runs one task on each node of the launch, its words for the plan).

    srun inside a Slurm allocation; mpirun over the launch's own hosts (-H without the slot
    counts, or its hostfile) with one process per node (Open MPI's --map-by ppr:1:node)."""
    task = next((w for w in reversed(cmd.wrappers) if w.name in ("mpirun", "mpiexec", "orterun")), None)
    if task is not None and nodes:
        argv = list(task.argv)
        for i, a in enumerate(argv[:-1]):
            if a in ("-H", "--host", "-host"):
                hosts = ",".join(dict.fromkeys(h.split(":")[0] for h in argv[i + 1].split(",")))
                return (f"{task.name} -np {nodes} -H {quote_if_needed(hosts)} --map-by ppr:1:node -x PATH",
                        f"one {task.name} process per host")
            if a in ("--hostfile", "-hostfile", "-machinefile", "--machinefile"):
                return (f"{task.name} -np {nodes} {a} {quote_if_needed(argv[i + 1])} --map-by ppr:1:node -x PATH",
                        f"one {task.name} process per host")
    return SRUN_PER_NODE, "one srun task per node"


def _task_caller(job: Job, cmd: Command, edits: SpanEdits) -> tuple[str, int] | None:
    """(job script, line) of the srun/mpirun statement that starts the per-task script `cmd` is in
    (the walker follows that call into the script without keeping it as a command)."""
    name = os.path.basename(cmd.site.file)
    for f in job.shell_files:
        if f.role != "job" or f.path == cmd.site.file:
            continue
        lines = edits.doc(f.path).text.splitlines()  # as planned so far (per-rank-launch's call)
        for n, text in enumerate(lines, 1):
            words = text.split()
            if any(os.path.basename(w) == name for w in words):
                first = n
                while first > 1 and lines[first - 2].rstrip().endswith("\\"):
                    first -= 1
                statement = " ".join(lines[first - 1:n])
                if any(argvmod.base(w) in TASK_LAUNCHERS for w in statement.split()):
                    return f.path, first
    return None


def node_warmup_block(python: str, indent: str = "", step: str = SRUN_PER_NODE) -> list[str]:
    """The warm-up loop as one step with one task per node: each node retries its own runtime,
    and the one that never becomes ready says its name and fails the job.

    srun gets `--ntasks` with `--ntasks-per-node=1` because it otherwise takes the job's task
    count from SLURM_NTASKS and ignores the per-node count."""
    loop = warmup_block(python)[2:]  # the loop and its exit, without the two comment lines
    body = loop
    lines = [
        f"# {WARMUP_MARK}: initialise the CUDA runtime on every node of the job before python -m scorep",
        "# preloads its CUDA adapter (a runtime not ready then stays broken for that process): one",
        "# task per node, each retrying until its own GPUs answer.",
        f"{step} bash -c '",
        *body,
        "' || exit 1",
    ]
    inside = range(4, len(lines) - 1)
    return [ln if i in inside or not ln else indent + ln for i, ln in enumerate(lines)]


def comment_top(doc: TextDoc, line: int) -> int:
    """The first line of the comment block right above `line` (a comment belongs to its command)."""
    while line > 1:
        above = doc.line_text(line - 1).strip()
        if not above.startswith("#") or above.startswith(("#!", "#SBATCH")):
            break
        line -= 1
    return line


@remedy("per-rank-launch", Safety.UNSAFE,
        "Launch one python -m scorep per rank instead of wrapping torchrun",
        phase=Phase.LAUNCH)
def per_rank_launch(ctx: RemedyContext) -> None:
    job = job_of(ctx)
    submitted = [t for t in ctx.targets() if t.data.get("spawner") == "submitit"]
    if submitted:
        _submitit_by_hand(job, submitted[0].data)
    wrapped = [(c, lch) for c, lch in at_targets(ctx, job.instrumented)
               if lch.scorep is not None and lch.spawner is not None]
    for cmd, launch in wrapped:
        if launch.spawner is None or launch.spawner.kind not in REWRITABLE:
            continue
        if _spawner_nodes(launch) not in ("1", "1:1"):
            _multi_node(ctx, job, cmd, launch)
            return
        run = torchrun_words(job, cmd, launch)
        path = Path(cmd.site.file)
        target = _free_name(ctx, path.parent)
        edits = SpanEdits(ctx)
        ctx.create(target, launch_script(edits, run, target.name, f"{path.name}:{cmd.site.line}"),
                   f"per-rank launch script: one python -m scorep per rank ({target.name})", 0o755)
        warmed = WARMUP_MARK in edits.doc(cmd.site.file).text  # cuda-warmup ran already: one warm-up is enough
        _replace_launch(edits, cmd, run, target, path, warmed)
        summary = f"{launch.spawner.kind} under python -m scorep -> bash ./{target.name}"
        wrapper = Path(launch.target).name if launch.spawner.kind == "wrapper-script" else None
        if wrapper:  # the torchrun-as-a-script file nothing runs any more: say so where the launch was
            edits.insert_lines_before(cmd.site.file, cmd.site.line, [
                f"# gpu-doctor per-rank-launch: {target.name} starts the ranks; {wrapper} is no longer used "
                "(delete it once this launch works)"])
            summary += f"; {wrapper} is left unused"
        edits.write(SCRIPT_LINE, summary)
        notes = [f"{wrapper} stays in the folder but nothing runs it any more"] if wrapper else []
        if warmed:
            notes.append(f"{path.name} already warms CUDA up, so {target.name} is called with --no-warmup")
        notes.extend(run.notes)
        ctx.note = "; ".join(notes)
        return  # one launch per plan: the others' offsets moved; a second fix run takes the next
    spawners = {lch.spawner.kind for _c, lch in wrapped if lch.spawner is not None}
    if spawners - set(REWRITABLE):
        raise CannotPlan(f"python -m scorep wraps {', '.join(sorted(spawners))}, which gpu-doctor cannot "
                         "rewrite into a per-rank launch",
                         ["Start each rank yourself as its own `python -m scorep --cuda train.py ...` with "
                          "RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and "
                          "SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_N (field guide, error 8), or use "
                          "`gpu-doctor launch`."])
    ctx.note = "no python -m scorep launch wraps torchrun"


def _submitit_by_hand(job: Job, data: Mapping[str, Any]) -> None:
    """submitit starts the tasks from a pickled function: the per-task Score-P run is a command the
    launcher submits in its place, written in the launcher's own Python, which gpu-doctor does not edit."""
    script = job.rel(str(data.get("script") or "launch.py"))
    submit = data.get("submit") or {}
    at = f"{job.rel(str(submit.get('file', script)))}:{submit.get('line', '?')}"
    flags = " ".join(data.get("scorep_flags") or ["--cuda"])
    raise CannotPlan(
        f"{script} hands {data.get('function')} to submitit, whose tasks run it unmeasured; the per-task "
        "launch is Python gpu-doctor does not rewrite",
        [f"In {at}, submit a command in its place that each task runs under Score-P: "
         'executor.submit(submitit.helpers.CommandFunction(["bash", "scorep_task.sh", ...])).',
         "In scorep_task.sh, name each task's folder and start its own Score-P: "
         'export SCOREP_EXPERIMENT_DIRECTORY="$SCOREP_EXPERIMENT_DIRECTORY/rank_$SLURM_PROCID"; '
         f'mkdir -p "$SCOREP_EXPERIMENT_DIRECTORY"; exec python -m scorep {flags} train.py "$@" '
         "(RANK, LOCAL_RANK, WORLD_SIZE from SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS).",
         f"Start {script} itself without Score-P: python {script} "
         + " ".join(shlex.quote(str(a)) for a in data.get("args") or []),
         "Then run gpu-doctor again on the job folder."])


def _spawner_nodes(launch: Launch) -> str:
    """The spawner's node count as written (`--nnodes`, accelerate's --num_machines...), "1" without one."""
    sp = launch.spawner
    assert sp is not None
    kind = "torchrun" if sp.kind in TORCHRUN_KINDS else sp.kind
    key = NNODES_OPTION.get(kind, "--nnodes")
    args = list(sp.argv)
    for i, a in enumerate(args):
        name, eq, value = a.partition("=")
        if name.replace("-", "_") == key.replace("-", "_"):
            return value if eq else (args[i + 1] if i + 1 < len(args) else "")
        if not a.startswith("-"):
            break
    return "1"


TASK_LAUNCHERS = ("srun", "mpirun", "mpiexec", "orterun")
TORCHRUN_KINDS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
NODE_RANK_SCRIPT = "scorep_rank.sh"
SRUN_RANK_SCRIPT = "run_rank.sh"


def _multi_node(ctx: RemedyContext, job: Job, cmd: Command, launch: Launch) -> None:
    """`python -m scorep torchrun --nnodes=N ...`: measure every worker on every node.

    Two forms, chosen by what the allocation already gives each rank:
    - srun: where `#SBATCH --ntasks-per-node` equals the workers per node, Slurm has allotted a
      task (its CPUs and GPUs) per rank, so srun starts every rank itself, each its own
      `python -m scorep`, its rank from SLURM_PROCID; no launcher agent stands between.
    - torchrun: otherwise (one task per node sized for torchrun's agent, or no srun) torchrun
      stays, with its rendezvous, and starts each worker through a wrapper that runs
      `python -m scorep` (`torchrun --no-python ./scorep_rank.sh train.py ...`)."""
    sp = launch.spawner
    assert sp is not None and launch.scorep is not None
    where_at = f"{job.rel(cmd.site.file)}:{cmd.site.line}"
    if sp.kind not in TORCHRUN_KINDS or sp.no_python or launch.training_script is None or any(
            a in ("-m", "--module") for a in sp.argv[:len(sp.argv) - len(launch.training_args) - 1]):
        raise CannotPlan(f"{where_at}: {sp.kind} runs on {_spawner_nodes(launch)} nodes; over several nodes "
                         "gpu-doctor rewrites only torchrun starting a Python script",
                         ["Inside the Slurm allocation, start one task per rank with srun, each task its own "
                          "python -m scorep: `srun --ntasks-per-node=<ranks per node> bash -c 'RANK=$SLURM_PROCID "
                          "LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS SCOREP_EXPERIMENT_DIRECTORY="
                          "scorep_rank_$SLURM_PROCID exec python -m scorep --cuda train.py'` (MASTER_ADDR: the "
                          "first node of the allocation), or use gpu-doctor launch."])
    lay = layout(job, cmd, launch)
    per_node = sp.nproc
    alloc = sbatch_layout(job).tasks_per_node
    srun = next((w for w in cmd.wrappers if w.name == "srun"), None)
    base = experiment_base(cmd.var("SCOREP_EXPERIMENT_DIRECTORY"))
    flags = " ".join(quote_if_needed(f) for f in launch.scorep.flags if f not in ("-m", "--module"))
    python = launch.interpreter
    edits = SpanEdits(ctx)
    folder = Path(cmd.site.file).parent
    n_script = len(launch.training_args) + 1
    script_word = cmd.argv_words[len(cmd.argv_words) - n_script]
    if srun is not None and per_node is not None and alloc == per_node:
        target = _free(ctx, folder, SRUN_RANK_SCRIPT)
        why = (f"srun form: #SBATCH --ntasks-per-node={alloc} already gives each of the {lay.world or '?'} ranks ({lay.words()}) its own "
               "task, so srun starts every rank itself (RANK from SLURM_PROCID) and torchrun is no longer used")
        ctx.create(target, _rank_script("srun", python, flags, base, f"{Path(cmd.site.file).name}:{cmd.site.line}",
                                        why), f"per-task script: one python -m scorep per srun task ({target.name})",
                   0o755)
        master = _rendezvous(sp.argv)
        prefix = [f"MASTER_ADDR={master[0]}"] if master[0] else []
        prefix += [f"MASTER_PORT={master[1]}"] if master[1] else []
        words = prefix + ["srun", f"--ntasks-per-node={per_node}",
                          f'--ntasks="$((SLURM_JOB_NUM_NODES * {per_node}))"', "bash", f"./{target.name}"]
        assert cmd.span is not None
        edits.replace(Span(cmd.span.file, cmd.span.start, script_word.span.start, cmd.span.line, cmd.span.col,
                           script_word.span.line, script_word.span.col), " ".join(words) + " ")
        edits.write(SCRIPT_LINE, why)
        ctx.note = why
        return
    why = ("torchrun form: " + ("the allocation gives one task per node, sized for torchrun's agent"
                                if srun is not None else "nothing but torchrun's rendezvous assigns the ranks here")
           + f", so torchrun stays and starts each of its {lay.world or '?'} workers ({lay.words()}) as its own "
           "python -m scorep "
           "(--no-python and a wrapper)")
    target = _free(ctx, folder, NODE_RANK_SCRIPT)
    ctx.create(target, _rank_script("torchrun", python, flags, base, f"{Path(cmd.site.file).name}:{cmd.site.line}",
                                    why), f"per-worker wrapper: one python -m scorep per torchrun worker ({target.name})",
               0o755)
    sw = argvmod.scorep_words(cmd)
    assert sw is not None
    last = max(sw.options) if sw.options else sw.scorep
    keep_python = sp.kind != "torchrun"  # `python -m torch.distributed.run`: the interpreter stays
    first = sw.python + 1 if keep_python else sw.python
    start, end = cmd.argv_words[first].span, cmd.argv_words[last + 1].span
    edits.replace(Span(start.file, start.start, end.start, start.line, start.col, end.line, end.col), "")
    edits.insert(script_word.span.file, script_word.span.start, script_word.span.line, f"--no-python ./{target.name} ")
    edits.write(SCRIPT_LINE, why)
    ctx.note = why


def _free(ctx: RemedyContext, folder: Path, name: str) -> Path:
    stem, dot, ext = name.partition(".")
    for n in range(1, 100):
        path = folder / (name if n == 1 else f"{stem}_{n}{dot}{ext}")
        if ctx.draft.read(path) is None:
            return path
    raise CannotPlan(f"no free name for {name} in {folder}")


def _rendezvous(argv: tuple[str, ...]) -> tuple[str | None, str | None]:
    """(address, port) torchrun's options name: --master_addr/--master_port, else --rdzv_endpoint host:port."""
    opts: dict[str, str] = {}
    for i, a in enumerate(argv):
        name, eq, value = a.partition("=")
        if name.startswith("--"):
            opts[name.replace("-", "_")] = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
    addr, port = opts.get("__master_addr"), opts.get("__master_port")
    endpoint = opts.get("__rdzv_endpoint")
    if endpoint and not addr:
        host, _, p = endpoint.rpartition(":")
        addr, port = (host or endpoint), (port or p or None)
    return addr or None, port or None


def _rank_script(form: str, python: str, flags: str, base: str | None, source: str, why: str) -> str:
    """The per-rank script of the multi-node forms: name the rank's folder, then exec python -m scorep."""
    folder = "$SCOREP_EXPERIMENT_DIRECTORY/scorep_rank_${RANK}" if base else "scorep_rank_${RANK}"
    lines = ["#!/usr/bin/env bash",
             f"# One rank of {source}, generated by gpu-doctor (remedy per-rank-launch, check LNC001).",
             *textwrap.wrap(why[0].upper() + why[1:] + ".", 96, initial_indent="# ", subsequent_indent="# ",
                           break_on_hyphens=False),
             "#"]
    if form == "srun":
        lines += ["# srun starts this once per task: Slurm's task is the rank (RANK from SLURM_PROCID), and",
                  "# each rank is its own python -m scorep with its own experiment folder.",
                  'export RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" WORLD_SIZE="$SLURM_NTASKS"',
                  'export LOCAL_WORLD_SIZE="${SLURM_NTASKS_PER_NODE%%(*}"',
                  'export MASTER_ADDR="${MASTER_ADDR:-$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)}"',
                  'export MASTER_PORT="${MASTER_PORT:-29500}"']
    else:
        lines += ["# torchrun --no-python starts this once per worker (RANK, LOCAL_RANK, WORLD_SIZE set): each",
                  "# worker is its own python -m scorep with its own experiment folder."]
    if base:
        lines.append('mkdir -p "$SCOREP_EXPERIMENT_DIRECTORY"  # the job\'s own base folder: Score-P makes no parents')
    lines += [f"export SCOREP_EXPERIMENT_DIRECTORY={folder}",
              f'exec {python} -m scorep{" " + flags if flags else ""} "$@"', ""]
    return "\n".join(lines)


REWRITABLE = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "wrapper-script", "accelerate",
              "deepspeed")
# per spawner: the option that sets the ranks per node, the node count, the rendezvous port
NPROC_OPTION = {"accelerate": "--num_processes", "deepspeed": "--num_gpus"}
NNODES_OPTION = {"accelerate": "--num_machines", "deepspeed": "--num_nodes"}
PORT_OPTION = {"accelerate": "--main_process_port"}
_POSITIONAL_RE = re.compile(r"\$\{?[@*1-9#]")


@dataclass(frozen=True)
class TorchrunWords:
    """What the per-rank script needs of `python -m scorep <torchrun> [opts] script args`."""

    python: str
    scorep_flags: tuple[str, ...]
    options: dict[str, str]
    script: tuple[Word, ...]  # the training script (or `-m module`) and its arguments
    nproc: str = "1"
    env: tuple[str, ...] = ()  # NAME=value the ranks need from the launcher (accelerate's mixed precision)
    local_rank_arg: bool = False  # deepspeed passes --local_rank=N to each rank's script
    notes: tuple[str, ...] = ()


def torchrun_words(job: Job, cmd: Command, launch: Launch) -> TorchrunWords:
    sp = launch.spawner
    assert sp is not None and launch.scorep is not None
    where = f"{job.rel(cmd.site.file)}:{cmd.site.line}"
    kind = "torchrun" if sp.kind in ("wrapper-script", "torch.distributed.run", "torch.distributed.launch") \
        else sp.kind
    valueless = {"--" + f.lstrip("-").replace("-", "_") for f in argvmod.valueless_flags(kind)}
    options: dict[str, str] = {}
    args = list(sp.argv)
    i = 0
    while i < len(args) and args[i].startswith("-"):
        name, eq, value = args[i].partition("=")
        key = "--" + name.lstrip("-").replace("-", "_") if name.startswith("--") else name
        if key in ("-m", "--module"):
            options[key] = ""
            break
        if eq:
            options[key] = value
            i += 1
        elif key in valueless:
            options[key] = ""
            i += 1
        else:
            options[key] = args[i + 1] if i + 1 < len(args) else ""
            i += 2
    nnodes = options.get(NNODES_OPTION.get(kind, "--nnodes")) or "1"
    if nnodes not in ("1", "1:1"):
        raise CannotPlan(f"{where}: {sp.kind} runs on {nnodes} nodes; a per-rank script is for one node",
                         ["Inside a Slurm allocation, start one task per rank with srun, each task "
                          "its own python -m scorep with SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_"
                          "$SLURM_PROCID (or use gpu-doctor launch)."])
    if i >= len(args) or "--no_python" in options or launch.training_script is None:
        what = "a Python script or a module in the job folder"
        raise CannotPlan(f"{where}: {sp.kind} does not start {what} here",
                         ["Write the per-rank loop by hand: see the field guide (error 8)."])
    n_script = len(args) - i
    script = tuple(cmd.argv_words[len(cmd.argv_words) - n_script:])
    # `-m` named the launcher module (`python -m scorep -m torch.distributed.run`); each rank
    # runs the script file (or `-m module`) itself, so only scorep's own flags carry over.
    flags = tuple(f for f in launch.scorep.flags if f not in ("-m", "--module"))
    env, notes = _launcher_env(job, kind, options)
    if kind in PORT_OPTION and options.get(PORT_OPTION[kind]):
        options["--master_port"] = options[PORT_OPTION[kind]]
    return TorchrunWords(launch.interpreter, flags, options, script,
                         options.get(NPROC_OPTION.get(kind, "--nproc_per_node")) or "1", env,
                         kind == "deepspeed" and "--no_local_rank" not in options, notes)


def _launcher_env(job: Job, kind: str, options: dict[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What accelerate's launcher would hand each rank that a plain per-rank start must set itself."""
    if kind != "accelerate":
        return (), ()
    precision = options.get("--mixed_precision")
    config = options.get("--config_file")
    notes: tuple[str, ...] = ()
    if precision is None and config:
        precision = _config_value(job, config, "mixed_precision")
        if precision is None:
            notes = (f"the ranks start without accelerate launch, so {config}'s settings other than "
                     "mixed_precision are not applied",)
    env = (f"ACCELERATE_MIXED_PRECISION={precision}",) if precision and precision != "no" else ()
    return env, notes


def _config_value(job: Job, config: str, key: str) -> str | None:
    """A top-level `key: value` of an accelerate YAML config in the job folder."""
    if job.root is None or "$" in config:
        return None
    path = Path(job.root, config)
    try:
        import yaml

        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ImportError, yaml.YAMLError):
        return None
    value = data.get(key) if isinstance(data, dict) else None
    return str(value) if isinstance(value, str | int) else None


def _free_name(ctx: RemedyContext, folder: Path) -> Path:
    for n in range(1, 100):
        path = folder / (LAUNCH_NAME if n == 1 else f"run_ranks_{n}.sh")
        if ctx.draft.read(path) is None:
            return path
    raise CannotPlan(f"no free name for the per-rank launch script in {folder}")


def _as_written(edits: SpanEdits, word: Word) -> str:
    """A word for the generated script: its value where known, else as the job script writes it."""
    if word.known and not word.varies:
        return quote_if_needed(word.text)
    return edits.doc(word.span.file).text[word.span.start:word.span.end]


def launch_script(edits: SpanEdits, run: TorchrunWords, name: str, source: str) -> str:
    nproc = run.nproc
    flags = "".join(" " + quote_if_needed(f) for f in run.scorep_flags)
    text = TEMPLATE.read_text(encoding="utf-8")
    for key, value in (("@WARMUP@", "\n".join(warmup_block(run.python, "    "))),
                       ("@SCRIPT@", _args_text(edits, run)), ("@SCOREP_FLAGS@", flags),
                       ("@PYTHON@", run.python), ("@NPROC@", nproc if nproc.isdigit() else "gpu"),
                       ("@NAME@", name), ("@SOURCE@", source)):
        text = text.replace(key, value)
    return text


def _args_text(edits: SpanEdits, run: TorchrunWords) -> str:
    """The training script and its arguments as written, one option per line when long."""
    words = [_as_written(edits, w) for w in _dedupe(run.script)]
    if run.local_rank_arg:  # deepspeed's launcher puts it right after the script
        at = 2 if words[:1] == ["-m"] else 1
        words[at:at] = ["--local_rank=$rank"]
    flat = " ".join(words)
    if len(flat) <= 70:
        return flat
    groups: list[list[str]] = []
    for w in words:
        if not groups or w.startswith("-"):
            groups.append([w])
        else:
            groups[-1].append(w)
    return " \\\n                ".join(" ".join(g) for g in groups)


def _dedupe(words: tuple[Word, ...]) -> list[Word]:
    """One entry per shell word where an unknown word expanded to several (`"${ARGS[@]}"`)."""
    out: list[Word] = []
    for w in words:
        if out and not w.known and out[-1].span == w.span:
            continue
        out.append(w)
    return out


def _replace_launch(edits: SpanEdits, cmd: Command, run: TorchrunWords, target: Path, path: Path,
                    warmed: bool = False) -> None:
    """Replace the launch command (up to its last word; redirections stay) with the script's call."""
    used: set[str] = set()
    positional = False
    for w in run.script:
        if not (w.known and not w.varies):
            text = _as_written(edits, w)
            used.update(_VAR_RE.findall(text))
            positional = positional or bool(_POSITIONAL_RE.search(text))
    # known words are written as their values; what the launch line reads from the shell's own
    # variables (a loop variable, `overrides="$*"`) goes along, and the script's arguments after `--`
    local = used & set(cmd.shell_refs)
    prefix = [f"{v.name}={quote_if_needed(v.value)}" for v in cmd.inline
              if v.name not in RANK_VARS and v.value is not None]
    prefix += [e for e in run.env if e.split("=", 1)[0] not in {v.name for v in cmd.inline}]
    prefix += [f'{v}="${v}"' for v in sorted(local - RANK_VARS)]
    for opt, var in (("--master_port", "MASTER_PORT"), ("--master_addr", "MASTER_ADDR")):
        if run.options.get(opt):
            prefix.append(f"{var}={run.options[opt]}")
    rel = target.name if target.parent == path.parent else str(target)
    call = " ".join(prefix + ["bash", f"./{rel}" if "/" not in rel else rel])
    nproc = run.nproc
    if nproc and not nproc.isdigit():
        call += f" --nproc {nproc}"
    if warmed:
        call += " --no-warmup"
    if positional:
        call += ' -- "$@"'

    assert cmd.span is not None
    last = cmd.argv_words[-1].span
    edits.replace(Span(cmd.span.file, cmd.span.start, last.end, cmd.span.line, cmd.span.col, last.end_line,
                       last.end_col), call)


@remedy("exclude-node", Safety.SAFE,
        "Keep the job off a node whose CUDA runtime never became ready (#SBATCH --exclude=)",
        phase=Phase.LAUNCH)
def exclude_node(ctx: RemedyContext) -> None:
    nodes = _bad_nodes(ctx)
    if not nodes:
        raise CannotPlan("no node is known to have failed GPU003",
                         ["Run `gpu-doctor --check-only --json-file verdict.json` on the suspect node, "
                          "then `gpu-doctor fix --findings verdict.json`; or add `#SBATCH "
                          "--exclude=<node>` to the job script yourself."])
    paths = [p for p in shell_files(ctx) if "#SBATCH" in ctx.read_doc(p).text] or shell_files(ctx)[:1]
    if not paths:
        raise CannotPlan("no job script found", [f"Add `#SBATCH --exclude={','.join(nodes)}`."])
    for path in paths:
        doc = ctx.read_doc(path)
        line = add_exclude(doc, nodes)
        if line is not None:
            ctx.write_doc(path, doc, SCRIPT_LINE, f"#SBATCH --exclude={','.join(nodes)}", line)
        else:
            ctx.note = f"{', '.join(nodes)} already excluded"


def _bad_nodes(ctx: RemedyContext) -> list[str]:
    nodes: dict[str, None] = {}
    for t in ctx.targets():
        for key in ("node", "nodes", "host", "hosts"):
            value = t.data.get(key)
            for n in ([value] if isinstance(value, str) else list(value or [])):
                nodes.setdefault(str(n), None)
    for f in ctx.findings_of("GPU003"):
        if f.status == Status.FAIL:
            nodes.setdefault(str(f.entities.get("host") or ctx.case.host), None)
    return [n for n in nodes if n]


_EXCLUDE_RE = re.compile(r"^(\s*#SBATCH\s+)(?:--exclude[= ]|-x\s*)(\S+)")


def add_exclude(doc: TextDoc, nodes: list[str]) -> int | None:
    """Extend an `#SBATCH --exclude=` line or add one after the last `#SBATCH` header line."""
    last_sbatch = None
    first_command = None
    for n in range(1, doc.line_count + 1):
        text = doc.line_text(n)
        stripped = text.strip()
        if stripped.startswith("#SBATCH"):
            if first_command is None:
                last_sbatch = n
            m = _EXCLUDE_RE.match(text)
            if m and first_command is None:
                have = m.group(2).split(",")
                missing = [x for x in nodes if x not in have]
                if not missing:
                    return None
                start = doc.line_start(n) + m.end(2)
                doc.insert(start, "," + ",".join(missing))
                return n
        elif stripped and not stripped.startswith("#") and first_command is None:
            first_command = n
    line = f"#SBATCH --exclude={','.join(nodes)}"
    if last_sbatch is not None:
        doc.insert_lines_after(last_sbatch, [line])
        return last_sbatch + 1
    shebang = 1 if doc.line_count and doc.line_text(1).startswith("#!") else 0
    doc.insert_lines_after(shebang, [line]) if shebang else doc.insert_lines_before(1, [line])
    return shebang + 1

"""Launcher layer: who gets measured, whether CUDA is warm first, whether a broken node is avoided."""

from __future__ import annotations

import re
from typing import Any

from checks.launcher_cold_runtime import Adapter, ColdRuntime, cold_runtime, cuda_adapter
from doctor.facts import Facts, ProbeFailure
from doctor.jobfolder.model import Command, Job
from doctor.jobfolder.queries import (
    code_of,
    command_data,
    ev,
    layout,
    link_unknown,
    one_script_for_all_nodes,
    problem_evidence,
    ranks,
    sbatch,
    submitted,
)
from doctor.limits import bound_problem
from doctor.model import Evidence, Layer, Outcome, Status, fail, passed, skip, unknown, warn
from doctor.registry import check

L = Layer.LAUNCHER
SPAWNER_WORDS = {
    "torchrun": "torchrun", "torch.distributed.run": "python -m torch.distributed.run",
    "torch.distributed.launch": "python -m torch.distributed.launch", "accelerate": "accelerate launch",
    "deepspeed": "deepspeed", "wrapper-script": "a script that calls torch.distributed.run.main()",
}


def _unreadable(job: Job) -> list[Outcome]:
    out = []
    for f in job.shell_files:
        if not f.analysed:
            note = next((n for n in job.notes if n.file == f.path), None)
            text = note.text if note else "unreadable"
            evidence = Evidence(text, job.rel(f.path), None, "not analysed")
            if f.role == "job":
                bound = {"bound": "not analysed"} if bound_problem(text) else {}
                out.append(unknown(f"cannot analyse {job.rel(f.path)}: {text}", evidence,
                                   entities={"file": job.rel(f.path), **bound}))
            else:  # a sourced file or child script the job names
                out.append(skip(f"{job.rel(f.path)} ({f.role} by the job) not analysed: {text}", evidence))
    return out


@check("LNC001", L, "`python -m scorep` wraps torchrun: only the launcher agent is measured",
       needs=("job",), remedies=("per-rank-launch",))
def launcher_only(facts: Facts) -> list[Outcome]:
    """What it does:
    Finds `python -m scorep` launches whose program spawns the workers: torchrun
    (`$(which torchrun)`), `-m torch.distributed.run`/`.launch`, `accelerate launch`,
    `deepspeed`, or a wrapper script whose code calls `torch.distributed.run.main()`; and those
    whose program hands the training function to submitit (`executor.submit(train)`), which
    queues a Slurm job whose tasks run it.

    Why is this bad?
    `python -m scorep` preloads Score-P into its own process only and removes the preload
    again, so the workers the elastic agent spawns start fresh interpreters without Score-P.
    The trace holds one process, `LocalElasticAgent._invoke_run` waiting: no kernels, no NCCL.
    Under submitit the measured process is the one that submits; the tasks on the nodes unpickle
    and run the function in interpreters of their own, unmeasured.

    Example:
        python -m scorep --cuda scorep_torchrun.py --nproc_per_node=8 train.py

    Remedy:
    Launch every rank yourself, each as its own `python -m scorep` with RANK, LOCAL_RANK,
    WORLD_SIZE, MASTER_ADDR/PORT and its own SCOREP_EXPERIMENT_DIRECTORY (or `gpu-doctor launch`).
    Under submitit, submit `submitit.helpers.CommandFunction(["bash", "scorep_task.sh"])`, a script
    that runs `python -m scorep` in each task, and start the launcher without Score-P.

    Severity:
    fail when `python -m scorep` runs a launcher that spawns the workers or submits them
    through submitit (the workers are never measured); unknown when the wrapped script cannot be read; skip without a `python -m scorep`
    launch; else pass.

    Fix safety:
    Unsafe: replaces the launch line with a per-rank loop.
    """
    job: Job = facts["job"]
    out: list[Outcome] = list(_unreadable(job))
    for note in job.notes:
        if note.kind == "unparsed":
            out.append(skip(f"{job.rel(note.file)}: {note.text}", Evidence(note.text, job.rel(note.file),
                                                                         note.line, "not analysed")))
    found = False
    for cmd, launch in job.instrumented:
        found = True
        sp = launch.spawner
        script = job.script(launch.training_script) if sp is None and launch.training_script else None
        if script is not None and script.problem is not None:
            out.append(unknown(f"cannot tell whether {job.rel(script.path)} starts torchrun: {script.problem}",
                               [ev(job, cmd.site, "launch"), problem_evidence(job, script)],
                               entities={"file": job.rel(script.path)}))
            continue
        submitted = _submitit(job, cmd, launch, script)
        if submitted is not None:
            out.append(submitted)
            continue
        if sp is None:
            n, how = ranks(job, cmd, launch)
            out.append(passed(f"each measured process runs the training script itself ({how})",
                              ev(job, cmd.site, "launch")))
            continue
        evidence = [ev(job, cmd.site, "launch")]
        if sp.kind == "wrapper-script" and sp.wrapper_script:
            wrapper = job.script(sp.wrapper_script)
            if wrapper is not None and wrapper.torchrun_main is not None:
                evidence.append(ev(job, wrapper.torchrun_main, "calls torchrun"))
        assert launch.scorep is not None
        data = command_data(cmd) | {
            "python": launch.interpreter, "scorep_flags": list(launch.scorep.flags), "spawner": sp.kind,
            "nproc": sp.nproc, "nproc_text": sp.nproc_text, "script": launch.training_script,
            "target": launch.training_target, "args": list(launch.training_args),
            "env": {k: v.raw for k, v in cmd.env.items() if k.startswith(("SCOREP_", "MASTER_", "NCCL_"))
                    and v.site is not None},
        }
        out.append(fail(f"`python -m scorep` wraps {SPAWNER_WORDS.get(sp.kind, sp.kind)}: Score-P measures the "
                        f"launcher agent only, not {_workers(sp, layout(job, cmd, launch))}", evidence,
                        "per-rank-launch", entities={"file": job.rel(cmd.site.file)}, data=data))
    if not found:
        out.append(link_unknown(job, "no `python -m scorep` launch")
                   or skip("no `python -m scorep` launch in the job folder"))
    return out


def _submitit(job: Job, cmd: Command, launch: Any, script: Any) -> Outcome | None:
    """`python -m scorep launch.py` where launch.py hands a function to submitit's
    `executor.submit`: Score-P measures the submitting process; the tasks Slurm starts run the
    function in interpreters of their own, unmeasured."""
    sub = submitted(job, launch)
    if script is None or sub is None:
        return None
    lay = layout(job, cmd, launch)
    tasks = (f"the {lay.world} tasks it starts, {lay.tasks_per_node} on each of {lay.nodes} nodes"
             if lay.several_nodes and lay.world is not None else "the tasks it starts")
    evidence = [ev(job, cmd.site, "launch", f"{cmd.site.text}  ({lay.words()}: {lay.how})"),
                ev(job, sub.site, "submits to Slurm")]
    assert launch.scorep is not None
    data = command_data(cmd) | {"spawner": "submitit", "function": sub.function, "script": launch.training_script,
                                "submit": {"file": sub.site.file, "line": sub.site.line},
                                "nodes": lay.nodes, "tasks_per_node": lay.tasks_per_node,
                                "scorep_flags": list(launch.scorep.flags), "args": list(launch.training_args)}
    return fail(f"`python -m scorep` wraps {job.rel(script.path)}, which hands {sub.function} to submitit: Score-P "
                f"measures the submitting process only, not {tasks}", evidence, "per-rank-launch",
                entities={"file": job.rel(cmd.site.file)}, data=data)


def _workers(sp: Any, lay: Any = None) -> str:
    """`the 4 workers it spawns` (`the 8 workers it spawns, 4 on each of 2 nodes`), or how many when
    the count is known only when the job runs."""
    if sp.nproc is not None and lay is not None and lay.several_nodes and lay.world is not None:
        return f"the {lay.world} workers it spawns, {sp.nproc} on each of {lay.nodes} nodes"
    if sp.nproc is not None:
        return f"the {sp.nproc} workers it spawns"
    if sp.nproc_text:
        return f"the workers it spawns ({sp.nproc_text} of them, known only when the job runs)"
    return "the workers it spawns"


def _warmups(job: Job, target: Command) -> tuple[list[Command], list[Command], list[Command]]:
    """(real CUDA warm-ups, nvidia-smi checks, is_available-only checks) before `target`."""
    real, smi, asserts = [], [], []
    for c in job.commands:
        if c.flow != target.flow or c.order >= target.order:
            continue
        if c.argv and c.argv[0].rsplit("/", 1)[-1] == "gpu-doctor":
            real.append(c)
            continue
        if c.argv and c.argv[0].rsplit("/", 1)[-1] == "nvidia-smi":
            smi.append(c)
            continue
        if c.launch is None or c.instrumented is not None:
            continue
        code = code_of(job, c)
        if code is None or not code.ok:
            continue
        if code.cuda_ops:
            real.append(c)
        elif code.cuda_asserts:
            asserts.append(c)
    return real, smi, asserts


@check("LNC002", L, "the instrumented run starts without a CUDA warm-up outside Score-P",
       needs=("job", "nvml", "cuda_runtime", "logscan"), remedies=("cuda-warmup",), handles_failures=True)
def warmup_first(facts: Facts) -> list[Outcome]:
    """What it does:
    Before the first `python -m scorep` launch of each job script, looks for a warm-up outside
    Score-P: a Python command that runs a real CUDA operation (`torch.zeros(1).cuda()`,
    `.to("cuda")`, `torch.cuda.init()`...) in a retry loop, or `gpu-doctor --check-only`.
    For a launch over several nodes the warm-up must run on every one of them (an srun step
    with one task per node): one in the batch shell warms the first node only.

    Why is this bad?
    Score-P's CUDA adapter, preloaded at process start, probes the CUDA runtime at once; on a
    fresh node the runtime may still answer 802 (system not ready) and the adapter poisons the
    process's CUDA context for good (the FP16 ValueError, error 802). `nvidia-smi` only proves
    the driver API, and `torch.cuda.is_available()` can return False without initialising.

    Example:
        python -m scorep --cuda train.py      # first CUDA touch of the job

    Remedy:
    A loop of `python -c "import torch; torch.zeros(1).cuda()"` in try/except with sleeps,
    before `python -m scorep`; over several nodes, that loop once on every node (`srun
    --ntasks-per-node=1 bash -c '...'`, or one mpirun process per host).

    Severity:
    skip when no launch loads a CUDA adapter (no `--cuda`, nothing asks for CUDA recording:
    a ROCm job, a CPU profile); pass with a warm-up in a retry loop; warn without one (a risk on
    a freshly allocated node: GPU003 answered at the first attempt, or the node was not
    measured here), also for a warm-up without retries, one that runs on fewer nodes than the
    launch, and while only SCOREP_CUDA_ENABLE asks for CUDA (SCP002); fail when the evidence shows a cold runtime: GPU003 "ready after
    attempt k" (k > 1) on this node, or error 802 / the FP16 ValueError in the log of a run that had
    Score-P's CUDA adapter (a log whose run is not known to have had it: warn, said so).

    Fix safety:
    Safe: inserts the warm-up block before the launch.
    """
    job = facts.get("job")
    if isinstance(job, ProbeFailure):
        return [unknown(str(job), entities={"probe": "job"})]
    firsts: dict[int, Command] = {}
    for cmd, _launch in job.instrumented:
        firsts.setdefault(cmd.flow, cmd)
    if not firsts:
        return [skip("no `python -m scorep` launch in the job folder")]
    adapter = cuda_adapter(job)
    if adapter.state == "absent":
        return [skip(f"no CUDA adapter to warm up for: {adapter.why}", adapter.evidence)]
    cold = cold_runtime(facts)
    out: list[Outcome] = []
    for cmd in firsts.values():
        out.append(_warmup_outcome(job, cmd, adapter, cold))
    return out


def _warmup_outcome(job: Job, cmd: Command, adapter: Adapter, cold: ColdRuntime) -> Outcome:
    """LNC002 for the first instrumented launch of one flow, at the level the evidence sets."""
    real, smi, asserts = _warmups(job, cmd)
    insert_line = cmd.loop.site.line if cmd.loop is not None else cmd.site.line
    launch = cmd.instrumented
    data = command_data(cmd) | {"insert_before_line": insert_line,
                                "python": launch.interpreter if launch else "python",
                                "adapter": adapter.state, "evidence_level": cold.level.value}
    if cold.next_step:
        data["next_step"] = cold.next_step
    if real:
        w = real[-1]
        nodes = layout(job, cmd, launch).nodes
        reach = layout(job, w).nodes
        if nodes is not None and nodes > 1 and (reach or 1) < nodes and one_script_for_all_nodes(job, cmd):
            return warn(f"the CUDA warm-up runs on {_first_nodes(reach)} only, the instrumented launch on {nodes} "
                        f"nodes: the other nodes' runtimes stay cold for Score-P's CUDA adapter; run the warm-up "
                        "once on every node (one srun task per node)",
                        [ev(job, w.site, "warm-up"), ev(job, cmd.site, "launch")], "cuda-warmup",
                        data=data | {"warmup_line": w.site.line, "nodes": nodes, "warmup_nodes": reach or 1})
        if w.loop is None and not (w.argv and w.argv[0].endswith("gpu-doctor")):
            return warn("the CUDA warm-up runs once: on a cold node the runtime can need tens of seconds; "
                        "retry it in a loop", [ev(job, w.site, "warm-up"), ev(job, cmd.site, "launch")],
                        "cuda-warmup", data=data | {"warmup_line": w.site.line})
        return passed("CUDA is warmed up outside Score-P before the instrumented launch",
                      [ev(job, w.site, "warm-up")])
    launch_ev = ev(job, cmd.site, "launch")
    evidence = [launch_ev, *(e for e in adapter.evidence[:1] if (e.file, e.line) != (launch_ev.file, launch_ev.line)),
                *cold.evidence]
    why = ""
    if smi:
        evidence.append(ev(job, smi[-1].site, "driver API only"))
        why = "; nvidia-smi checks the driver API, not the runtime"
    if asserts:
        evidence.append(ev(job, asserts[-1].site, "no CUDA op"))
        why += "; torch.cuda.is_available() does not initialise the runtime"
    level = cold.level if adapter.state == "loaded" else Status.WARN
    if level == Status.FAIL:
        return fail(f"no CUDA warm-up outside Score-P, and {cold.why}: the CUDA adapter probes a cold runtime "
                    f"(error 802){why}", evidence, "cuda-warmup", data=data)
    if adapter.state == "wanted":
        return warn(f"no CUDA warm-up outside Score-P: {adapter.why}; once --cuda loads the adapter it probes the "
                    f"runtime at process start{why}", evidence, "cuda-warmup", data=data)
    return warn(f"no CUDA warm-up outside Score-P: the CUDA adapter is the first thing to touch CUDA "
                f"({cold.why}){why}", evidence, "cuda-warmup", data=data)


def _first_nodes(reach: int | None) -> str:
    return "the first node (the batch shell)" if (reach or 1) == 1 else f"{reach} nodes"


def hostlist(expr: str) -> set[str]:
    """Slurm hostlist expansion: `node[01-03,07],gpu5` -> {node01, node02, node03, node07, gpu5}."""
    out: set[str] = set()
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", expr):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part.strip())
        if not m:
            if part.strip():
                out.add(part.strip())
            continue
        pre, ranges, post = m.groups()
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            if hi and lo.isdigit() and hi.isdigit():
                for k in range(int(lo), int(hi) + 1):
                    out.add(f"{pre}{str(k).zfill(len(lo))}{post}")
            else:
                out.add(f"{pre}{lo}{post}")
    return out


@check("LNC003", L, "a node whose CUDA runtime failed permanently is not excluded from the job",
       needs=("job", "cuda_runtime"), depends_on=("GPU001",), remedies=("exclude-node",),
       handles_failures=True)
def broken_node_excluded(facts: Facts) -> Outcome:
    """What it does:
    When GPU003 found this node's CUDA runtime broken for good (never ready within the budget,
    hung, or an error no retry cures), checks the job's `#SBATCH --exclude`/`-x` and
    `--nodelist`/`-w` for the node.

    Why is this bad?
    A node whose runtime never comes up burns every job the scheduler puts there on CUDA
    timeouts, however good the warm-up; the scheduler keeps choosing it while it is first in
    the queue.

    Example:
        GPU003: never ready within 45 s on node17; job.sbatch has no --exclude=node17

    Remedy:
    `#SBATCH --exclude=node17` (and tell the admins).

    Severity:
    fail when GPU003 found this node's runtime broken for good and the job pins it (--nodelist)
    or does not exclude it; skip when there is no sbatch script to exclude it from; unknown when
    GPU003's probe gave no result; else pass.

    Fix safety:
    Safe: adds one directive.
    """
    job = facts.get("job")
    if isinstance(job, ProbeFailure):
        return unknown(str(job), entities={"probe": "job"})
    runtime = facts.get("cuda_runtime")
    host = facts.case.host
    if isinstance(runtime, ProbeFailure):
        return unknown(f"GPU003's runtime probe gave no result ({runtime.detail}); cannot tell whether "
                       f"{host} must be excluded", entities={"host": host})
    state = runtime.get("state") if isinstance(runtime, dict) else None
    if state not in ("never_ready", "hung", "error"):
        return passed(f"the CUDA runtime on {host} is {state or 'not known broken'}; nothing to exclude",
                      entities={"host": host})
    short = host.split(".")[0]
    opts = sbatch(job)
    files = [f for f in job.shell_files if f.sbatch]
    excluded = [o for o in opts if o.name == "exclude" and {host, short} & hostlist(o.value)]
    if excluded:
        return passed(f"{host} is excluded", ev(job, excluded[0].site, "#SBATCH"), entities={"host": host})
    pinned = [o for o in opts if o.name == "nodelist" and {host, short} & hostlist(o.value)]
    data: dict[str, Any] = {"node": short, "host": host, "runtime_state": state}
    if files:
        last = files[0].sbatch[-1].site
        data.update({"file": files[0].path, "line": last.line, "text": last.text, "insert_after_line": last.line})
        existing = [o for o in opts if o.name == "exclude"]
        if existing:
            data.update({"exclude": existing[0].value, "exclude_line": existing[0].site.line})
    evidence = [Evidence(f"CUDA runtime on {host}: {state}", label="GPU003")]
    if pinned:
        evidence.append(ev(job, pinned[0].site, "#SBATCH"))
        return fail(f"the job pins itself to {host} (--nodelist), whose CUDA runtime is broken ({state})",
                    evidence, "exclude-node", entities={"host": host}, data=data)
    if not files:
        return skip(f"{host}'s CUDA runtime is broken ({state}), but the job has no sbatch script to exclude it "
                    "from; GPU003 reports the node", evidence, entities={"host": host})
    return fail(f"{host}'s CUDA runtime is broken ({state}) and {job.rel(files[0].path)} does not exclude it",
                evidence, "exclude-node", entities={"host": host}, data=data)

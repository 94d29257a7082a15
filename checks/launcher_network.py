"""Launcher layer, across nodes: the socket interface the ranks' gloo and NCCL sockets use."""

from __future__ import annotations

import re
from typing import Any

from doctor.facts import Facts, ProbeFailure
from doctor.jobfolder.model import Command, Job
from doctor.jobfolder.queries import ev, layout, sbatch, var_evidence
from doctor.model import Evidence, Layer, Outcome, fail, passed, skip, unknown, warn
from doctor.registry import check, manual_remedy

L = Layer.LAUNCHER
VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def _gpu_doctor_launch(cmd: Command) -> bool:
    words = [w.rsplit("/", 1)[-1] for w in cmd.argv[:4]]
    return "launch" in words and ("gpu-doctor" in words or "doctor" in words)


def _training(job: Job) -> list[Command]:
    """The commands that start the ranks (or their launcher)."""
    return [c for c in job.commands if _gpu_doctor_launch(c) or (
        c.launch is not None and (c.launch.spawner is not None or c.launch.training_script is not None
                                  or c.launch.kind == "module"))]


def _nodes(job: Job, commands: list[Command], env: dict[str, str]) -> tuple[int, Evidence | None]:
    """How many nodes the job asks for, and where it says so (1 when nothing says more)."""
    for opt in sbatch(job):
        m = re.match(r"\s*(\d+)", opt.value) if opt.name == "nodes" else None
        if m and int(m.group(1)) > 1:
            return int(m.group(1)), ev(job, opt.site, "#SBATCH")
    for cmd in commands:
        lay = layout(job, cmd, cmd.instrumented or cmd.launch)
        if lay.nodes is not None and lay.nodes > 1:
            return lay.nodes, ev(job, cmd.site, "launch", f"{cmd.site.text}  ({lay.words()}: {lay.how})")
    value = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or ""
    if value.isdigit() and int(value) > 1:
        return int(value), Evidence(f"SLURM_JOB_NUM_NODES={value}", label="this allocation")
    return 1, None


@check("LNC004", L, "across nodes, the ranks' socket interface is left to a hostname that does not reach the master",
       needs=("job", "socket_route"), remedies=("socket-ifname",), handles_failures=True)
def socket_interface(facts: Facts) -> Outcome:
    """What it does:
    For a job over several nodes (`#SBATCH --nodes`, srun `-N`, torchrun `--nnodes`, mpirun's
    hosts, submitit's `slurm_nodes`, Lightning's `num_nodes`, or this allocation) that sets
    neither GLOO_SOCKET_IFNAME nor NCCL_SOCKET_IFNAME, compares what the libraries would pick
    with the interface of this node's route to MASTER_ADDR (the kernel's answer through a
    connected UDP socket, like `ip route get`): gloo binds to the first of this node's own
    addresses that the hostname resolves to, or to 127.0.0.1 when there is none; NCCL takes the
    first ib* interface, else the first that is not lo or docker*.

    Why is this bad?
    A hostname that resolves to 127.0.1.1 (Debian's /etc/hosts), to nothing, or to a management
    network makes every rank advertise an address the other nodes cannot reach: the ranks
    meet at the store on MASTER_ADDR, then hang (or fail with "Connection refused") connecting
    to each other.

    Example:
        hostname gpu012 resolves to 127.0.1.1 (loopback): gloo binds to 127.0.1.1;
        10.40.0.11 is reached through ib0 (10.40.0.12)

    Remedy:
    `export GLOO_SOCKET_IFNAME=ib0 NCCL_SOCKET_IFNAME=ib0` (the interface named) before the
    launch, or `gpu-doctor launch`, which sets both per node from its route to MASTER_ADDR.

    Severity:
    skip on one node, without a launch, without a MASTER_ADDR to route to, or where the node is not
    probed (`gpu-doctor fix`); pass when the job
    names both interfaces, launches through `gpu-doctor launch`, or the libraries' own choice is
    the route's interface; fail when gloo's is not (its sockets cannot reach the other nodes);
    warn when only NCCL's is not (another network may still connect the nodes); unknown when the
    probe gave no answer.

    Fix safety:
    Manual: two exports in the job script.
    """
    job = facts.get("job")
    if isinstance(job, ProbeFailure):
        return unknown(str(job), entities={"probe": "job"})
    commands = _training(job)
    if not commands:
        return skip("no launch in the job folder")
    nodes, where = _nodes(job, commands, dict(facts.case.env))
    if nodes < 2:
        return skip("one node: the ranks reach each other whatever interface they pick")
    evidence = [e for e in (where,) if e is not None]
    gd = [c for c in commands if _gpu_doctor_launch(c)]
    if gd and not any("--socket-ifname=off" in " ".join(c.argv) or "off" in c.argv for c in gd):
        return passed(f"gpu-doctor launch sets {' and '.join(VARIABLES)} per node from its route to MASTER_ADDR",
                      [ev(job, gd[0].site, "launch"), *evidence])
    cmd = commands[0]
    own = {v: cmd.env[v] for v in VARIABLES if v in cmd.env and cmd.env[v].raw}
    if len(own) == len(VARIABLES):
        return passed("the job names the socket interface: "
                      + " ".join(f"{v}={own[v].raw}" for v in VARIABLES),
                      [var_evidence(job, own[v], v) for v in VARIABLES])
    route = facts.get("socket_route")
    if isinstance(route, ProbeFailure) and route.detail.startswith("not probed"):
        return skip(f"{route.detail}: which interface reaches the master is this node's answer "
                    "(`gpu-doctor --check-only` on a node of the allocation)", evidence)
    if isinstance(route, ProbeFailure):
        return unknown(f"cannot tell which interface reaches the master: {route.detail}",
                       entities={"probe": "socket_route"})
    from doctor.launch.ifname import SocketRoute

    r = SocketRoute.from_fact(route)
    whence = str(route.get("whence") or "MASTER_ADDR")
    if not r.interface:
        return skip(f"no route to judge the socket interface by: {r.error}", evidence)
    host = facts.case.host
    facts_ev = [Evidence(f"{r.hostname} resolves to {', '.join(r.resolved) or 'nothing'}", label="getent ahosts"),
                Evidence(f"{r.master} ({whence}) via {r.interface} src {r.source}", label="ip route get")]
    missing = [v for v in VARIABLES if v not in own]
    data: dict[str, Any] = {"interface": r.interface, "host": host, "master": r.master, "missing": missing,
                            "file": cmd.site.file, "line": cmd.site.line}
    gloo = None if "GLOO_SOCKET_IFNAME" in own else r.problem()
    nccl = None if "NCCL_SOCKET_IFNAME" in own else r.nccl_problem()
    unset = " and ".join(missing)
    sets_no = f"neither {missing[0]} nor {missing[1]}" if len(missing) == 2 else f"no {missing[0]}"
    launch = ev(job, cmd.site, "launch")
    if gloo:
        return fail(f"{gloo}; the job sets {sets_no}" + (f"; also {nccl}" if nccl else ""),
                    [launch, *evidence, *facts_ev], "socket-ifname", entities={"host": host}, data=data)
    if nccl:
        return warn(f"{nccl}; the job sets no NCCL_SOCKET_IFNAME", [launch, *evidence, *facts_ev],
                    "socket-ifname", entities={"host": host}, data=data)
    return passed(f"without {unset} the libraries still pick {r.interface}, the interface of the route to "
                  f"{r.master}", [launch, *facts_ev], entities={"host": host})


manual_remedy(
    "socket-ifname", "Name the interface the ranks' sockets use (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME)",
    steps=(
        "In the job script, before the launch line, name the interface of the route to MASTER_ADDR "
        "(`ip route get $MASTER_ADDR` prints it after `dev`), e.g.:",
        "    export GLOO_SOCKET_IFNAME=ib0 NCCL_SOCKET_IFNAME=ib0",
        "Where nodes name it differently, pick it on each node inside the srun task:",
        "    srun bash -c 'export GLOO_SOCKET_IFNAME=$(ip -o route get $MASTER_ADDR | "
        "sed -n \"s/.* dev \\([^ ]*\\).*/\\1/p\"); exec python train.py'",
        "Or launch with `gpu-doctor launch`, which sets both per node from its route (`--socket-ifname`).",
        "Fixing the hostname instead (an /etc/hosts line with the node's real address, not 127.0.1.1) "
        "is the admins' part.",
    ),
)

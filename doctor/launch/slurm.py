"""Beyond one node: launch through Slurm's `srun`, one task per rank.

gpu-doctor never starts processes on other hosts itself. Inside an allocation
it builds one `srun` step; each task runs `python -m doctor.launch.srun_task`,
which maps SLURM_PROCID/SLURM_LOCALID/... to RANK/LOCAL_RANK/..., sets the
rank's own Score-P folder, warms CUDA up outside Score-P, then execs the same
per-rank command a single-node launch uses.

Shell equivalent (2 nodes x 4 ranks):
    srun --nodes=2 --ntasks=8 --ntasks-per-node=4 --kill-on-bad-exit=1 --label --unbuffered \\
         --export=ALL,MASTER_ADDR=node01,MASTER_PORT=29512 \\
         python -m doctor.launch.srun_task --warmup-python python --socket-ifname auto -- \\
         python -m scorep --cuda --thread=pthread train.py
"""

from __future__ import annotations

import ipaddress
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from doctor.launch import ifname
from doctor.launch.spec import LaunchSpec, experiment_base, rank_command, total_memory_to_set


@dataclass(frozen=True)
class Allocation:
    """The Slurm allocation this process runs in."""

    job_id: str
    nnodes: int
    nodelist: str
    hosts: tuple[str, ...]


def allocation_nodes(env: Mapping[str, str]) -> int:
    """Nodes of the allocation we are in (0 outside Slurm)."""
    if not env.get("SLURM_JOB_ID"):
        return 0
    for name in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return 1


def _expand_range(prefix: str, body: str, suffix: str) -> list[str]:
    out: list[str] = []
    for part in body.split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            width = len(lo)
            out.extend(f"{prefix}{n:0{width}d}{suffix}" for n in range(int(lo), int(hi) + 1))
        else:
            out.append(f"{prefix}{part}{suffix}")
    return out


def parse_nodelist(text: str) -> list[str]:
    """`node[01-03,07],gpu5` -> node01 node02 node03 node07 gpu5 (one bracket per name)."""
    hosts: list[str] = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)?", text.strip()):
        item = item.strip(",")
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", item)
        hosts.extend(_expand_range(*m.groups()) if m else [item] if item else [])
    return hosts


def expand_nodelist(text: str, env: Mapping[str, str] | None = None) -> list[str]:
    """Hostnames of a Slurm node list: `scontrol show hostnames` when there, else our parser."""
    scontrol = shutil.which("scontrol", path=(env or {}).get("PATH") if env else None)
    if scontrol:
        try:
            out = subprocess.run([scontrol, "show", "hostnames", text], capture_output=True,
                                 text=True, timeout=10, check=False)
            hosts = out.stdout.split()
            if out.returncode == 0 and hosts:
                return hosts
        except (OSError, subprocess.TimeoutExpired):
            pass
    return parse_nodelist(text)


def current_allocation(env: Mapping[str, str]) -> Allocation | None:
    nnodes = allocation_nodes(env)
    if nnodes == 0:
        return None
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    hosts = tuple(expand_nodelist(nodelist, env)) if nodelist else ()
    return Allocation(env.get("SLURM_JOB_ID", ""), nnodes, nodelist, hosts)


def _is_loopback(addr: str) -> bool:
    if addr.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def node_address(host: str, env: Mapping[str, str] | None = None) -> str:
    """Where the other nodes reach `host`: Slurm's NodeAddr for it, else its name.

    Slurm reaches its nodes at NodeAddr (which need not resolve from the node name);
    a loopback NodeAddr is only good on that one machine, so the name is used then.
    Shell equivalent: `scontrol show node HOST -o | grep -o 'NodeAddr=[^ ]*'`.
    """
    scontrol = shutil.which("scontrol", path=(env or {}).get("PATH") if env else None)
    if not scontrol:
        return host
    try:
        out = subprocess.run([scontrol, "show", "node", host, "-o"], capture_output=True, text=True,
                             timeout=10, check=False, env=dict(env) if env else None)
    except (OSError, subprocess.TimeoutExpired):
        return host
    m = re.search(r"\bNodeAddr=(\S+)", out.stdout)
    addr = m.group(1) if m and out.returncode == 0 else ""
    return addr if addr and not _is_loopback(addr) else host


def master_port_for(job_id: str) -> int:
    """A port every node agrees on without talking: derived from the job id."""
    digits = "".join(c for c in job_id if c.isdigit()) or "0"
    return 29500 + int(digits) % 2000


def srun_command(spec: LaunchSpec, master_addr: str, master_port: int,
                 srun: str = "srun", run_dir: Path | None = None) -> list[str]:
    """The one `srun` step that runs every rank of a multi-node launch."""
    nnodes = max(1, spec.nnodes)
    task = [sys.executable, "-m", "doctor.launch.srun_task"]
    if spec.rendezvous_timeout_s:
        task += ["--rendezvous-timeout", f"{spec.rendezvous_timeout_s:g}"]
    if spec.socket_ifname != ifname.OFF:
        task += ["--socket-ifname", spec.socket_ifname]
    if spec.warmup:
        task += ["--warmup-python", spec.python, "--warmup-budget", f"{spec.warmup_budget_s:g}"]
        if spec.cuda_required:
            task.append("--require-cuda")
    if spec.canary:   # the task sets the canary's variables itself: a PYTHONPATH may hold commas, --export not
        task += ["--canary", str(spec.canary), "--canary-timeout", f"{spec.canary_timeout_s:g}",
                 "--canary-dir", str(run_dir or spec.run_dir or spec.workdir)]
        if spec.canary_optimizer_state:
            task.append("--canary-optimizer-state")
    base = experiment_base(spec)
    if base is not None:  # started above the job folder: the ranks' Score-P folders go there, as locally
        task += ["--experiment-base", base]
    total = total_memory_to_set(spec, spec.base_env())
    memory = f",SCOREP_TOTAL_MEMORY={total}" if total else ""
    return [
        srun, f"--nodes={nnodes}", f"--ntasks={nnodes * spec.nproc}",
        f"--ntasks-per-node={spec.nproc}", "--distribution=block",
        # The launcher stops the other ranks after --grace itself (srun would at once).
        "--kill-on-bad-exit=0", "--label", "--unbuffered",
        f"--chdir={spec.workdir}",
        f"--export=ALL,MASTER_ADDR={master_addr},MASTER_PORT={master_port}{memory}",
        *task, "--", *rank_command(spec),
    ]


_LABEL = re.compile(r"^\s*(\d+): ?(.*)$", re.DOTALL)


def split_label(line: str) -> tuple[int | None, str]:
    """`srun --label` output `  3: text` -> (3, "text"); unlabelled -> (None, line)."""
    m = _LABEL.match(line)
    return (int(m.group(1)), m.group(2)) if m else (None, line)


_SIGNALS = {"Killed": -9, "Terminated": -15, "Segmentation fault": -11, "Aborted": -6, "Hangup": -1,
            "Interrupt": -2, "Bus error": -7}


_REPORT = re.compile(r"^srun: error: (\S+): tasks? ([\d,\-]+): (?:Exited with exit code (\d+)|(\w[\w ]*?))\s*$")


def _task_ids(text: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit():
            out.extend(range(int(lo), int(hi) + 1) if hi.isdigit() else [int(lo)])
    return tuple(out)


_NODE_FAILURE = re.compile(r"^srun: error: Node failure on (\S+)\s*$")


def node_failure(line: str) -> str | None:
    """`srun: error: Node failure on node2` (slurmctld lost that node's slurmd) -> "node2"."""
    m = _NODE_FAILURE.match(line.strip())
    return m.group(1) if m else None


def task_report(line: str) -> tuple[str, tuple[int, ...], int] | None:
    """`srun: error: node2: tasks 2-3: Killed` -> ("node2", (2, 3), -9);
    `srun: error: node1: task 0: Exited with exit code 1` -> ("node1", (0,), 1)."""
    m = _REPORT.match(line.strip())
    if not m:
        return None
    code = int(m.group(3)) if m.group(3) else _SIGNALS.get(m.group(4), -9)
    return m.group(1), _task_ids(m.group(2)), code

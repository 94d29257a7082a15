"""One Slurm task of a multi-node launch: map SLURM_* to the DDP variables, then exec.

Usage (built by `doctor.launch.slurm.srun_command`, not typed by people):

    python -m doctor.launch.srun_task [--warmup-python P [--warmup-budget S] [--require-cuda]] \\
        [--rendezvous-timeout S] [--socket-ifname auto|NAME] [--experiment-base DIR] -- python -m scorep --cuda train.py ...

With --socket-ifname the rank gets GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME (where the job
set neither itself): NAME, or with `auto` the interface of this node's route to MASTER_ADDR
(doctor.launch.ifname), said in one line in the rank's log.

Each rank's SCOREP_EXPERIMENT_DIRECTORY is `scorep_rank_N` in the task's working folder, or with
--experiment-base DIR (a launch started above the job folder) DIR/scorep_rank_N, as a local launch.

With --rendezvous-timeout the task stays as the rank's parent and watches, on its own
node, whether the rank joined the rendezvous at MASTER_ADDR:MASTER_PORT, saying so in
one marker line (doctor.launch.placement) that the launcher reads through srun's output;
otherwise the wrapped command replaces this process.

Exit codes: 2 when not inside an srun task or MASTER_ADDR/MASTER_PORT are
missing; 1 when the warm-up finds CUDA broken (or absent with --require-cuda);
otherwise the rank's own (a rank killed by signal N: this task dies of N too).
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from doctor.launch import ifname, placement, rendezvous
from doctor.launch.spec import experiment_dir

SYN_SENT_S = 2.0          # a connection attempt unanswered this long: a firewall drops it
# What each answer means (a firewall's DROP is silence, its REJECT a refusal, like a closed port).
SILENCE = "a firewall drops what goes to port {port}, or no route leads there"
REFUSED = "connection refused: a firewall rejects port {port} on the way, or nothing listens on it"
PROHIBITED = ("no route to host: a firewall rejects port {port} with host-prohibited (firewalld's default), "
              "or the address is not reachable from here")
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


class TaskError(Exception):
    pass


def tasks_on_node(tasks_per_node: str, node_id: int) -> int | None:
    """SLURM_TASKS_PER_NODE `2(x3),1` with node 3 -> 1."""
    counts: list[int] = []
    for part in tasks_per_node.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            return None
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    return counts[node_id] if 0 <= node_id < len(counts) else None


def task_env(env: Mapping[str, str], experiment_base: str | None = None) -> dict[str, str]:
    """The environment of the rank this Slurm task is (its Score-P folder under `experiment_base`, if given)."""
    try:
        rank = int(env["SLURM_PROCID"])
        local = int(env.get("SLURM_LOCALID", "0"))
        world = int(env.get("SLURM_NTASKS") or env["SLURM_NPROCS"])
        node = int(env.get("SLURM_NODEID", "0"))
    except (KeyError, ValueError) as exc:
        raise TaskError(f"not inside an srun task (SLURM_PROCID/SLURM_NTASKS missing or bad: {exc})") from None
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if not env.get(name):
            raise TaskError(f"{name} is not set (gpu-doctor launch sets it through srun --export)")
    local_world = tasks_on_node(env.get("SLURM_TASKS_PER_NODE", ""), node) \
        or int(env.get("SLURM_NTASKS_PER_NODE", "0") or 0) or 1
    out = dict(env)
    out.update({
        "RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(local_world), "GROUP_RANK": str(node), "NODE_RANK": str(node),
        "SCOREP_EXPERIMENT_DIRECTORY": (str(Path(experiment_base) / experiment_dir(rank)) if experiment_base
                                        else experiment_dir(rank)),
    })
    out.setdefault("PYTHONUNBUFFERED", "1")
    out.pop("SCOREP_PYTHON_BINDINGS_INITIALISED", None)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        print("srun_task: usage: srun_task [options] -- COMMAND...", file=sys.stderr)
        return 2
    cut = argv.index("--")
    p = argparse.ArgumentParser(prog="srun_task")
    p.add_argument("--warmup-python")
    p.add_argument("--warmup-budget", type=float, default=300.0)
    p.add_argument("--require-cuda", action="store_true")
    p.add_argument("--rendezvous-timeout", type=float, default=0.0)
    p.add_argument("--socket-ifname", default=ifname.OFF)
    p.add_argument("--experiment-base")
    p.add_argument("--canary", type=int, default=0)
    p.add_argument("--canary-timeout", type=float, default=60.0)
    p.add_argument("--canary-dir", default=".")
    p.add_argument("--canary-optimizer-state", action="store_true")
    args = p.parse_args(argv[:cut])
    command = argv[cut + 1:]
    if not command:
        print("srun_task: no command after --", file=sys.stderr)
        return 2
    try:
        env = task_env(os.environ, args.experiment_base)
    except TaskError as exc:
        print(f"srun_task: error: {exc}", file=sys.stderr)
        return 2
    if args.canary:
        from doctor.canary.launch import rank_env as canary_env

        env.update(canary_env(args.canary, args.canary_timeout, Path(args.canary_dir), env,
                              args.canary_optimizer_state))
    host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    sockets = ifname.choose(env, args.socket_ifname, f"rank {env['RANK']} on {host}")
    env.update(sockets.env)
    if sockets.line:
        say(sockets.line)
    if args.warmup_python:
        from doctor.launch.warmup import run_warmup

        res = run_warmup(args.warmup_python, env, budget_s=args.warmup_budget)
        print(f"gpu-doctor warm-up on {host}: {res.describe()}", file=sys.stderr, flush=True)
        if not res.ok and (not res.no_cuda or args.require_cuda):
            return 1
    if args.rendezvous_timeout > 0 and rendezvous.available():
        return supervise(command, env, args.rendezvous_timeout)
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"srun_task: cannot run {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    return 0  # not reached


def reachable(addr: str, port: int, timeout: float = 3.0) -> tuple[bool, str]:
    """Can this node open a TCP connection to addr:port? (and why not)."""
    try:
        with socket.create_connection((addr, port), timeout=timeout):
            return True, ""
    except TimeoutError:
        return False, f"connect timed out after {timeout:g} s: {SILENCE.format(port=port)}"
    except ConnectionRefusedError:
        return False, REFUSED.format(port=port)
    except OSError as exc:
        if exc.errno == errno.EHOSTUNREACH:
            return False, PROHIBITED.format(port=port)
        return False, f"connect: {exc.strerror or exc}"


def is_local(addr: str) -> bool:
    """Is addr one of this node's own addresses?"""
    try:
        with socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET) as s:
            s.bind((addr, 0))
        return True
    except OSError:
        return False


def supervise(command: list[str], env: dict[str, str], timeout: float) -> int:
    """Run the rank as a child; say when it joins the rendezvous, or that it cannot reach it."""
    rank, node = int(env["RANK"]), os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    addr, port = env["MASTER_ADDR"], int(env["MASTER_PORT"])
    master = f"{addr}:{port}"
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as exc:
        print(f"srun_task: cannot run {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    for sig in FORWARDED:
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    probe_every = min(30.0, max(5.0, timeout / 2))
    # The master's own node needs no probe (and its store may not be up yet).
    next_probe = float("inf") if is_local(addr) else time.monotonic() + probe_every
    syn_since: float | None = None
    said: bool | None = None          # the last reachability we reported
    joined = False
    while child.poll() is None:
        try:
            child.wait(timeout=0.25)
            break
        except subprocess.TimeoutExpired:
            pass
        if joined:
            continue
        now = time.monotonic()
        if rendezvous.joined({rank: child.pid}, port):
            joined = True
            say(placement.joined_line(rank, node, master))
            continue
        if rendezvous.connecting(child.pid, port):
            syn_since = syn_since or now
            if now - syn_since >= SYN_SENT_S and said is not False:
                said = False
                say(placement.reach_line(rank, node, master, False, "no answer to the connection attempt: "
                                             + SILENCE.format(port=port)))
        else:
            syn_since = None
        if now >= next_probe:
            next_probe = now + probe_every
            ok, why = reachable(addr, port)
            if ok != said and not (ok and syn_since):
                said = ok
                say(placement.reach_line(rank, node, master, ok, why))
    return exit_like(child.returncode)


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def exit_like(code: int) -> int:
    """The rank's exit status as ours; for a signal, die of it, so srun reports it as such."""
    if code >= 0:
        return code
    if -code not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
    return 128 - code


if __name__ == "__main__":
    sys.exit(main())

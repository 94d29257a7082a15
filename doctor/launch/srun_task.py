"""One Slurm task of a multi-node launch: map SLURM_* to the DDP variables, then exec.

Usage (built by `doctor.launch.slurm.srun_command`, not typed by people):

    python -m doctor.launch.srun_task [--warmup-python P [--warmup-budget S] [--require-cuda]] \\
        -- python -m scorep --cuda train.py ...

Exit codes: 2 when not inside an srun task or MASTER_ADDR/MASTER_PORT are
missing; 1 when the warm-up finds CUDA broken (or absent with --require-cuda);
otherwise the wrapped command replaces this process.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Mapping, Sequence

from doctor.launch.spec import experiment_dir


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


def task_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment of the rank this Slurm task is."""
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
        "SCOREP_EXPERIMENT_DIRECTORY": experiment_dir(rank),
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
    args = p.parse_args(argv[:cut])
    command = argv[cut + 1:]
    if not command:
        print("srun_task: no command after --", file=sys.stderr)
        return 2
    try:
        env = task_env(os.environ)
    except TaskError as exc:
        print(f"srun_task: error: {exc}", file=sys.stderr)
        return 2
    if args.warmup_python:
        from doctor.launch.warmup import run_warmup

        res = run_warmup(args.warmup_python, env, budget_s=args.warmup_budget)
        host = os.environ.get("SLURMD_NODENAME", "?")
        print(f"gpu-doctor warm-up on {host}: {res.describe()}", file=sys.stderr, flush=True)
        if not res.ok and (not res.no_cuda or args.require_cuda):
            return 1
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"srun_task: cannot run {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())

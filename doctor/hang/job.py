"""The sampler on every node of a Slurm job: `srun --overlap --jobid JOBID` runs this module once
per node; each finds the job's ranks there, samples them twice and prints one JSON line.

    srun --overlap --jobid 1234 --nodes 3 --ntasks 3 --ntasks-per-node 1 \\
        python -m doctor.hang.job --node 1234

A rank on a node is a Python process of the job (SLURM_JOB_ID in its environment) with RANK
(torchrun, gpu-doctor launch) or else SLURM_PROCID (one srun task per rank); of a rank's
processes the outermost one counts (not its data loader workers), never gpu-doctor's own.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from doctor.hang.groups import RankStack
from doctor.hang.sampler import GAP_S, sample_ranks
from doctor.hang.stacks import Sample, sample_from_json, sample_to_json
from doctor.isolate import die_with_parent

SAMPLER_MARK = "GPU_DOCTOR_HANG_SAMPLER"
OURS = (b"doctor.hang", b"doctor.launch.srun_task", b"doctor.launch.cli", b"-m\0doctor\0launch")
SRUN_TIMEOUT_S = 90.0


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def job_ranks(jobid: str, node: str = "") -> dict[int, int]:
    """rank -> pid of the job's ranks on this node (`node`: this node's SLURMD_NODENAME; a process
    whose task Slurm started on another node is not ours, even where /proc shows it)."""
    candidates: dict[int, int] = {}   # pid -> rank
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        exe = Path(argv.split(b"\0", 1)[0].decode("utf-8", "replace")).name
        if not exe.startswith("python") or any(mark in argv for mark in OURS):
            continue
        env = _environ(pid)
        if env.get("SLURM_JOB_ID") != jobid or SAMPLER_MARK in env:
            continue
        if node and env.get("SLURMD_NODENAME", node) != node:
            continue
        rank = env.get("RANK") or env.get("SLURM_PROCID")
        if rank is not None and rank.isdigit():
            candidates[pid] = int(rank)
    return {rank: pid for pid, rank in sorted(candidates.items())
            if candidates.get(_ppid(pid)) != rank}


def node_main(jobid: str, gap_s: float) -> int:
    """On one node: sample this node's ranks, print one JSON line."""
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    pids = job_ranks(jobid, os.environ.get("SLURMD_NODENAME", ""))
    stacks = sample_ranks(pids, gap_s, nodes={r: node for r in pids}) if pids else []
    print(json.dumps({"node": node, "ranks": [stack_to_json(s) for s in stacks]}), flush=True)
    return 0


def stack_to_json(rs: RankStack) -> dict[str, Any]:
    return {"rank": rs.rank, "advanced": rs.advanced, "first": sample_to_json(rs.first),
            "second": sample_to_json(rs.second), "native": sample_to_json(rs.native) if rs.native else None}


def stack_from_json(doc: Mapping[str, Any], step: int | None = None) -> RankStack:
    native = doc.get("native")
    return RankStack(int(doc["rank"]), sample_from_json(doc["first"]), sample_from_json(doc["second"]),
                     bool(doc.get("advanced")), sample_from_json(native) if native else None, step)


class JobError(Exception):
    """The job cannot be sampled: the message says why (one line)."""


def job_nodes(jobid: str, env: Mapping[str, str]) -> int:
    """How many nodes the job holds (`scontrol show job -o JOBID`: NumNodes=N); running jobs only."""
    try:
        out = subprocess.run(["scontrol", "show", "job", "-o", jobid], capture_output=True, text=True,
                             timeout=30, env=dict(env), preexec_fn=die_with_parent())
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JobError(f"cannot ask Slurm about job {jobid}: {exc}") from None
    if out.returncode != 0:
        raise JobError(f"Slurm does not know job {jobid}: {' '.join(out.stderr.split())[:200]}")
    fields = dict(f.split("=", 1) for f in out.stdout.split() if "=" in f)
    if fields.get("JobState") != "RUNNING":
        raise JobError(f"job {jobid} is {fields.get('JobState', 'not running')}: only a running job has stacks")
    try:
        return int(fields.get("NumNodes", "1").split("-")[0])
    except ValueError:
        return 1


def sample_job(jobid: str, env: Mapping[str, str] | None = None, gap_s: float = GAP_S,
               steps: Mapping[int, int | None] | None = None) -> list[RankStack]:
    """Every rank of a running Slurm job, sampled on its own node (raises JobError)."""
    env = dict(os.environ if env is None else env)
    nodes = job_nodes(jobid, env)
    argv = ["srun", "--overlap", f"--jobid={jobid}", f"--nodes={nodes}", f"--ntasks={nodes}",
            "--ntasks-per-node=1", "--kill-on-bad-exit=0", "--quiet", "--label",
            sys.executable, "-m", "doctor.hang.job", "--node", jobid, "--gap", str(gap_s)]
    run_env = {**env, SAMPLER_MARK: "1"}
    for name in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEPID"):   # our own allocation's
        run_env.pop(name, None)
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=SRUN_TIMEOUT_S, env=run_env,
                             preexec_fn=die_with_parent(), start_new_session=True)
    except OSError as exc:
        raise JobError(f"cannot run srun: {exc.strerror or exc}") from None
    except subprocess.TimeoutExpired:
        raise JobError(f"srun --overlap --jobid {jobid} did not finish within {SRUN_TIMEOUT_S:g} s") from None
    stacks: list[RankStack] = []
    for doc in task_documents(out.stdout):
        stacks += [stack_from_json(r, (steps or {}).get(int(r["rank"]))) for r in doc.get("ranks", [])
                   if int(r["rank"]) not in {s.rank for s in stacks}]
    if not stacks:
        why = " ".join(out.stderr.split())[:300] or "no rank of the job found on its nodes"
        raise JobError(f"no stacks from job {jobid}'s nodes (srun exit {out.returncode}): {why}")
    return sorted(stacks, key=lambda s: s.rank)


def task_documents(stdout: str) -> list[dict[str, Any]]:
    """Each task's JSON document from `srun --label` output: srun interleaves the tasks' long lines
    in pieces, each piece labelled `N: `; a task's pieces, in order, make its document."""
    pieces: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        label, sep, rest = line.partition(": ")
        if sep and label.strip().isdigit():
            pieces.setdefault(label.strip(), []).append(rest)
    docs = []
    decoder = json.JSONDecoder()
    for label in sorted(pieces, key=int):
        text, at = "".join(pieces[label]), 0
        while at < len(text):
            try:
                doc, at = decoder.raw_decode(text, at)
            except ValueError:
                break
            if isinstance(doc, dict):
                docs.append(doc)
            while at < len(text) and text[at].isspace():
                at += 1
    return docs


def collector(jobid: str, env: Mapping[str, str],
              steps: Callable[[], Mapping[int, int | None]]) -> Callable[[dict[int, int]], list[RankStack]]:
    """For the launch's stall watch under srun: sample the ranks where they run."""
    def collect(_pids: dict[int, int]) -> list[RankStack]:
        try:
            return sample_job(jobid, env, steps=steps())
        except JobError as exc:
            gone = Sample(-1, 0, 0.0, reason=str(exc))
            return [RankStack(r, gone, gone) for r in sorted(_pids)]
    return collect


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m doctor.hang.job")
    p.add_argument("--node", metavar="JOBID", required=True, help="sample this node's ranks of JOBID")
    p.add_argument("--gap", type=float, default=GAP_S)
    args = p.parse_args(argv)
    return node_main(args.node, args.gap)


if __name__ == "__main__":
    sys.exit(main())

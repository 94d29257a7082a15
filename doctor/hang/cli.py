"""`gpu-doctor hang`: the hang verdict for a job that runs now.

    gpu-doctor hang RUN_DIR          # a gpu-doctor launch (its pids.json); writes RUN_DIR/hang.json
    gpu-doctor hang --pid 4242 4243  # any processes: rank i is the i-th PID
    gpu-doctor hang --job 1234       # a Slurm job: the sampler runs on every node (srun --overlap)
    gpu-doctor hang ... --json       # hang.json's document on stdout

Exit codes: 0 a verdict (every sampled rank named, even when some could not be sampled);
1 no rank could be sampled; 2 usage error (nothing to sample, a bad folder, Slurm refused).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from doctor.arguments import Parser, UsageError, positive_int
from doctor.hang import verdict as verdicts
from doctor.hang.groups import RankStack
from doctor.hang.monitor import PIDS_JSON


def build_parser() -> Parser:
    p = Parser(prog="gpu-doctor hang", description=(
        "Sample every rank's Python stack twice (py-spy), group the ranks by stack, tell stuck from moving, "
        "and name the rank that diverged and the collective the others wait in."),
        usage="gpu-doctor hang [RUN_DIR | --pid PID... | --job JOBID] [--json]")
    p.add_argument("run_dir", nargs="?", metavar="RUN_DIR",
                   help="a running gpu-doctor launch's run folder (default: the newest under .gpu-doctor/runs)")
    p.add_argument("--pid", type=positive_int, nargs="+", metavar="PID", help="processes to sample; rank i is the i-th")
    p.add_argument("--job", metavar="JOBID", help="a running Slurm job: sample its ranks on every node")
    p.add_argument("--json", action="store_true", help="print hang.json's document instead of the text")
    return p


def newest_run(cwd: Path) -> Path | None:
    runs = cwd / ".gpu-doctor" / "runs"
    try:
        found = sorted((d for d in runs.iterdir() if (d / PIDS_JSON).is_file()), key=lambda d: d.name)
    except OSError:
        return None
    return found[-1] if found else None


def run_pids(run_dir: Path) -> tuple[dict[int, int], dict[int, str], bool]:
    path = run_dir / PIDS_JSON
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        pids = {int(r): int(p) for r, p in doc["ranks"].items()}
        nodes = {int(r): str(n) for r, n in doc.get("nodes", {}).items()}
    except FileNotFoundError:
        raise UsageError(f"{path}: not found: {run_dir} is not a gpu-doctor launch's run folder "
                         "(or the launch has not started its ranks yet)") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"{path}: cannot read the ranks' pids: {exc}") from None
    return pids, nodes, bool(doc.get("srun"))


def collect(args: argparse.Namespace, cwd: Path) -> tuple[list[RankStack], str, Path | None]:
    from doctor.hang.job import JobError, sample_job
    from doctor.hang.sampler import sample_ranks

    job, pid_list, run_dir = args.job, args.pid, args.run_dir
    if sum(x is not None for x in (job, pid_list, run_dir)) > 1:
        raise UsageError("give one of RUN_DIR, --pid or --job")
    if job is not None:
        if not job.replace("_", "").isdigit():
            raise UsageError(f"--job {job!r} is not a Slurm job ID")
        try:
            return sample_job(job), f"job {job}", None
        except JobError as exc:
            raise UsageError(str(exc)) from None
    if pid_list:
        return sample_ranks(dict(enumerate(pid_list))), "pids", None
    folder = Path(run_dir) if run_dir else newest_run(cwd)
    if folder is None:
        raise UsageError("nothing to sample: give RUN_DIR, --pid PID... or --job JOBID "
                         f"(no gpu-doctor launch under {cwd / '.gpu-doctor' / 'runs'})")
    if not folder.is_dir():
        raise UsageError(f"{folder}: not a folder")
    pids, nodes, srun = run_pids(folder)
    if srun:
        raise UsageError(f"{folder}: this launch runs its ranks through srun on other nodes: use "
                         "gpu-doctor hang --job JOBID (squeue shows the job's ID)")
    return sample_ranks(pids, nodes=nodes), "launch", folder


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))
    stacks, source, folder = collect(args, Path.cwd())
    verdict = verdicts.judge(stacks, source)
    if folder is not None:
        from doctor.hang.flight import read_run

        fr = read_run(folder)
        if fr is not None:
            verdict = verdicts.with_flight_recorder(verdict, fr)
        try:
            verdicts.write(folder, verdict, stacks)
        except OSError as exc:
            print(f"gpu-doctor: cannot write {folder / verdicts.HANG_JSON}: {exc.strerror or exc}", file=sys.stderr)
    if args.json:
        print(json.dumps(verdict.to_json(), indent=2))
    else:
        print(verdict.verdict)
        for line in verdicts.group_lines(verdict.groups):
            print(f"  {line}")
        if verdict.flight_recorder:
            print(f"  Flight Recorder: {verdict.flight_recorder.get('summary')}")
        if folder is not None:
            print(f"saved {folder / verdicts.HANG_JSON} and the raw stacks in {folder / verdicts.STACKS_DIR}")
    return 0 if any(not g.reason for g in verdict.groups) else 1

"""`gpu-doctor launch`: run every rank yourself, each under its own Score-P, and watch it.

    gpu-doctor launch --nproc 4 --instrument scorep --scorep-flags "--cuda --thread=pthread" \\
        -- train.py --max_steps 50

Exit codes: 0 every rank finished with 0; otherwise the first failing rank's
code (a signal N as 128+N); 124 rendezvous timeout; 3 stalled with
`--stall-action stop` (hang.json in the run folder says where); 128+N when gpu-doctor got
signal N (130 Ctrl+C, 143 SIGTERM, 129 SIGHUP); 1 CUDA warm-up failed (nothing
launched); 2 usage or setup error (e.g. Score-P missing), nothing launched;
3 with --canary: the ranks' parameters differed (unless --canary-action warn).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from doctor.arguments import Parser, UsageError, non_negative_float, positive_float, positive_int
from doctor.canary.launch import ACTIONS, DEFAULT_TIMEOUT_S
from doctor.case import Case
from doctor.launch import slurm
from doctor.launch.bounds import check_nproc, check_run_dir, host_address, port_number
from doctor.launch.engine import Launcher
from doctor.launch.events import RunSummary
from doctor.launch.scorep import ScorepFound, cuda_support, find_scorep
from doctor.launch.spec import DEFAULT_SCOREP_FLAGS, LaunchSpec, memory_warning, total_memory_to_set
from doctor.launch.view import LiveView, PlainView, summary_lines
from doctor.sanitize import shown
from doctor.wording import count

LAUNCHER_SCRIPTS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")


def build_parser() -> Parser:
    p = Parser(prog="gpu-doctor launch", description=(
        "Launch one process per rank (each under its own `python -m scorep` when instrumented), "
        "after a CUDA warm-up outside Score-P, and show their status live."),
        usage="gpu-doctor launch [options] -- script.py [args...]")
    p.add_argument("--nproc", type=positive_int, metavar="N",
                   help="ranks per node (default: the GPUs Slurm or CUDA_VISIBLE_DEVICES give, else 1)")
    p.add_argument("--local", action="store_true",
                   help="inside a Slurm allocation, start the ranks here instead of one srun task per rank")
    p.add_argument("--nnodes", type=positive_int, metavar="N",
                   help="nodes (more than 1 needs a Slurm allocation; default: the allocation's nodes)")
    p.add_argument("--instrument", choices=("scorep", "none"), default="none",
                   help="run each rank under `python -m scorep` (default: none)")
    p.add_argument("--scorep-flags", default=" ".join(DEFAULT_SCOREP_FLAGS), metavar="FLAGS",
                   help=f"flags for python -m scorep (default: {' '.join(DEFAULT_SCOREP_FLAGS)!r})")
    p.add_argument("--python", metavar="P", help="the job's interpreter (default: the current one)")
    p.add_argument("--workdir", metavar="D", default=".", help="the folder the ranks run in (default: .)")
    p.add_argument("--run-dir", metavar="D", help="where logs go (default: .gpu-doctor/runs/TIME in the script's folder)")
    p.add_argument("--no-warmup", action="store_true", help="skip the CUDA warm-up")
    p.add_argument("--warmup-budget", type=positive_float, default=300.0, metavar="S",
                   help="how long the warm-up may retry (default 300)")
    p.add_argument("--grace", type=non_negative_float, default=5.0, metavar="S",
                   help="after a rank fails, how long the others may finish (default 5)")
    p.add_argument("--kill-after", type=non_negative_float, default=5.0, metavar="S",
                   help="after SIGTERM, when a rank gets SIGKILL (default 5)")
    p.add_argument("--rendezvous-timeout", type=non_negative_float, default=300.0, metavar="S",
                   help="after the first rank joins the rendezvous, how long the others may take; 0 = off")
    p.add_argument("--master-addr", type=host_address, default="127.0.0.1", metavar="A")
    p.add_argument("--master-port", type=port_number, metavar="P", help="default: a free port")
    p.add_argument("--socket-ifname", type=socket_ifname, default="auto", metavar="IF",
                   help="across nodes: GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME for the ranks that do not "
                        "set them: auto (each node's route to MASTER_ADDR, the default), off, or a name")
    p.add_argument("--canary", type=positive_int, metavar="K",
                   help="every K optimizer steps, check that the DDP replicas' parameters are bit-identical "
                        "across ranks (off by default; canary.json in the run folder)")
    p.add_argument("--canary-action", choices=ACTIONS, default="fail",
                   help="when the replicas differ: fail (finish, then exit 3; the default), stop (stop every "
                        "rank at once, exit 3) or warn (report only)")
    p.add_argument("--canary-timeout", type=positive_float, default=DEFAULT_TIMEOUT_S, metavar="S",
                   help=f"how long a check waits for a late rank before naming it (default {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--canary-optimizer-state", action="store_true",
                   help="the canary compares the optimizer's state too (Adam's exp_avg...), not only the parameters")
    p.add_argument("--stall", type=non_negative_float, default=300.0, metavar="S",
                   help="when no rank advanced for S seconds (no output, no CPU), sample every rank's stack and "
                        "write hang.json in the run folder (default 300; 0 = off)")
    p.add_argument("--stall-action", choices=("wait", "stop"), default="wait",
                   help="after the stall verdict: let the ranks go on (wait, the default) or stop every rank "
                        "and exit 3 (stop)")
    p.add_argument("--flight-recorder", action="store_true",
                   help="turn torch's Flight Recorder on in every rank (TORCH_FR_BUFFER_SIZE, dump on NCCL "
                        "timeout into the run folder); off by default")
    p.add_argument("--plain", action="store_true", help="plain line output even on a terminal")
    p.add_argument("--quiet", "-q", action="store_true", help="do not echo rank output (logs keep it)")
    return p


def socket_ifname(text: str) -> str:
    """An interface name as gloo and NCCL take it (`eth0`, NCCL's `^docker,lo` / `=eth0` too), or auto/off."""
    if not text or len(text) > 256 or any(c.isspace() or c in "/'\"$`;" for c in text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an interface name (auto, off, or e.g. eth0)")
    return text


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    for i, arg in enumerate(argv):   # `launch [opts] script.py args`: the first .py ends the options
        if arg.endswith(".py") and not arg.startswith("-"):
            return argv[:i], argv[i:]
    return argv, []


def join_flag_values(opts: list[str]) -> list[str]:
    """`--scorep-flags --cuda` -> `--scorep-flags=--cuda` (argparse takes `--cuda` for an option)."""
    out: list[str] = []
    i = 0
    while i < len(opts):
        if opts[i] == "--scorep-flags" and i + 1 < len(opts):
            out.append(f"--scorep-flags={opts[i + 1]}")
            i += 2
            continue
        out.append(opts[i])
        i += 1
    return out


def scorep_flags(text: str) -> tuple[str, ...]:
    try:
        flags = tuple(shlex.split(text))
    except ValueError as exc:
        raise UsageError(f"--scorep-flags {text!r}: {exc}") from None
    if "--" in flags:
        raise UsageError("--scorep-flags must not contain `--`: python -m scorep passes it to "
                         "scorep-config, which fails with \"Unknown option: '--'\" (SCP005)")
    return flags


def default_nproc(env: dict[str, str]) -> int:
    """Ranks on this node: Slurm's tasks on this node, else the GPUs the job was given, else 1."""
    from doctor.launch.srun_task import tasks_on_node

    node = env.get("SLURM_NODEID", "0")
    tasks = tasks_on_node(env.get("SLURM_TASKS_PER_NODE", ""), int(node) if node.isdigit() else 0)
    if tasks:
        return tasks
    value = env.get("SLURM_NTASKS_PER_NODE", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    return Case(env=env).gpus_expected or 1


def inside_step(env: dict[str, str]) -> bool:
    """Already inside an srun task (not the batch script): its ranks must not srun again."""
    return env.get("SLURM_STEP_ID", "") not in ("", "batch", "extern", "4294967294", "4294967295")


def build_spec(args: argparse.Namespace, command: list[str], env: dict[str, str]) -> LaunchSpec:
    if not command:
        raise UsageError("nothing to launch: give the training script after `--` "
                         "(gpu-doctor launch --nproc 2 -- train.py ...)")
    script, script_args = command[0], tuple(command[1:])
    if script in ("-m", "-c"):
        raise UsageError(f"`{script}` launches are not supported: pass the training script's file "
                         "(each rank runs `python [-m scorep ...] FILE args`)")
    if Path(script).name in LAUNCHER_SCRIPTS or any(a in LAUNCHER_SCRIPTS for a in command[:3]):
        raise UsageError(f"{script!r} is a launcher: gpu-doctor launch starts every rank itself; pass the "
                         "training script (wrapping torchrun measures only its agent, LNC001)")
    workdir = Path(args.workdir)
    if not workdir.is_dir():
        raise UsageError(f"--workdir {args.workdir!r} is not a folder")
    workdir = workdir.resolve()
    if not (workdir / script).is_file():
        raise UsageError(f"script {script!r} not found in {workdir}")
    python = args.python or sys.executable
    if args.python and not (shutil.which(python, path=env.get("PATH")) or Path(python).is_file()):
        raise UsageError(f"--python {python!r} not found")
    nproc = args.nproc or default_nproc(env)
    check_nproc(nproc, env)
    check_run_dir(args.run_dir)
    nnodes, hosts = nodes(args, env)
    return LaunchSpec(
        script=script, args=script_args, nproc=nproc, python=python, workdir=workdir,
        instrument=args.instrument, scorep_flags=scorep_flags(args.scorep_flags), env=env,
        master_addr=args.master_addr, master_port=args.master_port, warmup=not args.no_warmup,
        warmup_budget_s=args.warmup_budget, grace_s=args.grace, kill_after_s=args.kill_after,
        rendezvous_timeout_s=args.rendezvous_timeout or None,
        run_dir=Path(args.run_dir).resolve() if args.run_dir else None, nnodes=nnodes,
        slurm_hosts=hosts, socket_ifname=args.socket_ifname, canary=args.canary or 0,
        canary_action=args.canary_action, canary_timeout_s=args.canary_timeout,
        canary_optimizer_state=args.canary_optimizer_state, stall_s=args.stall,
        stall_action=args.stall_action, flight_recorder=args.flight_recorder)


def nodes(args: argparse.Namespace, env: dict[str, str]) -> tuple[int, tuple[str, ...]]:
    """(nodes, hosts for srun or ()): one node runs locally; more need a Slurm allocation."""
    alloc_nodes = slurm.allocation_nodes(env)
    wanted = args.nnodes or (alloc_nodes if alloc_nodes > 1 else 1)
    tasks = env.get("SLURM_NTASKS", "")
    several_tasks = tasks.isdigit() and int(tasks) > 1 and alloc_nodes >= 1 and not inside_step(env)
    if wanted == 1 and (args.local or not several_tasks):
        return 1, ()
    if alloc_nodes == 0:
        raise UsageError(f"--nnodes {wanted}: more than one node needs a Slurm allocation "
                         f"(salloc/sbatch -N {wanted}); gpu-doctor does not start ranks on other hosts itself")
    if wanted > alloc_nodes:
        raise UsageError(f"--nnodes {wanted}, but this Slurm allocation has {count(alloc_nodes, 'node')}")
    if not shutil.which("srun", path=env.get("PATH")):
        raise UsageError("a multi-node launch runs through `srun`, which is not on PATH")
    alloc = slurm.current_allocation(env)
    hosts = alloc.hosts if alloc else ()
    if not hosts:
        raise UsageError("cannot tell the allocation's nodes: SLURM_JOB_NODELIST is empty")
    return wanted, hosts


def install_signals(launcher: Launcher) -> dict[int, Any]:
    previous: dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        previous[sig] = signal.signal(sig, lambda signum, _frame: launcher.signal_stop(signum))
    return previous


def wait_for(launcher: Launcher) -> RunSummary:
    while True:
        summary = launcher.wait(0.2)   # short waits so signal handlers run promptly
        if summary is not None:
            return summary


def run_launch(spec: LaunchSpec, plain: bool, quiet: bool) -> int:
    started_wall = time.time()
    launcher = Launcher(spec)
    plain_view = PlainView(quiet=quiet)
    use_live = not plain and sys.stderr.isatty() and os.environ.get("TERM", "") not in ("", "dumb")
    previous = install_signals(launcher)
    try:
        if use_live:
            from doctor.launch.gpus import GpuMonitor

            gpus = GpuMonitor().start()
            live = LiveView(launcher.statuses, gpus.snapshot, "starting")
            launcher.add_sink(live)
            with live:
                launcher.start()
                summary = wait_for(launcher)
            gpus.stop()
        else:
            launcher.add_sink(plain_view)
            launcher.start()
            summary = wait_for(launcher)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    for line in summary_lines(summary):
        plain_view.say(line)
    if spec.instrumented and summary.ranks and any(r.pid for r in summary.ranks):
        from doctor.launch.verify import verify

        check = verify(spec, summary, started_wall)
        for problem in check.problems():
            plain_view.say(f"  {problem}")
        if check.unavailable:
            plain_view.say(f"  trace checks not in this build: {', '.join(check.unavailable)}")
        plain_view.say(check.verdict_line())
    return summary.exit_code


def without_unsupported_cuda(spec: LaunchSpec, found: ScorepFound, env: dict[str, str],
                             explicit: bool) -> LaunchSpec:
    """`--cuda` on a Score-P built without CUDA ends every rank at once ("Unsupported feature 'cuda'
    cannot be enabled by '--cuda'", SCP001): drop it from the default flags, refuse it when asked for."""
    if "--cuda" not in spec.scorep_flags or found.scorep_config is None:
        return spec
    if cuda_support(found.scorep_config, env) is not False:
        return spec
    where = f"Score-P at {found.scorep_config} was built without CUDA support (scorep-info config-summary)"
    if explicit:
        raise UsageError(f"--scorep-flags has --cuda, but {where}: every rank would stop with \"Unsupported "
                         "feature 'cuda' cannot be enabled by '--cuda'\" (SCP001); drop --cuda or load a "
                         "Score-P with CUDA support")
    print(shown(f"gpu-doctor: {where}: measuring without --cuda"), file=sys.stderr, flush=True)
    return dataclasses.replace(spec, scorep_flags=tuple(f for f in spec.scorep_flags if f != "--cuda"))


def main(argv: Sequence[str]) -> int:
    opts, command = split_command(list(argv))
    args = build_parser().parse_args(join_flag_values(opts))
    env = dict(os.environ)
    spec = build_spec(args, command, env)
    if spec.instrumented:
        found = find_scorep(spec.python, env)
        if not found.ok:
            raise UsageError(found.problem(spec.python))
        spec = without_unsupported_cuda(spec, found, env, explicit=any(o.startswith("--scorep-flags") for o in opts))
        warning = memory_warning(spec, spec.base_env())
        if warning:
            print(shown(f"gpu-doctor: warning: {warning}"), file=sys.stderr, flush=True)
        elif total_memory_to_set(spec, spec.base_env()):
            print(f"gpu-doctor: SCOREP_TOTAL_MEMORY={total_memory_to_set(spec, spec.base_env())} for each rank "
                  "(Score-P's default 16000k cannot hold the Python instrumenter's trace of `import torch`)",
                  file=sys.stderr, flush=True)
    return run_launch(spec, args.plain, args.quiet)

"""Fixtures for the launcher tests: a tiny gloo DDP job, the fake Score-P, process checks."""

from __future__ import annotations

import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FAKE_SCOREP_PATH = TESTS / "fake_scorep"
PYTHON = sys.executable
# What torch 2.13's gloo/TCPStore C++ teardown prints when it aborts a rank at interpreter exit
# (status 134, ~1 run in 10-20, after the training finished): test jobs skip that teardown with
# os._exit where nothing writes at exit, and run once more where something must (Score-P).
TEARDOWN_ABORT = "terminate called without an active exception"

# A real DDP job on CPU (gloo). Knobs make it fail, hang, idle, spam or fork.
DDP_JOB = r'''
import argparse, os, subprocess, sys, threading
p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=3)
p.add_argument("--fail-rank", type=int, default=-1)
p.add_argument("--others-wait", action="store_true", help="non-failing ranks idle outside collectives")
p.add_argument("--hang-before-init", type=int, default=-1)
p.add_argument("--idle", action="store_true", help="every rank blocks forever after the rendezvous")
p.add_argument("--grandchild", action="store_true", help="every rank starts a `sleep` child")
p.add_argument("--spam-mb", type=int, default=0, help="rank 0 prints this many MB first")
p.add_argument("--line-kb", type=int, default=1024)
a = p.parse_args()
rank = int(os.environ["RANK"])
if a.grandchild:
    child = subprocess.Popen(["sleep", "600"])
    print(f"grandchild pid {child.pid}", flush=True)
if rank == a.hang_before_init:
    print("rank %d: not joining the rendezvous" % rank, flush=True)
    threading.Event().wait()
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
print(f"rank {rank} joined a world of {dist.get_world_size()}", flush=True)
if a.idle:
    print("idle", flush=True)
    threading.Event().wait()
if a.spam_mb and rank == 0:
    line = "x" * (a.line_kb * 1024 - 1) + "\n"
    for _ in range(a.spam_mb * 1024 // a.line_kb):
        sys.stdout.write(line)
    sys.stdout.flush()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1, a.steps + 1):
    if rank == a.fail_rank:
        raise RuntimeError(f"boom on rank {rank} at step {step}")
    if a.fail_rank >= 0 and a.others_wait:
        print(f"rank {rank} waiting", flush=True)
        threading.Event().wait()
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {step}/{a.steps} loss {loss.item():.4f}", flush=True)
print({"loss": round(loss.item(), 4), "epoch": 1.0}, flush=True)
dist.destroy_process_group()
print(f"rank {rank} done", flush=True)
# torch 2.13's gloo/TCPStore teardown sometimes aborts at interpreter exit ("terminate called
# without an active exception", ~1 run in 10, with a plain bash loop too): skip the C++ teardown.
os._exit(0)
'''

SCORE_CONFIG = "#!/bin/sh\necho 'fake scorep-config' \"$@\"\n"


def write_job(folder: Path, text: str = DDP_JOB, name: str = "job.py") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def fake_scorep_env(tmp: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment where `python -m scorep` is the stand-in and scorep-config is on PATH.

    For the launcher's own behaviour only (see tests/fake_scorep/scorep/__main__.py for where and
    why); what Score-P itself does is tested against real Score-P in tests/test_scorep_real.py."""
    env = dict(os.environ if base is None else base)
    bin_dir = tmp / "fake_bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "scorep-config"
    tool.write_text(SCORE_CONFIG)
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    records = tmp / "scorep_records"
    records.mkdir(exist_ok=True)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(FAKE_SCOREP_PATH), env.get("PYTHONPATH")) if p)
    env["FAKE_SCOREP_RECORD_DIR"] = str(records)
    return env


def cli_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """An environment in which `python -m doctor` imports this checkout."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.pop("GPU_DOCTOR_DEBUG", None)
    return env


def running(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] != "Z"


def group_members(pgid: int) -> list[int]:
    """Live processes whose process group is pgid."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(entry))
    return out


def wait_until(predicate: Callable[[], object], timeout: float, what: str) -> object:
    """Poll `predicate` until it is truthy; fail the test naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")

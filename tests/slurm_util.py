"""Fixtures for the Slurm integration tests: the Prolog as an admin installs it, fake nodes, jobs.

    prolog = PrologSetup(tmp / "prolog").install()    # wrapper + root-owned conf + gpu-doctor shim
    prolog.configure("permanent_802")                  # the next Prolog sees a node whose runtime says 802
    with local_slurm(tmp / "slurm", prolog=prolog.wrapper, gpus=4) as slurm: ...   # skips if it can't

Slurm runs the Prolog with no PATH and an environment of its own (nothing of
slurmd's), so the settings reach `doctor/slurm/prolog.sh` the way an admin's
do: through its conf file, here a test copy named by a small wrapper
(`GPU_DOCTOR_PROLOG_CONF`) instead of /etc/gpu-doctor/prolog.conf; the wrapper
also records how long each Prolog took (`PrologSetup.runs`). The conf exports
the fake node's variables (`LD_LIBRARY_PATH`, `FAKE_*`) so the gate loads the
fake NVIDIA libraries; rewriting it switches the node's scenario for the next job.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.node import clean_env, scenario_env
from slurm_cluster import LocalSlurm, SlurmUnavailable, slurm_missing

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
PROLOG_SH = REPO / "doctor" / "slurm" / "prolog.sh"
PYTHON = sys.executable


def write_exec(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@contextlib.contextmanager
def local_slurm(root: Path, **options: Any) -> Iterator[LocalSlurm]:
    """A started LocalSlurm(root, **options), stopped afterwards; skips where none can run here."""
    reason = slurm_missing()
    if reason:
        pytest.skip(reason)
    cluster = LocalSlurm(root, **options)
    try:
        cluster.start()
    except SlurmUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()


class PrologSetup:
    """The Prolog wrapper, its conf and the verdict folder, as an admin would set them up."""

    def __init__(self, root: Path, timeout: int = 10) -> None:
        self.root = root
        self.timeout = timeout
        self.conf = root / "prolog.conf"
        self.wrapper = root / "prolog-wrapper.sh"
        self.shim = root / "gpu-doctor"
        self.verdicts = root / "verdicts"
        self.timings = root / "timings"

    def install(self) -> PrologSetup:
        self.root.mkdir(parents=True, exist_ok=True)
        # gpu-doctor as an admin's venv has it: one executable, whatever the Prolog's PATH.
        write_exec(self.shim, f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(REPO))}\nexport PYTHONPATH\n"
                              f"exec {shlex.quote(PYTHON)} -m doctor \"$@\"\n")
        # The wrapper also times the whole Prolog (gpu-doctor's start-up included) per job.
        write_exec(self.wrapper, f"""#!/bin/sh
start=$(date +%s.%N)
GPU_DOCTOR_PROLOG_CONF={shlex.quote(str(self.conf))} {shlex.quote(str(PROLOG_SH))}
rc=$?
echo "$SLURM_JOB_ID $start $(date +%s.%N) $rc" >>{shlex.quote(str(self.timings))}
exit $rc
""")
        self.configure("healthy")
        return self

    def configure(self, scenario: str, gpu_doctor: Path | None = None, **knobs: Any) -> None:
        """Rewrite the conf: the next Prolog runs the gate on fake node `scenario`."""
        self.write_conf(self.conf, self.root / "node", scenario, gpu_doctor, **knobs)

    def write_conf(self, conf: Path, node_dir: Path, scenario: str, gpu_doctor: Path | None = None,
                   **knobs: Any) -> None:
        """Write a Prolog conf whose gate sees fake node `scenario` (state in `node_dir`)."""
        env = scenario_env(scenario, node_dir, **knobs)
        base = clean_env()
        exports = {k: v for k, v in env.items() if base.get(k) != v}
        lines = [f"GPU_DOCTOR={shlex.quote(str(gpu_doctor or self.shim))}",
                 f"VERDICT_DIR={shlex.quote(str(self.verdicts))}",
                 f"TIMEOUT={self.timeout}",
                 "FAIL_ON=error"]
        lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(exports.items())]
        tmp = conf.with_suffix(".tmp")
        tmp.write_text("# test copy of /etc/gpu-doctor/prolog.conf\n" + "\n".join(lines) + "\n")
        tmp.chmod(0o644)
        tmp.replace(conf)   # a Prolog starting now reads the old or the new file, never half

    def verdict(self, job: str) -> dict[str, Any]:
        return json.loads((self.verdicts / f"job-{job}.json").read_text())

    def reason_line(self, job: str) -> str:
        return (self.verdicts / f"job-{job}.txt").read_text()

    def runs(self, job: str) -> list[tuple[float, int]]:
        """(seconds, exit status) of each Prolog run for `job`, as the wrapper measured them."""
        lines = self.timings.read_text().splitlines() if self.timings.exists() else []
        return [(float(end) - float(start), int(rc))
                for job_id, start, end, rc in (ln.split() for ln in lines) if job_id == job]


def check(doc: dict[str, Any], check_id: str) -> dict[str, Any]:
    """The verdict JSON's entry for one check."""
    found = [c for c in doc["checks"] if c["id"] == check_id]
    assert found, f"{check_id} not in the verdict: {[c['id'] for c in doc['checks']]}"
    return found[0]


def evidence(entry: dict[str, Any]) -> dict[str, str]:
    """A check's evidence as label -> text."""
    return {str(e.get("label")): str(e.get("text")) for e in entry.get("evidence", [])}


def poll(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll until `predicate` is truthy; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def job_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment `sbatch` exports to a job: this interpreter first on PATH, the checkout importable."""
    env = clean_env()
    env["PATH"] = os.pathsep.join([str(Path(PYTHON).parent), env.get("PATH", "/usr/bin:/bin")])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.update(extra or {})
    return env


# A gloo DDP job that says where each rank ran (Slurm's view of it included).
DDP_JOB = r'''
import os, sys
rank = int(os.environ["RANK"])
print(f"rank {rank} of {os.environ['WORLD_SIZE']} on node {os.environ.get('SLURMD_NODENAME')} "
      f"procid {os.environ.get('SLURM_PROCID')} local {os.environ.get('LOCAL_RANK')} "
      f"master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", flush=True)
print(f"sockets gloo {os.environ.get('GLOO_SOCKET_IFNAME', '-')} nccl {os.environ.get('NCCL_SOCKET_IFNAME', '-')}",
      flush=True)
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 2
for step in range(1, steps + 1):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {step}/{steps} loss {loss.item():.4f}", flush=True)
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
print(f"rank {rank} all_reduce {total.item():.0f}", flush=True)
dist.barrier()   # without it, torch 2.13 gloo ranks abort at exit now and then (~1 in 20 runs here)
dist.destroy_process_group()
print(f"rank {rank} done", flush=True)
# torch 2.13's gloo teardown still aborts at interpreter exit now and then, barrier or not ("terminate
# called without an active exception", seen in CI after "rank 1 done"): skip the C++ teardown, as
# launch_util.DDP_JOB does (the Score-P stand-in flushes on os._exit).
os._exit(0)
'''

# torchrun as the field guide's job calls it (`python -m scorep ... scorep_torchrun.py`).
TORCHRUN = "from torch.distributed.run import main\n\nmain()\n"

"""Real Score-P 8.4 + scorep 4.5.1 for the `scorep` tests, where scripts/build-scorep.sh put it.

The script writes <venv>/scorep-prefix (the Score-P prefix it installed or reused) and
installs the bindings into that venv. Without them the tests skip with the reason; under
.ci/run (GPU_DOCTOR_REQUIRE_SCOREP=1, set when the build step succeeded) they fail instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
PYTHON = sys.executable

# A gloo DDP job whose steps are Score-P user regions. It exits normally: real Score-P
# writes its measurement at exit (atexit), so an os._exit() would leave no trace.
TRAIN = '''\
import os
import sys

import torch
import torch.distributed as dist


def region(name):
    import scorep.user  # lazy: the workers import this file too (SCR001)

    return scorep.user.region(name)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 4):
        with region("train_step"):
            loss = model(torch.randn(32, 16)).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    if "--os-exit" in sys.argv:  # only where no Score-P measures this process (it writes at exit)
        os._exit(0)  # torch 2.13's gloo teardown sometimes aborts at exit ("terminate called ...")
'''

HELLO = "def work(n):\n    return sum(range(n))\n\n\nprint(work(1000))\n"
TORCHRUN_WRAPPER = "from torch.distributed.run import main\n\nmain()\n"


def prefix() -> Path | None:
    """The Score-P prefix whose scorep-config --version runs, with the bindings importable here."""
    recorded = Path(sys.prefix) / "scorep-prefix"
    candidates = [Path(recorded.read_text().strip())] if recorded.is_file() else []
    found = shutil.which("scorep-config")
    if found:
        candidates.append(Path(found).resolve().parent.parent)
    for p in candidates:
        try:
            ok = subprocess.run([str(p / "bin" / "scorep-config"), "--version"], capture_output=True,
                                timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return p
    return None


def missing() -> str | None:
    """Why real Score-P cannot run here (None: it can)."""
    if prefix() is None:
        return "real Score-P is not installed (run scripts/build-scorep.sh; see ../shared/vendor/PROVENANCE.md)"
    probe = subprocess.run([PYTHON, "-c", "import importlib.util as u; assert u.find_spec('scorep._bindings')"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"the Score-P Python bindings do not import in {PYTHON} (scripts/build-scorep.sh installs them)"
    if shutil.which("gcc") is None:
        return "gcc is not on PATH (python -m scorep compiles its init library with it)"
    return None


def require() -> Path:
    """The prefix, or skip (fail under CI, where the build step succeeded) with the reason."""
    why = missing()
    if why is not None:
        if os.environ.get("GPU_DOCTOR_REQUIRE_SCOREP"):
            pytest.fail(f"GPU_DOCTOR_REQUIRE_SCOREP is set but {why}")
        pytest.skip(why)
    found = prefix()
    assert found is not None
    return found


def scorep_env(scorep: Path, **extra: str) -> dict[str, str]:
    """The environment a user has after `module load scorep`: its bin first on PATH, no stale SCOREP_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCOREP_")}
    env["PATH"] = f"{scorep / 'bin'}{os.pathsep}{Path(PYTHON).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.pop("GPU_DOCTOR_DEBUG", None)
    env.update(extra)
    return env


def gpu_doctor(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "doctor", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def run_scorep(args: list[str], env: dict[str, str], cwd: Path, log: Path,
               timeout: float = 240) -> subprocess.CompletedProcess:
    """`python -m scorep ARGS` as a job script runs it, stdout and stderr into `log`."""
    with open(log, "w") as fh:
        proc = subprocess.run([PYTHON, "-m", "scorep", *args], env=env, cwd=cwd, stdout=fh,
                              stderr=subprocess.STDOUT, timeout=timeout)
    return proc


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    if text.startswith("#!"):
        path.chmod(0o755)
    return path


def checks(json_text: str) -> dict[str, dict]:
    """check id -> its entry (status, message, findings with their data), from `--check-only --json`."""
    import json

    return {c["id"]: c for c in json.loads(json_text)["checks"]}


def findings(check: dict, status: str | None = None) -> list[dict]:
    return [f for f in check["findings"] if status is None or f["status"] == status]

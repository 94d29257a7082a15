"""The CUDA warm-up: a real CUDA op in the job's interpreter, outside Score-P.

Field guide errors 1-4: Score-P's CUDA adapter probes the runtime the moment
a process starts; if the runtime is not ready yet (802) that process's CUDA
stays broken. Forcing the runtime up first, in a plain interpreter, fixes it.
`is_available()` is not a readiness test (error 3): the op is
`torch.zeros(1).cuda()` in try/except, one fresh process per attempt (a
runtime that failed once in a process stays failed there), with backoff.

Shell equivalent:
    until python -c "import torch; torch.zeros(1).cuda()"; do sleep 10; done
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from doctor.isolate import die_with_parent
from doctor.wording import count

WARMUP_CODE = r"""
import json, sys
out = {"ok": False, "kind": "", "error": None, "torch": None, "torch_cuda": None}
try:
    import torch
except Exception as exc:
    out.update(kind="no_torch", error=f"{type(exc).__name__}: {exc}")
else:
    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    try:
        torch.zeros(1).cuda()
        torch.cuda.synchronize()
        out.update(ok=True, kind="ready")
    except Exception as exc:
        msg = f"{type(exc).__name__}: {exc}".strip()
        low = msg.lower()
        if torch.version.cuda is None or "not compiled with cuda" in low:
            kind = "cpu_build"
        elif "no nvidia driver" in low or "no cuda gpus are available" in low:
            kind = "no_device"
        else:
            kind = "not_ready"
        out.update(kind=kind, error=" ".join(msg.split())[:400])
print(json.dumps(out))
"""

NO_CUDA_KINDS = ("cpu_build", "no_device", "no_torch")


@dataclass(frozen=True)
class WarmupResult:
    """`kind`: ready | not_ready | hung | cpu_build | no_device | no_torch | stopped."""

    ok: bool
    kind: str
    attempts: int
    duration_s: float
    detail: str
    torch_version: str | None = None

    @property
    def no_cuda(self) -> bool:
        return self.kind in NO_CUDA_KINDS

    def describe(self) -> str:
        if self.ok:
            return f"CUDA runtime ready after attempt {self.attempts} ({self.duration_s:.1f} s)"
        if self.kind == "cpu_build":
            return f"no CUDA here: torch {self.torch_version or '?'} is a CPU-only build"
        if self.kind == "no_device":
            return f"no CUDA here: {self.detail}"
        if self.kind == "no_torch":
            return f"torch is not importable in the job's interpreter ({self.detail})"
        if self.kind == "stopped":
            return "warm-up stopped"
        how = "hung" if self.kind == "hung" else "never became ready"
        return (f"CUDA runtime {how} within {self.duration_s:.0f} s ({count(self.attempts, 'attempt')}; "
                f"last: {self.detail}). The node's runtime looks broken (field guide error 4): "
                "exclude the node (#SBATCH --exclude=<node>) or launch with --no-warmup")


def warmup_env(base: Mapping[str, str]) -> dict[str, str]:
    """The job's environment minus anything that would load Score-P."""
    env = dict(base)
    preload = [p for p in env.get("LD_PRELOAD", "").split(":") if p and "scorep" not in p]
    if preload:
        env["LD_PRELOAD"] = ":".join(preload)
    else:
        env.pop("LD_PRELOAD", None)
    env.pop("SCOREP_PYTHON_BINDINGS_INITIALISED", None)
    return env


def _attempt(python: str, env: Mapping[str, str], cwd: str | None, limit: float,
             should_stop: Callable[[], bool]) -> dict[str, object]:
    try:
        proc = subprocess.Popen([python, "-c", WARMUP_CODE], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=dict(env),
                                cwd=cwd, start_new_session=True, preexec_fn=die_with_parent())
    except OSError as exc:
        return {"ok": False, "kind": "no_torch", "error": f"cannot run {python}: {exc.strerror or exc}"}
    deadline = time.monotonic() + limit
    try:
        while proc.poll() is None:
            if should_stop():
                return {"ok": False, "kind": "stopped", "error": "stopped"}
            if time.monotonic() > deadline:
                return {"ok": False, "kind": "hung", "error": f"torch.zeros(1).cuda() hung for {limit:.0f} s"}
            try:
                proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass
        out = proc.stdout.read().decode("utf-8", "replace") if proc.stdout else ""
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        if proc.stdout:
            proc.stdout.close()
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not lines:
        return {"ok": False, "kind": "not_ready",
                "error": f"the warm-up process exited with code {proc.returncode} and no result"}
    return dict(json.loads(lines[-1]))


def run_warmup(python: str, env: Mapping[str, str], cwd: str | None = None, budget_s: float = 300.0,
               attempt_limit_s: float = 60.0, should_stop: Callable[[], bool] = lambda: False,
               on_attempt: Callable[[int, dict[str, object]], None] | None = None,
               backoff_s: float = 1.0) -> WarmupResult:
    """Retry the warm-up with backoff until ready, a definite "no CUDA", or the budget is spent.

    Waits backoff_s, then doubles it up to 10 s, between attempts.
    """
    env = warmup_env(env)
    start = time.monotonic()
    delay, attempt = backoff_s, 0
    last: dict[str, object] = {}
    while True:
        attempt += 1
        left = budget_s - (time.monotonic() - start)
        last = _attempt(python, env, cwd, max(1.0, min(attempt_limit_s, left)), should_stop)
        if on_attempt:
            on_attempt(attempt, last)
        kind = str(last.get("kind"))
        if last.get("ok") or kind in NO_CUDA_KINDS or kind == "stopped":
            break
        if time.monotonic() - start + delay >= budget_s:
            break
        end = time.monotonic() + delay
        while time.monotonic() < end and not should_stop():
            time.sleep(0.05)   # backoff between attempts, interruptible
        delay = min(delay * 2, 10.0)
    torch_version = last.get("torch")
    return WarmupResult(bool(last.get("ok")), str(last.get("kind")), attempt, time.monotonic() - start,
                        str(last.get("error") or ""),
                        torch_version if isinstance(torch_version, str) else None)

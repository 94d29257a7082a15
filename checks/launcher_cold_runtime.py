"""The evidence behind LNC002's and SCR001's severity: will Score-P's CUDA adapter meet a cold runtime?

The field guide's error 802 needs three things at once: a CUDA adapter that
starts before the job's own CUDA init, a runtime that is not ready yet, and
nothing that warmed it first. The launch says whether an adapter is loaded at
all; the node (GPU003's attempts) and the logs (error 802, the FP16
ValueError) say whether the runtime was cold. Each question is one small
function over facts, so it can be pointed at another job model unchanged.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from doctor import pyast, safeopen
from doctor.artifacts.runrecord import had, unsure
from doctor.facts import Facts, ProbeFailure
from doctor.limits import MAX_PYTHON_BYTES
from doctor.model import Evidence, Status

# Log signatures (doctor.artifacts.logscan) that prove a rank met a cold runtime.
COLD_SIGNATURES = ("cuda_802", "fp16_valueerror")


@dataclass(frozen=True)
class Adapter:
    """Whether the job loads Score-P's CUDA adapter: `loaded` (--cuda), `wanted`
    (SCOREP_CUDA_ENABLE asks for CUDA, no --cuda yet: SCP002), or `absent`."""

    state: str
    why: str
    evidence: tuple[Evidence, ...] = ()


@dataclass(frozen=True)
class ColdRuntime:
    """How strongly the node and the logs say the runtime was (or will be) cold at job start.

    `level` is FAIL when it was observed (GPU003 needed retries, or a log shows
    error 802 / the FP16 ValueError), WARN when it is only a risk."""

    level: Status
    why: str
    evidence: tuple[Evidence, ...] = ()
    next_step: str = ""


def cuda_adapter(job: Any) -> Adapter:
    """What the job's instrumented launches load: `python -m scorep --cuda` on any of them wins."""
    from doctor.artifacts.discover import cuda_requested

    instrumented = list(getattr(job, "instrumented", ()) or ())
    for cmd, launch in instrumented:
        if launch.scorep is not None and launch.scorep.cuda:
            return Adapter("loaded", "`python -m scorep --cuda` loads the CUDA adapter",
                           (cmd.site.evidence(job.root, "launch"),))
    for cmd, _launch in instrumented:
        var = cmd.var("SCOREP_CUDA_ENABLE")
        if var is not None and cuda_requested(var.value):
            ev = var.site.evidence(job.root, "asks for CUDA") if var.site else Evidence(
                f"SCOREP_CUDA_ENABLE={var.raw}", label="inherited")
            return Adapter("wanted", f"SCOREP_CUDA_ENABLE={var.raw} asks for CUDA recording, but no launch has "
                           "--cuda yet (SCP002)", (ev,))
    env = getattr(job, "env", None) or {}
    var = env.get("SCOREP_CUDA_ENABLE")
    if var is not None and var.site is not None and cuda_requested(var.value):
        return Adapter("wanted", f"SCOREP_CUDA_ENABLE={var.raw} asks for CUDA recording",
                       (var.site.evidence(job.root, "asks for CUDA"),))
    if not instrumented:
        return Adapter("absent", "no `python -m scorep` launch and no SCOREP_CUDA_ENABLE")
    flags = {f for _cmd, launch in instrumented if launch.scorep for f in launch.scorep.flags}
    hip = " (a HIP/ROCm measurement)" if any(f.startswith("--hip") for f in flags) else ""
    return Adapter("absent", f"no `python -m scorep` launch has --cuda and nothing asks for CUDA recording{hip}: "
                   "no CUDA adapter probes the runtime early",
                   tuple(cmd.site.evidence(job.root, "launch") for cmd, _l in instrumented[:1]))


def log_lines(facts: Facts, doubtful: bool = False) -> list[Evidence]:
    """Error 802 and FP16-ValueError lines in the job's logs (nothing when the logs were not read),
    of runs that had a CUDA adapter: a `gpu-doctor launch` without Score-P --cuda proves nothing about it.
    With `doubtful`: the lines of runs not known to have had one (no record says, the log does not)."""
    scan = facts.get("logscan")
    if isinstance(scan, ProbeFailure) or not scan:
        return []
    return [Evidence(m["text"], m["file"], m["line"], "log") for m in scan
            if m.get("signature") in COLD_SIGNATURES and had(m.get("run"), "cuda")
            and bool(unsure(m.get("run"), "cuda")) == doubtful][:4]


def log_doubt(facts: Facts) -> str | None:
    """Why the first doubtful line's run is not known to have had Score-P's CUDA adapter."""
    scan = facts.get("logscan")
    if isinstance(scan, ProbeFailure) or not scan:
        return None
    return next((d for m in scan if m.get("signature") in COLD_SIGNATURES
                 and (d := unsure(m.get("run"), "cuda"))), None)


def node_state(facts: Facts) -> tuple[str, str, Evidence | None]:
    """(cold | warm | broken | unmeasured, why, evidence) from GPU003's runtime probe on this host."""
    host = facts.case.host
    nvml = facts.get("nvml")
    runtime = facts.get("cuda_runtime")
    if isinstance(nvml, Mapping) and nvml.get("no_driver"):
        return "unmeasured", f"no NVIDIA driver on {host}, so its runtime says nothing about the GPU node", None
    if not isinstance(runtime, Mapping):
        detail = runtime.detail if isinstance(runtime, ProbeFailure) else "no result"
        return "unmeasured", f"the CUDA runtime was not probed ({detail})", None
    state, k = runtime.get("state"), runtime.get("ready_attempt")
    if state == "ready" and isinstance(k, int) and k > 1:
        return "cold", f"GPU003: the runtime on {host} was ready only after attempt {k}", Evidence(
            f"CUDA runtime ready after attempt {k}", label="GPU003")
    if state == "ready":
        return "warm", f"GPU003: the runtime on {host} answered at the first attempt (warm now)", Evidence(
            "CUDA runtime ready at attempt 1", label="GPU003")
    if state in ("never_ready", "hung", "error"):
        return "broken", f"GPU003: the runtime on {host} is {state}: no warm-up cures that (LNC003)", Evidence(
            f"CUDA runtime {state}", label="GPU003")
    return "unmeasured", f"GPU003 gave no usable state ({state})", None


def cold_runtime(facts: Facts) -> ColdRuntime:
    """Combine the logs and the node: observed coldness fails, everything else is a risk."""
    lines = log_lines(facts)
    state, why, node_ev = node_state(facts)
    if lines:
        return ColdRuntime(Status.FAIL, "the logs show it happened (error 802 / the FP16 ValueError)",
                           tuple(lines) + ((node_ev,) if node_ev else ()))
    if state == "cold":
        assert node_ev is not None
        return ColdRuntime(Status.FAIL, why, (node_ev,))
    doubtful = log_lines(facts, doubtful=True)
    if doubtful:   # the lines may come from a run without the adapter: a risk the logs point at, not proof
        return ColdRuntime(Status.WARN, f"the logs show error 802 / the FP16 ValueError, but {log_doubt(facts)}",
                           tuple(doubtful) + ((node_ev,) if node_ev else ()))
    if state == "unmeasured":
        return ColdRuntime(Status.WARN, f"a risk on a freshly allocated node; {why}", (),
                           "run `gpu-doctor --check-only --playbook node` on the GPU node")
    return ColdRuntime(Status.WARN, f"a risk on a freshly allocated node; {why}", (node_ev,) if node_ev else ())


def _ancestors(tree: ast.Module, line: int) -> list[tuple[list[ast.stmt], int]]:
    """The blocks from the module down to the statement on `line`, each with that statement's index."""
    chain: list[tuple[list[ast.stmt], int]] = []
    body: list[ast.stmt] = tree.body
    while True:
        index = next((i for i, s in enumerate(body)
                      if s.lineno <= line <= (s.end_lineno or s.lineno)), None)
        if index is None:
            return chain
        chain.append((body, index))
        stmt = body[index]
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or stmt.lineno == line:
            return chain
        inner = [b for b in (getattr(stmt, "body", None), getattr(stmt, "orelse", None),
                             getattr(stmt, "finalbody", None)) if b]
        inner += [h.body for h in getattr(stmt, "handlers", [])]
        body = next((b for b in inner if b and b[0].lineno <= line <= (b[-1].end_lineno or b[-1].lineno)), [])
        if not body:
            return chain


def cuda_set_up_before(script: Any, line: int) -> int | None:
    """The line of a CUDA op (`.cuda()`, `.to("cuda")`, `set_device`, a DDP wrap) that runs before
    the module-level statement on `line` in `script`, else None. Statements inside `def`/`class`
    bodies do not count: they run only when called."""
    marks = sorted({s.line for s in script.cuda_ops} | {c.site.line for c in script.ddp_wrap})
    if not marks:
        return None
    try:
        tree = pyast.parse(safeopen.read_text(script.path, MAX_PYTHON_BYTES))
    except (OSError, SyntaxError, ValueError):
        return None
    for body, index in _ancestors(tree, line):
        for stmt in body[:index]:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            end = stmt.end_lineno or stmt.lineno
            hit = next((m for m in marks if stmt.lineno <= m <= end), None)
            if hit is not None:
                return hit
    return None

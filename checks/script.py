"""Script layer: what the training code does that fights Score-P, NCCL or CUDA streams.

Reads the Python the job runs (training scripts and the local modules they
import, and `python -c` / here-document snippets in the job scripts) as
analysed by `ast` in the `job` fact.
"""

from __future__ import annotations

from checks.launcher_cold_runtime import Adapter, cold_runtime, cuda_adapter, cuda_set_up_before
from checks.script_teardown import framework_teardown
from doctor.facts import Facts, ProbeFailure
from doctor.jobfolder.model import Job, PyScript, ScorepImport, Site
from doctor.jobfolder.queries import ev, is_ddp, launches_of, link_unknown, script_problems
from doctor.model import Evidence, Layer, Outcome, Status, fail, passed, skip, unknown, warn
from doctor.registry import check

L = Layer.SCRIPT


def _no_scripts(job: Job | None = None) -> Outcome:
    hidden = link_unknown(job, "no Python training script") if job is not None else None
    return hidden or skip("no Python training script found in the job folder")


def _importer(closure: list[PyScript], path: str) -> Site | None:
    """Where one of `closure` imports `path` at import time."""
    return next((site for s in closure for p, at_import, site in s.local_imports if p == path and at_import), None)


def _direct_scorep_only(job: Job, entry: PyScript) -> bool:
    """True when every launch of `entry` runs it under its own `python -m scorep` (no spawner)."""
    launches = launches_of(job, entry)
    return bool(launches) and all(
        launch.scorep is not None and launch.spawner is None for _cmd, launch in launches)


@check("SCR001", L, "scorep.user imported at module level in a script DDP workers import",
       needs=("job", "nvml", "cuda_runtime", "logscan"), remedies=("lazy-scorep-import",),
       handles_failures=True)
def lazy_scorep_import(facts: Facts) -> list[Outcome]:
    """What it does:
    Finds `import scorep.user`, `import scorep.user as su`, `from scorep import user`,
    `import scorep` (its `__init__` imports `scorep.user`) or `importlib.import_module("scorep.user")`
    that run when a DDP worker imports the training script or one of its local modules: at module
    level, in a class body, or inside a module-level `try:`/`if`/`with`. An import inside a
    function (the first `training_step()`), or at module level after the script has set CUDA
    up (inside the training loop, after `model.cuda()`), is the lazy import and passes.

    Why is this bad?
    Every worker torchrun spawns is a fresh process that re-imports the script; the import loads
    Score-P's bindings and CUDA adapter in that worker before PyTorch has set up its CUDA
    context, and the worker fails with error 802. A warm-up in the parent shell does not carry
    into the children.

    Example:
        import scorep.user  # module level
        def training_step(...): scorep.user.region_begin("step")

    Remedy:
    Import it on first use, once per process (`_scorep_user = None` at module level, the import
    inside the first `training_step()`), as the field guide does.

    Severity:
    pass when the import runs after CUDA is set up, when the script is not DDP, when each rank
    runs under its own `python -m scorep` (its adapter starts at process start anyway: LNC002),
    or when no CUDA adapter is loaded or asked for (a ROCm job); warn when spawned workers
    import it early but nothing shows a cold runtime (GPU003 answered at once, or the node was
    not measured), also for error 802 / the FP16 ValueError in a log whose run is not known to
    have had Score-P's CUDA adapter (no launch record, no [Score-P] line); fail when the evidence
    shows one: GPU003 "ready after attempt k" (k > 1), or error 802 / the FP16 ValueError in the
    log of a run that had the adapter (its launch record, its own lines, or the job's Slurm output).

    Fix safety:
    Unsafe: edits the training code.
    """
    job = facts.get("job")
    if isinstance(job, ProbeFailure):
        return [unknown(str(job), entities={"probe": "job"})]
    entries = job.entry_scripts()
    if not entries:
        return [_no_scripts(job)]
    out: list[Outcome] = []
    seen: set[tuple[str, int]] = set()
    adapter = cuda_adapter(job)
    for entry in entries:
        closure = job.import_closure(entry, import_time_only=True)
        out.extend(script_problems(job, [s for s in closure if s.path not in {p for p, _ in seen}], "SCR001"))
        for s in closure:
            for imp in s.scorep_imports:
                key = (imp.site.file, imp.site.line)
                if not imp.import_time or key in seen:
                    continue
                seen.add(key)
                out.append(_import_outcome(facts, job, entry, closure, s, imp, adapter))
    return out or [passed("no import-time scorep import in the training scripts")]


def _import_outcome(facts: Facts, job: Job, entry: PyScript, closure: list[PyScript], s: PyScript,
                    imp: ScorepImport, adapter: Adapter) -> Outcome:
    """SCR001 for one import-time scorep import, at the level the evidence sets."""
    where = "at module level" if imp.guard is None else f"at module level inside `{imp.guard}`"
    if imp.scope in ("class", "main-guard"):
        where = f"in the {'class body' if imp.scope == 'class' else '__main__ block'}"
    data = imp.site.data() | {"scope": imp.scope, "guard": imp.guard, "entry": entry.path,
                              "adapter": adapter.state}
    evidence = [ev(job, imp.site, "import")]
    via = _importer(closure, s.path) if s is not entry else None
    if via is not None:
        evidence.append(ev(job, via, "imported by"))
    after = cuda_set_up_before(s, imp.site.line) if imp.scope == "module" and s.role != "snippet" else None
    if after is not None:
        evidence.append(Evidence(f"line {after} sets CUDA up first", job.rel(s.path), after, "CUDA set up"))
        return passed(f"scorep imported {where} in {job.rel(s.path)}, after CUDA is set up (line {after}): "
                      "the lazy import the field guide recommends", evidence)
    ddp, why = is_ddp(job, entry)
    if not ddp:
        return passed(f"scorep imported {where}, but {job.rel(entry.path)} is not a DDP script ({why})", evidence)
    if _direct_scorep_only(job, entry):
        return passed(f"scorep imported {where} in {job.rel(s.path)}: harmless while each rank runs under its own "
                      "python -m scorep (its adapter starts with the process anyway: LNC002); error 802 once "
                      "torchrun spawns the workers", evidence)
    if adapter.state == "absent":
        return passed(f"scorep imported {where} in {job.rel(s.path)}, but {adapter.why}", evidence)
    cold = cold_runtime(facts)
    evidence += list(cold.evidence)
    if cold.next_step:
        data["next_step"] = cold.next_step
    data["evidence_level"] = cold.level.value
    if cold.level == Status.FAIL:
        return fail(f"scorep imported {where} in {job.rel(s.path)}, which every DDP worker imports ({why}), and "
                    f"{cold.why}: Score-P's CUDA adapter starts before the worker's CUDA context (error 802)",
                    evidence, "lazy-scorep-import", entities={"file": job.rel(s.path)}, data=data)
    return warn(f"scorep imported {where} in {job.rel(s.path)}, which every DDP worker imports ({why}): "
                f"Score-P's CUDA adapter starts before the worker's CUDA context ({cold.why})",
                evidence, "lazy-scorep-import", entities={"file": job.rel(s.path)}, data=data)


@check("SCR002", L, "the process group is never destroyed before exit",
       needs=("job", "logscan"), remedies=("destroy-process-group",), handles_failures=True)
def destroys_process_group(facts: Facts) -> list[Outcome]:
    """What it does:
    For DDP training scripts (init_process_group, DistributedDataParallel, or an HF Trainer
    started as several ranks), looks for `torch.distributed.destroy_process_group()` in the
    script or the local modules it imports, or a framework teardown that calls it:
    accelerate's `Accelerator.end_training()` (since accelerate 0.34; the version is read from
    a pin in the job folder or the job's interpreter), Lightning's atexit handler.

    Why is this bad?
    Without it, NCCL's watchdog thread runs its cleanup (touching the CUDA device) at
    interpreter exit, racing Score-P's own CUDA teardown: ranks abort with
    `c10::Error ... dummyHasPrimaryContext` in `ncclCommWatchdog` before Score-P flushes, and
    their traces are lost (6 of 8 in the field guide).

    Example:
        trainer.train()   # end of main(), no destroy_process_group()

    Remedy:
    `if dist.is_initialized(): dist.destroy_process_group()` at the end of training.

    Severity:
    pass when the script destroys the group, or accelerate >= 0.34's end_training() does, or
    the script is not DDP; warn when a framework may do it but gpu-doctor cannot tell
    (accelerate of unknown version, Lightning's atexit order), or when nothing destroys it in a
    job that Score-P does not measure with a CUDA adapter (the race needs one); fail when
    nothing destroys it and Score-P's CUDA adapter is loaded or asked for (traces are lost),
    or when the logs show the watchdog abort.

    Fix safety:
    Unsafe: edits the training code.
    """
    job = facts.get("job")
    if isinstance(job, ProbeFailure):
        return [unknown(str(job), entities={"probe": "job"})]
    entries = job.entry_scripts()
    if not entries:
        return [_no_scripts(job)]
    out: list[Outcome] = []
    for entry in entries:
        closure = job.import_closure(entry, import_time_only=False)
        problems = script_problems(job, closure, "SCR002")
        if problems:
            out.extend(problems)
            continue
        ddp, why = is_ddp(job, entry)
        if not ddp:
            out.append(passed(f"{job.rel(entry.path)} is not a DDP script ({why})"))
            continue
        destroy = next((c for s in closure for c in s.destroy_pg), None)
        if destroy is not None:
            out.append(passed("destroy_process_group() is called", ev(job, destroy.site, "teardown")))
            continue
        out.append(_teardown_outcome(facts, job, entry, closure, why))
    return out


def _teardown_outcome(facts: Facts, job: Job, entry: PyScript, closure: list[PyScript], why: str) -> Outcome:
    """SCR002 for a DDP entry script that never calls destroy_process_group() itself."""
    framework = framework_teardown(facts, job, closure)
    if framework is not None and framework.destroys:
        return passed(framework.why, framework.evidence)
    anchor = next((c for s in closure for c in s.trainer_train), None) or \
        next((c for s in closure for c in s.init_pg), None) or \
        next((c for s in closure for c in s.ddp_wrap), None)
    data: dict[str, object] = {"entry": entry.path, "ddp": why}
    evidence = []
    if anchor is not None:
        data.update(anchor.site.data())
        if anchor.function is not None:
            data.update({"function": anchor.function.name, "function_start": anchor.function.start,
                         "function_end": anchor.function.end, "insert_after_line": anchor.function.end})
        evidence.append(ev(job, anchor.site, "training"))
    else:
        data.update({"file": entry.path, "line": 1, "text": ""})
    aborts = watchdog_lines(facts)
    adapter = cuda_adapter(job)
    entities = {"file": job.rel(entry.path)}
    if framework is not None and framework.destroys is None and not aborts:
        return warn(f"{job.rel(entry.path)} leaves the process-group teardown to {framework.framework}: "
                    f"{framework.why}", evidence + list(framework.evidence), "destroy-process-group",
                    entities=entities, data=data)
    what = f"{job.rel(entry.path)} never calls destroy_process_group()"
    if framework is not None:
        what += f" ({framework.why})"
        evidence += list(framework.evidence)
    if aborts:
        return fail(f"{what}, and the logs show ranks aborting at teardown: NCCL's watchdog raced the "
                    "profiler's teardown at exit", evidence + aborts, "destroy-process-group",
                    entities=entities, data=data)
    if job.uses_scorep and adapter.state != "absent":
        return fail(f"{what}: NCCL's watchdog races the profiler's teardown at exit and Score-P loses the ranks' "
                    "traces", evidence + list(adapter.evidence[:1]), "destroy-process-group",
                    entities=entities, data=data)
    return warn(f"{what}: NCCL's watchdog can race a profiler's CUDA teardown at exit ({adapter.why})",
                evidence, "destroy-process-group", entities=entities, data=data)


def watchdog_lines(facts: Facts) -> list[Evidence]:
    """NCCL-watchdog / `tpd == 0` teardown aborts in the job's logs."""
    scan = facts.get("logscan")
    if isinstance(scan, ProbeFailure) or not scan:
        return []
    return [Evidence(m["text"], m["file"], m["line"], "log") for m in scan
            if m.get("signature") in ("nccl_watchdog_teardown", "tpd_zero")][:4]


@check("SCR003", L, "CUDA stream self-wait inside `with torch.cuda.stream(s)`",
       needs=("job",), remedies=("stream-capture-producer",))
def stream_self_wait(facts: Facts) -> list[Outcome]:
    """What it does:
    Finds `s.wait_stream(torch.cuda.current_stream())` (or a name bound to
    `current_stream()` in the block) inside `with torch.cuda.stream(s):`.

    Why is this bad?
    Inside the context `current_stream()` *is* `s`: the stream waits on itself, a no-op. The
    copy that follows is not ordered after the kernels of the producer stream and can read the
    tensor before it is written: metrics such as the loss come out impossible while training is
    fine.

    Example:
        with torch.cuda.stream(stream):
            stream.wait_stream(torch.cuda.current_stream(dev))
            cpu_buf.copy_(metric_stack, non_blocking=True)

    Remedy:
        producer_stream = torch.cuda.current_stream(dev)   # before the context
        with torch.cuda.stream(stream):
            stream.wait_stream(producer_stream)

    Severity:
    fail for every self-wait found (the copy races the producer: corrupt values); else pass.

    Fix safety:
    Unsafe: edits the training code.
    """
    job: Job = facts["job"]
    scripts = [s for s in job.scripts if s.role != "snippet"]
    if not scripts:
        return [_no_scripts(job)]
    out: list[Outcome] = list(script_problems(job, scripts, "SCR003"))
    for s in scripts:
        for w in s.self_waits:
            out.append(fail(f"`{w.site.text}` inside `with torch.cuda.stream({w.stream})` waits on {w.stream} "
                            "itself: the copy is not ordered after the producer's kernels",
                            [ev(job, w.site, "self-wait"), ev(job, w.with_site, "stream context")],
                            "stream-capture-producer", entities={"file": job.rel(s.path)},
                            data=w.site.data() | {"with_line": w.with_site.line, "with_text": w.with_site.text,
                                                  "stream": w.stream, "producer": w.producer,
                                                  "proposed": f"producer_stream = {w.producer}"}))
    return out or [passed("no stream waits on itself")]


@check("SCR004", L, "`assert torch.cuda.is_available()` used as a readiness test",
       needs=("job",), remedies=("cuda-real-op-check",))
def real_cuda_check(facts: Facts) -> list[Outcome]:
    """What it does:
    Finds `assert torch.cuda.is_available()` (and `if not torch.cuda.is_available(): raise/exit`)
    in the training scripts and in `python -c` warm-up snippets of the job scripts.

    Why is this bad?
    On a cold node `is_available()` can return False without raising and without initialising
    the runtime, so the assert fails on the first attempt and a warm-up loop built on it never
    warms anything (field guide, error 3).

    Example:
        python -c "import torch; assert torch.cuda.is_available(); torch.zeros(1).cuda()"

    Remedy:
    `try: torch.zeros(1).cuda() except Exception: sys.exit(1)`: the exception is the
    "not ready yet" signal.

    Severity:
    fail when a warm-up snippet tests `is_available()` (that warm-up never warms up); warn for
    the test in a training script (a spurious failure on a cold node); else pass.

    Fix safety:
    Unsafe: edits code.
    """
    job: Job = facts["job"]
    if not job.scripts:
        return [_no_scripts(job)]
    out: list[Outcome] = list(script_problems(job, list(job.scripts), "SCR004"))
    for s in job.scripts:
        for site in s.cuda_asserts:
            in_warmup = s.role == "snippet"
            data = site.data() | {"in_warmup": in_warmup}
            if in_warmup:
                out.append(fail("the warm-up tests torch.cuda.is_available(), which can be False on a cold node "
                                "without initialising the runtime: the warm-up never warms up",
                                ev(job, site, "warm-up"), "cuda-real-op-check", data=data))
            else:
                out.append(warn("`torch.cuda.is_available()` as a readiness test can be False on a cold node "
                                "where a real CUDA op would succeed after a retry", ev(job, site, "readiness"),
                                "cuda-real-op-check", data=data))
    return out or [passed("no is_available() readiness test")]

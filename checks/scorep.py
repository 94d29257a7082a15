"""Score-P layer: the install, and how the job configures and starts `python -m scorep`.

Each check reads the `job` fact (the parsed job folder); SCP001 also reads
`scorep_install`, SCP004/SCP006 the `logscan` fact of the artifacts area
when it is there.
"""

from __future__ import annotations

import re
from typing import Any

from doctor.facts import Facts, ProbeFailure
from doctor.jobfolder.argv import scorep_words
from doctor.jobfolder.model import Job
from doctor.jobfolder.queries import (
    command_data,
    ev,
    layout,
    link_unknown,
    multi_rank,
    origin_evidence,
    rank_spelling,
    ranks,
    same_on_every_node,
    settings,
    var_data,
    var_evidence,
    worker_scripts,
)
from doctor.jobfolder.scorep_values import (
    CUDA_BUFFER_PER_RANK,
    DEFAULT_CUDA_BUFFER,
    PROPOSED_TOTAL_MEMORY,
    TOTAL_MEMORY_LIMIT,
    SizeError,
    format_size,
    human,
    parse_cuda_enable,
    parse_size,
    proposed_cuda_buffer,
)
from doctor.model import Evidence, Layer, Outcome, fail, passed, skip, unknown, warn
from doctor.registry import check

L = Layer.SCOREP


def _no_scorep(job: Job) -> Outcome:
    return link_unknown(job, "no `python -m scorep` launch") or skip("no `python -m scorep` launch in the job folder")


def _logscan(facts: Facts, signature: str) -> tuple[list[dict[str, Any]], str | None]:
    """(matches of `signature`, why logs were not scanned)."""
    value = facts.get("logscan")
    if isinstance(value, ProbeFailure):
        return [], f"logs not scanned ({value.detail})"
    if not isinstance(value, list):
        return [], "logs not scanned"
    return [m for m in value if isinstance(m, dict) and m.get("signature") == signature], None


def _log_evidence(job: Job, m: dict[str, Any]) -> Evidence:
    return Evidence(str(m.get("text", "")), job.rel(str(m["file"])) if m.get("file") else None,
                    m.get("line"), "log")


@check("SCP001", L, "Score-P install: scorep-config, version, CUDA support, Python bindings",
       needs=("job", "scorep_install"), remedies=("manual-scorep-install",))
def scorep_installed(facts: Facts) -> Outcome:
    """What it does:
    Looks for `scorep-config` on the PATH the job runs with, asks for its version and for
    `CUDA support: yes` in `scorep-info config-summary`, and checks that the job's Python
    interpreter finds the Score-P Python bindings.

    Why is this bad?
    Without `scorep-config` the `python -m scorep` wrapper cannot build its measurement
    library; a Score-P built without CUDA support cannot record kernels however the job is
    configured; and a Python that lacks the bindings fails at `python -m scorep`.

    Example:
        $ module load scorep   # forgotten in the job script
        $ python -m scorep --cuda train.py   # -> No module named scorep

    Remedy:
    Load the Score-P module (or add its `bin` to PATH) in the job script, use a Score-P
    built with `--with-libcudart`, and `pip install scorep` in the job's environment.

    Severity:
    fail when the job uses Score-P and scorep-config is not on its PATH, the job's Python cannot
    import the bindings, or CUDA recording is asked for from a Score-P without CUDA support;
    unknown when the job loads modules gpu-doctor cannot evaluate or a value could not be read;
    skip without Score-P; else pass.

    Fix safety:
    Manual: gpu-doctor prints the steps.
    """
    job: Job = facts["job"]
    inst: dict[str, Any] = facts["scorep_install"]
    if not job.uses_scorep:
        return skip("the job does not use Score-P")
    notes = [Evidence(n, label="probe") for n in inst.get("notes") or []]
    loads = [s for f in job.shell_files for s in f.module_loads]
    data = {k: inst.get(k) for k in ("scorep_config", "version", "cuda_support", "python_bindings", "python")}
    data["module_loads"] = [s.data() for s in loads]
    remedy = ("manual-scorep-install",)
    if inst.get("scorep_config") is None:
        if loads:
            return unknown("scorep-config is not on PATH here, and the job loads modules that gpu-doctor "
                           "cannot evaluate; load them in this shell and run again",
                           [ev(job, s, "module load") for s in loads] + notes, remedy, data=data)
        return fail("Score-P is not installed for this job: scorep-config is not on the job's PATH",
                    notes, remedy, data=data)
    cuda_wanted = any(launch.scorep is not None and launch.scorep.cuda for _c, launch in job.instrumented) or \
        any(c.var("SCOREP_CUDA_ENABLE") is not None for c, _l in job.instrumented)
    version = inst.get("version") or "unknown version"
    if inst.get("cuda_support") is False and cuda_wanted:
        return fail(f"Score-P ({version}) at {inst['scorep_config']} was built without CUDA support; "
                    "CUDA recording is asked for", notes, remedy, data=data)
    if inst.get("python_bindings") is False:
        return fail(f"the job's Python ({inst.get('python')}) cannot import the Score-P bindings",
                    notes, remedy, data=data)
    if inst.get("python_bindings") is None or (cuda_wanted and inst.get("cuda_support") is None):
        return unknown(f"Score-P {version} found, but could not tell "
                       + ("whether the bindings import" if inst.get("python_bindings") is None
                          else "whether it has CUDA support"), notes, remedy, data=data)
    return passed(f"{version} at {inst['scorep_config']}; CUDA support: "
                  f"{'yes' if inst.get('cuda_support') else 'not needed'}; bindings import in {inst.get('python')}",
                  data=data)


@check("SCP002", L, "CUDA recording wanted but `python -m scorep` has no --cuda",
       needs=("job",), remedies=("scorep-add-cuda",))
def cuda_adapter_loaded(facts: Facts) -> list[Outcome]:
    """What it does:
    For every `python -m scorep` launch whose environment sets `SCOREP_CUDA_ENABLE`, checks that
    the wrapper is given `--cuda` (the last of `--cuda`/`--nocuda` wins).

    Why is this bad?
    `SCOREP_CUDA_ENABLE` only configures what the CUDA adapter records; the adapter itself is
    linked only when the wrapper passes `--cuda` to scorep-config ("On default cuda
    instrumentation is disabled"). The trace then holds no CUDA type and zero kernels.

    Example:
        export SCOREP_CUDA_ENABLE=kernel,memcpy,sync
        python -m scorep --thread=pthread train.py

    Remedy:
    `python -m scorep --cuda --thread=pthread train.py`

    Severity:
    fail when SCOREP_CUDA_ENABLE asks for CUDA recording and the launch has no --cuda (the
    measurement will hold no kernel); else pass.

    Fix safety:
    Safe: adds one flag to the launch line.
    """
    job: Job = facts["job"]
    out: list[Outcome] = []
    for cmd, launch in job.instrumented:
        assert launch.scorep is not None
        var = cmd.var("SCOREP_CUDA_ENABLE")
        if var is None:
            continue
        if var.value is not None and parse_cuda_enable(var.value).disabled:
            continue
        where = ev(job, cmd.site, "launch")
        if launch.scorep.cuda:
            out.append(passed(f"--cuda given with SCOREP_CUDA_ENABLE={var.raw}", where))
            continue
        data = command_data(cmd) | {"scorep_flags": list(launch.scorep.flags), "flag": "--cuda",
                                    "cuda_enable": var_data(var)}
        sw = scorep_words(cmd)
        written = origin_evidence(job, cmd, sw.scorep if sw else None, "python -m scorep written here")
        out.append(fail(f"SCOREP_CUDA_ENABLE={var.raw} but `python -m scorep` has no --cuda: the CUDA adapter "
                        "is never loaded, no kernels are recorded",
                        [where, *([written] if written else []), var_evidence(job, var)],
                        "scorep-add-cuda", entities={"file": job.rel(cmd.site.file)}, data=data))
    if not job.instrumented:
        return [_no_scorep(job)]
    return out or [passed("no launch asks for CUDA recording without --cuda")]


@check("SCP003", L, "SCOREP_TOTAL_MEMORY at or above 4 GiB, or not a size",
       needs=("job",), remedies=("scorep-total-memory",))
def total_memory(facts: Facts) -> list[Outcome]:
    """What it does:
    Parses `SCOREP_TOTAL_MEMORY` exactly as Score-P does (digits, optional K/M/G/T/P/E in powers
    of 1024, optional B, any case) and compares it with Score-P's ceiling of 4294967295 bytes.

    Why is this bad?
    Score-P supports "only up to, but not including, 4 GiB of total memory per process": `4G`
    is already too much and is clamped with a warning ("Too many memory requested"); a value
    Score-P cannot parse is rejected.

    Example:
        export SCOREP_TOTAL_MEMORY=4G

    Remedy:
    `export SCOREP_TOTAL_MEMORY=3500M` (under the cap, room for CUDA traces).

    Severity:
    fail for a size of 4 GiB or more (clamped) or one Score-P does not accept; unknown when the
    value is only known at run time; else pass.

    Fix safety:
    Safe: changes one value.
    """
    job: Job = facts["job"]
    out: list[Outcome] = []
    for var, _cmds in settings(job, "SCOREP_TOTAL_MEMORY"):
        where = var_evidence(job, var)
        data = var_data(var) | {"proposed": PROPOSED_TOTAL_MEMORY}
        if var.value is None:  # the remedy says where to set it instead, when no assignment can be edited
            out.append(unknown(f"SCOREP_TOTAL_MEMORY={var.raw} cannot be known before the job runs", where,
                               ("scorep-total-memory",) if var.unfollowed else (), data=data))
            continue
        try:
            size = parse_size(var.value)
        except SizeError as exc:
            out.append(fail(f"SCOREP_TOTAL_MEMORY={var.value!r} is not a size Score-P accepts: {exc}", where,
                            "scorep-total-memory", data=data))
            continue
        if size > TOTAL_MEMORY_LIMIT:
            out.append(fail(f"SCOREP_TOTAL_MEMORY={var.value} is {size} bytes; Score-P supports less than 4 GiB "
                            f"per process and clamps it (use {PROPOSED_TOTAL_MEMORY})", where,
                            "scorep-total-memory", data=data | {"bytes": size}))
        else:
            out.append(passed(f"SCOREP_TOTAL_MEMORY={var.value} ({human(size)}) is under the 4 GiB cap", where))
    if not out:
        return [passed("SCOREP_TOTAL_MEMORY is not set (Score-P's default is 16M)")] if job.uses_scorep \
            else [_no_scorep(job)]
    return out


@check("SCP004", L, "CUPTI activity buffer too small: dropped records or too many ranks for it",
       needs=("job", "logscan"), remedies=("scorep-cuda-buffer",), handles_failures=True)
def cuda_buffer(facts: Facts) -> list[Outcome]:
    """What it does:
    Reads the `[CUPTI Activity] Dropped N records ... Proposed minimum SCOREP_CUDA_BUFFER=P`
    warnings the logs hold (the `logscan` fact) and compares P with the buffer the job sets;
    without logs, compares the buffer with the number of CUDA-recording ranks (over every
    node: nodes × tasks per node).

    Why is this bad?
    Each process records CUDA activity into a `SCOREP_CUDA_BUFFER` (default 1M) that CUPTI
    fills between flushes; when it overflows, kernel records are silently dropped. 1- and
    4-rank runs fit in 1M, an 8-rank run dropped 85222 records in the field guide.

    Example:
        [CUPTI Activity] Dropped 85222 records. Current buffer size: 1048576 bytes
        Proposed minimum SCOREP_CUDA_BUFFER=8889000

    Remedy:
    `export SCOREP_CUDA_BUFFER=64M` (comfortably above the proposal).

    Severity:
    fail when the logs show dropped CUPTI records and the buffer is below Score-P's proposal, or
    SCOREP_CUDA_BUFFER is not a size; warn when the rank count makes drops likely with this
    buffer; skip without a CUDA-recording launch; else pass.

    Fix safety:
    Safe: sets one variable.
    """
    job = facts.get("job")
    if isinstance(job, ProbeFailure):
        return [unknown(str(job), entities={"probe": "job"})]
    dropped, why_not = _logscan(facts, "cupti_dropped")
    cuda_cmds = [(c, lch) for c, lch in job.instrumented if lch.scorep is not None and lch.scorep.cuda]
    out: list[Outcome] = []
    for m in dropped:
        values = m.get("values") or {}
        proposal = int(values.get("proposed_buffer") or 0)
        current = _current_buffer(job, cuda_cmds)
        if current is not None and proposal and current[0] >= proposal:
            out.append(passed(f"the log's proposal {proposal} is below the job's SCOREP_CUDA_BUFFER "
                              f"({format_size(current[0])}) now", _log_evidence(job, m)))
            continue
        proposed = proposed_cuda_buffer(proposal or None)
        evidence = [_log_evidence(job, m)] + ([var_evidence(job, current[1])] if current and current[1] else [])
        evidence.append(Evidence(f"SCOREP_CUDA_BUFFER={format_size(proposed)} ({proposed} bytes, minimum "
                                 f"{proposal or '?'})", label="proposed"))
        data = {"var": "SCOREP_CUDA_BUFFER", "dropped": values.get("dropped"),
                "current_bytes": current[0] if current else DEFAULT_CUDA_BUFFER,
                "minimum": proposal, "proposed": format_size(proposed), "proposed_bytes": proposed,
                "log": {"file": m.get("file"), "line": m.get("line"), "text": m.get("text")}}
        data.update(_where_to_set(job, cuda_cmds, current))
        out.append(fail(f"CUPTI dropped {values.get('dropped', '?')} records: SCOREP_CUDA_BUFFER must be at least "
                        f"{proposal or '?'} bytes; set {format_size(proposed)}", evidence, "scorep-cuda-buffer",
                        data=data))
    if not cuda_cmds:
        return out or [skip("no launch records CUDA (`python -m scorep --cuda`)")]
    for cmd, launch in cuda_cmds:
        n, how = ranks(job, cmd, launch)
        var = cmd.var("SCOREP_CUDA_BUFFER")
        try:
            size = parse_size(var.value) if var is not None and var.value is not None else DEFAULT_CUDA_BUFFER
        except SizeError as exc:
            assert var is not None
            out.append(fail(f"SCOREP_CUDA_BUFFER={var.value!r} is not a size Score-P accepts: {exc}",
                            var_evidence(job, var), "scorep-cuda-buffer",
                            data=var_data(var) | {"proposed": format_size(proposed_cuda_buffer(None)),
                                                  "proposed_bytes": proposed_cuda_buffer(None)}))
            continue
        if n is not None and n > 4 and size < n * CUDA_BUFFER_PER_RANK:
            proposed = proposed_cuda_buffer(n * CUDA_BUFFER_PER_RANK)
            evidence = [ev(job, cmd.site, "launch", f"{cmd.site.text}  ({n} ranks: {how})")]
            if var is not None:
                evidence.append(var_evidence(job, var))
            evidence.append(Evidence(f"SCOREP_CUDA_BUFFER={format_size(proposed)}", label="proposed"))
            lay = layout(job, cmd, launch)
            over = f" ({lay.words()})" if lay.several_nodes else ""
            out.append(warn(f"{n} CUDA-recording ranks{over} with a {format_size(size)} CUPTI buffer each: expect dropped "
                            f"records; set SCOREP_CUDA_BUFFER={format_size(proposed)}", evidence,
                            "scorep-cuda-buffer",
                            data=command_data(cmd) | {"var": "SCOREP_CUDA_BUFFER", "ranks": n,
                                                      "current_bytes": size, "proposed": format_size(proposed),
                                                      "proposed_bytes": proposed}))
    if not out:
        note = f"; {why_not}" if why_not else "; no dropped records in the logs"
        return [passed(f"the CUPTI buffer fits the rank count{note}")]
    return out


def _current_buffer(job: Job, cmds: list[Any]) -> tuple[int, Any] | None:
    for cmd, _l in cmds or job.instrumented:
        var = cmd.var("SCOREP_CUDA_BUFFER")
        if var is not None and var.value is not None:
            try:
                return parse_size(var.value), var
            except SizeError:
                return None
    return (DEFAULT_CUDA_BUFFER, None) if cmds else None


def _where_to_set(job: Job, cmds: list[Any], current: Any) -> dict[str, Any]:
    if current and current[1] is not None and current[1].site is not None:
        return {"file": current[1].site.file, "line": current[1].site.line, "text": current[1].site.text}
    if cmds:
        cmd = cmds[0][0]
        return {"file": cmd.site.file, "line": cmd.site.line, "text": cmd.site.text, "insert_before": True}
    return {}


@check("SCP005", L, "`--` separator after `python -m scorep`", needs=("job",), remedies=("scorep-drop-dashdash",))
def no_dashdash(facts: Facts) -> list[Outcome]:
    """What it does:
    Finds a `--` among the arguments of `python -m scorep` before the script.

    Why is this bad?
    The wrapper (up to at least scorep 4.5.1) passes every argument that starts with `-` to
    scorep-config verbatim; scorep-config rejects `--` with `Unknown option: '--'` and the run
    never starts.

    Example:
        python -m scorep --cuda -- train.py

    Remedy:
    `python -m scorep --cuda train.py`

    Severity:
    fail for a `--` after `python -m scorep` (the run never starts); else pass.

    Fix safety:
    Safe: removes one word.
    """
    job: Job = facts["job"]
    out = []
    for cmd, launch in job.instrumented:
        assert launch.scorep is not None
        if launch.scorep.dashdash:
            sw = scorep_words(cmd)
            word = cmd.word_at(sw.dashdash[0]) if sw and sw.dashdash else None
            span = word.source if word is not None else None
            line = span.line if span is not None and span.file == cmd.site.file else cmd.line_of("--")
            origin = origin_evidence(job, cmd, sw.dashdash[0] if sw and sw.dashdash else None, "`--` written here")
            evidence = [ev(job, cmd.site, "launch"), origin] if origin is not None else [
                ev(job, cmd.site, "launch") if line == cmd.site.line else
                Evidence("--", job.rel(cmd.site.file), line, "launch")]
            out.append(fail("`--` after `python -m scorep` goes to scorep-config, which rejects it "
                            "(Unknown option: '--')", evidence, "scorep-drop-dashdash",
                            data=command_data(cmd) | {"token": "--", "token_line": line}))
    if not job.instrumented:
        return [_no_scorep(job)]
    return out or [passed("no `--` after `python -m scorep`")]


@check("SCP006", L, "several ranks share one experiment folder",
       needs=("job", "logscan"), remedies=("scorep-per-rank-dirs",), handles_failures=True)
def experiment_per_rank(facts: Facts) -> list[Outcome]:
    """What it does:
    For every instrumented launch that starts several measured processes at once (a
    backgrounded loop, srun/mpirun tasks, `torchrun --no-python python -m scorep`), checks that
    `SCOREP_EXPERIMENT_DIRECTORY` differs per rank; also reports collisions found in logs.
    Ranks are counted over every node (nodes × tasks per node): a fixed folder is shared
    across nodes too, and so is one named only by the node-local rank (LOCAL_RANK,
    SLURM_LOCALID) without the node or the global rank.

    Why is this bad?
    Unnamed runs all write `scorep-measurement-tmp`, and a fixed name is the same folder for
    every rank: the ranks collide ("File does already exist") and traces are lost or mixed.

    Example:
        for r in 0 1 2 3; do RANK=$r python -m scorep --cuda train.py & done

    Remedy:
    `SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_$r` for each rank.

    Severity:
    fail when several ranks write one experiment folder (the default, a fixed name, or one per
    node-local rank over several nodes), or the logs show the collision; else pass.

    Fix safety:
    Safe: sets one variable per rank.
    """
    job = facts.get("job")
    if isinstance(job, ProbeFailure):
        return [unknown(str(job), entities={"probe": "job"})]
    out: list[Outcome] = []
    collisions, _why = _logscan(facts, "experiment_collision")
    for m in collisions:
        out.append(fail("ranks collided on one Score-P experiment folder", _log_evidence(job, m),
                        "scorep-per-rank-dirs", data={"log": m}))
    background_single: dict[int, list[Any]] = {}
    for cmd, launch in job.instrumented:
        multi, why = multi_rank(job, cmd, launch)
        assert launch.scorep is not None
        if launch.scorep.mpi:  # Score-P's MPI adapter writes one experiment for all ranks, by design
            out.append(passed("Score-P measures the ranks as one MPI experiment (--mpi / --mpp=mpi)",
                              ev(job, cmd.site, "launch")))
            continue
        if not multi:
            if cmd.background and cmd.loop is None:
                background_single.setdefault(cmd.flow, []).append(cmd)
            continue
        out.extend(_shared_dir(job, cmd, why))
    for cmds in background_single.values():
        if len(cmds) < 2:
            continue
        dirs = [c.var("SCOREP_EXPERIMENT_DIRECTORY") for c in cmds]
        raws = [d.value if d is not None else None for d in dirs]
        if len(set(raws)) < len(raws):
            cmd = cmds[0]
            out.append(fail(f"{len(cmds)} backgrounded instrumented launches share the experiment folder "
                            f"{raws[0] or 'scorep-measurement-tmp'}", [ev(job, c.site, "launch") for c in cmds],
                            "scorep-per-rank-dirs",
                            data=command_data(cmd) | {"var": "SCOREP_EXPERIMENT_DIRECTORY", "value": raws[0],
                                                      "proposed": "scorep_rank_${RANK}", "rank_var": "RANK"}))
    if not job.instrumented:
        return out or [_no_scorep(job)]
    return out or [passed("every measured process writes its own experiment folder")]


def _spelled(var: Any) -> str:
    """The value as written, and where that hides the folder (`$BASE`, known when the job runs) what
    it is one level down: `$BASE (/scratch/$USER/scorep/vit_${SLURM_JOB_ID})`."""
    if var.spelling is None or var.spelling == var.raw.strip("\"'"):
        return str(var.raw)
    return f"{var.raw} ({var.spelling})"


def _shared_dir(job: Job, cmd: Any, why: str) -> list[Outcome]:
    var = cmd.var("SCOREP_EXPERIMENT_DIRECTORY")
    rank = rank_spelling(cmd) or "${RANK}"
    first = re.match(r"\$\{?(\w+)", rank)
    rank_var = first.group(1) if first else "RANK"
    said = f"the launch {why}" if why.startswith("starts") else why
    proposed = f"scorep_rank_{rank}"
    data = command_data(cmd) | {"var": "SCOREP_EXPERIMENT_DIRECTORY", "proposed": proposed, "rank_var": rank_var}
    launch_ev = ev(job, cmd.site, "launch", f"{cmd.site.text}  ({why})")
    if var is None:
        return [fail(f"the measured ranks share the default experiment folder (scorep-measurement-tmp): {said}",
                     launch_ev, "scorep-per-rank-dirs", data=data | {"value": None})]
    lay = layout(job, cmd, cmd.instrumented)
    if var.varies and lay.several_nodes and same_on_every_node(var):
        return [fail(f"SCOREP_EXPERIMENT_DIRECTORY={var.raw} names the rank on its node only, so the ranks of the "
                     f"{lay.nodes} nodes write the same folders: {said}", [launch_ev, var_evidence(job, var)],
                     "scorep-per-rank-dirs", data=data | {"value": var.raw, "setting": var_data(var),
                                                          "nodes": lay.nodes})]
    if var.varies:
        return [passed(f"SCOREP_EXPERIMENT_DIRECTORY={_spelled(var)} differs per rank", var_evidence(job, var))]
    note = ""
    if any(r in ("SLURM_PROCID", "RANK", "LOCAL_RANK", "SLURM_LOCALID") for r in var.refs):
        note = " (the job script expands the rank variable once, before the tasks start)"
    return [fail(f"every rank writes SCOREP_EXPERIMENT_DIRECTORY={_spelled(var)}{note}: {said}",
                 [launch_ev, var_evidence(job, var)], "scorep-per-rank-dirs",
                 data=data | {"value": var.raw, "setting": var_data(var)})]


@check("SCP007", L, "SCOREP_CUDA_ENABLE entries outside the accepted set",
       needs=("job",), remedies=("scorep-cuda-enable-fix",))
def cuda_enable_entries(facts: Facts) -> list[Outcome]:
    """What it does:
    Splits `SCOREP_CUDA_ENABLE` as Score-P does (at space , : ; with `~x` removing x) and checks
    every entry against runtime, driver, kernel, kernel_serial, kernel_counter,
    kernel_callsite, memcpy, sync, idle, pure_idle, gpumemusage, references, dontflushatexit,
    flushatexit, default/yes/1 (or none/no for the whole value).

    Why is this bad?
    Score-P rejects the whole variable on the first unknown entry ("Value 'kernels' not in
    accepted set") and the CUDA features are not what you asked for.

    Example:
        export SCOREP_CUDA_ENABLE=kernels,memcopy,sync

    Remedy:
    `export SCOREP_CUDA_ENABLE=kernel,memcpy,sync`

    Severity:
    fail for entries Score-P does not accept; warn for idle with pure_idle; unknown when the
    value is only known at run time; else pass.

    Fix safety:
    Safe: corrects the list.
    """
    job: Job = facts["job"]
    out: list[Outcome] = []
    for var, _cmds in settings(job, "SCOREP_CUDA_ENABLE"):
        where = var_evidence(job, var)
        if var.value is None:
            out.append(unknown(f"SCOREP_CUDA_ENABLE={var.raw} cannot be known before the job runs", where))
            continue
        parsed = parse_cuda_enable(var.value)
        if parsed.invalid:
            proposed = parsed.proposed()
            out.append(fail(f"SCOREP_CUDA_ENABLE has entries Score-P does not accept: {', '.join(parsed.invalid)} "
                            f"(use {proposed})", where, "scorep-cuda-enable-fix",
                            data=var_data(var) | {"invalid": list(parsed.invalid), "proposed": proposed}))
            continue
        if parsed.conflicting:
            out.append(warn("SCOREP_CUDA_ENABLE asks for both idle and pure_idle, which exclude each other", where,
                            "scorep-cuda-enable-fix", data=var_data(var) | {
                                "invalid": ["pure_idle"], "proposed": parsed.proposed()}))
            continue
        out.append(passed(f"SCOREP_CUDA_ENABLE={var.value} is valid", where))
    if not out:
        return [passed("SCOREP_CUDA_ENABLE is not set")] if job.uses_scorep else [_no_scorep(job)]
    return out


@check("SCP008", L, "a second CUPTI user beside Score-P's CUDA adapter",
       needs=("job",), remedies=("manual-second-cupti",))
def second_cupti_user(facts: Facts) -> list[Outcome]:
    """What it does:
    Where Score-P records CUDA (`python -m scorep --cuda`), looks for another CUPTI subscriber:
    the PyTorch profiler (`torch.profiler.profile`, `ProfilerActivity.CUDA`) in the training
    code, a kineto daemon (`KINETO_USE_DAEMON`, `dynolog`), or nsys/ncu/nvprof wrapping the launch.

    Why is this bad?
    CUPTI allows one subscriber per process. The second one fails
    (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) or steals the activity records: kernels go
    missing from the Score-P trace, or the profiler silently records nothing.

    Example:
        with torch.profiler.profile(activities=[ProfilerActivity.CUDA]): ...   # under python -m scorep --cuda

    Remedy:
    Use one tool per run: turn the PyTorch profiler / kineto daemon / nsys off for Score-P runs.

    Severity:
    fail when a profiler wraps a Score-P CUDA launch (two CUPTI users in one process); warn for
    the kineto daemon, dynolog or torch.profiler beside Score-P's CUDA adapter; skip without the
    adapter; else pass.

    Fix safety:
    Manual.
    """
    job: Job = facts["job"]
    cuda_cmds = [(c, lch) for c, lch in job.instrumented if lch.scorep is not None and lch.scorep.cuda]
    if not cuda_cmds:
        return [skip("Score-P's CUDA adapter is not used (no `python -m scorep --cuda`)")]
    out: list[Outcome] = []
    for cmd, _launch in cuda_cmds:
        tools = [w for w in cmd.wrappers if w.name in ("nsys", "ncu", "nv-nsight-cu-cli", "nvprof", "dlprof")]
        for w in tools:
            out.append(fail(f"{w.name} wraps a Score-P CUDA launch: two CUPTI users in one process",
                            ev(job, cmd.site, "launch"), "manual-second-cupti",
                            data=command_data(cmd) | {"kind": w.name}))
        daemon = cmd.var("KINETO_USE_DAEMON")
        if daemon is not None and (daemon.value or "").strip() not in ("", "0", "false", "False"):
            out.append(warn("KINETO_USE_DAEMON is set for a Score-P CUDA launch: the kineto daemon is a second "
                            "CUPTI user", var_evidence(job, daemon), "manual-second-cupti",
                            data=var_data(daemon) | {"kind": "kineto-daemon"}))
    for c in job.commands:
        if c.argv and c.argv[0].rsplit("/", 1)[-1] in ("dynolog", "dyno"):
            out.append(warn("the job starts dynolog, whose kineto traces use CUPTI beside Score-P",
                            ev(job, c.site, "command"), "manual-second-cupti",
                            data=command_data(c) | {"kind": "dynolog"}))
    for s in worker_scripts(job):
        # one finding per profiler line: its `profile(...)` call and its CUDA activity are one site
        unique = list({(site.file, site.line): site for site in s.profilers}.values())
        for site in unique[:3]:
            out.append(warn("the PyTorch profiler (kineto/CUPTI) runs in a script that Score-P measures with --cuda",
                            ev(job, site, "profiler"), "manual-second-cupti",
                            data=site.data() | {"kind": "torch.profiler"}))
    return out or [passed("no second CUPTI user next to Score-P's CUDA adapter")]

"""Remedies for the Score-P settings of a job (SCP002-SCP007): flags and environment.

Each reads the job through the checks' own model (`doctor.remedy.spans.job_of`) and
edits the exact span of the word or value the check read (field guide errors 6, 9 and
10): where a value came through a variable, the assignment is edited; where it is set
more than once, the setting that wins for the launch. The values they write come from
`doctor.jobfolder.scorep_values`, as the checks' messages do. All are `safe`: they
change how Score-P measures, not what the job computes.
"""

from __future__ import annotations

import re
import shlex

from doctor.jobfolder import argv as argvmod
from doctor.jobfolder.model import Command, EnvVar, Job, Span
from doctor.jobfolder.queries import TASK_RANKS, layout, rank_spelling, same_on_every_node, settings
from doctor.jobfolder.scorep_values import (
    PROPOSED_TOTAL_MEMORY,
    TOTAL_MEMORY_LIMIT,
    SizeError,
    format_size,
    parse_cuda_enable,
    parse_size,
    proposed_cuda_buffer,
)
from doctor.model import Phase, Safety
from doctor.registry import manual_remedy, remedy
from doctor.remedy.draft import RemedyContext
from doctor.remedy.model import ENV, SCRIPT_LINE, CannotPlan
from doctor.remedy.spans import (
    SpanEdits,
    at_targets,
    chain_root,
    for_double_quotes,
    in_double_quotes,
    job_of,
    scorep_words,
    set_values,
    value_span,
    where,
    word_span,
)

TOTAL_MEMORY = PROPOSED_TOTAL_MEMORY


def _size(value: str | None) -> int | None:
    try:
        return parse_size(value) if value is not None else None
    except SizeError:
        return None


@remedy("scorep-total-memory", Safety.SAFE,
        f"Set SCOREP_TOTAL_MEMORY to {TOTAL_MEMORY}: Score-P clamps 4 GiB and above",
        phase=Phase.FLAGS)
def total_memory(ctx: RemedyContext) -> None:
    """Replace each SCOREP_TOTAL_MEMORY value that is 4 GiB or more, or unparseable, with 3500M."""
    def proposed(var: EnvVar) -> str | None:
        if var.value is None:  # SCP003 says unknown: where nothing can be edited, say where to set it
            return TOTAL_MEMORY if var.unfollowed else None
        size = _size(var.value)
        return TOTAL_MEMORY if size is None or size > TOTAL_MEMORY_LIMIT else None

    set_values(ctx, "SCOREP_TOTAL_MEMORY", proposed)


def _buffer_wanted(ctx: RemedyContext) -> int:
    """The size the findings propose (SCP004, ART004 carry it), else the proposal for 1M."""
    best = 0
    for t in ctx.targets():
        for key in ("proposed_bytes", "proposed_buffer", "minimum"):
            value = t.data.get(key)
            if isinstance(value, int) and value:
                best = max(best, value if key == "proposed_bytes" else proposed_cuda_buffer(value))
    return best or proposed_cuda_buffer(None)


@remedy("scorep-cuda-buffer", Safety.SAFE,
        "Set SCOREP_CUDA_BUFFER above CUPTI's proposed minimum", phase=Phase.FLAGS)
def cuda_buffer(ctx: RemedyContext) -> None:
    """Raise SCOREP_CUDA_BUFFER where the launch's setting is, else export it before the launch.

    The size is `scorep_values.proposed_cuda_buffer` of CUPTI's proposed minimum (64M for the
    field guide's 8889000), as SCP004 and ART004 say.
    """
    want = _buffer_wanted(ctx)
    value = format_size(want)
    job = job_of(ctx)
    found = settings(job, "SCOREP_CUDA_BUFFER")
    if found:
        set_values(ctx, "SCOREP_CUDA_BUFFER", lambda v: value if (_size(v.value) or 0) < want else None)
        return
    launches = [(c, lch) for c, lch in job.instrumented]
    if not launches:
        raise CannotPlan("no `python -m scorep` launch found to set SCOREP_CUDA_BUFFER for",
                         [f"Add `export SCOREP_CUDA_BUFFER={value}` to the job script before the "
                          "instrumented launch."])
    cmd = at_targets(ctx, launches)[0][0]
    edits = SpanEdits(ctx)
    line = f"export SCOREP_CUDA_BUFFER={value}"
    anchor = _last_scorep_setting(cmd)
    if anchor is not None:  # next to the job's other Score-P settings, where they reach the launch
        doc = edits.doc(anchor.file)
        end = doc.line_of(max(anchor.start, anchor.end - 1))
        edits.insert_lines_before(anchor.file, end + 1, [line], indent=doc.indent_of(anchor.line))
    else:
        root = chain_root(cmd)
        edits.insert_lines_before(root.site.file, root.statement_line or root.site.line, [line])
    _forward_to_other_hosts(job, edits, cmd, "SCOREP_CUDA_BUFFER")
    edits.write(ENV, line)


def _forward_to_other_hosts(job: Job, edits: SpanEdits, cmd: Command, name: str) -> None:
    """Open MPI's mpirun hands the ranks on other hosts only the variables its `-x` names: where
    the launch lists its variables that way over several hosts, a new one goes on the list."""
    for i, word in enumerate(cmd.argv):
        if argvmod.base(word) not in ("mpirun", "mpiexec", "orterun"):
            continue
        forwarded = [cmd.argv[k + 1].split("=", 1)[0] for k in range(i, len(cmd.argv) - 1) if cmd.argv[k] == "-x"]
        if forwarded and name not in forwarded and layout(job, cmd, cmd.instrumented).several_nodes:
            span = cmd.argv_words[i].span
            edits.insert(span.file, span.end, span.line, f" -x {name}")
        return


def _last_scorep_setting(cmd: Command) -> Span | None:
    """The last `export SCOREP_*=...` statement (its span) that the launch's environment has from a script."""
    best: EnvVar | None = None
    for var in cmd.env.values():
        if not var.name.startswith("SCOREP_") or var.site is None or var.span is None or var in cmd.inline:
            continue
        if var.site.file == cmd.site.file and var.site.line >= cmd.site.line:
            continue
        if best is None or best.site is None or (var.site.file, var.site.line) > (best.site.file, best.site.line):
            best = var
    return best.span if best is not None else None


@remedy("scorep-add-cuda", Safety.SAFE,
        "Add --cuda to python -m scorep so the CUDA adapter is loaded",
        phase=Phase.FLAGS)
def add_cuda(ctx: RemedyContext) -> None:
    """Insert `--cuda` right after `-m scorep` (or turn `--nocuda` into `--cuda`), where it is written."""
    job = job_of(ctx)
    edits = SpanEdits(ctx)
    done = 0
    for cmd, launch in at_targets(ctx, job.instrumented):
        sw = scorep_words(cmd)
        if sw is None or (launch.scorep is not None and launch.scorep.cuda):
            continue
        nocuda = next((i for i in sw.options if cmd.argv[i] == "--nocuda"), None)
        if nocuda is not None:
            edits.replace(word_span(job, cmd, cmd.argv_words[nocuda], "--nocuda"), "--cuda")
        else:
            span = word_span(job, cmd, cmd.argv_words[sw.scorep], "`-m scorep`")
            edits.insert(span.file, span.end, span.line, " --cuda")
        done += 1
    if done:
        edits.write(SCRIPT_LINE, "python -m scorep ... -> python -m scorep --cuda ...")
    else:
        ctx.note = "every python -m scorep launch already has --cuda"


@remedy("scorep-drop-dashdash", Safety.SAFE,
        "Remove the `--` after python -m scorep (scorep-config rejects it)",
        phase=Phase.FLAGS)
def drop_dashdash(ctx: RemedyContext) -> None:
    job = job_of(ctx)
    edits = SpanEdits(ctx)
    done = 0
    for cmd, _launch in at_targets(ctx, job.instrumented):
        sw = scorep_words(cmd)
        for i in sw.dashdash if sw is not None else ():
            edits.delete_word(word_span(job, cmd, cmd.argv_words[i], "the `--`"))
            done += 1
    if done:
        edits.write(SCRIPT_LINE, "remove `--` from python -m scorep")
    else:
        ctx.note = "no `--` after python -m scorep"


@remedy("scorep-per-rank-dirs", Safety.SAFE,
        "Give every rank its own SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_N",
        phase=Phase.LAUNCH, after=["per-rank-launch"])
def per_rank_dirs(ctx: RemedyContext) -> None:
    """Name each rank's folder from what differs per rank (its loop variable, RANK, SLURM_PROCID),
    in the setting that wins for the launch: the `env`/prefix assignment on the command, or the
    wrapper script's own export; else a prefix on the command itself."""
    from doctor.jobfolder.queries import multi_rank

    job = job_of(ctx)
    edits = SpanEdits(ctx)
    done = 0
    for cmd, launch in at_targets(ctx, job.instrumented):
        several, _why = multi_rank(job, cmd, launch)
        var = cmd.var("SCOREP_EXPERIMENT_DIRECTORY")
        if var is not None and var.varies and not (layout(job, cmd, launch).several_nodes
                                                   and same_on_every_node(var)):
            continue
        spawner = (cmd.launch.spawner if cmd.launch is not None else None)
        if spawner is not None and spawner.kind != "wrapper-script" and not spawner.no_python:
            if "per-rank-launch" in ctx.planned:
                continue
            raise CannotPlan("torchrun spawns the ranks, so one wrapper measures them all",
                             ["Apply per-rank-launch, which gives every rank its own python -m scorep and folder: "
                              f"gpu-doctor fix {shlex.quote(str(ctx.case.root or '.'))} --only per-rank-launch "
                              "--apply --unsafe"])
        if not several and not cmd.background:
            continue
        task_rank = _task_rank(cmd)
        rank = task_rank or rank_spelling(cmd)
        if rank is None:
            raise CannotPlan(f"{where(job, None, cmd)}: cannot tell which rank this launch runs",
                             ["Start each rank with its own folder: SCOREP_EXPERIMENT_DIRECTORY="
                              "scorep_rank_$RANK python -m scorep ... (or use gpu-doctor launch)."])
        value = f"scorep_rank_{rank}"
        base = experiment_base(var)
        span = value_span(var) if var is not None else None
        # Score-P creates the experiment folder but not its parents: the base is made first
        if task_rank:  # the batch shell expands the line once: name the folder in each task's shell
            first = cmd.argv_words[len(cmd.argv) - len(argvmod.strip_wrappers(list(cmd.argv))[1])].span
            make = 'mkdir -p "$SCOREP_EXPERIMENT_DIRECTORY" && ' if base else ""
            value = f"$SCOREP_EXPERIMENT_DIRECTORY/{value}" if base else value
            edits.insert(first.file, first.start, first.line,
                         f"bash -c '{make}SCOREP_EXPERIMENT_DIRECTORY={value} exec \"$@\"' bash ")
            if base:  # each task's shell reads the base: the other hosts' tasks need it too
                _forward_to_other_hosts(job, edits, cmd, "SCOREP_EXPERIMENT_DIRECTORY")
        elif var is not None and span is not None and _per_rank_scope(cmd, var, rank):
            edits.replace(span, f"{base}/{value}" if base else value)
            if base and var.site is not None:
                edits.insert_lines_before(var.site.file, var.site.line, [f'mkdir -p "{base}"'])
        elif var is None or _on_command(cmd, var) is False:
            head = cmd.span
            assert head is not None
            # The folder is named from the exported value (`${SCOREP_EXPERIMENT_DIRECTORY}/...`), not
            # from its spelling (`/scratch/$USER/.../vit_${SLURM_JOB_ID}/...`) nor from `$BASE`: the
            # value is the one the batch shell computed and every task has it, while `$BASE` unexported
            # is empty in a task and a spelling with `$(date ...)` or `$RANDOM` in it would differ per task.
            start = _command_start(edits, cmd, head)
            # inside `bash -c "..."` the batch shell would expand `${RANK}` once, for every task: escaped
            # text means in the string what it means on its own line
            quoted = for_double_quotes if in_double_quotes(edits.doc(head.file).parse_text, start) else str
            if base:
                value = f"${{SCOREP_EXPERIMENT_DIRECTORY}}/{value}"
                line = cmd.statement_line or head.line
                doc = edits.doc(head.file)
                # a line of its own: inside the string only where the string spans that line
                own = for_double_quotes if in_double_quotes(doc.parse_text, doc.line_start(line)) else str
                edits.insert_lines_before(head.file, line, [own('mkdir -p "$SCOREP_EXPERIMENT_DIRECTORY"')])
            edits.insert(head.file, start, head.line, quoted(f"SCOREP_EXPERIMENT_DIRECTORY={value} "))
        else:
            at = f"{job.rel(var.site.file)}:{var.site.line}" if var.site else where(job, None, cmd)
            raise CannotPlan(f"{at}: SCOREP_EXPERIMENT_DIRECTORY={var.raw} is not a value "
                             "gpu-doctor can edit", [f"Set SCOREP_EXPERIMENT_DIRECTORY={value} there by hand."])
        done += 1
    if done:
        edits.write(ENV, "SCOREP_EXPERIMENT_DIRECTORY=[base/]scorep_rank_N for each rank")
    elif not ctx.note:
        ctx.note = "every launch already has its own folder, or per-rank-launch writes them"


def _command_start(edits: SpanEdits, cmd: Command, head: Span) -> int:
    """Where the command's first word starts on its line (after the line's indentation)."""
    words = cmd.argv_words
    first = words[0].span if words else None
    if first is None or first.file != head.file or not head.start <= first.start <= head.end:
        return head.start
    lead = edits.doc(head.file).parse_text[head.start:first.start]
    return first.start if lead.strip() == "" else head.start


def experiment_base(var: EnvVar | None) -> str | None:
    """The folder the job names for its measurements, as written where it is set
    (`/scratch/$USER/scorep/run_$SLURM_JOB_ID`, or `$BASE`), when it is a path: each rank's folder
    goes under it, never into the submit folder (traces of several GB belong where the user put
    them). A bare name (`scorep_run`) is a folder in the submit folder itself: the ranks' folders
    take its place there.

    Whether it is a path is read from the value, or for one known only when the job runs from its
    spelling one level down (`$BASE` set by `BASE=/scratch/$USER/...`): the written `$BASE` alone
    says nothing, and a shell variable the batch script did not export is not even there in a task."""
    if var is None or not var.raw:
        return None
    if "/" not in var.spelled.rstrip("/") and "/" not in var.raw.rstrip("/"):
        return None
    return var.raw.rstrip("/")


def _task_launcher_on_line(cmd: Command) -> str | None:
    """The srun/mpirun on this command's own line (the batch shell expands that line once)."""
    return next((argvmod.base(a) for a in cmd.argv if argvmod.base(a) in TASK_RANKS), None)


def _task_rank(cmd: Command) -> str | None:
    """For `srun ... python -m scorep` or `mpirun ... python -m scorep` on the command itself (not a
    loop variable, not a per-task shell): each task's rank as that task's own shell spells it."""
    if cmd.loop is not None or cmd.parent is not None:
        return None
    name = _task_launcher_on_line(cmd)
    return TASK_RANKS[name] if name is not None and any(w.name == name for w in cmd.wrappers) else None


def _on_command(cmd: Command, var: EnvVar) -> bool:
    """Whether `var` is set on the command itself (a prefix or `env X=`)."""
    return var in cmd.inline


def _per_rank_scope(cmd: Command, var: EnvVar, rank: str) -> bool:
    """Whether a value written where `var` is set is read once per rank (so `${RANK}` differs)."""
    if var.site is None:
        return False
    if _on_command(cmd, var):
        return True
    if var.site.file != cmd.site.file:
        return False
    if cmd.parent is not None:  # the wrapper script: every line runs in each worker
        return True
    if cmd.per_task and _task_launcher_on_line(cmd) is None:
        # a script srun/mpirun runs once per task: its export is read in each task, once the
        # rank it names is set there (a wrapper's own `export RANK=...` must come first)
        named = re.fullmatch(r"\$\{?(\w+)\}?", rank)
        own = cmd.env.get(named.group(1)) if named else None
        return own is None or own.site is None or own.site.file != var.site.file or own.site.line < var.site.line
    return cmd.loop is not None and cmd.loop.site.line <= var.site.line <= cmd.site.line


@remedy("scorep-cuda-enable-fix", Safety.SAFE,
        "Keep only the SCOREP_CUDA_ENABLE entries Score-P accepts", phase=Phase.FLAGS)
def cuda_enable_fix(ctx: RemedyContext) -> None:
    """Write `scorep_values.CudaEnable.proposed()`, the list SCP007 names, where the value is set."""
    def proposed(var: EnvVar) -> str | None:
        if var.value is None:
            return None
        parsed = parse_cuda_enable(var.value)
        return parsed.proposed() if parsed.invalid or parsed.conflicting else None

    set_values(ctx, "SCOREP_CUDA_ENABLE", proposed)


manual_remedy(
    "manual-scorep-install", "Install or load Score-P with CUDA support and its Python bindings",
    steps=(
        "Load Score-P the way your site provides it, e.g.:  module load scorep   (or spack load scorep+cuda)",
        "Check it is on PATH:  scorep-config --version",
        "Check CUDA support:  scorep-info config-summary | grep -i 'CUDA support'   (must say yes)",
        "Install the Python bindings into the job's interpreter:  python -m pip install scorep",
        "Check them:  python -c 'import scorep'",
        "Then run gpu-doctor again on the job folder.",
    ),
)

manual_remedy(
    "manual-second-cupti", "Keep one CUPTI user: turn off the PyTorch profiler while Score-P records CUDA",
    steps=(
        "CUPTI serves one activity subscriber per process; Score-P's CUDA adapter and the PyTorch "
        "profiler (kineto) compete for it.",
        "In the training script, disable torch.profiler.profile(...) / torch.autograd.profiler "
        "(use_cuda=True) for runs measured with python -m scorep --cuda.",
        "In the job script, remove KINETO_USE_DAEMON=1 / the dynolog daemon for these runs:  unset "
        "KINETO_USE_DAEMON",
        "Or measure with one tool at a time: drop --cuda from python -m scorep when you need the "
        "PyTorch profiler.",
    ),
)

"""Remedies for the Score-P settings of a job (SCP001-SCP008): flags and environment.

Each edits the job script in place, on the exact span of the word or value it
fixes (field guide errors 6, 9 and 10). All are `safe`: they change how Score-P
measures, not what the job computes.
"""

from __future__ import annotations

import re

from doctor.model import Phase, Safety
from doctor.registry import manual_remedy, remedy
from doctor.remedy.draft import RemedyContext
from doctor.remedy.edits import at_lines, delete_word, insert_export, launch_files, parse_size, shell_files
from doctor.remedy.launchline import ScorepLaunch
from doctor.remedy.model import ENV, SCRIPT_LINE, CannotPlan
from doctor.remedy.shell import Assignment, ShellScript

TOTAL_MEMORY = "3500M"
CLAMP = 4 * 1024 ** 3  # Score-P clamps SCOREP_TOTAL_MEMORY at 4 GiB and above
CUDA_FEATURES = ("runtime", "driver", "kernel", "kernel_serial", "kernel_counter", "kernel_callsite",
                 "memcpy", "sync", "idle", "pure_idle", "gpumemusage", "references",
                 "dontflushatexit", "flushatexit", "default", "yes", "1")
_ALIASES = {"kernels": "kernel", "memcopy": "memcpy", "memcpys": "memcpy", "synchronization": "sync",
            "synchronize": "sync", "true": "yes", "on": "yes", "memory": "gpumemusage"}


@remedy("scorep-total-memory", Safety.SAFE,
        f"Set SCOREP_TOTAL_MEMORY to {TOTAL_MEMORY}: Score-P clamps 4 GiB and above",
        phase=Phase.FLAGS, fixes=["SCP003"])
def total_memory(ctx: RemedyContext) -> None:
    """Replace each SCOREP_TOTAL_MEMORY value that is 4 GiB or more, or unparseable, with 3500M."""
    seen = 0
    for path in shell_files(ctx):
        doc = ctx.read_doc(path)
        for a in ShellScript(doc).assignments("SCOREP_TOTAL_MEMORY"):
            seen += 1
            size = parse_size(a.value)
            if "$" in a.value:
                ctx.note = f"SCOREP_TOTAL_MEMORY={a.value} is only known when the job runs; set it to " \
                           f"{TOTAL_MEMORY} by hand"
                continue
            if size is not None and size < CLAMP:
                continue
            doc.replace(a.value_start, a.value_end, TOTAL_MEMORY)
            ctx.write_doc(path, doc, ENV, f"SCOREP_TOTAL_MEMORY={a.value} -> {TOTAL_MEMORY}", a.word_line)
            doc = ctx.read_doc(path)
    if not seen:
        _fix_on_finding_lines(ctx, "SCOREP_TOTAL_MEMORY", TOTAL_MEMORY,
                              lambda v: (s := parse_size(v)) is None or s >= CLAMP)


def _fix_on_finding_lines(ctx: RemedyContext, name: str, value: str, bad: object) -> None:
    """Where no shell assignment holds it (`#SBATCH --export=...`), fix NAME=... on the finding's line."""
    pattern = re.compile(rf"(?<![A-Za-z0-9_]){name}=([^\s,;\"']+)")
    for t in ctx.targets():
        if t.file is None or t.line is None or t.file.suffix == ".py":
            continue
        doc = ctx.read_doc(t.file)
        if t.line > doc.line_count:
            continue
        start = doc.line_start(t.line)
        m = pattern.search(doc.line_text(t.line))
        if m and callable(bad) and bad(m.group(1)):
            doc.replace(start + m.start(1), start + m.end(1), value)
            ctx.write_doc(t.file, doc, ENV, f"{name}={m.group(1)} -> {value}", t.line)
            return
    ctx.note = f"no {name} setting to change was found"


def cuda_buffer_for(proposal: int | None) -> str:
    """The smallest power-of-two MiB at or above CUPTI's proposed minimum (8889000 -> 16M).

    Without a proposal: 64M, the field guide's value for 8 ranks.
    """
    if not proposal:
        return "64M"
    mib = 2
    while mib * 1024 ** 2 < proposal:
        mib *= 2
    return f"{mib}M"


def _proposal(ctx: RemedyContext) -> int | None:
    best = None
    for t in ctx.targets():
        values = [t.data.get(k) for k in ("proposed_buffer", "proposed", "proposal", "proposed_minimum",
                                            "minimum", "needed")]
        values += [(t.data.get("values") or {}).get("proposed_buffer")] if isinstance(
            t.data.get("values"), dict) else []
        m = re.search(r"SCOREP_CUDA_BUFFER=(\d+\w*)", t.text)
        values.append(m.group(1) if m else None)
        for v in values:
            size = v if isinstance(v, int) else parse_size(str(v)) if v is not None else None
            if size and (best is None or size > best):
                best = size
    return best


@remedy("scorep-cuda-buffer", Safety.SAFE,
        "Set SCOREP_CUDA_BUFFER above CUPTI's proposed minimum", phase=Phase.FLAGS, fixes=["SCP004"])
def cuda_buffer(ctx: RemedyContext) -> None:
    """Raise SCOREP_CUDA_BUFFER where it is set, else export it before the instrumented launch.

    The size: the check's own proposal where the finding carries one (SCP004 proposes a
    power of two at least 4x CUPTI's minimum: 64M for the field guide's 8889000, the
    guide's own choice), else the smallest power-of-two MiB at or above CUPTI's proposed
    minimum (8889000 -> 16M), else 64M.
    """
    value = cuda_buffer_for(_proposal(ctx))
    want = parse_size(value) or 0
    changed = False
    for path in shell_files(ctx):
        doc = ctx.read_doc(path)
        for a in ShellScript(doc).assignments("SCOREP_CUDA_BUFFER"):
            if "$" in a.value or (parse_size(a.value) or 0) >= want:
                changed = True  # already big enough: nothing to raise here
                ctx.note = f"SCOREP_CUDA_BUFFER={a.value} is already at least {value}"
                continue
            doc.replace(a.value_start, a.value_end, value)
            ctx.write_doc(path, doc, ENV, f"SCOREP_CUDA_BUFFER={a.value} -> {value}", a.word_line)
            doc = ctx.read_doc(path)
            changed = True
    if changed:
        return
    files = launch_files(ctx)
    if not files:
        raise CannotPlan("no `python -m scorep` launch found to set SCOREP_CUDA_BUFFER for",
                         [f"Add `export SCOREP_CUDA_BUFFER={value}` to the job script before the "
                          "instrumented launch."])
    path, doc, script, launches = files[0]
    line = insert_export(doc, script, launches[0], "SCOREP_CUDA_BUFFER", value)
    ctx.write_doc(path, doc, ENV, f"export SCOREP_CUDA_BUFFER={value}", line)


@remedy("scorep-add-cuda", Safety.SAFE,
        "Add --cuda to python -m scorep so the CUDA adapter is loaded",
        phase=Phase.FLAGS, fixes=["SCP002", "ART002"])
def add_cuda(ctx: RemedyContext) -> None:
    """Insert `--cuda` right after `-m scorep` (or turn `--nocuda` into `--cuda`)."""
    lines = {t.line for t in ctx.targets() if t.line}
    for path, doc, _script, launches in launch_files(ctx):
        todo = [la for la in at_lines(launches, lines) if not la.has_option("--cuda")]
        for la in todo:
            nocuda = next((o for o in la.options if o.text == "--nocuda"), None)
            if nocuda is not None:
                doc.replace(nocuda.start, nocuda.end, "--cuda")
            else:
                doc.insert(la.scorep.end, " --cuda")
        if todo:
            ctx.write_doc(path, doc, SCRIPT_LINE, "python -m scorep ... -> python -m scorep --cuda ...",
                          todo[0].cmd.line)
    if not ctx.changes:
        ctx.note = "every python -m scorep launch already has --cuda"


@remedy("scorep-drop-dashdash", Safety.SAFE,
        "Remove the `--` after python -m scorep (scorep-config rejects it)",
        phase=Phase.FLAGS, fixes=["SCP005"])
def drop_dashdash(ctx: RemedyContext) -> None:
    for path, doc, _script, launches in launch_files(ctx):
        words = [w for la in launches for w in la.dashdash]
        for w in words:
            delete_word(doc, w)
        if words:
            ctx.write_doc(path, doc, SCRIPT_LINE, "remove `--` from python -m scorep",
                          doc.line_of(words[0].start))


@remedy("scorep-per-rank-dirs", Safety.SAFE,
        "Give every rank its own SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_N",
        phase=Phase.LAUNCH, after=["per-rank-launch"], fixes=["SCP006"])
def per_rank_dirs(ctx: RemedyContext) -> None:
    """Prefix each rank's launch with its own folder, named from the loop variable or RANK."""
    from doctor.remedy.launchline import wrapped_torchrun

    for path, doc, script, launches in launch_files(ctx):
        for la in launches:
            if wrapped_torchrun(la, path.parent) is not None:
                if "per-rank-launch" in ctx.planned:
                    continue
                raise CannotPlan("torchrun spawns the ranks, so one wrapper measures them all",
                                 ["Apply per-rank-launch: gpu-doctor fix --only per-rank-launch --apply "
                                  "--unsafe"])
            prefix = script.prefix_assignments(la.cmd)
            rank = _rank_expression(la, prefix)
            if rank is None:
                raise CannotPlan(f"{path.name}:{la.cmd.line}: cannot tell which rank this launch runs",
                                 ["Start each rank with its own folder: SCOREP_EXPERIMENT_DIRECTORY="
                                  "scorep_rank_$RANK python -m scorep ... (or use gpu-doctor launch)."])
            value = f"scorep_rank_{rank}"
            current = next((a for a in prefix if a.name == "SCOREP_EXPERIMENT_DIRECTORY"), None)
            if current is not None:
                if current.value == value or rank in current.value:
                    continue
                doc.replace(current.value_start, current.value_end, value)
            else:
                doc.insert(la.cmd.start, f"SCOREP_EXPERIMENT_DIRECTORY={value} ")
            ctx.write_doc(path, doc, ENV, f"SCOREP_EXPERIMENT_DIRECTORY={value} for each rank", la.cmd.line)
            doc = ctx.read_doc(path)
    if not ctx.changes and not ctx.note:
        ctx.note = "every launch already has its own folder, or per-rank-launch writes them"


def _rank_expression(la: ScorepLaunch, prefix: list[Assignment]) -> str | None:
    """How the launch's own rank is spelled: its loop variable, else the value it gives RANK."""
    if la.cmd.loops:
        return "${" + la.cmd.loops[-1] + "}"
    for a in prefix:
        if a.name == "RANK" and a.value:
            return a.word.raw.split("=", 1)[1]
    return None


@remedy("scorep-cuda-enable-fix", Safety.SAFE,
        "Keep only the SCOREP_CUDA_ENABLE entries Score-P accepts", phase=Phase.FLAGS, fixes=["SCP007"])
def cuda_enable_fix(ctx: RemedyContext) -> None:
    for path in shell_files(ctx):
        doc = ctx.read_doc(path)
        for a in ShellScript(doc).assignments("SCOREP_CUDA_ENABLE"):
            fixed = corrected_cuda_enable(a.value)
            if fixed != a.value and "$" not in a.value:
                doc.replace(a.value_start, a.value_end, fixed)
                ctx.write_doc(path, doc, ENV, f"SCOREP_CUDA_ENABLE={a.value} -> {fixed}", a.word_line)
                doc = ctx.read_doc(path)


def corrected_cuda_enable(value: str) -> str:
    """Map each unknown entry to its nearest accepted one (`kernels` -> `kernel`), dropping the rest."""
    import difflib

    seps = re.findall(r"[\s,:;]+", value)
    sep = seps[0] if seps else ","
    out: list[str] = []
    for entry in (e for e in re.split(r"[\s,:;]+", value) if e):
        neg, name = ("~", entry[1:]) if entry.startswith("~") else ("", entry)
        key = name.lower()
        if key not in CUDA_FEATURES:
            key = _ALIASES.get(key) or next(iter(difflib.get_close_matches(key, CUDA_FEATURES, 1, 0.75)), "")
        if key and neg + key not in out:
            out.append(neg + key)
    return sep.join(out) or "default"


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
    fixes=("SCP001",),
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
    fixes=("SCP008",),
)

"""The parsed job folder: frozen values that cross from the analysers to the checks.

Every place is a `Site` (absolute file, 1-based line, the source text), so a
finding can always say file:line and a remedy knows what to edit.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from doctor.model import Evidence


@dataclass(frozen=True)
class Site:
    """A place in a file: absolute path, 1-based line, the text found there."""

    file: str
    line: int
    text: str

    def evidence(self, root: str | None, label: str | None = None, text: str | None = None) -> Evidence:
        return Evidence(text if text is not None else self.text, display_path(self.file, root),
                        self.line, label)

    def data(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "text": self.text}


def display_path(path: str, root: str | None) -> str:
    """`path` relative to the job folder when inside it, else absolute."""
    if root:
        try:
            rel = os.path.relpath(path, root)
        except ValueError:
            return path
        if not rel.startswith(".."):
            return rel
    return path


@dataclass(frozen=True)
class Span:
    """Where a shell word or value is written: character offsets in the file's text, 1-based line/column."""

    file: str
    start: int
    end: int
    line: int
    col: int
    end_line: int
    end_col: int

    def data(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "col": self.col, "end_line": self.end_line,
                "end_col": self.end_col}


@dataclass(frozen=True)
class Piece:
    """Part of an expanded word. `span` is set only where `text` is written there character for character."""

    text: str
    span: Span | None = None


@dataclass(frozen=True)
class Word:
    """One argument of a command after expansion, and where each of its characters came from.

    `span` is the shell word it was expanded from (the command's own text); `via` the variable
    assignments its value came through, innermost last; `pieces` the characters by origin, so
    an edit can go to the assignment that wrote them.
    """

    text: str
    span: Span
    pieces: tuple[Piece, ...] = ()
    via: tuple[Site, ...] = ()
    known: bool = True
    varies: bool = False

    @property
    def source(self) -> Span | None:
        """The one place the whole word is written literally (the command or an assignment), else None."""
        spans = [p.span for p in self.pieces if p.text]
        if not spans or any(s is None for s in spans):
            return None
        first, last = spans[0], spans[-1]
        assert first is not None and last is not None
        if any(s.file != first.file for s in spans if s is not None):
            return None
        for a, b in zip(spans, spans[1:], strict=False):
            if a is None or b is None or a.end != b.start:
                return None
        return Span(first.file, first.start, last.end, first.line, first.col, last.end_line, last.end_col)


@dataclass(frozen=True)
class Note:
    """Something gpu-doctor could not read or analyse, said plainly."""

    file: str
    text: str
    line: int | None = None
    kind: str = "note"  # unreadable, binary, empty, too-large, syntax, encoding, unparsed, outside, unresolved, note


@dataclass(frozen=True)
class EnvVar:
    """One variable of the environment a command runs with.

    `value` is None when it cannot be known statically (a command
    substitution, an unknown variable); `raw` is what was written. `site` is
    where a script set it (None: inherited from the environment gpu-doctor
    runs in). `varies` means it differs per rank (a loop variable, or a rank
    variable read inside a per-task shell). `spelling` is an unknown value's
    text one level down: what was written, with each shell variable that set
    part of it replaced by that variable's own spelling, so only names the
    environment of the job still has remain (`BASE=/scratch/$USER/v_${SLURM_JOB_ID}`
    then `DIR=$BASE/run`: `/scratch/$USER/v_${SLURM_JOB_ID}/run`); None where the
    value is known or nothing was written to spell (a loop variable, `read`).
    """

    name: str
    value: str | None
    raw: str
    site: Site | None = None
    exported: bool = True
    refs: tuple[str, ...] = ()
    varies: bool = False
    items: tuple[str, ...] | None = None  # bash array items, when an array
    pieces: tuple[Piece, ...] = ()  # the value's characters by origin (scalars)
    item_pieces: tuple[tuple[Piece, ...], ...] = ()  # the same per array item
    span: Span | None = None  # the value as written in the assignment (inside its quotes)
    spelling: str | None = None

    @property
    def spelled(self) -> str:
        """The value where known, else its spelling one level down, else what was written."""
        if self.value is not None:
            return self.value
        return self.spelling if self.spelling is not None else self.raw

    @property
    def unfollowed(self) -> bool:
        """Set by what the reader does not follow (`read`, `eval "$(...)"`, `export "$k=$v"`): its value is
        known only when the job runs, and there is no assignment to edit."""
        return self.value is None and self.site is not None and self.raw.startswith("<") and not self.varies


@dataclass(frozen=True)
class Loop:
    """The loop a command runs in: `count` iterations when known."""

    var: str | None
    count: int | None
    site: Site
    kind: str = "for"  # for, c-for, while, until


@dataclass(frozen=True)
class Wrapper:
    """A command that runs the next one: srun, mpirun, timeout, nsys, env, apptainer..."""

    name: str
    argv: tuple[str, ...]
    tasks: int | None = None  # tasks it starts (srun -n, mpirun -np), when known
    how: str | None = None  # where its counts come from when no script writes it (submitit's srun)


@dataclass(frozen=True)
class ScorepWrap:
    """`python -m scorep <flags>`: the binding's own flags and what goes to scorep-config."""

    wrapper_flags: tuple[str, ...]
    config_flags: tuple[str, ...]
    dashdash: bool = False

    @property
    def cuda(self) -> bool:
        """Whether scorep-config is asked for the CUDA adapter (the last of --cuda/--nocuda wins)."""
        state = False
        for flag in self.config_flags:
            if flag == "--cuda":
                state = True
            elif flag == "--nocuda":
                state = False
        return state

    @property
    def flags(self) -> tuple[str, ...]:
        return self.wrapper_flags + self.config_flags

    @property
    def mpi(self) -> bool:
        """Measured as one MPI experiment (`--mpi`, `--mpp=mpi`)."""
        return "--mpi" in self.wrapper_flags or "--mpp=mpi" in self.config_flags


@dataclass(frozen=True)
class Spawner:
    """A launcher that spawns the workers: torchrun, torch.distributed.run/launch,
    accelerate, deepspeed, or a wrapper script that calls torch.distributed.run.main()."""

    kind: str  # torchrun, torch.distributed.run, torch.distributed.launch, accelerate, deepspeed, wrapper-script
    argv: tuple[str, ...]
    nproc: int | None = None
    nproc_text: str | None = None
    no_python: bool = False
    wrapper_script: str | None = None  # for kind == wrapper-script
    mixed_precision: str | None = None  # accelerate --mixed_precision

    @property
    def name(self) -> str:
        """The launcher in the user's words: `torchrun`, or the wrapper script by its file name."""
        if self.kind == "wrapper-script" and self.wrapper_script:
            return f"{os.path.basename(self.wrapper_script)} (torch.distributed.run)"
        return self.kind


@dataclass(frozen=True)
class Launch:
    """One Python start: interpreter, optional Score-P wrapper, optional spawner, target.

    `training_script` / `training_args` are what each worker runs (the target
    of the spawner, or the target itself). `inner` is the per-worker command
    of `torchrun --no-python ...`.
    """

    interpreter: str
    kind: str  # script, module, code, stdin, command, none
    target: str
    scorep: ScorepWrap | None = None
    spawner: Spawner | None = None
    script: str | None = None
    args: tuple[str, ...] = ()
    code: str | None = None
    code_line: int | None = None
    training_script: str | None = None
    training_target: str | None = None
    training_args: tuple[str, ...] = ()
    inner: Launch | None = None
    code_span: Span | None = None  # where `code` is written (the -c word, the here-document body)


@dataclass(frozen=True)
class Command:
    """One simple shell command with its context, in execution order."""

    site: Site
    text: str
    argv: tuple[str, ...]
    env: Mapping[str, EnvVar]
    inline: tuple[EnvVar, ...] = ()
    wrappers: tuple[Wrapper, ...] = ()
    launch: Launch | None = None
    loop: Loop | None = None
    background: bool = False
    condition: bool = False
    per_task: bool = False  # runs once per task of an outer srun/mpirun
    flow: int = 0
    order: int = 0
    words: tuple[tuple[str, int], ...] = ()  # (source text of each word, its line)
    end_line: int = 0
    argv_words: tuple[Word, ...] = ()  # argv with spans, one per argv entry
    span: Span | None = None  # the whole command (prefix assignments to last word)
    parent: Command | None = None  # the launcher whose workers run this command (torchrun --no-python ...)
    cwd: str | None = None
    statement_line: int = 0  # the top-level statement of its file it runs in (a loop, an if...)
    shell_refs: tuple[str, ...] = ()  # the script's own unexported variables its words read (`$overrides`)
    opaque: EnvVar | None = None  # `while read k v; do export "$k=$v"` above: any variable may be set there
    read: str = "static"  # which reading produced it: "static", or "observed" (bash ran it; doctor.observe)

    def word_at(self, index: int) -> Word | None:
        return self.argv_words[index] if 0 <= index < len(self.argv_words) else None

    def line_of(self, token: str, default: int | None = None) -> int:
        """The line of the first word whose source text is `token` (or starts with `token=`)."""
        for raw, line in self.words:
            if raw == token or raw.startswith(token + "="):
                return line
        return default if default is not None else self.site.line

    @property
    def instrumented(self) -> Launch | None:
        """The Launch that runs under `python -m scorep` (outer or torchrun --no-python inner)."""
        launch = self.launch
        while launch is not None:
            if launch.scorep is not None:
                return launch
            launch = launch.inner
        return None

    def var(self, name: str) -> EnvVar | None:
        """The variable `name` the command runs with; unknown where the script set names it did not
        spell (`opaque`): a variable not seen set may have been set there."""
        var = self.env.get(name)
        if var is None and self.opaque is not None:
            return replace(self.opaque, name=name)
        return var

    @property
    def tasks(self) -> int | None:
        """How many copies of this command run at once, when known."""
        n = 1
        known = True
        for w in self.wrappers:
            if w.name in TASK_WRAPPERS:
                if w.tasks is None:
                    known = False
                else:
                    n *= w.tasks
        if self.loop is not None and self.background:
            if self.loop.count is None:
                known = False
            else:
                n *= self.loop.count
        return n if known else None


TASK_WRAPPERS = ("srun", "mpirun", "mpiexec", "orterun", "jsrun", "aprun")


@dataclass(frozen=True)
class SbatchOption:
    name: str  # without dashes: exclude, nodelist, gres, ntasks-per-node...
    value: str
    site: Site


@dataclass(frozen=True)
class ShellFile:
    """A job or launch script, or a file one of them sources."""

    path: str
    role: str  # job, sourced, child
    sbatch: tuple[SbatchOption, ...] = ()
    module_loads: tuple[Site, ...] = ()
    lines: int = 0
    analysed: bool = True


@dataclass(frozen=True)
class ImportSite:
    module: str
    level: int
    site: Site
    import_time: bool  # runs when the file is imported (module level, class body, try/if at top)


@dataclass(frozen=True)
class ScorepImport:
    site: Site
    import_time: bool
    scope: str  # module, class, main-guard, function
    guard: str | None = None  # try, if, with...


@dataclass(frozen=True)
class SelfWait:
    """`s.wait_stream(torch.cuda.current_stream())` inside `with torch.cuda.stream(s):`."""

    site: Site
    with_site: Site
    stream: str
    producer: str


@dataclass(frozen=True)
class FunctionSpan:
    name: str
    start: int
    end: int
    indent: int


@dataclass(frozen=True)
class CallSite:
    site: Site
    function: FunctionSpan | None = None


@dataclass(frozen=True)
class KwCall:
    """A `TrainingArguments(...)` call and its literal keyword values (`UNKNOWN` if not literal)."""

    site: Site
    name: str
    kwargs: Mapping[str, Any]
    kw_sites: Mapping[str, Site]
    star_kwargs: bool = False
    exprs: Mapping[str, str] = field(default_factory=dict)  # a value that is not literal, as written


UNKNOWN = "<unknown>"


@dataclass(frozen=True)
class Submit:
    """submitit's `executor.submit(fn, ...)` (or `map_array`): `fn` runs in every task of the job
    Slurm starts, on the nodes the executor's parameters ask for, not in this process."""

    site: Site
    function: str  # as written: `train`, `Trainer(args)`, `submitit.helpers.CommandFunction([...])`
    # a `CommandFunction([...])`'s command: each word as written, and whether it is a literal string
    # (`"task.sh"`) or known only when the launcher runs (`str(args.epochs)`)
    command: tuple[tuple[str, bool], ...] | None = None


@dataclass(frozen=True)
class PyScript:
    """One Python source the job runs or imports, with what `ast` found in it.

    `problem` is set when the file could not be analysed (syntax error, binary,
    unreadable, too large...); the lists are then empty.
    """

    path: str
    role: str  # entry, module, snippet
    origin: Site | None = None
    problem: str | None = None
    notes: tuple[str, ...] = ()
    imports: tuple[ImportSite, ...] = ()
    local_imports: tuple[tuple[str, bool, Site], ...] = ()  # (abs path, import_time, site)
    scorep_imports: tuple[ScorepImport, ...] = ()
    init_pg: tuple[CallSite, ...] = ()
    destroy_pg: tuple[CallSite, ...] = ()
    ddp_wrap: tuple[CallSite, ...] = ()
    trainer_train: tuple[CallSite, ...] = ()
    uses_hf: bool = False
    hf_parser: tuple[Site, ...] = ()
    training_args: tuple[KwCall, ...] = ()
    self_waits: tuple[SelfWait, ...] = ()
    cuda_asserts: tuple[Site, ...] = ()
    cuda_ops: tuple[Site, ...] = ()
    profilers: tuple[Site, ...] = ()
    torchrun_main: Site | None = None
    main_guard: bool = False
    snippet_of: Site | None = None  # for role == snippet: the shell command it came from
    training_defaults: tuple[KwCall, ...] = ()  # `class Args(TrainingArguments)`: its fields' defaults
    # submitit's update_parameters/AutoExecutor, Lightning's Trainer: their node and task counts
    layout_calls: tuple[KwCall, ...] = ()
    # what a layout value written as a name or `args.nodes` is: `name = 4` / `name = args.ngpus`
    # (the int, or the expression), and argparse's `add_argument("--nodes", type=int, default=2)`
    int_names: Mapping[str, int | str] = field(default_factory=dict)
    int_options: Mapping[str, tuple[int, Site]] = field(default_factory=dict)  # dest -> (default, site)
    submits: tuple[Submit, ...] = ()  # submitit's `executor.submit(fn)`: the function runs in each task

    @property
    def ok(self) -> bool:
        return self.problem is None


@dataclass(frozen=True)
class ArgValue:
    value: Any  # str, bool, int, or UNKNOWN
    site: Site
    source: str  # cli, config, code
    key: str  # the spelling used (evaluation_strategy, eval_strategy...)


@dataclass(frozen=True)
class TrainerArgs:
    """The TrainingArguments one run gets, each value with where it came from."""

    source: str  # cli (with config files), code
    script: str | None
    values: Mapping[str, ArgValue]
    site: Site  # the command or the TrainingArguments(...) call
    command: Command | None = None
    config_files: tuple[str, ...] = ()
    partial: bool = False  # `TrainingArguments(**kwargs)`: keys not shown may be set elsewhere


@dataclass(frozen=True)
class Job:
    """Everything found in the job folder."""

    root: str | None
    shell_files: tuple[ShellFile, ...] = ()
    commands: tuple[Command, ...] = ()
    scripts: tuple[PyScript, ...] = ()
    trainer: tuple[TrainerArgs, ...] = ()
    notes: tuple[Note, ...] = ()
    env: Mapping[str, EnvVar] = field(default_factory=dict)
    python: str | None = None  # the interpreter the job runs (first launch), when found
    # Real path -> the bytes this model was parsed from: a remedy drafts its edits from these, and
    # applying refuses a file that no longer holds them (one read, compared before the write).
    reads: Mapping[str, bytes] = field(default_factory=dict, repr=False, compare=False)
    reading: str = "static"  # how the launch was read: one line (doctor.observe)
    differences: tuple[Mapping[str, Any], ...] = ()  # where the observed reading differs from the static one
    observed_notes: tuple[str, ...] = ()  # how the observed reading went (stopped, output cut, module missing)

    def script(self, path: str | None) -> PyScript | None:
        if path is None:
            return None
        return next((s for s in self.scripts if s.path == path and s.role != "snippet"), None)

    @property
    def launches(self) -> list[tuple[Command, Launch]]:
        return [(c, c.launch) for c in self.commands if c.launch is not None]

    @property
    def instrumented(self) -> list[tuple[Command, Launch]]:
        out = []
        for c in self.commands:
            launch = c.instrumented
            if launch is not None:
                out.append((c, launch))
        return out

    @property
    def uses_scorep(self) -> bool:
        return bool(self.instrumented) or any(s.scorep_imports for s in self.scripts)

    def rel(self, path: str) -> str:
        return display_path(path, self.root)

    def entry_scripts(self) -> list[PyScript]:
        """The scripts the workers run (training scripts)."""
        return [s for s in self.scripts if s.role == "entry"]

    def import_closure(self, entry: PyScript, import_time_only: bool = True) -> list[PyScript]:
        """`entry` plus the local modules it imports (transitively), optionally only at import time."""
        seen: dict[str, PyScript] = {entry.path: entry}
        todo = [entry]
        while todo:
            cur = todo.pop()
            for path, at_import, _site in cur.local_imports:
                if import_time_only and not at_import:
                    continue
                mod = self.script(path)
                if mod is not None and mod.path not in seen:
                    seen[mod.path] = mod
                    todo.append(mod)
        return list(seen.values())

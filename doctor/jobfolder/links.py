"""The links between scripts the walker follows: scripts a script runs (`bash x.sh args`, `./x.sh`,
`bash -c '...'`), files it sources (and `export $(grep -v '^#' vars.env | xargs)`), the wrapper
script `torchrun --no-python` runs in every worker, the script a submitit launcher's
`CommandFunction` runs in every task, a script the job writes with a here-document
and runs later, and `-m pkg.mod` as a file. Where a link leaves the job folder it is noted, not read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from doctor.jobfolder import argv as argvmod
from doctor.jobfolder.expand import Expansion
from doctor.jobfolder.loops import words_of
from doctor.jobfolder.model import TASK_WRAPPERS, Command, EnvVar, Note, Piece, Site, Span, Word, Wrapper
from doctor.jobfolder.reading import inside
from doctor.jobfolder.state import Ctx, ShellState
from doctor.jobfolder.syntax import Node, Source

MAX_DEPTH = 8  # scripts, functions and wrappers followed into one another
SHELL_NAMES = {"bash", "sh", "zsh", "dash", "ksh"}
# What torchrun / accelerate / deepspeed give every worker they start.
WORKER_VARS = ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
               "MASTER_PORT")


class Links:
    """Following one script into another (mixed into the walker)."""

    root: str | None
    notes: list[Note]
    referenced: set[str]
    exists: Callable[[str], bool]
    read: Callable[[str], Any]
    generated: dict[str, Span]  # scripts the job writes with `cat > x.sh <<'EOF'`
    _texts_generated: dict[str, str]
    _running: set[str]

    def run_file(self, path: str, state: ShellState, flow: int, role: str, depth: int = 0,
                 wrappers: tuple[Wrapper, ...] = ()) -> None:
        raise NotImplementedError

    def run_string(self, word: Word, ctx: Ctx) -> None:
        raise NotImplementedError

    def walk(self, node: Node, ctx: Ctx) -> None:
        raise NotImplementedError

    def _expand(self, node: Node, ctx: Ctx, split: bool = True) -> Expansion:
        raise NotImplementedError

    def _workers(self, cmd: Command, rest: list[Word], launch: Any, ctx: Ctx) -> None:
        """`torchrun --no-python ./wrapper.sh args`: walk the wrapper as every worker runs it."""
        target_at = len(rest) - len(launch.training_args) - 1
        if not 0 < target_at < len(rest):
            return
        target = rest[target_at]
        args = rest[target_at + 1:]
        if argvmod.base(target.text) in SHELL_NAMES and args:
            target, args = args[0], args[1:]
        path = self.resolve(target.text, ctx.state.cwd)
        env = dict(cmd.env)
        for name in WORKER_VARS:
            env[name] = EnvVar(name, None, f"<set by {argvmod.base(launch.interpreter)}>", None, True,
                               varies=name in ("RANK", "LOCAL_RANK", "GROUP_RANK"))
        if path is not None and self.run_generated(path, ShellState(env, ctx.state.cwd, False, {}, True, tuple(args),
                                                                    cmd, opaque=cmd.opaque), ctx, ()):
            return
        if path is None or path.endswith(".py") or not self.exists(path):
            return
        if self.root is not None and not inside(path, self.root):
            self.notes.append(Note(cmd.site.file, f"torchrun runs {target.text!r}, outside the job folder; "
                                                  "not read", cmd.site.line, "outside"))
            return
        state = ShellState(env, ctx.state.cwd, False, {}, True, tuple(args), cmd, opaque=cmd.opaque)
        self.referenced.add(path)
        self.run_file(path, state, ctx.flow, "child", ctx.depth + 1, ())

    def _submitted(self, cmd: Command, launch: Any, ctx: Ctx) -> None:
        """`python launch.py` where launch.py submits `submitit.helpers.CommandFunction(["bash",
        "task.sh", ...])`: submitit's sbatch runs srun with the nodes and tasks per node the executor asks
        for, and every task runs the command with the launcher's environment. Walk task.sh as each
        task runs it (its rank from SLURM_PROCID), under that srun."""
        path = launch.training_script
        if not path or not path.endswith(".py") or not self.exists(path) or ctx.state.per_task:
            return
        text = self.read(path).text
        if not text or "submitit" not in text or "CommandFunction" not in text:
            return
        from doctor.jobfolder.pyscan import analyse
        from doctor.jobfolder.queries import launcher_layout

        script = analyse(path, text, "launcher")
        rel = (lambda p: os.path.relpath(p, self.root)) if self.root else os.path.basename
        lay = launcher_layout([script], tuple(launch.training_args), rel)
        for sub in script.submits:
            words = list(sub.command or ())
            if words and words[0][1] and argvmod.base(words[0][0]) in SHELL_NAMES:
                words = words[1:]
            if not words or not words[0][1] or not words[0][0].endswith(".sh"):
                continue
            task = self.resolve(words[0][0], ctx.state.cwd)
            if task is None or not self.exists(task) or (self.root is not None and not inside(task, self.root)):
                continue
            span = Span(path, 0, 0, sub.site.line, 1, sub.site.line, 1)
            args = tuple(Word(w, span, (Piece(w),), known=literal) for w, literal in words[1:])
            srun = ("srun", f"--nodes={lay.nodes if lay and lay.nodes else '?'}",
                    f"--ntasks-per-node={lay.tasks_per_node if lay else 1}")
            how = f"submitit's srun, {lay.how}" if lay and lay.how else "submitit's srun"
            wrapper = Wrapper("srun", srun, lay.world if lay else None, how=how)
            state = ShellState(dict(cmd.env), ctx.state.cwd, False, {}, True, args, None, opaque=cmd.opaque)
            self.referenced.add(task)
            self.run_file(task, state, ctx.flow, "child", ctx.depth + 1, (*cmd.wrappers, wrapper))

    def resolve(self, path: str, cwd: str) -> str | None:
        """Absolute path of a script named on a command line (None when not statically known)."""
        if not path or "$" in path or "`" in path:
            return None
        return os.path.normpath(os.path.join(cwd, path))

    def resolve_module(self, module: str, cwd: str, env: dict[str, EnvVar]) -> str | None:
        """`-m pkg.mod` as a file: in the working folder, the PYTHONPATH the scripts set, the job folder."""
        if not re.fullmatch(r"[A-Za-z_][\w.]*", module):
            return None
        dirs = [cwd]
        pp = env.get("PYTHONPATH")
        if pp is not None and pp.value:
            dirs += [os.path.normpath(os.path.join(cwd, d)) for d in pp.value.split(":") if d]
        if self.root is not None:
            dirs.append(self.root)
        parts = module.split(".")
        for d in dict.fromkeys(dirs):
            stem = os.path.join(d, *parts)
            for cand in (stem + ".py", os.path.join(stem, "__main__.py")):
                if self.exists(cand) and (self.root is None or inside(cand, self.root)):
                    return os.path.normpath(cand)
        return None

    def _source(self, target: Word, args: list[Word], ctx: Ctx, site: Site) -> None:
        path = self.resolve(target.text, ctx.state.cwd) if target.known else None
        if path is None:
            self.notes.append(Note(site.file, f"sources {target.text!r}, which cannot be resolved statically",
                                   site.line, "unresolved"))
            return
        if self.root is not None and not inside(path, self.root):
            self.notes.append(Note(site.file, f"sources {target.text!r}, outside the job folder; not read",
                                   site.line, "outside"))
            return
        self.referenced.add(path)
        saved = ctx.state.args
        if args:
            ctx.state.args = tuple(args)
        self.run_file(path, ctx.state, ctx.flow, "sourced", ctx.depth + 1)
        ctx.state.args = saved

    def _nested_shell(self, rest: list[Word], wrappers: list[Wrapper], env: dict[str, EnvVar], ctx: Ctx,
                      site: Site) -> bool:
        """`bash -c '...'`, `bash x.sh args`, `./x.sh args`: walk what they run, in a new shell."""
        head = argvmod.base(rest[0].text)
        per_task = ctx.state.per_task or any(w.name in TASK_WRAPPERS for w in wrappers)
        state = ShellState(dict(env), ctx.state.cwd, False, {}, per_task, None, ctx.state.parent,
                           opaque=ctx.state.opaque)
        if head in SHELL_NAMES:
            k = 1
            while k < len(rest) and rest[k].text.startswith("-") and rest[k].text != "-c":
                k += 1
            if k < len(rest) and rest[k].text == "-c" and k + 1 < len(rest):
                state.args = tuple(rest[k + 3:])
                self.run_string(rest[k + 1], replace(ctx, state=state, depth=ctx.depth + 1,
                                                     wrappers=tuple(wrappers), heredoc=None))
                return True
            if k < len(rest):
                state.args = tuple(rest[k + 1:])
                return self._child(rest[k], state, wrappers, ctx, site)
            return False
        if rest[0].text.endswith(".sh") or rest[0].text.startswith("./"):
            state.args = tuple(rest[1:])
            return self._child(rest[0], state, wrappers, ctx, site)
        return False

    def _child(self, target: Word, state: ShellState, wrappers: list[Wrapper], ctx: Ctx, site: Site) -> bool:
        path = self.resolve(target.text, ctx.state.cwd) if target.known else None
        if path is not None and self.run_generated(path, state, ctx, tuple(wrappers)):
            return True
        if path is None or not self.exists(path) or path.endswith(".py"):
            return False
        if self.root is not None and not inside(path, self.root):
            self.notes.append(Note(site.file, f"runs {target.text!r}, outside the job folder; not read", site.line,
                                   "outside"))
            return False
        if path in self._running:  # `bash ./job.sh` in job.sh: bash starts it again, and again
            self.notes.append(Note(site.file, f"runs {target.text!r}, which is already running there (it starts "
                                              "itself again); not followed", site.line, "recursive"))
            return True
        self.referenced.add(path)
        self.run_file(path, state, ctx.flow, "child", ctx.depth + 1, tuple(wrappers))
        return True

    def _written_script(self, node: Node, body: Node, heredoc: Node, hb: Node, ctx: Ctx) -> None:
        """`cat > rank.sh <<'EOF' ... EOF`: the job writes a script it runs later; remember its text
        (where it is written, so its words keep their spans). Only a quoted delimiter (or a body
        without expansions) is kept as written: otherwise the shell expands it at write time."""
        names = words_of(body) if body.type == "command" else []
        if not names or ctx.src.text_of(names[0]) not in ("cat", "tee"):
            return
        start = next((c for c in heredoc.children if c.type == "heredoc_start"), None)
        text = ctx.src.text_of(hb)
        if start is None or not (ctx.src.text_of(start)[:1] in ("'", '"', "\\") or not re.search(r"[$`]", text)):
            return
        for redirect in (c for c in node.children if c.type == "file_redirect"):
            dest = redirect.child_by_field_name("destination")
            if dest is not None and any(c.type in (">", ">|") for c in redirect.children):
                target = self._expand(dest, ctx, split=False)
                path = self.resolve(target.value, ctx.state.cwd) if target.known else None
                if path is not None:
                    self.generated[path] = ctx.src.node_span(hb)
                    self._texts_generated[path] = text

    def run_generated(self, path: str, state: ShellState, ctx: Ctx, wrappers: tuple[Wrapper, ...]) -> bool:
        """Walk a script the job wrote with a here-document (see `_written_script`), where it is written."""
        span = self.generated.get(path)
        if span is None or path in self._running or ctx.depth >= MAX_DEPTH:
            return False
        src = Source(span.file, self._texts_generated[path], span.line - 1, span.start, span.col - 1)
        self._running.add(path)
        try:
            self.walk(src.root, Ctx(src, state, ctx.flow, ctx.depth + 1, wrappers=wrappers))
        finally:
            self._running.discard(path)
        return True

    def _export_file(self, node: Node, ctx: Ctx) -> None:
        """`export $(grep -v '^#' .env | xargs)`, `export $(cat vars.env | xargs)`: the file's
        `NAME=value` lines, read as `set -a; source FILE` reads them; any other `$(...)` is noted."""
        src = ctx.src
        line = src.line(src.start(node))
        site = Site(src.path, line, src.line_text(line))
        m = _EXPORT_FILE_RE.fullmatch(src.text_of(node)[2:-1].strip()) if src.text_of(node).startswith("$(") else None
        if m is None:
            self.notes.append(Note(src.path, f"exports what {src.text_of(node)!r} prints, which is only known when "
                                             "the job runs; not followed", line, "unresolved"))
            return
        name = next(g for g in m.groups() if g)
        saved = ctx.state.allexport
        ctx.state.allexport = True
        try:
            self._source(Word(name, src.node_span(node), (), known="$" not in name), [], ctx, site)
        finally:
            ctx.state.allexport = saved


# what `export $(...)` reads a variables file with: cat F, grep -v '^#' F, xargs < F (then `| xargs`)
_EXPORT_FILE_RE = re.compile(r"""(?:cat\s+([\w./-]+)|grep\s+-v\s+['"]?\^#['"]?\s+([\w./-]+)|xargs\s*<\s*([\w./-]+))"""
                             r"""(?:\s*\|\s*xargs(?:\s+-0)?)?""")

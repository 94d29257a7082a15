"""Build the `Job` from a case: find the scripts, walk them, analyse what they run.

Discovery (overridden by `--launch` / `--script`): job and launch scripts
in the folder (`*.sh`, `*.sbatch`, `*.slurm`, ... or a shell shebang, two
levels deep, no hidden or environment folders); the Python scripts their
commands run; the local modules those import; the trainer config files they
pass. Only files inside the job folder are read; as root in the gate no
symlink is followed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from doctor import limits
from doctor.case import Case
from doctor.jobfolder import argv as argvmod
from doctor.jobfolder import pyscan, trainer
from doctor.jobfolder.model import (
    Command,
    EnvVar,
    ImportSite,
    Job,
    KwCall,
    Launch,
    Note,
    PyScript,
    ShellFile,
    Site,
    TrainerArgs,
)
from doctor.jobfolder.reading import Source, inside, peek, read_bytes, read_source, source_of
from doctor.jobfolder.sbatch import sbatch_exports
from doctor.jobfolder.walker import ShellState, ShellWalker

SHELL_SUFFIXES = (".sh", ".bash", ".sbatch", ".slurm", ".job", ".pbs", ".batch", ".lsf")
SKIP_DIRS = {"__pycache__", "venv", "env", "node_modules", "site-packages", "wandb", "mlruns", "build", "dist"}
MAX_WALK = 5000
MAX_SHELL_FILES = 100
MAX_PY_FILES = 300


def _skip_dir(name: str) -> bool:
    return name.startswith(".") or name in SKIP_DIRS or name.startswith(("scorep-", "scorep_"))


def discover_files(root: str, depth: int = 2) -> tuple[list[str], list[str]]:
    """(shell scripts, top-level Python files) in `root`; symlinked folders are not entered."""
    shells: list[str] = []
    pys: list[str] = []
    seen = 0
    todo = [(root, 0)]
    while todo:
        folder, level = todo.pop(0)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            seen += 1
            if seen > MAX_WALK:
                return shells, pys
            try:
                if e.is_dir(follow_symlinks=False):
                    if level + 1 < depth and not _skip_dir(e.name):
                        todo.append((e.path, level + 1))
                    continue
            except OSError:
                continue
            if e.name.endswith(SHELL_SUFFIXES):
                shells.append(e.path)
            elif e.name.endswith(".py") and level == 0:
                pys.append(e.path)
            elif "." not in e.name and level == 0:
                head = peek(e.path, 64)
                if head.startswith(b"#!") and any(s in head.split(b"\n")[0] for s in (b"sh", b"bash")):
                    shells.append(e.path)
    return shells[:MAX_SHELL_FILES], pys


class JobBuilder:
    def __init__(self, case: Case, planned: Mapping[str, bytes | None] | None = None):
        self.case = case
        self.planned = {os.path.realpath(k): v for k, v in (planned or {}).items()}
        root = Path(os.path.abspath(case.root)) if case.root is not None else None
        launch = [os.path.abspath(p) for p in case.launch]
        scripts = [os.path.abspath(p) for p in case.scripts]
        if root is not None and root.is_file():
            (scripts if root.suffix == ".py" else launch).append(str(root))
            root = root.parent
        self.root = str(root) if root is not None else None
        self.launch_override = launch
        self.script_override = scripts
        self.explicit = set(launch) | set(scripts)
        self.no_symlinks = case.gate and case.as_root
        self.notes: list[Note] = []
        self.scripts: dict[str, PyScript] = {}
        self.reads: dict[str, bytes] = {}  # real path -> the bytes read: each file is read once

    # -- reading ----------------------------------------------------------
    def read(self, path: str, python: bool = False) -> Source:
        path = os.path.abspath(path)
        if self.root is not None and not inside(path, self.root) and path not in self.explicit:
            return Source(path, None, "outside the job folder; not read", "outside")
        root = self.root if (self.root is not None and inside(path, self.root)) else None
        real = os.path.realpath(path)
        planned = self.planned.get(real) if self.planned else None
        limits.note_reading(path)
        limit = limits.MAX_PYTHON_BYTES if python else limits.MAX_FILE_BYTES
        if planned is None and real in self.reads:  # read again (a sourced file): the same bytes
            src = source_of(path, self.reads[real], python, limit)
        elif planned is None:
            data, problem, kind, size = read_bytes(path, root, self.no_symlinks and root is not None, limit)
            if data is None:
                return Source(path, None, problem, kind, size=size)
            self.reads[real] = data
            src = source_of(path, data, python, limit)
        else:
            src = read_source(path, root, self.no_symlinks and root is not None, python, limit, data=planned)
        if not python and src.text and limits.shell_nesting(src.text) > limits.MAX_SHELL_NESTING:
            return Source(path, None, f"blocks nested more than {limits.MAX_SHELL_NESTING} deep; not analysed",
                          "too-deep", size=src.size)
        return src

    def exists(self, path: str) -> bool:
        """A regular file on disk, or one the plan being checked creates."""
        if self.planned and os.path.realpath(path) in self.planned:
            return self.planned[os.path.realpath(path)] is not None
        return os.path.isfile(path)

    def read_text(self, path: str) -> str | None:
        src = self.read(path)
        if src.text is None:
            self.notes.append(Note(path, src.problem or "unreadable", None, src.kind or "unreadable"))
        return src.text

    # -- python -----------------------------------------------------------
    def analyse(self, path: str, role: str, origin: Site | None, store: bool = True) -> PyScript:
        old = self.scripts.get(path)
        if old is not None:
            if role == "entry" and old.role == "module":
                old = replace(old, role="entry")
                self.scripts[path] = old
            return old
        if len(self.scripts) >= MAX_PY_FILES:
            return PyScript(path, role, origin, "not analysed: too many Python files in the job folder")
        src = self.read(path, python=True)
        if src.text is None:
            script = PyScript(path, role, origin, src.problem)
        elif src.kind == "empty" and role != "module":
            script = PyScript(path, role, origin, "empty file: nothing to analyse")
        else:
            script = pyscan.analyse(path, src.text, role, origin=origin, notes=src.notes)
        if store:
            self.scripts[path] = script
        return script

    def resolve_imports(self, script: PyScript) -> None:
        """Analyse the local modules `script` imports (transitively) and link them."""
        todo = [script.path]
        done: set[str] = set()
        while todo:
            path = todo.pop()
            if path in done:
                continue
            done.add(path)
            cur = self.scripts[path]
            links: list[tuple[str, bool, Site]] = []
            for imp in cur.imports:
                for target in self._import_files(path, imp):
                    mod = self.analyse(target, "module", imp.site)
                    links.append((mod.path, imp.import_time, imp.site))
                    todo.append(mod.path)
            unique = tuple(dict.fromkeys(links))
            self.scripts[path] = replace(self.scripts[path], local_imports=unique)

    def _import_files(self, path: str, imp: ImportSite) -> list[str]:
        if self.root is None:
            return []
        here = os.path.dirname(path)
        if imp.level:
            base = here
            for _ in range(imp.level - 1):
                base = os.path.dirname(base)
            dirs = [base]
        else:
            dirs = list(dict.fromkeys([here, self.root]))
        parts = [p for p in imp.module.split(".") if p]
        out: list[str] = []
        for d in dirs:
            for k in range(1, len(parts) + 1):
                stem = os.path.join(d, *parts[:k])
                for cand in (stem + ".py", os.path.join(stem, "__init__.py")):
                    if cand != path and inside(cand, self.root) and os.path.isfile(cand):
                        out.append(os.path.normpath(cand))
            if out:
                break
        return out

    # -- build ------------------------------------------------------------
    def build(self) -> Job:
        # `$_` is the shell's own (the last word of the command before), never the one gpu-doctor was started with
        base_env = {k: EnvVar(k, v, v) for k, v in self.case.env.items() if k != "_"}
        root = self.root
        if root is not None:  # the job starts in its folder, which is where it was submitted from
            base_env["PWD"] = EnvVar("PWD", root, root)
            base_env.setdefault("SLURM_SUBMIT_DIR", EnvVar("SLURM_SUBMIT_DIR", root, root))
        home = self.case.env.get("HOME")
        walker = ShellWalker(root, self.read, self.notes, home, self.exists)
        if self.launch_override:
            shells, pys = list(self.launch_override), []
            if root is not None and not self.script_override:
                pys = discover_files(root)[1]
        elif root is not None:
            shells, pys = discover_files(root)
        else:
            shells, pys = [], []
        cwd = root or os.getcwd()
        # Pass 1 finds what is sourced or run by another script; those are not jobs of their own.
        # A script that runs only itself (`bash "$0"`), or one of a pair that run each other, is still a job.
        probe = ShellWalker(root, self.read, [], home, self.exists)
        refs: dict[str, set[str]] = {}
        for path in shells:
            before = set(probe.referenced)
            probe.referenced.clear()
            probe.run_file(path, ShellState(dict(base_env), cwd), 0, "job")
            refs[path] = set(probe.referenced)
            probe.referenced |= before
        tops = [p for p in shells if p in self.launch_override or not any(
            p in refs[q] and q not in refs.get(p, ()) for q in shells if q != p)]
        tops.sort(key=lambda p: (not _has_sbatch(probe.files.get(p)), p))
        for flow, path in enumerate(tops):
            env = dict(base_env)
            loaded = probe.files.get(path)
            env.update(sbatch_exports(loaded.sbatch if loaded else ()))
            start = self._start_dir(path, probe.commands, cwd)
            if start != cwd:
                env["PWD"] = EnvVar("PWD", start, start)
                env["SLURM_SUBMIT_DIR"] = EnvVar("SLURM_SUBMIT_DIR", start, start)
            walker.run_file(path, ShellState(env, start), flow, "job")
        walked, observed = walker.commands, None
        if root is not None and self.case.options.get("observe"):
            from doctor.observe import observe_commands

            walked, observed = observe_commands(self.case, Job(root, tuple(walker.files.values()), tuple(walked)),
                                                walker, self.planned)
        commands = self._relink([self._link(c) for c in walked], walked)
        self._entries(commands, pys)
        trainer_args = self._trainer_args(commands, cwd)
        env, python = self._job_env(commands, base_env)
        ordered = sorted(self.scripts.values(), key=lambda s: ({"entry": 0, "launcher": 1, "module": 2,
                                                                "snippet": 3}.get(s.role, 4), s.path))
        job = Job(root, tuple(walker.files.values()), tuple(commands), tuple(ordered), tuple(trainer_args),
                  tuple(self.notes), env, python, dict(self.reads))
        if observed is not None:
            job = replace(job, reading=observed.line, differences=tuple(observed.differences),
                          observed_notes=tuple(observed.notes))
        elif root is not None and self.case.options.get("observe") is False:
            job = replace(job, reading="static reading only (--no-observe)")
        return job

    def _start_dir(self, path: str, probed: list[Command], cwd: str) -> str:
        """The folder a job script in a sub-folder is run from: its own, where the program it starts
        by a relative path (`python train.py`) is there and not in the job folder (the repository runs
        `cd scripts && sbatch train.sbatch`, its `../resources` paths say so); else the job folder."""
        here = os.path.dirname(path)
        if self.root is None or here == cwd:
            return cwd
        for c in probed:
            launch = c.launch
            while launch is not None and launch.inner is not None:
                launch = launch.inner
            targets = [t for t in (launch.target, launch.training_target) if t and t.endswith((".py", ".sh"))] \
                if launch is not None and launch.kind == "script" else []  # `python x.py`, `torchrun x.py`
            target = targets[-1] if targets else None
            if (c.site.file != path or c.cwd != cwd or not target or os.path.isabs(target) or "$" in target
                    or self.exists(os.path.join(cwd, target))):
                continue
            if self.exists(os.path.join(here, target)):
                rel = os.path.relpath(path, self.root)
                self.notes.append(Note(path, f"read as run from its own folder ({os.path.dirname(rel)}/): {target} is "
                                             "there, not in the job folder", c.site.line, "assumed"))
                return here
        return cwd

    @staticmethod
    def _relink(linked: list[Command], walked: list[Command]) -> list[Command]:
        """Point each worker's `parent` at its launcher as linked (parents come first)."""
        new_of: dict[int, Command] = {}
        out = []
        for old, cmd in zip(walked, linked, strict=True):
            if cmd.parent is not None and id(cmd.parent) in new_of:
                cmd = replace(cmd, parent=new_of[id(cmd.parent)])
            new_of[id(old)] = cmd
            out.append(cmd)
        return out

    def _link(self, cmd: Command) -> Command:
        """Analyse what a command runs; turn `python wrapper.py` into a spawner when it calls run.main()."""
        if cmd.launch is None:
            return cmd
        launch = self._link_launch(cmd, cmd.launch)
        return replace(cmd, launch=launch)

    def _link_launch(self, cmd: Command, launch: Launch) -> Launch:
        if launch.inner is not None:
            inner = self._link_launch(cmd, launch.inner)
            launch = replace(launch, inner=inner, training_script=inner.training_script,
                             training_target=inner.training_target, training_args=inner.training_args)
        if launch.code is not None and launch.kind in ("code", "stdin"):
            line = launch.code_line or cmd.site.line
            key = f"{cmd.site.file}:{line}"
            if key not in self.scripts:
                self.scripts[key] = replace(pyscan.analyse(cmd.site.file, launch.code, "snippet",
                                                           line_offset=line - 1, snippet_of=cmd.site),
                                            path=cmd.site.file)
            return launch
        if launch.script and launch.spawner is None:
            overridden = bool(self.script_override) and launch.script not in self.script_override
            first = self.analyse(launch.script, "entry", cmd.site, store=not overridden)
            if first.torchrun_main is not None:
                self.scripts[launch.script] = replace(first, role="launcher")
                target = os.path.normpath(launch.target)
                cwd = launch.script[:-len(target)] if launch.script.endswith(target) else (self.root or "")
                launch = argvmod.as_wrapper_spawner(
                    launch, launch.script, lambda p: os.path.normpath(os.path.join(cwd, p)))
        if launch.training_script and not self.script_override:
            self.analyse(launch.training_script, "entry", cmd.site)
        return launch

    def _entries(self, commands: list[Command], pys: list[str]) -> None:
        for path in self.script_override:
            self.analyse(path, "entry", None)
        has_entry = any(s.role == "entry" for s in self.scripts.values())
        if not has_entry and not self.script_override:
            for path in pys:
                if os.path.basename(path) not in ("setup.py", "conftest.py"):
                    self.analyse(path, "entry", None)
        for path in [p for p, s in self.scripts.items() if s.role in ("entry", "launcher")]:
            self.resolve_imports(self.scripts[path])
        imported = {t for s in self.scripts.values() for t, _, _ in s.local_imports}
        for path in list(self.scripts):
            s = self.scripts[path]
            if s.role == "entry" and s.origin is None and path in imported and path not in self.script_override:
                self.scripts[path] = replace(s, role="module")

    def _trainer_args(self, commands: list[Command], cwd: str) -> list[TrainerArgs]:
        out: list[TrainerArgs] = []
        seen: set[tuple[str, int]] = set()

        def note(path: str, text: str) -> None:
            self.notes.append(Note(path, text, None, "config"))

        for cmd in commands:
            launch = cmd.launch
            while launch is not None and launch.inner is not None:
                launch = launch.inner
            if launch is None or not launch.training_target or launch.kind in ("code", "stdin"):
                continue
            ta = trainer.from_command(cmd, launch.training_script, launch.training_args, cmd.cwd or cwd,
                                      self.read_text, note)
            defaults = self._class_defaults(launch.training_script)
            if defaults:  # `class Args(TrainingArguments)`: its defaults, where the command line says nothing
                ta = ta or TrainerArgs("cli", launch.training_script, {}, cmd.site, cmd)
                values = {k: v for d in defaults.values() for k, v in trainer.from_code(d, d.site.file).values.items()}
                ta = replace(ta, values={**values, **ta.values})
            if ta is not None:
                out.append(ta)
        for script in list(self.scripts.values()):
            if script.role == "snippet":
                continue
            for call in script.training_args:
                key = (call.site.file, call.site.line)
                if key not in seen:
                    seen.add(key)
                    found = trainer.from_code(call, script.path)
                    cls = self._class_defaults(script.path).get(call.name)
                    if cls is not None:  # `MyArguments(...)`: the class's defaults under its keywords
                        found = replace(found, values={**trainer.from_code(cls, script.path).values, **found.values})
                    out.append(found)
        return out

    def _class_defaults(self, path: str | None) -> dict[str, KwCall]:
        """The TrainingArguments subclasses `path` and the local modules it imports define, by name."""
        out: dict[str, KwCall] = {}
        todo = [path] if path else []
        done: set[str] = set()
        while todo:
            cur = self.scripts.get(todo.pop())
            if cur is None or cur.path in done:
                continue
            done.add(cur.path)
            for cls in cur.training_defaults:
                out.setdefault(cls.name, cls)
            todo.extend(t for t, _, _ in cur.local_imports)
        return out

    @staticmethod
    def _job_env(commands: list[Command], base_env: dict[str, EnvVar]) -> tuple[dict[str, EnvVar], str | None]:
        chosen = next((c for c in commands if c.instrumented is not None), None) or next(
            (c for c in commands if c.launch is not None and c.launch.kind not in ("code", "stdin")), None)
        if chosen is None:
            return base_env, None
        launch = chosen.instrumented or chosen.launch
        interp = launch.interpreter if launch is not None else None
        python = interp if interp and argvmod.is_python(interp) else None
        return dict(chosen.env), python


def _has_sbatch(f: ShellFile | None) -> bool:
    return f is not None and bool(f.sbatch)


def load_job(case: Case, planned: Mapping[str, bytes | None] | None = None) -> Job:
    """The parsed job folder of `case` (an empty Job when the case has no folder).

    `planned` maps paths to the content a remedy plan would give them: the job as it
    would be after the plan (files not named are read from disk).
    """
    if case.root is None and not case.launch and not case.scripts:
        return Job(None)
    return JobBuilder(case, planned).build()

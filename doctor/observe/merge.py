"""The observed launches into the one job model.

Each observed command line is matched with the static reading's Command on the same file:line.
Where the two agree the static Command stays (its spans are what remedies edit) and is marked
`read="observed"`; where they differ the observed argv, working folder and environment win,
each value keeping the static span only where the static reading found it on the same line, and
`job.differences` lists what differed. A launch only bash saw (`eval`, `bash -c "$CMD"`...)
becomes a Command of its own, built by the same argv parsing; a launch only the static reading
saw is dropped when bash ran that script to its end without starting it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from doctor.jobfolder import argv as argvmod
from doctor.jobfolder.model import TASK_WRAPPERS, Command, EnvVar, Loop, Piece, Site, Span, Word, Wrapper
from doctor.jobfolder.processes import SHOWN_ENV
from doctor.observe.places import Places
from doctor.observe.records import Observed, Record, launches

Resolve = Callable[[str, str], "str | None"]
Modules = Callable[[str, str, dict[str, EnvVar]], "str | None"]


SIMULATED = ("SLURM_", "SLURMD_", "OMPI_COMM_WORLD_", "PMI_")  # what the shims make up for each task
WORKER_VARS = ("GROUP_RANK", "ROLE_RANK")


def _shown(name: str) -> bool:
    return name.startswith(SHOWN_ENV[0]) or name in SHOWN_ENV[1:]


class Merger(Places):
    def __init__(self, root: str, base_env: dict[str, str], resolve: Resolve, modules: Modules,
                 generated: dict[str, Span] | None = None):
        super().__init__(root, generated)
        self.base_env = base_env
        self.resolve = resolve
        self.modules = modules
        self.differences: list[dict[str, Any]] = []

    # -- one observed command line -----------------------------------------
    def env(self, obs: Observed, static: Command | None) -> tuple[dict[str, EnvVar], list[str]]:
        """The environment the line ran with. A value the static reading could not know (`$SLURM_JOB_ID`,
        a command substitution) stays unknown: the sandbox's Slurm, hosts and ranks are stand-ins."""
        first = obs.runs[0]
        env: dict[str, EnvVar] = {}
        changed: list[str] = []
        names = dict.fromkeys([*first.env, *(static.env if static is not None else ())])
        for name in names:
            old = static.env.get(name) if static is not None else None
            values = {r.env.get(name) for r in obs.runs}
            value = first.env.get(name)
            varies = len(values) > 1
            where = first.sites.get(name)
            if where is not None:
                ran_at = self.site(*self.place(where[0], where[1], first.cwd))
                # a file the job wrote as it ran (`cat > $RUN/x.env <<EOF`): the line of the folder that writes it
                site: Site | None = ran_at if os.path.exists(ran_at.file) else self.written_at(name) or ran_at
            elif self.base_env.get(name) == value or name.startswith(SIMULATED) or name in WORKER_VARS:
                if old is not None:
                    env[name] = old  # inherited, or a stand-in the sandbox set
                elif value is not None and self.base_env.get(name) == value and not name.startswith(SIMULATED):
                    env[name] = EnvVar(name, value, value)
                continue
            else:
                site = self.site(obs.file, obs.line)  # NAME=value on the line, srun --export, mpirun -x
            if value is None:
                if old is not None and not _shown(name):
                    env[name] = old
                elif old is not None:
                    changed.append(name)  # the static reading has it; bash did not
                continue
            if old is not None and _unfollowed(old) and not varies and value:  # '': what the node has, not here
                old = None  # bash saw what the static reading marked unknown (`read`, `eval`, `source <(...)`)
            # several runs saw what differs per rank: a value that differed between them, or one that did
            # not (`"...=scorep_rank_${RANK}"` expanded once, in the batch shell, for every task)
            seen_per_rank = old is not None and len(obs.runs) > 1 and (
                (varies and not old.varies and _differs_on_one_node(obs, name)) or (old.varies and not varies))
            if old is not None and not seen_per_rank and (old.value is None or old.varies or old.value == value) and \
                    (old.varies == varies or old.value is None):
                span = self.literal(site, value) if old.value == value and old.span is None and value else None
                env[name] = old if span is None else replace(old, raw=value, span=span, pieces=(Piece(value, span),))
                continue
            span = self.literal(site, value) if not varies else None
            if span is None and not varies and value:
                found = self.data_line(name, value)  # `while read`, `source <(sed ... profile)`: the data file
                if found is not None:
                    site, span = found
            raw = old.raw if varies and old is not None else value  # per rank: as written, not the first run's
            if not varies and self._stand_in(value):  # `cd "$_"` into `/tmp/ddp_$SLURM_JOB_ID`: the sandbox's id
                env[name] = EnvVar(name, None, old.raw if old is not None else value, site, True)
                if _shown(name) and static is not None:
                    changed.append(name)
                continue
            env[name] = EnvVar(name, None if varies else value, raw, site, True, varies=varies, span=span,
                               pieces=(Piece(value, span),) if span is not None else ())
            if _shown(name) and static is not None:
                changed.append(name)
        return env, changed

    def _stand_in(self, value: str) -> bool:
        """Whether a value holds the job id the sandbox made up (known only when the job runs)."""
        job_id = self.base_env.get("SLURM_JOB_ID")
        return bool(job_id) and re.search(rf"(?<!\d){re.escape(str(job_id))}(?!\d)", value) is not None

    def command(self, obs: Observed, static: Command | None, by_id: dict[str, Record],
                flow: int, order: int) -> Command:
        head, run = obs.head, obs.runs[0]
        argv = head.argv
        env, changed = self.env(obs, static)
        wrappers, rest, _ops = argvmod.strip_wrappers(list(argv))
        if run is not head:
            rest = list(argvmod.strip_wrappers(list(run.argv))[1])
            chain: list[Record] = []
            cur = by_id.get(run.parent)
            while cur is not None and cur.id != head.id:  # container wrappers between, on the same line
                chain.insert(0, cur)
                cur = by_id.get(cur.parent)
            names = {w.name for w in wrappers}
            for r in [head, *chain]:
                if argvmod.base(r.tool) not in names:
                    wrappers.append(Wrapper(r.tool, r.argv[:r.own]))
        outer = self._outer(head, by_id)
        cwd = self.path(run.cwd, "/")
        launch = argvmod.interpret(rest, lambda p: self.resolve(p, cwd),
                                   lambda m: self.modules(m, cwd, env)) if rest else None
        if launch is not None and launch.kind == "code" and static is not None and static.launch is not None:
            launch = replace(launch, code_line=static.launch.code_line, code_span=static.launch.code_span)
        per_task = bool(outer) or any(w.name in TASK_WRAPPERS for w in wrappers)
        turns = max((sum(1 for r in obs.runs if r.task == t) for t in obs.tasks), default=1)
        loop = static.loop if static is not None else None
        if turns > 1 and (loop is None or loop.count != turns):
            loop = Loop(loop.var if loop else None, turns, loop.site if loop else self.site(obs.file, obs.line),
                        loop.kind if loop else "while")
        if static is not None and _same_argv(static, argv) and (static.launch is not None or launch is None):
            # the same command line: the static argv, words and launch stay (their indices and spans are
            # what remedies edit; real tools on the line, exec, env, timeout, are not recorded)
            argv, launch, wrappers, outer = static.argv, static.launch, list(static.wrappers), []
            per_task = static.per_task
        words = tuple(static.argv_words) if static is not None and static.argv == argv else _aligned_words(
            static, argv, static.span if static is not None and static.span else self.span(obs.file, obs.line))
        base = static or Command(self.site(obs.file, obs.line), self.text(obs.file, obs.line), argv, {},
                                 flow=flow, order=order, end_line=obs.line, span=self.span(obs.file, obs.line),
                                 statement_line=obs.line)
        # a prefix assignment on the line (`RANK=$rank python ...`) is the value bash gave it there
        inline = tuple(_at_same_line(env.get(v.name), v) for v in base.inline)
        cmd = replace(base, argv=argv, env=env, inline=inline, wrappers=tuple(outer) + tuple(wrappers), launch=launch,
                      per_task=per_task, loop=loop, background=run.background or base.background,
                      argv_words=words, cwd=cwd, read="observed", opaque=None)  # bash saw every name set
        self._differ(obs, static, cmd, changed)
        return cmd

    def _outer(self, rec: Record, by_id: dict[str, Record]) -> list[Wrapper]:
        """The task launchers (and container wrappers) on other lines that this line runs inside."""
        out: list[Wrapper] = []
        cur = by_id.get(rec.parent)
        while cur is not None:
            if cur.tool in TASK_WRAPPERS or not cur.launches:
                ws, _rest, _ops = argvmod.strip_wrappers([*cur.argv[:cur.own], "true"])
                out.insert(0, ws[0] if ws else Wrapper(cur.tool, cur.argv[:cur.own]))
            cur = by_id.get(cur.parent)
        return out

    def _differ(self, obs: Observed, static: Command | None, cmd: Command, changed: list[str]) -> None:
        where = {"file": obs.file, "line": obs.line}
        if static is None:
            self.differences.append({**where, "what": "launch", "static": None, "observed": list(cmd.argv),
                                     "why": "only bash started it"})
            return
        if not _same_argv(static, cmd.argv):
            self.differences.append({**where, "what": "argv", "static": list(static.argv),
                                     "observed": list(cmd.argv)})
        if static.cwd and cmd.cwd and os.path.normpath(static.cwd) != cmd.cwd:
            self.differences.append({**where, "what": "cwd", "static": static.cwd, "observed": cmd.cwd})
        for name in changed:
            old, new = static.env.get(name), cmd.env[name]
            self.differences.append({**where, "what": f"env {name}",
                                     "static": _env_text(old), "observed": _env_text(new)})


def _aligned_words(static: Command | None, argv: tuple[str, ...], line: Span) -> tuple[Word, ...]:
    """The observed argv's words: the line's span for each, but the static word itself for the end both
    readings agree on, word for word (`"${LAUNCH[@]}" python -m scorep -- train.py`: the launcher bash chose,
    then the words written on the line, which remedies can edit where they stand)."""
    out = [Word(a, line) for a in argv]
    words = static.argv_words if static is not None and len(static.argv_words) == len(static.argv) else ()
    k = 1
    while k <= min(len(words), len(argv)) and words[-k].known and words[-k].text == argv[-k] and \
            words[-k].source is not None:
        out[-k] = words[-k]
        k += 1
    return tuple(out)


def _same_argv(static: Command, argv: tuple[str, ...]) -> bool:
    """The observed argv is the static one, or its end after wrappers real tools ran (exec, env, timeout);
    a word the static reading could not know (`"$@"`, `$RANDOM`) stands for whatever bash made of it."""
    words = [(w.text, w.known) for w in static.argv_words] if len(static.argv_words) == len(static.argv) \
        else [(a, True) for a in static.argv]
    for skip in range(len(words) + 1):
        head = [t for t, _k in words[:skip]]
        if skip and head[0] not in ("exec", "command", "builtin") and argvmod.strip_wrappers([*head, "x"])[1][1:]:
            continue
        if _match(words[skip:], list(argv)):
            return True
    return False


def _match(words: list[tuple[str, bool]], argv: list[str]) -> bool:
    ok = [[False] * (len(argv) + 1) for _ in range(len(words) + 1)]  # ok[i][j]: words[i:] matches argv[j:]
    ok[len(words)][len(argv)] = True
    for i in range(len(words) - 1, -1, -1):
        text, known = words[i]
        for j in range(len(argv), -1, -1):
            if known:
                ok[i][j] = j < len(argv) and argv[j] == text and ok[i + 1][j + 1]
            else:
                ok[i][j] = any(ok[i + 1][k] for k in range(j, min(len(argv), j + 64) + 1))
    return ok[0][0]


def _at_same_line(merged: EnvVar | None, static: EnvVar) -> EnvVar:
    same = merged is not None and merged.site is not None and static.site is not None and \
        (merged.site.file, merged.site.line) == (static.site.file, static.site.line)
    return merged if same and merged is not None else static


def _differs_on_one_node(obs: Observed, name: str) -> bool:
    """Whether two runs on the same (simulated) node saw different values of `name`: per rank, not a value
    that differs only from node to node (`scorep_${SLURM_NODEID}`, which the ranks of a node share)."""
    by_node: dict[str | None, set[str | None]] = {}
    for r in obs.runs:
        by_node.setdefault(r.env.get("SLURM_NODEID"), set()).add(r.env.get(name))
    return any(len(values) > 1 for values in by_node.values())


def _unfollowed(var: EnvVar) -> bool:
    """Unknown to the static reading only because it does not follow what set it (`EnvVar.unfollowed`, or
    marked by a line that may set any name), not because only the running job knows it."""
    return var.unfollowed or (var.value is None and var.raw.startswith("<maybe set by") and not var.varies)


def _env_text(var: EnvVar | None) -> str | None:
    if var is None:
        return None
    where = f" ({os.path.basename(var.site.file)}:{var.site.line})" if var.site else " (inherited)"
    return ("per rank" if var.varies else repr(var.value if var.value is not None else var.raw)) + where


def merge(commands: list[Command], records: list[Record], complete: dict[str, bool], merger: Merger
          ) -> list[Command]:
    """The static reading's commands with the observed ones in (see the module docstring)."""
    by_id = {r.id: r for r in records}
    observed = launches(records)
    for obs in observed:
        obs.file, obs.line = merger.place(obs.file, obs.line, obs.head.cwd)
        if obs.head.approx:
            obs.line = _approx_line(obs, commands)
    seen = {(o.file, o.line) for o in observed}
    paired = _pair(commands, observed)
    used = {(c.site.file, c.site.line) for c in commands if id(c) in paired}
    out: list[Command] = []
    final: dict[int, Command] = {}  # a static Command -> what stands for it now (workers point at launchers)
    placed = [(merger.place(r.file, r.line, r.cwd), r.approx) for r in records]  # each record placed once
    ran = {where[0] for where, _approx in placed}
    started = {where for where, approx in placed if not approx}
    for cmd in commands:
        key = (cmd.site.file, cmd.site.line)
        launching = cmd.launch is not None or any(w.name in TASK_WRAPPERS for w in cmd.wrappers)
        if id(cmd) in paired:
            out.append(merger.command(paired[id(cmd)], cmd, by_id, cmd.flow, cmd.order))
            final[id(cmd)] = out[-1]
        elif launching and key not in seen and complete.get(cmd.site.file) and cmd.site.file in ran and \
                cmd.parent is None and not cmd.condition:
            if _launcher_ran(cmd, started):
                # its srun/mpirun ran: a tool the task runs for real (echo, sleep) is not recorded; a
                # program that did not start stopped before, on a stand-in of the node the sandbox cannot
                # be (`mkdir -p /scratch/...` && ...): either way the static reading stands
                out.append(cmd)
                if cmd.launch is None:
                    continue
                merger.differences.append({"file": cmd.site.file, "line": cmd.site.line, "what": "launch",
                                           "static": list(cmd.argv), "observed": None,
                                           "why": "its launcher ran in the sandbox, the task stopped before "
                                                  "the program (a path only the node has?): read statically"})
                continue
            merger.differences.append({"file": cmd.site.file, "line": cmd.site.line, "what": "launch",
                                       "static": list(cmd.argv), "observed": None,
                                       "why": "bash ran the script to its end without starting it"})
        else:
            out.append(cmd)
    for obs in observed:
        if (obs.file, obs.line) in used or not any(r.launches for r in obs.runs):
            continue
        after = [i for i, c in enumerate(out) if c.site.file == obs.file and c.site.line <= obs.line]
        at = after[-1] + 1 if after else len(out)
        flow = out[at - 1].flow if at and out else 0
        out.insert(at, merger.command(obs, None, by_id, flow, 0))
    return _relink(out, final)


def _pair(commands: list[Command], observed: list[Observed]) -> dict[int, Observed]:
    """Each static launch Command -> the observed line that stands for it: on its file:line, of the same
    argv (`mkdir -p "$D" && exec "$@"` on one line: the python run is python's, not mkdir's); where none
    on a line has the same argv, the line's first launch takes what ran there (a launching run first:
    a srun and the `bash -c` it runs)."""
    by_key: dict[tuple[str, int], list[Observed]] = {}
    for o in observed:
        by_key.setdefault((o.file, o.line), []).append(o)
    launching = [c for c in commands if (c.site.file, c.site.line) in by_key and (
        c.launch is not None or any(w.name in TASK_WRAPPERS for w in c.wrappers))]
    paired: dict[int, Observed] = {}
    taken: set[int] = set()
    for cmd in launching:
        for o in by_key[(cmd.site.file, cmd.site.line)]:
            if id(o) not in taken and (_same_argv(cmd, o.head.argv) or _same_argv(cmd, o.runs[0].argv)):
                paired[id(cmd)] = o
                taken.add(id(o))
                break
    done = {(c.site.file, c.site.line) for c in launching if id(c) in paired}
    for cmd in launching:
        key = (cmd.site.file, cmd.site.line)
        if key in done:
            continue
        done.add(key)
        left = [o for o in by_key[key] if id(o) not in taken]
        if left:
            paired[id(cmd)] = next((o for o in left if any(r.launches for r in o.runs)), left[0])
            taken.add(id(paired[id(cmd)]))
    return paired


def _launcher_ran(cmd: Command, started: set[tuple[str, int]]) -> bool:
    """Whether a task launcher of `cmd`'s own statement (its first line to its last) was recorded."""
    first = min(cmd.statement_line or cmd.site.line, cmd.site.line)
    return any(w.name in TASK_WRAPPERS for w in cmd.wrappers) and any(
        (cmd.site.file, line) in started for line in range(first, max(cmd.end_line, cmd.site.line) + 1))


def _approx_line(obs: Observed, commands: list[Command]) -> int:
    """Where a launch counted from its caller's line (`bash -c "$CMD"`) is written: the static Command of
    the same argv in that file, the nearest (the string may be set anywhere above: `CMD='...'`), else the
    launch nearest at or after the caller's line (a `bash -c '...'` string's lines follow the line that
    starts it), else the caller's line itself."""
    ran = obs.runs[0].argv
    here = [c for c in commands if c.site.file == obs.file and c.launch is not None]
    same = [c for c in here if _same_argv(c, ran)]
    near = same or [c for c in here if obs.line - 2 <= c.site.line <= obs.line + 8]
    if not near:
        return obs.line
    return min(near, key=lambda c: (c.site.line < obs.line, abs(c.site.line - obs.line))).site.line


def _relink(out: list[Command], final: dict[int, Command]) -> list[Command]:
    """Each worker's `parent` is its launcher as merged (launchers come first)."""
    origin = {id(new): old for old, new in final.items()}
    for i, cmd in enumerate(out):
        parent = final.get(id(cmd.parent)) if cmd.parent is not None else None
        if parent is not None and parent is not cmd.parent:
            out[i] = replace(cmd, parent=parent)
            final[origin.get(id(cmd), id(cmd))] = out[i]
    return out

"""Walk job scripts with bashlex: commands in execution order, each with its environment.

The walker follows what the scripts do to the environment (`export X=...`,
`X=... cmd`, `env X=... cmd`, `set -a`, `unset`, `source`d files and child
scripts inside the job folder, shell functions at their call sites) and
records, per simple command, its argv, the environment it runs with, the
loop it runs in, whether it is backgrounded, and what Python it starts.
Where bashlex cannot parse a construct the file is parsed statement by
statement and the skipped lines are noted, never guessed.
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from doctor.jobfolder import argv as argvmod
from doctor.jobfolder.model import (
    TASK_WRAPPERS,
    Command,
    EnvVar,
    Loop,
    Note,
    ShellFile,
    Site,
    Wrapper,
)
from doctor.jobfolder.reading import Source, inside
from doctor.jobfolder.shellparse import line_starts, parse_nodes, sbatch_options, split_words
from doctor.jobfolder.shellprep import Prepared, prepare
from doctor.jobfolder.words import RANK_VARS, Expanded, expand, match_close, try_arith

MAX_DEPTH = 8
SHELL_NAMES = {"bash", "sh", "zsh", "dash", "ksh"}


@dataclass
class ShellState:
    """The shell's variables, options and functions while a script runs."""

    vars: dict[str, EnvVar]
    cwd: str
    allexport: bool = False
    functions: dict[str, tuple[Any, FileCtx, int]] = field(default_factory=dict)
    per_task: bool = False

    def copy(self) -> ShellState:
        return ShellState(dict(self.vars), self.cwd, self.allexport, dict(self.functions), self.per_task)

    def child(self) -> ShellState:
        """A new shell (bash x.sh): exported variables only, no functions."""
        return ShellState({k: v for k, v in self.vars.items() if v.exported}, self.cwd, False, {}, self.per_task)

    def exported(self) -> dict[str, EnvVar]:
        return {k: v for k, v in self.vars.items() if v.exported}


@dataclass
class FileCtx:
    path: str
    src: str
    prep: Prepared
    line_starts: list[int]
    base_line: int = 0
    offset: int = 0  # of the chunk being walked, in src

    def line(self, pos: int) -> int:
        return bisect.bisect_right(self.line_starts, pos + self.offset) + self.base_line

    def raw(self, node: Any) -> str:
        a, b = node.pos
        return self.src[a + self.offset:b + self.offset]

    def line_text(self, line: int) -> str:
        k = line - self.base_line - 1
        if 0 <= k < len(self.line_starts):
            end = self.line_starts[k + 1] - 1 if k + 1 < len(self.line_starts) else len(self.src)
            return self.src[self.line_starts[k]:end].strip()
        return ""


@dataclass
class Ctx:
    file: FileCtx
    state: ShellState
    flow: int
    depth: int = 0
    loop: Loop | None = None
    background: bool = False
    condition: bool = False
    wrappers: tuple[Wrapper, ...] = ()


class ShellWalker:
    """Walks job scripts; collects commands, shell files and notes."""

    def __init__(self, root: str | None, read: Callable[[str], Source], notes: list[Note],
                 home: str | None = None):
        self.root = root
        self.read = read
        self.notes = notes
        self.home = home
        self.commands: list[Command] = []
        self.files: dict[str, ShellFile] = {}
        self.referenced: set[str] = set()
        self._order = 0
        self._cache: dict[str, tuple[FileCtx, list[tuple[Any, int]]] | None] = {}
        self._running: set[str] = set()

    # -- files ------------------------------------------------------------
    def load(self, path: str, role: str = "job") -> tuple[FileCtx, list[tuple[Any, int]]] | None:
        if path in self._cache:
            return self._cache[path]
        src = self.read(path)
        result = None
        if src.text is None:
            self.notes.append(Note(path, f"{src.problem}", None, src.kind or "unreadable"))
            self.files[path] = ShellFile(path, role, analysed=False)
        else:
            for n in src.notes:
                self.notes.append(Note(path, n, None, "empty" if src.kind == "empty" else "encoding"))
            prep = prepare(src.text)
            fctx = FileCtx(path, src.text, prep, line_starts(src.text))
            nodes = parse_nodes(prep, path, self.notes)
            result = (fctx, nodes)
        self._cache[path] = result
        return result

    def run_file(self, path: str, state: ShellState, flow: int, role: str, depth: int = 0,
                 wrappers: tuple[Wrapper, ...] = ()) -> None:
        if depth > MAX_DEPTH or path in self._running:
            return
        loaded = self.load(path, role)
        if loaded is None:
            return
        fctx, nodes = loaded
        if path not in self.files:
            self.files[path] = ShellFile(path, role, sbatch_options(path, fctx.src),
                                         lines=len(fctx.line_starts))
        self._running.add(path)
        try:
            self._walk_top(nodes, fctx, Ctx(fctx, state, flow, depth, wrappers=wrappers))
        finally:
            self._running.discard(path)

    def run_string(self, text: str, path: str, line: int, ctx: Ctx) -> None:
        """Walk a `bash -c` string as if it stood at `path:line`."""
        prep = prepare(text)
        fctx = FileCtx(path, text, prep, line_starts(text), base_line=line - 1)
        nodes = parse_nodes(prep, path, self.notes)
        self._walk_top(nodes, fctx, replace(ctx, file=fctx))

    def _walk_top(self, nodes: list[tuple[Any, int]], fctx: FileCtx, ctx: Ctx) -> None:
        for node, offset in nodes:
            fctx.offset = offset
            self.walk(node, ctx)

    # -- nodes ------------------------------------------------------------
    def walk(self, node: Any, ctx: Ctx) -> None:
        kind = node.kind
        if kind == "list":
            parts = node.parts
            for k, part in enumerate(parts):
                if part.kind == "operator":
                    continue
                bg = k + 1 < len(parts) and parts[k + 1].kind == "operator" and parts[k + 1].op == "&"
                self.walk(part, replace(ctx, background=ctx.background or bg,
                                        state=ctx.state.copy() if bg else ctx.state))
        elif kind == "pipeline":
            for part in node.parts:
                if part.kind not in ("pipe", "reservedword"):
                    self.walk(part, replace(ctx, state=ctx.state.copy()))
        elif kind == "compound":
            parts = node.list
            subshell = bool(parts) and parts[0].kind == "reservedword" and parts[0].word == "("
            inner = replace(ctx, state=ctx.state.copy()) if subshell else ctx
            for part in parts:
                if part.kind not in ("reservedword", "operator", "redirect"):
                    self.walk(part, inner)
        elif kind == "for":
            self._for(node, ctx)
        elif kind in ("while", "until"):
            self._while(node, ctx)
        elif kind == "if":
            self._if(node, ctx)
        elif kind == "function":
            name = node.parts[0].word
            ctx.state.functions[name] = (node.parts[-1], ctx.file, ctx.file.offset)
        elif kind == "command":
            self._command(node, ctx)

    def _for(self, node: Any, ctx: Ctx) -> None:
        parts = node.parts
        var_node = parts[1]
        var = var_node.word
        fctx = ctx.file
        items: list[Any] = []
        body = None
        seen_in = False
        for p in parts[2:]:
            if p.kind == "reservedword" and p.word == "in":
                seen_in = True
            elif p.kind == "reservedword" and p.word in (";", "do", "\n"):
                continue
            elif p.kind == "word" and seen_in and body is None:
                items.append(p)
            elif p.kind not in ("reservedword", "operator"):
                body = p
        cfor = fctx.prep.cfors.get(var_node.pos[0] + fctx.offset)
        if cfor is not None:
            count = self._cfor_count(cfor, ctx)
            kind = "c-for"
        else:
            count = self._items_count(items, ctx) if seen_in else None
            kind = "for"
        line = fctx.line(node.pos[0])
        loop = Loop(var, count, Site(fctx.path, line, fctx.line_text(line)), kind)
        ctx.state.vars[var] = EnvVar(var, None, f"<loop {line}>", Site(fctx.path, line, fctx.line_text(line)),
                                     exported=False, varies=True)
        if body is not None:
            self.walk(body, replace(ctx, loop=loop))

    def _cfor_count(self, cfor: Any, ctx: Ctx) -> int | None:
        m = re.fullmatch(r"\s*\w+\s*=\s*(.+)", cfor.init)
        c = re.fullmatch(r"\s*\$?(\w+)\s*(<=|<)\s*(.+)", cfor.cond)
        step_ok = re.fullmatch(r"\s*(\+\+\s*\w+|\w+\s*\+\+|\w+\s*\+=\s*1|\w+\s*=\s*\w+\s*\+\s*1)\s*", cfor.step)
        if not (m and c and step_ok):
            return None
        lo = try_arith(m.group(1), ctx.state.vars.get)
        hi = try_arith(c.group(3), ctx.state.vars.get)
        if lo is None or hi is None:
            return None
        return max(0, hi - lo + (1 if c.group(2) == "<=" else 0))

    def _items_count(self, items: list[Any], ctx: Ctx) -> int | None:
        total = 0
        for item in items:
            raw = ctx.file.raw(item).strip()
            inner = None
            if raw.startswith("$(") and raw.endswith(")") and match_close(raw, 1, "(", ")") == len(raw) - 1:
                inner = raw[2:-1]
            elif raw.startswith("`") and raw.endswith("`") and len(raw) > 1:
                inner = raw[1:-1]
            words = split_words(inner) if inner is not None else []
            if words and words[0] == "seq":
                args = [self._expand(a, ctx, split=False) for a in words[1:]]
                nums = [try_arith(a.value, ctx.state.vars.get) if a.known else None for a in args]
                if any(v is None for v in nums) or not 1 <= len(nums) <= 3:
                    return None
                vals = [int(v) for v in nums if v is not None]
                lo, step, hi = (1, 1, vals[0]) if len(vals) == 1 else (
                    (vals[0], 1, vals[1]) if len(vals) == 2 else (vals[0], vals[1], vals[2]))
                total += len(range(lo, hi + 1, step)) if step else 0
                continue
            brace = re.fullmatch(r"\{(-?\d+)\.\.(-?\d+)\}", raw)
            if brace:
                lo, hi = int(brace.group(1)), int(brace.group(2))
                total += abs(hi - lo) + 1
                continue
            exp = self._expand(raw, ctx)
            if not exp.known:
                return None
            total += len(exp.fields)
        return total

    def _while(self, node: Any, ctx: Ctx) -> None:
        fctx = ctx.file
        line = fctx.line(node.pos[0])
        loop = Loop(None, None, Site(fctx.path, line, fctx.line_text(line)), node.kind)
        inner = replace(ctx, loop=loop)
        after_do = False
        for p in node.parts:
            if p.kind == "reservedword":
                after_do = after_do or p.word == "do"
                continue
            self.walk(p, inner if after_do else replace(inner, condition=True))

    def _if(self, node: Any, ctx: Ctx) -> None:
        cond = False
        for p in node.parts:
            if p.kind == "reservedword":
                cond = p.word in ("if", "elif")
                continue
            self.walk(p, replace(ctx, condition=True) if cond else ctx)

    # -- simple commands --------------------------------------------------
    def _expand(self, raw: str, ctx: Ctx, split: bool = True) -> Expanded:
        return expand(raw, ctx.state.vars.get, split=split, per_task=ctx.state.per_task, home=self.home,
                      script=ctx.file.path, cwd=ctx.state.cwd)

    def _assign(self, raw: str, ctx: Ctx, site: Site, export: bool | None) -> EnvVar | None:
        m = re.match(r"([A-Za-z_]\w*)(\+?=)(.*)", raw, re.S)
        if not m:
            return None
        name, op, value_raw = m.groups()
        old = ctx.state.vars.get(name)
        items = None
        if value_raw.startswith("(") and value_raw.endswith(")"):
            items = self._array_items(value_raw[1:-1], ctx)
            if op == "+=" and old is not None and old.items is not None and items is not None:
                items = old.items + items
            value = " ".join(items) if items is not None else None
            exp_refs: list[str] = []
            varies = False
        else:
            exp = self._expand(value_raw, ctx, split=False)
            value = exp.value if exp.known else None
            if op == "+=" and old is not None:
                value = (old.value + value) if (old.value is not None and value is not None) else None
            exp_refs, varies = exp.refs, exp.varies
            if ctx.state.per_task and name in RANK_VARS:
                varies = True
        exported = bool(export) or ctx.state.allexport or (old is not None and old.exported)
        var = EnvVar(name, value, value_raw, site, exported, tuple(exp_refs), varies, items)
        return var

    def _array_items(self, body: str, ctx: Ctx) -> tuple[str, ...] | None:
        import bashlex

        try:
            nodes = bashlex.parse("_ " + body.replace("\n", " "))
        except Exception:
            return None
        out: list[str] = []
        src = "_ " + body.replace("\n", " ")
        for node in nodes:
            for p in getattr(node, "parts", [])[1:]:
                if p.kind != "word":
                    continue
                exp = self._expand(src[p.pos[0]:p.pos[1]], ctx)
                if not exp.known:
                    return None
                out.extend(exp.fields)
        return tuple(out)

    def _command(self, node: Any, ctx: Ctx) -> None:
        fctx = ctx.file
        line = fctx.line(node.pos[0])
        end_line = fctx.line(max(node.pos[0], node.pos[1] - 1))
        site = Site(fctx.path, line, fctx.line_text(line))
        assigns: list[Any] = []
        words: list[Any] = []
        heredoc = None
        for p in node.parts:
            if p.kind == "assignment" and not words:
                assigns.append(p)
            elif p.kind == "word":
                words.append(p)
            elif p.kind == "redirect" and getattr(p, "type", "") in ("<<", "<<-"):
                heredoc = fctx.prep.heredocs.get(p.pos[0] + fctx.offset)
        inline: list[EnvVar] = []
        for a in assigns:
            var = self._assign(fctx.raw(a), ctx, Site(fctx.path, fctx.line(a.pos[0]),
                                                      fctx.line_text(fctx.line(a.pos[0]))), None)
            if var is not None:
                inline.append(var)
        if not words:  # plain assignments change the shell
            for var in inline:
                ctx.state.vars[var.name] = var
            return
        argv: list[str] = []
        word_lines: list[tuple[str, int]] = []
        for w in words:
            raw = fctx.raw(w)
            exp = self._expand(raw, ctx)
            argv.extend(exp.fields)
            word_lines.append((raw, fctx.line(w.pos[0])))
        if not argv:
            return
        if self._builtin(argv, words, ctx, site, line):
            return
        wrappers, rest, env_ops = argvmod.strip_wrappers(argv)
        wrappers = list(ctx.wrappers) + wrappers
        env = {k: v for k, v in ctx.state.vars.items() if v.exported}
        for var in inline:
            env[var.name] = replace(var, exported=True)
        for op in env_ops:
            if op[0] == "clear":
                env = {}
            elif op[0] == "unset":
                env.pop(op[1], None)
            else:
                raw_val = op[2]
                env[op[1]] = EnvVar(op[1], raw_val, raw_val, self._word_site(word_lines, op[1] + "=", site),
                                    True, (), ctx.state.per_task and op[1] in RANK_VARS)
                inline.append(env[op[1]])
        per_task = ctx.state.per_task or any(w.name in TASK_WRAPPERS for w in wrappers)
        if rest and self._nested_shell(rest, wrappers, word_lines, env, ctx, site, line):
            return
        launch = argvmod.interpret(rest, lambda p: self.resolve(p, ctx.state.cwd)) if rest else None
        if launch is not None and launch.kind == "code":
            code_line = self._word_line(word_lines, "-c", line, after=True)
            launch = replace(launch, code_line=code_line)
        elif launch is not None and launch.kind == "stdin" and heredoc is not None:
            launch = replace(launch, code=heredoc.body, code_line=fctx.line(heredoc.body_start - fctx.offset))
        self._order += 1
        text = fctx.src[node.pos[0] + fctx.offset:node.pos[1] + fctx.offset]
        self.commands.append(Command(
            site=site, text=text, argv=tuple(argv), env=env, inline=tuple(inline), wrappers=tuple(wrappers),
            launch=launch, loop=ctx.loop, background=ctx.background, condition=ctx.condition,
            per_task=per_task, flow=ctx.flow, order=self._order, words=tuple(word_lines), end_line=end_line))
        if rest and rest[0] in ctx.state.functions and ctx.depth < MAX_DEPTH:
            body, def_file, def_offset = ctx.state.functions[rest[0]]
            saved = def_file.offset
            def_file.offset = def_offset
            self.walk(body, replace(ctx, file=def_file, depth=ctx.depth + 1))
            def_file.offset = saved

    @staticmethod
    def _word_site(word_lines: list[tuple[str, int]], prefix: str, default: Site) -> Site:
        for raw, line in word_lines:
            if raw.startswith(prefix):
                return Site(default.file, line, default.text if line == default.line else raw)
        return default

    @staticmethod
    def _word_line(word_lines: list[tuple[str, int]], token: str, default: int, after: bool = False) -> int:
        for k, (raw, line) in enumerate(word_lines):
            if raw == token:
                if after and k + 1 < len(word_lines):
                    return word_lines[k + 1][1]  # line 1 of the code is the line its word starts on
                return line
        return default

    def resolve(self, path: str, cwd: str) -> str | None:
        """Absolute path of a script named on a command line (None when not statically known)."""
        if not path or "$" in path or "`" in path:
            return None
        full = os.path.normpath(os.path.join(cwd, path))
        return full

    def _builtin(self, argv: list[str], words: list[Any], ctx: Ctx, site: Site, line: int) -> bool:
        head = argv[0]
        fctx = ctx.file
        if head in ("export", "declare", "typeset", "local", "readonly"):
            opts = [a for a in argv[1:] if a.startswith(("-", "+"))]
            export = head == "export" or any("x" in o for o in opts if o.startswith("-"))
            for w in words[1:]:
                raw = fctx.raw(w)
                if raw.startswith(("-", "+")):
                    continue
                wsite = Site(fctx.path, fctx.line(w.pos[0]), fctx.line_text(fctx.line(w.pos[0])))
                var = self._assign(raw, ctx, wsite, export)
                if var is not None:
                    ctx.state.vars[var.name] = var
                elif export and re.fullmatch(r"[A-Za-z_]\w*", raw) and raw in ctx.state.vars:
                    ctx.state.vars[raw] = replace(ctx.state.vars[raw], exported=True)
                elif export and re.fullmatch(r"[A-Za-z_]\w*", raw):
                    ctx.state.vars[raw] = EnvVar(raw, "", "", wsite, True)
            return True
        if head == "unset":
            for name in argv[1:]:
                ctx.state.vars.pop(name, None)
            return True
        if head == "set":
            for a in argv[1:]:
                if a.startswith("-") and "a" in a[1:] and not a.startswith("--"):
                    ctx.state.allexport = True
                elif a.startswith("+") and "a" in a[1:]:
                    ctx.state.allexport = False
            if "allexport" in argv:
                ctx.state.allexport = argv[argv.index("allexport") - 1] == "-o"
            return True
        if head in ("source", ".") and len(argv) > 1:
            self._source(argv[1], ctx, site)
            return True
        if head == "cd" and len(argv) > 1:
            exp_raw = fctx.raw(words[1])
            exp = self._expand(exp_raw, ctx, split=False)
            if exp.known:
                ctx.state.cwd = os.path.normpath(os.path.join(ctx.state.cwd, exp.value))
            return True
        if head in ("module", "ml"):
            if head == "ml" or argv[1:2] in (["load"], ["add"]):
                f = self.files.get(fctx.path)
                if f is not None:
                    self.files[fctx.path] = replace(f, module_loads=f.module_loads + (site,))
            return False
        return False

    def _source(self, target: str, ctx: Ctx, site: Site) -> None:
        path = self.resolve(target, ctx.state.cwd)
        if path is None:
            self.notes.append(Note(site.file, f"sources {target!r}, which cannot be resolved statically",
                                   site.line))
            return
        if self.root is not None and not inside(path, self.root):
            self.notes.append(Note(site.file, f"sources {target!r}, outside the job folder; not read",
                                   site.line, "outside"))
            return
        self.referenced.add(path)
        saved = ctx.file.offset
        self.run_file(path, ctx.state, ctx.flow, "sourced", ctx.depth + 1)
        ctx.file.offset = saved

    def _nested_shell(self, rest: list[str], wrappers: list[Wrapper], word_lines: list[tuple[str, int]],
                      env: dict[str, EnvVar], ctx: Ctx, site: Site, line: int) -> bool:
        """`bash -c '...'`, `bash x.sh`, `./x.sh`: walk what they run, in a new shell."""
        head = argvmod.base(rest[0])
        per_task = ctx.state.per_task or any(w.name in TASK_WRAPPERS for w in wrappers)
        state = ShellState(dict(env), ctx.state.cwd, False, {}, per_task)
        if head in SHELL_NAMES:
            args = rest[1:]
            k = 0
            while k < len(args) and args[k].startswith("-") and args[k] != "-c":
                k += 1
            if k < len(args) and args[k] == "-c" and k + 1 < len(args):
                code_line = self._word_line(word_lines, "-c", line, after=True)
                self.run_string(args[k + 1], ctx.file.path, code_line,
                                replace(ctx, state=state, depth=ctx.depth + 1, wrappers=tuple(wrappers)))
                return True
            if k < len(args):
                return self._child(args[k], state, wrappers, ctx, site)
            return False
        if rest[0].endswith(".sh") or rest[0].startswith("./"):
            return self._child(rest[0], state, wrappers, ctx, site)
        return False

    def _child(self, target: str, state: ShellState, wrappers: list[Wrapper], ctx: Ctx, site: Site) -> bool:
        path = self.resolve(target, ctx.state.cwd)
        if path is None or not os.path.isfile(path) or path.endswith(".py"):
            return False
        if self.root is not None and not inside(path, self.root):
            self.notes.append(Note(site.file, f"runs {target!r}, outside the job folder; not read", site.line,
                                   "outside"))
            return False
        self.referenced.add(path)
        saved = ctx.file.offset
        self.run_file(path, state, ctx.flow, "child", ctx.depth + 1, tuple(wrappers))
        ctx.file.offset = saved
        return True

"""Walk job scripts on their tree-sitter-bash trees: commands in execution order, each with its
environment, its arguments as spans, and the processes it starts.

The walker follows what the scripts do to the environment (`export X=...`, `X=... cmd`,
`env X=... cmd`, `set -a`, `unset`, `cd`), the links between scripts (`source`d files,
`bash x.sh args` / `./x.sh args` with `$1 "$@" ${1:-x}` bound from the caller, shell
functions at their call sites, `bash -c '...'`, the wrapper script that `torchrun
--no-python` starts per rank), and records per simple command its argv (`Word`s with the
source span of every character), the environment it runs with, the loop it runs in,
whether it is backgrounded, and what Python it starts. What tree-sitter cannot read is
noted, never guessed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import replace

from doctor.jobfolder import argv as argvmod
from doctor.jobfolder import modulefiles
from doctor.jobfolder.branches import Branches, clause_parts
from doctor.jobfolder.expand import RANK_VARS, Expander, Expansion, sub_span
from doctor.jobfolder.links import MAX_DEPTH, Links
from doctor.jobfolder.loops import cfor_count, counter_loop, items_count, words_of
from doctor.jobfolder.model import (
    TASK_WRAPPERS,
    Command,
    EnvVar,
    Loop,
    Note,
    Piece,
    ShellFile,
    Site,
    Span,
    Word,
    Wrapper,
)
from doctor.jobfolder.reading import Source as FileSource
from doctor.jobfolder.reading import inside
from doctor.jobfolder.recovery import STATEMENTS, chunks
from doctor.jobfolder.sbatch import sbatch_options
from doctor.jobfolder.state import Ctx, ShellState
from doctor.jobfolder.syntax import Node, Source, named

MAX_NESTING = 100  # statements nested deeper (3000 nested `if`s) are noted, not walked


class ShellWalker(Links, Branches):
    """Walks job scripts; collects commands, shell files and notes."""

    def __init__(self, root: str | None, read: Callable[[str], FileSource], notes: list[Note],
                 home: str | None = None, exists: Callable[[str], bool] = os.path.isfile):
        self.root = root
        self.exists = exists
        self.read = read
        self.notes = notes
        self.home = home
        self.commands: list[Command] = []
        self.files: dict[str, ShellFile] = {}
        self.referenced: set[str] = set()
        self._order = 0
        self._cache: dict[str, list[Source] | None] = {}
        self._running: set[str] = set()
        self._texts: dict[str, str] = {}
        self.generated: dict[str, Span] = {}  # scripts the job writes with `cat > x.sh <<'EOF'`
        self._texts_generated: dict[str, str] = {}

    # -- files ------------------------------------------------------------
    def load(self, path: str, role: str = "job") -> list[Source] | None:
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
            self._texts[path] = src.text
            result = chunks(Source(path, src.text), self.notes)
        self._cache[path] = result
        return result

    def run_file(self, path: str, state: ShellState, flow: int, role: str, depth: int = 0,
                 wrappers: tuple[Wrapper, ...] = ()) -> None:
        if depth > MAX_DEPTH or path in self._running:
            return
        chunks = self.load(path, role)
        if chunks is None:
            return
        if path not in self.files:
            text = self._texts.get(path, "")
            self.files[path] = ShellFile(path, role, sbatch_options(path, text), lines=text.count("\n") + 1)
        self._running.add(path)
        try:
            for src in chunks:
                self.walk(src.root, Ctx(src, state, flow, depth, wrappers=wrappers))
        finally:
            self._running.discard(path)

    def run_string(self, word: Word, ctx: Ctx) -> None:
        """Walk a `bash -c` string where it is written (its spans stay the file's where they can)."""
        span = word.source
        offsets = _char_offsets(word)
        first = next((p.span for p in word.pieces if p.text), None)
        if span is not None and span.end - span.start == len(word.text):
            src = Source(ctx.src.path, word.text, span.line - 1, span.start, span.col - 1)
        elif offsets is not None and first is not None:  # escapes in double quotes: each character where it is
            src = Source(ctx.src.path, word.text, first.line - 1, offsets[0], first.col - 1, offsets)
        elif span is not None:
            src = Source(ctx.src.path, word.text, span.line - 1, span.start, span.col - 1)
        else:
            src = Source(ctx.src.path, word.text, word.span.line - 1, word.span.start, 0)
        self.walk(src.root, replace(ctx, src=src))

    # -- statements -------------------------------------------------------
    def walk(self, node: Node, ctx: Ctx) -> None:
        if ctx.nesting > MAX_NESTING:
            line = ctx.src.line(ctx.src.start(node))
            self.notes.append(Note(ctx.src.path, f"line {line} not analysed: statements nested more than "
                                                 f"{MAX_NESTING} deep", line, "unparsed"))
            return
        ctx = replace(ctx, nesting=ctx.nesting + 1)
        kind = node.type
        if kind in ("program", "do_group", "compound_statement", "subshell", "ERROR", "else_clause"):
            inner = replace(ctx, state=ctx.state.copy()) if kind == "subshell" else ctx
            self._block(node, inner)
        elif kind == "list":
            for part in named(node):
                self.walk(part, ctx)
        elif kind == "pipeline":
            for part in named(node):
                self.walk(part, replace(ctx, state=ctx.state.copy()))
        elif kind == "negated_command":
            for part in named(node):
                self.walk(part, replace(ctx, condition=True))
        elif kind == "redirected_statement":
            self._redirected(node, ctx)
        elif kind == "command":
            self._command(node, ctx)
        elif kind in ("variable_assignment", "variable_assignments"):
            for a in ([node] if kind == "variable_assignment" else named(node)):
                var = self._assign(a, ctx, None)
                if var is not None:
                    ctx.state.vars[var.name] = var
        elif kind == "declaration_command":
            self._declare(node, ctx)
        elif kind == "unset_command":
            for n in named(node)[0:]:
                ctx.state.vars.pop(ctx.src.text_of(n), None)
        elif kind in ("for_statement", "c_style_for_statement"):
            self._for(node, ctx)
        elif kind == "while_statement":
            self._while(node, ctx)
        elif kind == "if_statement":
            self._if(node, ctx)
        elif kind == "case_statement":
            for item in self._case_arms(node, ctx):
                self._block(item, ctx, skip_patterns=True)
        elif kind == "function_definition":
            name = node.child_by_field_name("name")
            body = node.child_by_field_name("body")
            if name is not None and body is not None:
                ctx.state.functions[ctx.src.text_of(name)] = (body, ctx.src)

    def _block(self, node: Node, ctx: Ctx, skip_patterns: bool = False) -> None:
        kids = list(node.children)
        past_patterns = not skip_patterns
        for k, child in enumerate(kids):
            if not past_patterns:
                past_patterns = child.type == ")"
                continue
            if not child.is_named or child.type not in STATEMENTS:
                continue
            bg = k + 1 < len(kids) and kids[k + 1].type == "&"
            inner = replace(ctx, background=ctx.background or bg, state=ctx.state.copy()) if bg else ctx
            if node.type == "program" and (ctx.top is None or ctx.top[0] != ctx.src.path):
                inner = replace(inner, top=(ctx.src.path, ctx.src.line(ctx.src.start(child))))
            self.walk(child, inner)

    def _redirected(self, node: Node, ctx: Ctx) -> None:
        body = node.child_by_field_name("body") or (named(node)[0] if named(node) else None)
        heredoc = next((c for c in node.children if c.type == "heredoc_redirect"), None)
        if body is None:
            return
        if heredoc is not None:
            hb = next((c for c in heredoc.children if c.type == "heredoc_body"), None)
            if hb is not None:
                self._written_script(node, body, heredoc, hb, ctx)
                ctx = replace(ctx, heredoc=(ctx.src.text_of(hb), ctx.src.line(ctx.src.start(hb)),
                                            ctx.src.node_span(hb)))
            if body.type == "command":
                self._command(body, ctx, extra_end=ctx.src.start(heredoc))
                return
        self.walk(body, ctx)

    def _for(self, node: Node, ctx: Ctx) -> None:
        src = ctx.src
        line = src.line(src.start(node))
        site = Site(src.path, line, src.line_text(line))
        body = node.child_by_field_name("body")
        if node.type == "c_style_for_statement":
            init = node.child_by_field_name("initializer")
            m = re.match(r"\s*([A-Za-z_]\w*)", src.text_of(init)) if init is not None else None
            var = m.group(1) if m else None
            loop = Loop(var, cfor_count(node, src, ctx.state.vars.get), site, "c-for")
        else:
            var_node = node.child_by_field_name("variable")
            var = src.text_of(var_node) if var_node is not None else None
            values = [c for c in node.children_by_field_name("value")]
            has_in = any(c.type == "in" for c in node.children)
            loop = Loop(var, items_count(values, src, ctx.state.vars.get,
                                         lambda n, split=True: self._expand(n, ctx, split)) if has_in else None,
                        site, "for")
        if var:
            ctx.state.vars[var] = EnvVar(var, None, f"<loop {line}>", site, exported=False, varies=True)
        if body is not None:
            self.walk(body, replace(ctx, loop=loop))

    def _while(self, node: Node, ctx: Ctx) -> None:
        """`while`/`until`; a counter loop (`while [ $rank -lt $N ]; do ...; rank=$((rank+1)); done`) is
        read as the `for ((...))` it spells: its variable differs per iteration, N - start of them."""
        src = ctx.src
        line = src.line(src.start(node))
        site = Site(src.path, line, src.line_text(line))
        kind = "until" if node.children and node.children[0].type == "until" else "while"
        body = node.child_by_field_name("body")
        conds = node.children_by_field_name("condition")
        counter = counter_loop(" ".join(src.text_of(c) for c in conds), src.text_of(body) if body else "",
                               ctx.state.vars.get, until=kind == "until")
        loop = Loop(counter[0] if counter else None, counter[1] if counter else None, site, kind)
        inner = replace(ctx, loop=loop)
        if counter:
            ctx.state.vars[counter[0]] = EnvVar(counter[0], None, f"<loop {line}>", site,
                                                exported=bool((old := ctx.state.vars.get(counter[0])) and old.exported),
                                                varies=True)
        for c in conds:
            self.walk(c, replace(inner, condition=True))
        if body is not None and not _getopts_without_arguments(conds, ctx):
            self.walk(body, inner)

    def _if(self, node: Node, ctx: Ctx) -> None:
        """`if`/`elif`/`else`: a test whose value is known statically (`[ "$PROFILE" = 1 ]` with
        PROFILE=1 above) runs only its branch; else every branch is read, in order."""
        clauses = [node] + [c for c in node.children if c.type in ("elif_clause", "else_clause")]
        for clause in clauses:
            if clause.type == "else_clause":
                self._block(clause, ctx)
                return
            conds, body = clause_parts(clause)
            for c in conds:
                self.walk(c, replace(ctx, condition=True))
            taken = self._test_value(conds, ctx)
            if taken is False:
                continue
            for b in body:
                self.walk(b, ctx)
            if taken is True:
                return

    # -- words ------------------------------------------------------------
    def _expand(self, node: Node, ctx: Ctx, split: bool = True) -> Expansion:
        line = ctx.src.line(ctx.src.start(node))

        def assign(name: str, pieces: tuple[Piece, ...], known: bool) -> None:  # `: "${NGPUS:=4}"`
            old = ctx.state.vars.get(name)
            value = "".join(p.text for p in pieces)
            ctx.state.vars[name] = EnvVar(name, value if known else None, value,
                                          Site(ctx.src.path, line, ctx.src.line_text(line)),
                                          exported=old is not None and old.exported, pieces=pieces)

        return Expander(ctx.src, ctx.state.vars.get, ctx.state.args, split=split, per_task=ctx.state.per_task,
                        home=self.home, cwd=ctx.state.cwd, assign=assign).expand(node)

    def _assign(self, node: Node, ctx: Ctx, export: bool | None) -> EnvVar | None:
        """A `NAME=value` / `NAME+=value` / `NAME=(items)` node, evaluated now."""
        src = ctx.src
        name_node = node.child_by_field_name("name")
        value_node = node.child_by_field_name("value")
        if name_node is None or name_node.type != "variable_name":
            return None
        name = ctx.state.refs.get(src.text_of(name_node), src.text_of(name_node))  # `declare -n`
        append = any(c.type == "+=" for c in node.children)
        line = src.line(src.start(node))
        site = Site(src.path, line, src.line_text(line))
        old = ctx.state.vars.get(name)
        exported = bool(export) or ctx.state.allexport or (old is not None and old.exported)
        if value_node is None:
            return EnvVar(name, "", "", site, exported, span=src.span(src.end(node), src.end(node)))
        raw = src.text_of(value_node)
        if value_node.type == "array":
            items: list[str] = []
            pieces: list[tuple[Piece, ...]] = []
            known = True
            for item in named(value_node):
                exp = self._expand(item, ctx)
                known = known and exp.known
                items.extend(exp.values)
                pieces.extend(tuple(f) for f in exp.fields)
            if append and old is not None and old.items is not None:
                items = list(old.items) + items
                pieces = list(old.item_pieces) + pieces
            if not known:
                return EnvVar(name, None, raw, site, exported)
            return EnvVar(name, " ".join(items), raw, site, exported, items=tuple(items),
                          item_pieces=tuple(pieces), span=src.node_span(value_node))
        exp = self._expand(value_node, ctx, split=False)
        value: str | None = exp.value if exp.known else None
        vpieces = exp.pieces
        spelling = None if exp.known else self._spelling(value_node, ctx)
        if append and old is not None:
            value = (old.value + value) if (old.value is not None and value is not None) else None
            vpieces = old.pieces + vpieces
            if value is None:
                before = old.value if old.value is not None else old.spelling
                spelling = None if before is None else before + (spelling if spelling is not None else exp.value)
        varies = exp.varies or (ctx.state.per_task and name in RANK_VARS)
        return EnvVar(name, value, raw, site, exported, tuple(exp.refs), varies, pieces=vpieces,
                      span=_inside_quotes(src, value_node), spelling=spelling)

    def _spelling(self, node: Node, ctx: Ctx) -> str:
        """An unknown value's text one level down (EnvVar.spelling): what is known expanded, each shell
        variable with a spelling of its own replaced by that, the rest (`$USER`, `$(date)`) as written."""
        exp = Expander(ctx.src, ctx.state.vars.get, ctx.state.args, split=False, per_task=ctx.state.per_task,
                       home=self.home, cwd=ctx.state.cwd, spell=True).expand(node)
        return exp.value

    def _declare(self, node: Node, ctx: Ctx) -> None:
        src = ctx.src
        head = src.text_of(node.children[0]) if node.children else ""
        opts = [src.text_of(c) for c in node.children if c.type == "word" and src.text_of(c).startswith("-")]
        export = head == "export" or any("x" in o for o in opts if o.startswith("-"))
        nameref = head in ("declare", "typeset", "local") and any(
            "n" in o[1:] for o in opts if o.startswith("-") and not o.startswith("--"))  # `export -n` un-exports
        for c in named(node):
            if c.type == "command_substitution" and export:
                self._export_file(c, ctx)
            elif c.type == "variable_assignment" and nameref:  # `declare -n REF=NAME`: REF=x sets NAME
                ref, target = c.child_by_field_name("name"), c.child_by_field_name("value")
                if ref is not None and target is not None:
                    exp = self._expand(target, ctx, split=False)
                    line = src.line(src.start(c))
                    if exp.known and re.fullmatch(r"[A-Za-z_]\w*", exp.value):
                        ctx.state.refs[src.text_of(ref)] = exp.value
                    else:
                        self._opaque(ctx, Site(src.path, line, src.line_text(line)), f"declare -n on line {line}")
            elif c.type in ("string", "concatenation", "simple_expansion", "expansion", "raw_string", "word") \
                    and not src.text_of(c).startswith("-"):
                self._dynamic_assign(c, ctx, export, head)
            elif c.type == "variable_assignment":
                var = self._assign(c, ctx, export)
                if var is not None:
                    ctx.state.vars[var.name] = var
            elif c.type == "variable_name":
                name = src.text_of(c)
                line = src.line(src.start(c))
                if name in ctx.state.vars:
                    if export:
                        ctx.state.vars[name] = replace(ctx.state.vars[name], exported=True)
                elif export or head == "local":
                    ctx.state.vars[name] = EnvVar(name, "", "", Site(src.path, line, src.line_text(line)),
                                                  export)

    def _dynamic_assign(self, node: Node, ctx: Ctx, export: bool, head: str) -> None:
        """`export "$k=$v"`, `declare "$line"`: a name spelled by an expansion may be any variable;
        `export 'X=1'` is X=1."""
        src = ctx.src
        line = src.line(src.start(node))
        site = Site(src.path, line, src.line_text(line))
        exp = self._expand(node, ctx, split=False)
        m = re.fullmatch(r"([A-Za-z_]\w*)=(.*)", exp.value, re.S) if exp.known else None
        named_as = re.match(r"""["']?([A-Za-z_]\w*)=""", src.text_of(node))  # `export "LD_PATH=$X/lib"`
        if m is not None:
            old = ctx.state.vars.get(m.group(1))
            ctx.state.vars[m.group(1)] = EnvVar(m.group(1), m.group(2), src.text_of(node), site,
                                                export or ctx.state.allexport or (old is not None and old.exported))
        elif named_as is not None:
            self._unknown([named_as.group(1)], ctx, site, f"{head} on line {line}", export=export)
        elif not exp.known:
            self._opaque(ctx, site, f"{head} {src.text_of(node)} on line {line}")

    def _unknown(self, names: list[str], ctx: Ctx, site: Site, how: str, export: bool = False) -> None:
        """Variables a builtin sets to what only the running job knows (`read`, `printf -v`, `mapfile`):
        unknown from here on, never their older value."""
        for raw in names:
            name = ctx.state.refs.get(raw, raw)
            if not re.fullmatch(r"[A-Za-z_]\w*", name):
                self._opaque(ctx, site, how)
                continue
            old = ctx.state.vars.get(name)
            ctx.state.vars[name] = EnvVar(name, None, f"<{how}>", site,
                                          export or ctx.state.allexport or (old is not None and old.exported))

    def _opaque(self, ctx: Ctx, site: Site, how: str) -> None:
        """The script sets variables whose names only the running job knows (`eval "$(...)"`,
        `export "$k=$v"` in a `while read` loop, `source <(...)`): every variable is unknown from here."""
        marker = EnvVar("*", None, f"<maybe set by {how}>", site, True)
        self.notes.append(Note(site.file, f"sets variables only known when the job runs ({how}); values read "
                                          "after it are unknown", site.line, "unresolved"))
        ctx.state.opaque = marker
        for name, var in list(ctx.state.vars.items()):
            if var.site is not None and var.value is not None:
                ctx.state.vars[name] = EnvVar(name, None, marker.raw, site, var.exported, varies=var.varies)

    def _eval(self, words: list[Word], ctx: Ctx, site: Site) -> None:
        """`eval ARGS`: known words are run here as the shell would; else the names it assigns, as written,
        are unknown (any name, when it runs what a command prints)."""
        args = words[1:]
        if not args:
            return
        if all(w.known for w in args):
            code = args[0] if len(args) == 1 else Word(" ".join(w.text for w in args), args[0].span)
            before = dict(ctx.state.vars)
            self.run_string(code, replace(ctx, heredoc=None))
            self._eval_origins(code, ctx, before)
            return
        raw = " ".join(w.text for w in args)  # an unknown expansion keeps its spelling
        tool = re.match(r"""\s*["']?\$\(\s*([^\s)]+)""", raw)
        if tool and argvmod.base(tool.group(1)) in ENV_TOOLS:  # `eval "$(conda shell.bash hook)"`
            return
        names = _ASSIGNED.findall(raw)
        if names:
            self._unknown(names, ctx, site, f"eval on line {site.line}", export="export" in raw)
        if re.match(r"""\s*["']?[$`]""", raw) or re.search(r"""[;&|]\s*["']?[$`]""", raw) or not names:
            self._opaque(ctx, site, f"eval on line {site.line}")

    def _eval_origins(self, code: Word, ctx: Ctx, before: dict[str, EnvVar]) -> None:
        """A value `eval` assigned from a string a variable holds (`eval "export $SETTING"`) is written where
        that string is: the variable's span goes there, so an edit lands on the line that wrote it."""
        for name, var in list(ctx.state.vars.items()):
            if var is before.get(name) or not var.value:
                continue
            for piece in code.pieces:
                at = piece.text.find(f"{name}={var.value}") if piece.span is not None else -1
                if piece.span is None or at < 0 or piece.span.file != ctx.src.path:
                    continue
                a = at + len(name) + 1
                span = sub_span(piece.span, piece.text, a, a + len(var.value))
                site = Site(ctx.src.path, span.line, ctx.src.line_text(span.line))
                ctx.state.vars[name] = replace(var, site=site, span=span, pieces=(Piece(var.value, span),))
                break

    # -- simple commands --------------------------------------------------
    def _command(self, node: Node, ctx: Ctx, extra_end: int | None = None) -> None:
        src = ctx.src
        start = src.start(node)
        line = src.line(start)
        site = Site(src.path, line, src.line_text(line))
        prefix = [c for c in node.children if c.type == "variable_assignment"]
        word_nodes = words_of(node)
        inline = [v for a in prefix if (v := self._assign(a, ctx, None)) is not None]
        words: list[Word] = []
        word_lines: list[tuple[str, int]] = []
        refs: list[str] = []
        for w in word_nodes:
            exp = self._expand(w, ctx)
            words.extend(exp.words(src.node_span(w)))
            word_lines.append((src.text_of(w), src.line(src.start(w))))
            refs.extend(exp.refs)
        end = src.end(node)
        if extra_end is not None and extra_end > end:  # `python - <<EOF`: tree-sitter drops the `-`
            for m in re.finditer(r"\S+", src.text[end:extra_end]):
                a, b = end + m.start(), end + m.end()
                sp = src.span(a, b)
                words.append(Word(m.group(), sp, (Piece(m.group(), sp),)))
                word_lines.append((m.group(), src.line(a)))
        argv = [w.text for w in words]
        if words:  # `$_`: the last word of the command before (`mkdir -p "$D" && cd "$_"`)
            last = words[-1]
            ctx.state.vars["_"] = EnvVar("_", last.text if last.known else None, last.text, site, False,
                                         pieces=last.pieces)
        if not words:
            for var in inline:
                ctx.state.vars[var.name] = var
            return
        if self._builtin(argv, words, ctx, site):
            return
        if not words[0].known:
            self.notes.append(Note(src.path, f"runs {src.text_of(word_nodes[0])!r}, which is only known when the "
                                             "job runs; not followed", line, "unresolved"))
        unknown = frozenset(k for k, w in enumerate(words) if k and not w.known)
        wrappers, rest, env_ops = argvmod.strip_wrappers(argv, unknown)
        first = len(argv) - len(rest)
        pos = 0
        for w in wrappers:
            for k in range(pos + 1, pos + len(w.argv)):
                if k in unknown:
                    self.notes.append(Note(src.path, f"{w.name} gets {src.text_of(word_nodes[k]) if k < len(word_nodes) else argv[k]!r}, "
                                                     f"which is only known when the job runs; read as {w.name}'s "
                                                     "options", line, "unresolved"))
            pos += len(w.argv)
        if rest and first and not words[first].known:
            self.notes.append(Note(src.path, f"runs {rest[0]!r}, which is only known when the job runs; not "
                                             "followed", line, "unresolved"))
        rest_words = words[first:]
        wrappers = list(ctx.wrappers) + wrappers
        env = {k: v for k, v in ctx.state.vars.items() if v.exported}
        for var in inline:
            env[var.name] = replace(var, exported=True)
        before_clear = env
        for op in env_ops:
            if op[0] == "clear":
                before_clear, env = env, {}
            elif op[0] == "keep":
                if op[1] in before_clear:
                    env[op[1]] = before_clear[op[1]]
            elif op[0] == "unset":
                env.pop(op[1], None)
            else:
                env[op[1]] = var = self._env_word(op[1], words[int(op[3])], int(op[4]), int(op[5]), ctx)
                inline.append(var)
        per_task = ctx.state.per_task or any(w.name in TASK_WRAPPERS for w in wrappers)
        if rest and self._nested_shell(rest_words, wrappers, env, ctx, site):
            return
        launch = argvmod.interpret(rest, lambda p: self.resolve(p, ctx.state.cwd),
                                   lambda m: self.resolve_module(m, ctx.state.cwd, env)) if rest else None
        if launch is not None and launch.kind == "code":
            k = argv.index("-c", first) if "-c" in argv[first:] else -1
            code_line = words[k + 1].span.line if 0 <= k < len(words) - 1 else line
            code_span = words[k + 1].source if 0 <= k < len(words) - 1 else None
            launch = replace(launch, code_line=code_line, code_span=code_span)
        elif launch is not None and launch.kind == "stdin" and ctx.heredoc is not None:
            launch = replace(launch, code=ctx.heredoc[0], code_line=ctx.heredoc[1], code_span=ctx.heredoc[2])
        inner = launch
        while inner is not None and inner.inner is not None:
            inner = inner.inner
        target = inner.training_target if inner is not None else None
        if target and inner is not None and inner.training_script is None and ("$" in target or "`" in target):
            self.notes.append(Note(src.path, f"starts {target!r}, which is only known when the job runs; not "
                                             "followed", line, "unresolved"))
        self._order += 1
        end_line = src.line(max(start, end - 1))
        cmd = Command(
            site=site, text=src.text[start:end], argv=tuple(argv), env=env, inline=tuple(inline),
            wrappers=tuple(wrappers), launch=launch, loop=ctx.loop, background=ctx.background,
            condition=ctx.condition, per_task=per_task, flow=ctx.flow, order=self._order,
            words=tuple(word_lines), end_line=end_line, argv_words=tuple(words), span=src.span(start, end),
            parent=ctx.state.parent, cwd=ctx.state.cwd,
            statement_line=ctx.top[1] if ctx.top is not None and ctx.top[0] == src.path else line,
            shell_refs=tuple(dict.fromkeys(n for n in refs if n in ctx.state.vars and not ctx.state.vars[n].exported)),
            opaque=ctx.state.opaque)
        self.commands.append(cmd)
        if launch is not None and launch.spawner is not None and launch.spawner.no_python and launch.inner is None:
            self._workers(cmd, rest_words, launch, ctx)
        elif launch is not None and launch.spawner is None and launch.kind == "script":
            self._submitted(cmd, launch, ctx)
        if rest and rest[0] in ctx.state.functions and ctx.depth < MAX_DEPTH:
            body, def_src = ctx.state.functions[rest[0]]
            state = ctx.state.copy()
            state.args = tuple(rest_words[1:])
            self.walk(body, replace(ctx, src=def_src, state=state, depth=ctx.depth + 1))
            ctx.state.vars.update({k: v for k, v in state.vars.items()})

    def _env_word(self, name: str, word: Word, start: int, end: int, ctx: Ctx) -> EnvVar:
        """`env NAME=value`, `srun --export=ALL,NAME=value`: the value, word.text[start:end], with the
        spans of its characters."""
        value = word.text[start:end]
        pieces: list[Piece] = []
        pos = 0
        for p in word.pieces:
            a, b = max(start - pos, 0), min(end - pos, len(p.text))
            pos += len(p.text)
            if a >= b:
                continue
            if (a, b) != (0, len(p.text)):
                p = Piece(p.text[a:b], sub_span(p.span, p.text, a, b) if p.span else None)
            pieces.append(p)
        src_span = Word(value, word.span, tuple(pieces)).source
        site = Site(ctx.src.path, word.span.line, ctx.src.line_text(word.span.line))
        varies = word.varies or (ctx.state.per_task and name in RANK_VARS)
        return EnvVar(name, value if word.known else None, value, site, True, (), varies,
                      pieces=tuple(pieces), span=src_span)

    def _builtin(self, argv: list[str], words: list[Word], ctx: Ctx, site: Site) -> bool:
        head = argv[0]
        if head == "set":
            for a in argv[1:]:
                if a.startswith("-") and "a" in a[1:] and not a.startswith("--"):
                    ctx.state.allexport = True
                elif a.startswith("+") and "a" in a[1:]:
                    ctx.state.allexport = False
            if "allexport" in argv:
                ctx.state.allexport = argv[argv.index("allexport") - 1] == "-o"
            if "--" in argv and ctx.state.args is not None:
                ctx.state.args = tuple(words[argv.index("--") + 1:])
            return True
        if head == "shift":
            n = int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else 1
            if ctx.state.args is not None and not ctx.loop:
                ctx.state.args = ctx.state.args[n:]
            elif ctx.loop:
                ctx.state.args = None
            return True
        if head in ("source", ".") and len(argv) > 1:
            if argv[1].startswith(("<(", "/dev/stdin", "/dev/fd/")) or words[1].text.startswith("<("):
                self._opaque(ctx, site, f"{head} {argv[1]} on line {site.line}")  # `source <(...)`
                return True
            self._source(words[1], words[2:], ctx, site)
            return True
        if head == "eval":
            self._eval(words, ctx, site)
            return True
        if head == "read":
            self._unknown(_read_names(argv), ctx, site, f"read on line {site.line}")
            return True
        if head in ("mapfile", "readarray"):
            names = [a for a in argv[1:] if not a.startswith("-")]
            self._unknown(names[-1:] or ["MAPFILE"], ctx, site, f"{head} on line {site.line}")
            return True
        if head == "printf" and len(argv) > 2 and argv[1] == "-v":
            self._printf_v(words, ctx, site)
            return True
        if head == "cd" and len(argv) > 1:
            if words[1].known:
                ctx.state.cwd = os.path.normpath(os.path.join(ctx.state.cwd, argv[1]))
            return True
        if head in ("module", "ml"):
            if head == "ml" or argv[1:2] in (["load"], ["add"]):
                f = self.files.get(ctx.src.path)
                if f is not None:
                    self.files[ctx.src.path] = replace(f, module_loads=f.module_loads + (site,))
            self._module(argv, words, ctx, site)
            return False
        return False

    def _module(self, argv: list[str], words: list[Word], ctx: Ctx, site: Site) -> None:
        """`module use DIR` (MODULEPATH), `module load NAME` / `ml NAME` of a modulefile in the job
        folder: the variables it sets, each where its modulefile sets it."""
        sub = argv[1] if len(argv) > 1 else ""
        args = [a for a in argv[2:] if not a.startswith("-")]
        if sub == "use":
            dirs = [os.path.normpath(os.path.join(ctx.state.cwd, a)) for a in args]
            old = ctx.state.vars.get("MODULEPATH")
            rest = [old.value] if old is not None and old.value else []
            value = ":".join(rest + dirs if {"-a", "--append"} & set(argv) else dirs + rest)
            ctx.state.vars["MODULEPATH"] = EnvVar("MODULEPATH", value, value, site, True)
            return
        if argv[0] == "ml" and sub not in ("load", "add", "try-load"):
            names = [a for a in argv[1:] if not a.startswith("-")] if sub not in _ML_COMMANDS else []
        else:
            names = args if sub in ("load", "add", "try-load", "try-add") else []
        if not names or self.root is None:
            return
        dirs = [d for d in self._module_dirs(ctx) if inside(d, self.root)]
        for name in names:
            path = modulefiles.find(name, dirs)
            if path is None:
                continue
            src = self.read(path)
            if src.text is None:
                self.notes.append(Note(site.file, f"loads module {name!r} from {path}, which cannot be read: "
                                                  f"{src.problem}", site.line, "unresolved"))
                continue
            self.referenced.add(path)
            for m in modulefiles.settings(path, src.text):
                ctx.state.vars[m.name] = EnvVar(m.name, m.value, m.value, Site(path, m.line, m.text), True,
                                                pieces=(Piece(m.value, m.span),), span=m.span)

    def _module_dirs(self, ctx: Ctx) -> list[str]:
        """MODULEPATH's folders as the script set it (`$PWD/modulefiles:$MODULEPATH` with $PWD known)."""
        var = ctx.state.vars.get("MODULEPATH")
        if var is None:
            return []
        text = var.value if var.value is not None else var.raw.strip("\"'")
        out = []
        for part in text.split(":"):
            for name in ("PWD", "SLURM_SUBMIT_DIR", "HOME"):
                known = ctx.state.vars.get(name)
                if known is not None and known.value is not None:
                    part = part.replace("${" + name + "}", known.value).replace("$" + name, known.value)
            if part and "$" not in part:
                out.append(os.path.normpath(os.path.join(ctx.state.cwd, part)))
        return out

    def _printf_v(self, words: list[Word], ctx: Ctx, site: Site) -> None:
        """`printf -v NAME FORMAT ARGS`: the value when FORMAT is %s/%d and every word is known, else unknown."""
        name = ctx.state.refs.get(words[2].text, words[2].text)
        fmt, args = (words[3], words[4:]) if len(words) > 3 else (None, [])
        value = None
        if fmt is not None and words[2].known and fmt.known and all(a.known for a in args):
            specs = re.findall(r"%[sdi]", fmt.text)
            if len(specs) == len(args) and "%" not in re.sub(r"%[sdi]|%%", "", fmt.text) and "\\" not in fmt.text:
                parts = re.split(r"%[sdi]", fmt.text)
                value = parts[0] + "".join(a.text + p for a, p in zip(args, parts[1:], strict=True))
                value = value.replace("%%", "%")
        if value is None or not re.fullmatch(r"[A-Za-z_]\w*", name):
            self._unknown([name], ctx, site, f"printf -v on line {site.line}")
            return
        old = ctx.state.vars.get(name)
        ctx.state.vars[name] = EnvVar(name, value, fmt.text if fmt is not None else value, site,
                                      ctx.state.allexport or (old is not None and old.exported))


_ML_COMMANDS = {"use", "unuse", "unload", "purge", "list", "avail", "spider", "save", "restore", "show", "help",
                "swap", "reset", "keyword", "whatis", "rm", "del"}
# what `eval "$(TOOL ...)"` runs to set up its own tool, never Score-P's or the launch's variables
ENV_TOOLS = {"conda", "mamba", "micromamba", "pyenv", "rbenv", "ssh-agent", "spack", "brew", "luarocks"}
_ASSIGNED = re.compile(r"(?<![\w$])([A-Za-z_]\w*)\+?=")
_READ_VALUE_OPTS = {"-a", "-d", "-i", "-n", "-N", "-p", "-t", "-u"}


def _read_names(argv: list[str]) -> list[str]:
    """The variables `read [-r] [-p PROMPT] ... NAME...` sets (REPLY without a name)."""
    names: list[str] = []
    k = 1
    while k < len(argv):
        a = argv[k]
        if a in _READ_VALUE_OPTS:
            if a == "-a" and k + 1 < len(argv):
                names.append(argv[k + 1])
            k += 2
            continue
        if a.startswith("-") and len(a) > 1:
            k += 1
            continue
        names.append(a)
        k += 1
    return names or ["REPLY"]


def _inside_quotes(src: Source, node: Node) -> Span:
    """The span of a value as written, inside its quotes when the whole value is one quoted string."""
    a, b = src.start(node), src.end(node)
    text = src.text[a:b]
    if node.type in ("string", "raw_string") and len(text) >= 2:
        return src.span(a + 1, b - 1)
    return src.span(a, b)


def _char_offsets(word: Word) -> list[int] | None:
    """Each character of a word written in one place, as its offset in the file (and one past the end):
    a piece shorter than its text (`\\$`, `\\"` in double quotes) is its last characters."""
    out: list[int] = []
    for piece in word.pieces:
        if not piece.text:
            continue
        if piece.span is None:  # a separator an expansion made (`${ARGS[*]}`): no place of its own,
            if not out:         # so where the text before it ends
                return None
            out.extend([out[-1] + 1] * len(piece.text))
            continue
        width = piece.span.end - piece.span.start
        skip = max(0, width - len(piece.text))
        out.extend(piece.span.start + skip + min(i, width - 1) for i in range(len(piece.text)))
    if not out:
        return None
    out.append(out[-1] + 1)
    return out


def _getopts_without_arguments(conds: list[Node], ctx: Ctx) -> bool:
    """`while getopts "m:e:" opt; do ... done` over a script's own arguments, where it has none (as `${1:-5G}`
    reads its default): getopts fails at once, the body never runs and the defaults above it stand."""
    commands = [c for c in conds if c.type not in (";", "&", "\n")]
    if len(commands) != 1 or ctx.state.args:
        return False
    words = words_of(commands[0]) if commands[0].type == "command" else []
    return len(words) == 3 and ctx.src.text_of(words[0]) == "getopts"

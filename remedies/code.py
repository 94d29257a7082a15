"""Remedies that edit the training script (SCR001-SCR004), with libcst.

Every edit keeps the file's formatting and comments. All four are `unsafe`:
they change code that runs, so they need `fix --apply --unsafe`.

- `lazy-scorep-import`: module-level `import scorep.user` -> imported on first
  use, behind the field guide's `_scorep_user = None` guard (error 5).
- `destroy-process-group`: `destroy_process_group()`, guarded by
  `is_initialized()`, at the end of the training function (error 11).
- `stream-capture-producer`: the producer stream captured before
  `with torch.cuda.stream(s):` (the stream self-wait of seed 003).
- `cuda-real-op-check`: `assert torch.cuda.is_available()` -> a real CUDA op in
  try/except (error 3); in a job script's `python -c`, the op itself.
"""

from __future__ import annotations

import re
from typing import Any

from doctor.model import Phase, Safety
from doctor.registry import remedy
from doctor.remedy import pyedit
from doctor.remedy.draft import RemedyContext
from doctor.remedy.lazyimport import make_lazy
from doctor.remedy.model import SCRIPT_LINE, CannotPlan

SCOREP_GUARD = "_scorep_user"


@remedy("lazy-scorep-import", Safety.UNSAFE,
        "Import scorep.user on first use instead of at module level", phase=Phase.CODE)
def lazy_scorep_import(ctx: RemedyContext) -> None:
    for path in ctx.files((".py",)):
        module = pyedit.parse(ctx, path)
        result = make_lazy(module, path)
        if result is not None:
            new, line = result
            pyedit.save(ctx, path, new, "import scorep.user on first use (_scorep_user guard)", line)
    if not ctx.changes:
        ctx.note = "no module-level scorep.user import found"


# -- destroy_process_group ---------------------------------------------------

@remedy("destroy-process-group", Safety.UNSAFE,
        "Call destroy_process_group() at the end of training", phase=Phase.CODE)
def destroy_process_group(ctx: RemedyContext) -> None:
    lines = {t.file: t.line for t in ctx.targets()}
    # ART003 names the ranks that died, not a script: then the scripts the ranks run.
    for path in ctx.files((".py",)) or ctx.entry_scripts():
        module = pyedit.parse(ctx, path)
        if "destroy_process_group" in module.code:
            ctx.note = "destroy_process_group() is already called"
            continue
        new, line = add_destroy(module, lines.get(path))
        pyedit.save(ctx, path, new, "destroy_process_group() at the end of training", line)


def add_destroy(module: Any, anchor: int | None) -> tuple[Any, int]:
    import libcst as cst
    import libcst.metadata as md

    wrapper = md.MetadataWrapper(module)
    mod = wrapper.module
    pos = wrapper.resolve(md.PositionProvider)
    dist, mod = _dist_name(mod)
    if mod is not wrapper.module:  # an import was added: positions are gone, search again
        return add_destroy(mod, anchor)
    fn = _training_function(mod, pos, anchor)
    block = fn.body if fn is not None else _main_block(mod)
    body = list(block.body if block is not None else mod.body)
    at = len(body) - 1 if body and _is_return(body[-1]) else len(body)
    stmt = pyedit.statement(mod, f"if {dist}.is_initialized():\n    {dist}.destroy_process_group()\n")
    stmt = stmt.with_changes(leading_lines=[cst.EmptyLine(indent=False), *pyedit.comment_lines(
        mod, "gpu-doctor SCR002: tear NCCL down before the interpreter (and Score-P) shut down,",
        "so the NCCL watchdog cannot race Score-P's CUDA teardown at exit.")])
    body.insert(at, stmt)
    if block is None:
        new = mod.with_changes(body=body)
        return new, len(mod.code.splitlines()) + 2
    line = pos[body[at - 1]].end.line + 1 if at else pos[block].start.line
    return mod.with_deep_changes(block, body=body), line


def _is_return(stmt: Any) -> bool:
    import libcst as cst

    return isinstance(stmt, cst.SimpleStatementLine) and any(isinstance(s, cst.Return) for s in stmt.body)


def _dist_name(mod: Any) -> tuple[str, Any]:
    """How the module spells torch.distributed; adds `import torch.distributed as dist` if it cannot."""
    imports = pyedit.module_imports(mod)
    for bound, full in imports.items():
        if full == "torch.distributed":
            return bound, mod
    if imports.get("torch") == "torch":
        return "torch.distributed", mod
    body = list(mod.body)
    body.insert(pyedit.last_import_index(mod), pyedit.statement(mod, "import torch.distributed as dist\n"))
    return "dist", mod.with_changes(body=body)


def _training_function(mod: Any, pos: Any, anchor: int | None) -> Any:
    """The function that trains: holds the finding's line, or calls init_process_group / .train()."""
    import libcst as cst

    found: list[Any] = []

    class Finder(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            found.append(node)

    mod.visit(Finder())

    def score(fn: Any) -> tuple[int, int]:
        code = mod.code_for_node(fn.body)
        span = pos[fn]
        return ((anchor is not None and span.start.line <= anchor <= span.end.line) * 8
                + ("init_process_group" in code) * 4 + bool(re.search(r"\.train\(", code)) * 2
                + (fn.name.value in ("main", "train")), -span.start.line)

    ranked = sorted(found, key=score, reverse=True)
    return ranked[0] if ranked and score(ranked[0])[0] > 0 else None


def _main_block(mod: Any) -> Any:
    import libcst as cst

    for stmt in mod.body:
        if isinstance(stmt, cst.If) and "__name__" in mod.code_for_node(stmt.test):
            return stmt.body
    return None


# -- stream capture ----------------------------------------------------------

@remedy("stream-capture-producer", Safety.UNSAFE,
        "Capture the producer stream before entering torch.cuda.stream(...)",
        phase=Phase.CODE)
def stream_capture_producer(ctx: RemedyContext) -> None:
    for path in ctx.files((".py",)):
        module = pyedit.parse(ctx, path)
        new, count = capture_producer(module)
        if count:
            pyedit.save(ctx, path, new, f"capture the producer stream before the stream context ({count}x)",
                        None)
    if not ctx.changes:
        ctx.note = "no stream.wait_stream(current_stream()) inside its own stream context found"


def capture_producer(module: Any) -> tuple[Any, int]:
    import libcst as cst

    code_of = module.code_for_node
    norm = lambda n: re.sub(r"\s+", "", code_of(n))  # noqa: E731

    class Capture(cst.CSTTransformer):
        def __init__(self) -> None:
            self.streams: list[tuple[str, list[Any]]] = []
            self.count = 0
            self.used = set(re.findall(r"\bproducer_stream\w*", module.code))

        def visit_With(self, node: cst.With) -> None:
            stream = ""
            for item in node.items:
                call = item.item
                if isinstance(call, cst.Call) and pyedit.dotted(call.func).endswith(".stream") and call.args:
                    stream = norm(call.args[0].value)
            self.streams.append((stream, []))

        def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
            if not self.streams or not self.streams[-1][0]:
                return updated
            stream, captured = self.streams[-1]
            func = updated.func
            if (isinstance(func, cst.Attribute) and func.attr.value == "wait_stream"
                    and norm(func.value) == stream and len(updated.args) == 1):
                arg = updated.args[0].value
                if isinstance(arg, cst.Call) and pyedit.dotted(arg.func).endswith("current_stream"):
                    name = self._name()
                    captured.append((name, arg))
                    return updated.with_changes(args=[updated.args[0].with_changes(value=cst.Name(name))])
            return updated

        def _name(self) -> str:
            name, n = "producer_stream", 2
            while name in self.used:
                name, n = f"producer_stream_{n}", n + 1
            self.used.add(name)
            return name

        def leave_With(self, original: cst.With, updated: cst.With) -> Any:
            _, captured = self.streams.pop()
            if not captured:
                return updated
            self.count += len(captured)
            stmts = []
            note = pyedit.comment_lines(module, "gpu-doctor SCR003: the producer stream, captured before "
                                                "entering the stream context")
            for i, (name, call) in enumerate(captured):
                stmt = pyedit.statement(module, f"{name} = {code_of(call)}\n")
                stmts.append(stmt.with_changes(leading_lines=[*updated.leading_lines, *note] if i == 0 else []))
            return cst.FlattenSentinel([*stmts, updated.with_changes(leading_lines=[])])

    transformer = Capture()
    new = module.visit(transformer)
    return new, transformer.count


# -- assert is_available -----------------------------------------------------

_SHELL_ASSERT = re.compile(r"assert\s+torch\.cuda\.is_available\(\)\s*(;\s*)?")
# `sys.exit(0 if torch.cuda.is_available() else 1)`, `print(torch.cuda.is_available())` (piped to grep)
_SHELL_EXIT = re.compile(r"(?:(?:sys\.|os\._)?exit|raise\s+SystemExit)\(\s*0\s+if\s+torch\.cuda\.is_available\(\)\s+"
                         r"else\s+1\s*\)|print\(\s*torch\.cuda\.is_available\(\)\s*\)")


@remedy("cuda-real-op-check", Safety.UNSAFE,
        "Test CUDA with a real op in try/except, not assert torch.cuda.is_available()",
        phase=Phase.CODE)
def cuda_real_op_check(ctx: RemedyContext) -> None:
    for path in ctx.files():
        if path.suffix == ".py":
            module = pyedit.parse(ctx, path)
            new, count = real_op_check(module)
            if count:
                pyedit.save(ctx, path, new, "assert torch.cuda.is_available() -> a real CUDA op "
                            "in try/except", None)
        else:
            _shell_real_op(ctx, path)
    if not ctx.changes:
        ctx.note = "no assert torch.cuda.is_available() found"


def _shell_real_op(ctx: RemedyContext, path: Any) -> None:
    """In a job script's `python -c "..."` (or `python - <<EOF`), the op itself is the test: its
    exception is the exit status. Only the code the job model found runs is edited (not comments,
    not a here-document written to a file)."""
    import os

    from doctor.remedy.spans import job_of

    doc = ctx.read_doc(path)
    for cmd in job_of(ctx).commands:
        launch = cmd.launch
        span = launch.code_span if launch is not None else None
        if launch is None or span is None or launch.code is None \
                or os.path.realpath(span.file) != os.path.realpath(str(path)):
            continue
        if doc.text[span.start:span.end] != launch.code:  # escapes inside the quotes: offsets differ
            continue
        for m in reversed(list(_SHELL_ASSERT.finditer(launch.code))):
            rest = launch.code[m.end():m.end() + 40]
            doc.replace(span.start + m.start(), span.start + m.end(), "" if rest.startswith("torch.zeros(1).cuda()")
                        else "torch.zeros(1).cuda()" + (m.group(1) or ""))
        for m in reversed(list(_SHELL_EXIT.finditer(launch.code))):  # the op's exception is the exit status
            doc.replace(span.start + m.start(), span.start + m.end(),
                        "torch.zeros(1).cuda(); print(True)" if m.group(0).startswith("print") else "torch.zeros(1).cuda()")
    if doc.changed:
        ctx.write_doc(path, doc, SCRIPT_LINE, "python -c: assert is_available() -> torch.zeros(1).cuda()")


def real_op_check(module: Any) -> tuple[Any, int]:
    import libcst as cst

    torch_name = next((b for b, full in pyedit.module_imports(module).items() if full == "torch"), None)

    def base_of(func: str) -> str:
        base = func[:-len(".cuda.is_available")] or torch_name
        if not base:
            raise CannotPlan("cannot tell how this file names torch; import torch first")
        return base

    class RealOp(cst.CSTTransformer):
        count = 0

        def leave_If(self, original: cst.If, updated: cst.If) -> Any:
            """`if not torch.cuda.is_available(): <fail>` -> `try: <real op> except Exception: <fail>`."""
            test = updated.test
            if not (isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
                    and isinstance(test.expression, cst.Call)
                    and pyedit.dotted(test.expression.func).endswith("cuda.is_available")):
                return updated
            base = base_of(pyedit.dotted(test.expression.func))
            stmt = pyedit.statement(module, f"try:\n    {base}.zeros(1).cuda()\n"
                                            "except Exception:  # a real CUDA op, not is_available()\n    pass\n")
            handler = stmt.handlers[0].with_changes(body=updated.body)
            orelse = cst.Else(body=updated.orelse.body) if isinstance(updated.orelse, cst.Else) else None
            if updated.orelse is not None and orelse is None:  # an elif chain: leave it
                return updated
            self.count += 1
            return stmt.with_changes(handlers=[handler], orelse=orelse, leading_lines=updated.leading_lines)

        def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine,
                                      updated: cst.SimpleStatementLine) -> Any:
            if len(updated.body) != 1 or not isinstance(updated.body[0], cst.Assert):
                return updated
            check = updated.body[0]
            test = check.test
            func = pyedit.dotted(test.func) if isinstance(test, cst.Call) else ""
            if not func.endswith("cuda.is_available"):
                return updated
            base = base_of(func)
            msg = module.code_for_node(check.msg) if check.msg is not None else \
                '"CUDA is not usable in this process"'
            stmt = pyedit.statement(module, (
                f"try:\n    {base}.zeros(1).cuda()\n"
                "except Exception as _cuda_error:  # a real op: is_available() can be False "
                "while the runtime warms up\n"
                f"    raise RuntimeError({msg}) from _cuda_error\n"))
            self.count += 1
            return stmt.with_changes(leading_lines=updated.leading_lines)

    transformer = RealOp()
    return module.visit(transformer), transformer.count



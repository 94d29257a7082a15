"""What `ast` finds in a Python source: the facts the script and trainer checks read.

Names are resolved through the file's imports, so `dist.destroy_process_group`,
`from torch.distributed import destroy_process_group as dpg` and
`torch.distributed.destroy_process_group` are the same call. Nothing is
imported or run.

The analysis is bounded: `limits.MAX_PYTHON_BYTES` before parsing (the reader's cap), and
`limits.MAX_PYTHON_SECONDS` while it runs: the visitor looks at the clock every few hundred
nodes and stops with a named problem ("... the time limit for analysis; not analysed") that
the checks report as `unknown` for that file. No signal or thread is used, so it holds in
any thread (the TUI's workers). `ast.parse` itself is not interruptible: the size cap bounds it.
"""

from __future__ import annotations

import ast
import time
from typing import Any

from doctor import limits, pyast
from doctor.jobfolder.model import (
    UNKNOWN,
    CallSite,
    FunctionSpan,
    ImportSite,
    KwCall,
    PyScript,
    ScorepImport,
    SelfWait,
    Site,
    Submit,
)

STREAM_CONTEXTS = {"torch.cuda.stream", "torch.cuda.StreamContext", "torch.cuda.streams.StreamContext"}
CURRENT_STREAM = {"torch.cuda.current_stream"}
TORCHRUN_MAINS = {"torch.distributed.run.main", "torch.distributed.launch.main", "torch.distributed.run.run"}
EXITS = ("sys.exit", "exit", "quit", "os._exit", "SystemExit")
# Python launchers that say how many nodes and tasks per node: submitit, Lightning.
LAYOUT_CALLS = ("update_parameters", "AutoExecutor", "SlurmExecutor", "Trainer")
LAYOUT_KEYS = ("slurm_nodes", "nodes", "num_nodes", "tasks_per_node", "slurm_ntasks_per_node", "ntasks_per_node",
               "devices", "gpus_per_node", "slurm_gpus_per_node")  # SlurmExecutor: nodes, ntasks_per_node
TRAINING_ARGS_SUFFIXES = ("TrainingArguments", "SFTConfig", "DPOConfig", "GRPOConfig", "RewardConfig")
CUDA_INIT_CALLS = {"torch.cuda.init", "torch.cuda.synchronize", "torch.cuda.mem_get_info",
                   "torch.cuda.current_device", "torch.cuda.set_device", "torch.empty_like"}
PROFILERS = {"torch.profiler.profile", "torch.autograd.profiler.profile", "torch.profiler._KinetoProfile",
             "torch.profiler.tensorboard_trace_handler"}
MAX_SITES = 50
CLOCK_EVERY = 256  # nodes visited between two looks at the clock


class OutOfTime(Exception):
    """The analysis ran past its deadline."""


class Deadline:
    """A point in time the analysis must not pass; `tick()` counts work and looks at the clock now and then."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.steps = 0

    def tick(self) -> None:
        self.steps += 1
        if self.steps % CLOCK_EVERY == 0:
            self.check()

    def check(self) -> None:
        if time.monotonic() > self.at:
            raise OutOfTime

    def problem(self) -> str:
        return f"analysis stopped after {self.seconds:g} s, the time limit for analysis; not analysed"


def _is_main_guard(test: ast.expr) -> bool:
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__")


def _cuda_text(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("cuda")


class _Scan(ast.NodeVisitor):
    def __init__(self, path: str, lines: list[str], offset: int, entry: bool, deadline: Deadline):
        self.deadline = deadline
        self.path = path
        self.lines = lines
        self.offset = offset
        self.entry = entry
        self.aliases: dict[str, str] = {}
        self.scopes: list[tuple[str, ast.AST]] = [("module", ast.Module(body=[], type_ignores=[]))]
        self.guards: list[str] = []
        self.functions: list[FunctionSpan] = []
        self.trainer_names: set[str] = set()
        self.r: dict[str, Any] = {k: [] for k in (
            "imports", "scorep_imports", "init_pg", "destroy_pg", "ddp_wrap", "trainer_train", "hf_parser",
            "training_args", "self_waits", "cuda_asserts", "cuda_ops", "profilers", "training_defaults",
            "layout_calls", "submits")}
        self.int_names: dict[str, int | str] = {}
        self.int_options: dict[str, tuple[int, Site]] = {}
        self.commands: dict[str, tuple[tuple[str, bool], ...]] = {}  # `task = CommandFunction([...])`
        self.args_classes: set[str] = set()  # TrainingArguments subclasses defined here
        self.snippet = False  # a job script's `python -c` / here-document code
        self.r["uses_hf"] = False
        self.r["torchrun_main"] = None
        self.r["main_guard"] = False

    # -- helpers ----------------------------------------------------------
    def visit(self, node: ast.AST) -> Any:
        self.deadline.tick()
        return super().visit(node)

    def site(self, node: ast.AST) -> Site:
        line = getattr(node, "lineno", 1)
        text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        return Site(self.path, line + self.offset, text)

    def add(self, key: str, value: Any) -> None:
        if len(self.r[key]) < MAX_SITES:
            self.r[key].append(value)

    def qual(self, node: ast.AST | None) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.qual(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def import_time(self) -> bool:
        kinds = [k for k, _ in self.scopes]
        if any(k == "function" for k in kinds):
            return False
        return self.entry or "main-guard" not in kinds

    def callsite(self, node: ast.AST) -> CallSite:
        return CallSite(self.site(node), self.functions[-1] if self.functions else None)

    # -- imports ----------------------------------------------------------
    def collect_aliases(self, tree: ast.AST) -> None:
        for node in ast.walk(tree):
            self.deadline.tick()
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        top = a.name.split(".")[0]
                        self.aliases.setdefault(top, top)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                if node.module.split(".")[0] in ("transformers", "trl", "accelerate"):
                    self.r["uses_hf"] = True
        if any(v.split(".")[0] in ("transformers", "trl") for v in self.aliases.values()):
            self.r["uses_hf"] = True

    def _scorep(self, node: ast.AST) -> None:
        kinds = [k for k, _ in self.scopes]
        scope = "function" if "function" in kinds else (
            "main-guard" if "main-guard" in kinds else ("class" if "class" in kinds else "module"))
        self.add("scorep_imports", ScorepImport(self.site(node), self.import_time(), scope,
                                                self.guards[-1] if self.guards else None))

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.add("imports", ImportSite(a.name, 0, self.site(node), self.import_time()))
            if a.name == "scorep" or a.name.startswith("scorep."):
                self._scorep(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self.add("imports", ImportSite(module, node.level, self.site(node), self.import_time()))
        if module:  # `from pkg import sub` may import the submodule pkg/sub.py
            for a in node.names:
                if a.name != "*":
                    self.add("imports", ImportSite(f"{module}.{a.name}", node.level, self.site(node),
                                                   self.import_time()))
        if not node.level and (module == "scorep" or module.startswith("scorep.")):
            self._scorep(node)
        if node.level and not module:  # from . import a, b
            for a in node.names:
                self.add("imports", ImportSite(a.name, node.level, self.site(node), self.import_time()))

    # -- scopes -----------------------------------------------------------
    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for d in node.decorator_list:
            self.visit(d)
        self.scopes.append(("function", node))
        self.functions.append(FunctionSpan(node.name, node.lineno + self.offset,
                                           (node.end_lineno or node.lineno) + self.offset, node.col_offset))
        for stmt in node.body:
            self.visit(stmt)
        self.functions.pop()
        self.scopes.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.scopes.append(("function", node))
        self.generic_visit(node)
        self.scopes.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        bases = [(self.qual(b) or "").rsplit(".", 1)[-1] for b in node.bases]
        if any(b.endswith(TRAINING_ARGS_SUFFIXES) or b in self.args_classes for b in bases):
            self.args_classes.add(node.name)
            self._training_defaults(node)
        self.scopes.append(("class", node))
        self.generic_visit(node)
        self.scopes.pop()

    def visit_If(self, node: ast.If) -> None:
        if _is_main_guard(node.test):
            self.r["main_guard"] = True
            self.scopes.append(("main-guard", node))
            for stmt in node.body:
                self.visit(stmt)
            self.scopes.pop()
            for stmt in node.orelse:
                self.visit(stmt)
            return
        self._not_available_exit(node)
        self.guards.append("if")
        self.generic_visit(node)
        self.guards.pop()

    def visit_Try(self, node: ast.Try) -> None:
        self.guards.append("try")
        self.generic_visit(node)
        self.guards.pop()

    visit_TryStar = visit_Try  # type: ignore[assignment]

    # -- calls ------------------------------------------------------------
    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:  # `nodes = 8`, `num_gpus_per_node = args.ngpus`: what a layout value may name
            if isinstance(t, ast.Name) and isinstance(node.value, ast.Constant) and type(node.value.value) is int:
                self.int_names.setdefault(t.id, node.value.value)
            elif isinstance(t, ast.Name) and isinstance(node.value, ast.Attribute):
                self.int_names.setdefault(t.id, ast.unparse(node.value))
            elif isinstance(t, ast.Name) and (command := self._command(node.value)) is not None:
                self.commands[t.id] = command
        if isinstance(node.value, ast.Call):
            q = self.qual(node.value.func) or ""
            if q.endswith("Trainer"):
                for t in node.targets:
                    if isinstance(t, (ast.Name, ast.Attribute)):
                        self.trainer_names.add(ast.unparse(t))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        q = self.qual(node.func) or ""
        attr = node.func.attr if isinstance(node.func, ast.Attribute) else None
        first = node.args[0] if node.args else None
        if q in ("importlib.import_module", "__import__") and isinstance(first, ast.Constant) \
                and isinstance(first.value, str) and first.value.split(".")[0] == "scorep":
            self._scorep(node)
        if q.endswith("init_process_group") or q in ("deepspeed.init_distributed",) \
                or q.endswith("accelerate.Accelerator"):
            self.add("init_pg", self.callsite(node))
        if attr == "destroy_process_group" or q.endswith("destroy_process_group"):
            self.add("destroy_pg", self.callsite(node))
        if q.endswith("DistributedDataParallel"):
            self.add("ddp_wrap", self.callsite(node))
        if attr == "train" and isinstance(node.func, ast.Attribute) and (
                ast.unparse(node.func.value) in self.trainer_names
                or ("trainer" in ast.unparse(node.func.value).lower() and self.r["uses_hf"])):
            self.add("trainer_train", self.callsite(node))
        if q.endswith(TRAINING_ARGS_SUFFIXES):
            self.add("training_args", self._kwcall(node, q))
        if q.rsplit(".", 1)[-1] in LAYOUT_CALLS and any(kw.arg in LAYOUT_KEYS for kw in node.keywords):
            self.add("layout_calls", self._kwcall(node, q))
        if attr == "add_argument":
            self._int_option(node)
        if attr in ("submit", "map_array") and node.args and "submitit" in self.aliases.values():
            self.add("submits", Submit(self.site(node), ast.unparse(node.args[0]), self._command(node.args[0])))
        if q.endswith("HfArgumentParser"):
            self.add("hf_parser", self.site(node))
        if q in TORCHRUN_MAINS or (q == "runpy.run_module" and isinstance(first, ast.Constant)
                                   and first.value in ("torch.distributed.run", "torch.distributed.launch")):
            self.r["torchrun_main"] = self.r["torchrun_main"] or self.site(node)
        if self._is_cuda_op(node, q, attr):
            self.add("cuda_ops", self.site(node))
        if (q in EXITS or (q == "print" and self.snippet)) and any(self._mentions_is_available(a) for a in node.args):
            # `sys.exit(0 if torch.cuda.is_available() else 1)`; in `python -c`, `print(...) | grep -q True`
            self.add("cuda_asserts", self.site(node))
        if q in PROFILERS or (q == "torch.autograd.profiler.profile"):
            self.add("profilers", self.site(node))
        self.generic_visit(node)

    def _is_cuda_op(self, node: ast.Call, q: str, attr: str | None) -> bool:
        if attr == "cuda" and not q.startswith("torch.cuda"):
            return True
        if q in CUDA_INIT_CALLS and q != "torch.empty_like":
            return True
        if attr == "to" and node.args and (_cuda_text(node.args[0]) or self._device_call(node.args[0])):
            return True
        for kw in node.keywords:
            if kw.arg == "device" and (_cuda_text(kw.value) or self._device_call(kw.value)):
                return True
        return False

    def _device_call(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and self.qual(node.func) == "torch.device" and bool(node.args) \
            and _cuda_text(node.args[0])

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if self.qual(node) in ("torch.profiler.ProfilerActivity.CUDA", "torch.autograd.ProfilerActivity.CUDA"):
            self.add("profilers", self.site(node))
        self.generic_visit(node)

    def _command(self, node: ast.expr) -> tuple[tuple[str, bool], ...] | None:
        """`submitit.helpers.CommandFunction(["bash", "task.sh", str(args.epochs)])`, or a name set to
        one: its command's words as written, each with whether it is a literal string."""
        if isinstance(node, ast.Name):
            return self.commands.get(node.id)
        q = self.qual(node.func) if isinstance(node, ast.Call) else None
        if not isinstance(node, ast.Call) or not (q or "").endswith("CommandFunction") or not node.args \
                or not isinstance(node.args[0], (ast.List, ast.Tuple)):
            return None
        return tuple((e.value, True) if isinstance(e, ast.Constant) and isinstance(e.value, str)
                     else (ast.unparse(e), False) for e in node.args[0].elts)

    def _int_option(self, node: ast.Call) -> None:
        """`parser.add_argument("--nodes", type=int, default=2)`: dest `nodes`, default 2."""
        flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        default = kw.get("default")
        if not isinstance(default, ast.Constant) or type(default.value) is not int:
            return
        dest = kw.get("dest")
        name = dest.value if isinstance(dest, ast.Constant) and isinstance(dest.value, str) else next(
            (f.lstrip("-") for f in flags if f.startswith("--")), flags[0].lstrip("-") if flags else "")
        if name:
            self.int_options.setdefault(name.replace("-", "_"), (default.value, self.site(node)))

    def _kwcall(self, node: ast.Call, q: str) -> KwCall:
        kwargs: dict[str, Any] = {}
        sites: dict[str, Site] = {}
        exprs: dict[str, str] = {}
        star = False
        for kw in node.keywords:
            if kw.arg is None:
                star = True
                continue
            try:
                kwargs[kw.arg] = ast.literal_eval(kw.value)
            except (ValueError, SyntaxError, TypeError, RecursionError):
                # IntervalStrategy.NO, SaveStrategy.STEPS...
                if isinstance(kw.value, ast.Attribute) and (self.qual(kw.value) or "").split(".")[-2:-1] \
                        and (self.qual(kw.value) or "").split(".")[-2].endswith("Strategy"):
                    kwargs[kw.arg] = kw.value.attr.lower()
                else:
                    kwargs[kw.arg] = UNKNOWN
                    exprs[kw.arg] = ast.unparse(kw.value)
            sites[kw.arg] = self.site(kw.value)
        return KwCall(self.site(node), q.rsplit(".", 1)[-1], kwargs, sites, star, exprs)

    def _training_defaults(self, node: ast.ClassDef) -> None:
        """`class Args(TrainingArguments)` fields: `load_best_model_at_end: bool = field(default=True)`,
        `save_strategy: str = "epoch"`: the defaults a run gets without the flag."""
        kwargs: dict[str, Any] = {}
        sites: dict[str, Site] = {}
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None):
                continue
            value: ast.expr | None = stmt.value
            if isinstance(value, ast.Call) and (self.qual(value.func) or "").rsplit(".", 1)[-1] == "field":
                value = next((k.value for k in value.keywords if k.arg == "default"), None)
            if value is None:
                continue
            try:
                kwargs[stmt.target.id] = ast.literal_eval(value)
            except (ValueError, SyntaxError, TypeError, RecursionError):
                kwargs[stmt.target.id] = UNKNOWN
            sites[stmt.target.id] = self.site(stmt)
        if kwargs:
            self.add("training_defaults", KwCall(self.site(node), node.name, kwargs, sites))

    # -- readiness tests and streams --------------------------------------
    def _mentions_is_available(self, node: ast.AST) -> bool:
        return any(isinstance(n, ast.Call) and (self.qual(n.func) or "").endswith("cuda.is_available")
                   for n in ast.walk(node))

    def visit_Assert(self, node: ast.Assert) -> None:
        if self._mentions_is_available(node.test):
            self.add("cuda_asserts", self.site(node))
        self.generic_visit(node)

    def _not_available_exit(self, node: ast.If) -> None:
        test = node.test
        if not (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
                and self._mentions_is_available(test.operand)):
            return
        first = node.body[0] if node.body else None
        exits = isinstance(first, ast.Raise) or (
            isinstance(first, ast.Expr) and isinstance(first.value, ast.Call)
            and (self.qual(first.value.func) or "") in ("sys.exit", "exit", "quit", "os._exit"))
        if exits:
            self.add("cuda_asserts", self.site(node))

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            ce = item.context_expr
            if isinstance(ce, ast.Call) and (self.qual(ce.func) or "") in STREAM_CONTEXTS and ce.args:
                self._self_waits(node, ast.unparse(ce.args[0]))
        self.guards.append("with")
        self.generic_visit(node)
        self.guards.pop()

    visit_AsyncWith = visit_With  # type: ignore[assignment]

    def _is_current(self, node: ast.AST, bound: set[str]) -> bool:
        if isinstance(node, ast.Call) and (self.qual(node.func) or "") in CURRENT_STREAM:
            return True
        return isinstance(node, ast.Name) and node.id in bound

    def _self_waits(self, with_node: ast.With, stream: str) -> None:
        bound: set[str] = set()
        todo: list[ast.AST] = list(with_node.body)
        while todo:
            self.deadline.tick()
            n = todo.pop(0)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(n, ast.With) and any(
                    isinstance(i.context_expr, ast.Call) and (self.qual(i.context_expr.func) or "") in STREAM_CONTEXTS
                    for i in n.items):
                continue  # another stream is current in there; its own visit checks it
            if isinstance(n, ast.Assign) and self._is_current(n.value, set()):
                bound.update(t.id for t in n.targets if isinstance(t, ast.Name))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "wait_stream" \
                    and n.args:
                receiver, arg = n.func.value, n.args[0]
                if self._is_current(arg, bound) or (self._is_current(receiver, bound)
                                                    and ast.unparse(arg) == stream):
                    producer = ast.unparse(arg) if self._is_current(arg, bound) else ast.unparse(receiver)
                    self.add("self_waits", SelfWait(self.site(n), self.site(with_node), stream, producer))
            todo[0:0] = list(ast.iter_child_nodes(n))


def analyse(path: str, text: str, role: str, *, line_offset: int = 0, origin: Site | None = None,
            snippet_of: Site | None = None, notes: tuple[str, ...] = (),
            seconds: float | None = None) -> PyScript:
    """The PyScript for `text`; a syntax error or a run past `seconds` (default
    `limits.MAX_PYTHON_SECONDS`) becomes `problem`, never an exception."""
    deadline = Deadline(limits.MAX_PYTHON_SECONDS if seconds is None else seconds)
    try:
        tree = pyast.parse(text, filename=path)
    except SyntaxError as exc:
        line = (exc.lineno or 0) + line_offset
        return PyScript(path, role, origin, f"syntax error at line {line}: {exc.msg}", notes,
                        snippet_of=snippet_of)
    except (ValueError, RecursionError, MemoryError) as exc:
        return PyScript(path, role, origin, f"cannot parse: {type(exc).__name__}: {exc}", notes,
                        snippet_of=snippet_of)
    scan = _Scan(path, text.splitlines(), line_offset, entry=role in ("entry", "snippet", "launcher"),
                 deadline=deadline)
    scan.snippet = role == "snippet"
    try:
        deadline.check()  # the parse alone may have taken the time
        scan.collect_aliases(tree)
        for stmt in tree.body:
            scan.visit(stmt)
    except RecursionError:
        return PyScript(path, role, origin, "cannot analyse: nested too deeply", notes, snippet_of=snippet_of)
    except OutOfTime:
        return PyScript(path, role, origin, deadline.problem(), notes, snippet_of=snippet_of)
    r = scan.r
    return PyScript(
        path, role, origin, None, notes, tuple(r["imports"]), (), tuple(r["scorep_imports"]),
        tuple(r["init_pg"]), tuple(r["destroy_pg"]), tuple(r["ddp_wrap"]), tuple(r["trainer_train"]),
        bool(r["uses_hf"]), tuple(r["hf_parser"]), tuple(r["training_args"]), tuple(r["self_waits"]),
        tuple(r["cuda_asserts"]), tuple(r["cuda_ops"]), tuple(r["profilers"]), r["torchrun_main"],
        bool(r["main_guard"]), snippet_of, training_defaults=tuple(r["training_defaults"]),
        layout_calls=tuple(r["layout_calls"]), int_names=scan.int_names, int_options=scan.int_options,
        submits=tuple(r["submits"]))

"""Turn a module-level `import scorep.user` into an import on first use (field guide, error 5).

The result follows the guide's shape:

    _scorep_user = None  # None = not yet tried; False = import failed

    def _load_scorep_user():
        global _scorep_user
        if _scorep_user is None:
            try:
                import scorep.user
                _scorep_user = scorep.user
            except ImportError:
                _scorep_user = False
        return _scorep_user or None

The loader returns the module or None, so the uses keep their meaning:

- a bare call statement `su.region_begin(...)` becomes
  `if _load_scorep_user(): _scorep_user.region_begin(...)` (a no-op without Score-P);
- a test `if su is not None:` / `if su:` becomes `if _load_scorep_user() is not None:`,
  and inside that `if` the module is `_scorep_user` (loaded by the test);
- any other use becomes `_load_scorep_user()`.

Handled import forms: `import scorep.user [as x]`, `from scorep import user [as x]`,
at module level, alone or inside a `try` whose handlers only `pass` or set `x = None`.
Anything else (a use at import time, the bare package name, a second assignment of
the name, an import inside an `if`) raises CannotPlan with the steps to do it by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doctor.remedy import pyedit
from doctor.remedy.model import CannotPlan

GUARD = "_scorep_user"
LOADER = "_load_scorep_user"
ASSIGN = f"{GUARD} = None  # None = not yet tried; False = import failed (gpu-doctor SCR001)\n"
LOADER_CODE = f'''def {LOADER}():
    """Import scorep.user on first use, once PyTorch has set up CUDA in this rank.

    Imported at module level, it starts Score-P's CUDA adapter in every DDP worker
    before PyTorch initialises CUDA there (gpu-doctor SCR001). Returns the module,
    or None where Score-P is not installed.
    """
    global {GUARD}
    if {GUARD} is None:
        try:
            import scorep.user
            {GUARD} = scorep.user
        except ImportError:
            {GUARD} = False
    return {GUARD} or None
'''
STEPS = (
    "Remove the module-level `import scorep.user`.",
    f"Add `{ASSIGN.strip()}` at module level and import it inside the first function that "
    "runs after CUDA is set up, as in the field guide (error 5):",
    f"    global {GUARD}; if {GUARD} is None: try: import scorep.user; {GUARD} = scorep.user "
    f"except ImportError: {GUARD} = False",
    f"then call region_begin/region_end as `if {GUARD}: {GUARD}.region_begin(...)`.",
)


@dataclass
class Site:
    """One module-level import of scorep.user."""

    line: Any          # the SimpleStatementLine holding it
    small: Any         # the Import / ImportFrom
    alias: Any         # the ImportAlias
    wrapper: Any = None  # the module-level Try around it, if any
    names: list[str] = field(default_factory=list)
    handler_targets: list[Any] = field(default_factory=list)  # `name = None` in its except blocks


def make_lazy(module: Any, path: Path) -> tuple[Any, int] | None:
    """The module with the import made lazy and the line of the first site, or None if none."""
    import libcst.metadata as md

    wrapper = md.MetadataWrapper(module)
    mod = wrapper.module
    scopes = wrapper.resolve(md.ScopeProvider)
    parents = wrapper.resolve(md.ParentNodeProvider)
    pos = wrapper.resolve(md.PositionProvider)
    sites = _sites(mod)
    if not sites:
        return None
    gscope = scopes[mod]
    if gscope is None:
        return None
    for name in (GUARD, LOADER):
        if name in gscope:
            raise CannotPlan(f"{path}: the name {name} is already taken", STEPS)
    refs: list[Any] = []
    for site in sites:
        refs += _references(gscope, site, path, pos, parents)
    guarded = _guarding_ifs(refs, parents)
    statements: set[Any] = set()
    expressions: set[Any] = set()
    loaded: set[Any] = set()
    for ref in refs:
        if _inside_guarded_body(ref, parents, guarded):
            loaded.add(ref)
        elif (stmt := _call_statement(ref, parents)) is not None:
            statements.add(stmt)
        else:
            expressions.add(ref)
    new = mod.visit(_Rewrite(mod, sites, statements, expressions, loaded))
    return new, pos[sites[0].line].start.line


def _references(gscope: Any, site: Site, path: Path, pos: Any, parents: Any) -> list[Any]:
    """The nodes that use the imported module; CannotPlan for a use that cannot become lazy."""
    bound = site.names[0]
    allowed = {id(site.small), *(id(n) for n in site.handler_targets)}
    refs: list[Any] = []
    for assignment in gscope.assignments:
        node = getattr(assignment, "node", None)
        if assignment.name == bound and id(node) not in allowed:
            line = pos[node].start.line if node is not None and node in pos else "?"
            raise CannotPlan(f"{path}:{line}: `{bound}` is assigned again", STEPS)
        if id(node) not in allowed:
            continue
        for access in assignment.references:
            where = f"{path}:{pos[access.node].start.line}"
            if assignment.name != bound:
                raise CannotPlan(f"{where}: uses the package `{assignment.name}` itself", STEPS)
            if not _inside_function(access.node, parents):
                raise CannotPlan(f"{where}: uses scorep.user at import time", STEPS)
            if all(access.node is not r for r in refs):
                refs.append(access.node)
    return refs


def _guarding_ifs(refs: list[Any], parents: Any) -> set[int]:
    """The `if`s whose test uses the module (`if scorep_user is not None:`): it is loaded in their body."""
    import libcst as cst

    out = set()
    for ref in refs:
        child = ref
        while child in parents:
            parent = parents[child]
            if isinstance(parent, cst.If) and child is parent.test:
                out.add(id(parent))
                break
            if isinstance(parent, (cst.BaseStatement, cst.BaseSmallStatement)) and not isinstance(parent, cst.If):
                break
            child = parent
    return out


def _inside_guarded_body(ref: Any, parents: Any, guarded: set[int]) -> bool:
    import libcst as cst

    child = ref
    while child in parents:
        parent = parents[child]
        if isinstance(parent, cst.If) and id(parent) in guarded and child is parent.body:
            return True
        if isinstance(parent, (cst.FunctionDef, cst.Lambda)):
            return False
        child = parent
    return False


def _sites(mod: Any) -> list[Site]:
    import libcst as cst

    sites = []
    for stmt in mod.body:
        lines: list[tuple[Any, Any]] = [(stmt, None)]
        if isinstance(stmt, cst.Try):
            lines = [(s, stmt) for s in stmt.body.body]
        elif isinstance(stmt, cst.If):
            if any(_scorep_aliases(s) for s in stmt.body.body if isinstance(s, cst.SimpleStatementLine)):
                raise CannotPlan("scorep.user is imported inside a module-level `if`", STEPS)
            continue
        for line, wrap in lines:
            if not isinstance(line, cst.SimpleStatementLine):
                continue
            for small, alias, names in _scorep_aliases(line):
                targets = _handler_targets(wrap, names[0]) if wrap is not None else []
                if targets is None:
                    raise CannotPlan("scorep.user is imported inside a `try` that does more than that", STEPS)
                sites.append(Site(line, small, alias, wrap, names, targets))
    return sites


def _scorep_aliases(line: Any) -> list[tuple[Any, Any, list[str]]]:
    """(statement, alias, [bound module name, ...]) for each scorep.user import on the line."""
    import libcst as cst

    out: list[tuple[Any, Any, list[str]]] = []
    for small in line.body:
        if isinstance(small, cst.Import):
            for alias in small.names:
                if pyedit.dotted(alias.name) == "scorep.user":
                    bound = pyedit.dotted(alias.asname.name) if alias.asname else "scorep.user"
                    out.append((small, alias, [bound]))
        elif isinstance(small, cst.ImportFrom) and small.module is not None \
                and pyedit.dotted(small.module) == "scorep" and not isinstance(small.names, cst.ImportStar):
            for alias in small.names:
                if pyedit.dotted(alias.name) == "user":
                    bound = pyedit.dotted(alias.asname.name) if alias.asname else "user"
                    out.append((small, alias, [bound]))
    return out


def _handler_targets(node: Any, bound: str) -> list[Any] | None:
    """For `try: import scorep.user as B` whose handlers only `pass` or set `B = None`: those
    targets (the guard does the same); None for a try that does more."""
    import libcst as cst

    if len(node.body.body) != 1 or node.orelse or node.finalbody:
        return None
    targets = []
    for handler in node.handlers:
        for stmt in handler.body.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                return None
            for small in stmt.body:
                if isinstance(small, cst.Pass):
                    continue
                if (isinstance(small, cst.Assign) and len(small.targets) == 1
                        and pyedit.dotted(small.targets[0].target) == bound
                        and isinstance(small.value, cst.Name) and small.value.value in ("None", "False")):
                    targets.append(small.targets[0].target)
                    continue
                return None
    return targets


def _inside_function(node: Any, parents: Any) -> bool:
    import libcst as cst

    child = node
    while child in parents:
        parent = parents[child]
        if isinstance(parent, (cst.FunctionDef, cst.Lambda)) and child is parent.body:
            return True
        child = parent
    return False


def _call_statement(node: Any, parents: Any) -> Any:
    """The statement line if `node` is X in a bare `X.f(...)` statement, else None."""
    import libcst as cst

    attr = parents.get(node)
    call = parents.get(attr) if isinstance(attr, cst.Attribute) and attr.value is node else None
    expr = parents.get(call) if isinstance(call, cst.Call) and call.func is attr else None
    line = parents.get(expr) if isinstance(expr, cst.Expr) else None
    if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
        return line
    return None


class _Rewrite:  # a factory: libcst's base class is imported only when a rewrite runs
    def __new__(cls, mod: Any, sites: list[Site], statements: set[Any], expressions: set[Any],
                loaded: set[Any]) -> Any:
        import libcst as cst

        site_lines = {id(s.line): s for s in sites}
        site_trys = {id(s.wrapper): s for s in sites if s.wrapper is not None}

        class Rewrite(cst.CSTTransformer):
            def _swap(self, original: Any, updated: Any) -> Any:
                if original in expressions:
                    return _loader_call()
                return cst.Name(GUARD) if original in loaded else updated

            def leave_Name(self, original: Any, updated: Any) -> Any:
                return self._swap(original, updated)

            def leave_Attribute(self, original: Any, updated: Any) -> Any:
                return self._swap(original, updated)

            def leave_SimpleStatementLine(self, original: Any, updated: Any) -> Any:
                if original not in statements:
                    return updated
                call = updated.body[0].value
                inner = cst.SimpleStatementLine(
                    body=[cst.Expr(call.with_changes(func=cst.Attribute(
                        value=cst.Name(GUARD), attr=call.func.attr)))],
                    trailing_whitespace=updated.trailing_whitespace)
                return cst.If(test=_loader_call(), body=cst.IndentedBlock(body=[inner]),
                              leading_lines=updated.leading_lines)

            def leave_Module(self, original: Any, updated: Any) -> Any:
                body: list[Any] = []
                carry: list[Any] = []  # comments and blank lines of a removed import
                for old, new in zip(original.body, updated.body, strict=True):
                    site = site_lines.get(id(old)) or site_trys.get(id(old))
                    if site is not None:
                        new = None if site.wrapper is not None else _without_import(site, old, new)
                        if new is None:
                            carry += list(old.leading_lines)
                            continue
                    if carry:
                        own = list(new.leading_lines)
                        while carry and own and carry[-1].comment is None and own[0].comment is None:
                            carry.pop()  # one blank line where two statements each brought one
                        new = new.with_changes(leading_lines=[*carry, *own])
                        carry = []
                    body.append(new)
                at = _after_imports(body)
                assign = pyedit.statement(mod, ASSIGN).with_changes(
                    leading_lines=[cst.EmptyLine(indent=False)] if at else [])
                body.insert(at, assign)
                at += 1
                while at < len(body) and not isinstance(body[at], (cst.FunctionDef, cst.ClassDef, cst.If)):
                    at += 1
                blank = [cst.EmptyLine(indent=False), cst.EmptyLine(indent=False)]
                body.insert(at, pyedit.statement(mod, LOADER_CODE).with_changes(leading_lines=blank))
                if at + 1 < len(body) and len(body[at + 1].leading_lines) < 2:
                    body[at + 1] = body[at + 1].with_changes(
                        leading_lines=[*blank, *body[at + 1].leading_lines])
                return updated.with_changes(body=body)

        return Rewrite()


def _without_import(site: Site, old: Any, new: Any) -> Any:
    """The statement line without the scorep.user import, or None when nothing is left of it."""
    import libcst as cst

    body = []
    for small_o, small_u in zip(old.body, new.body, strict=True):
        if small_o is not site.small:
            body.append(small_u)
        elif len(small_u.names) > 1:
            names = [a for a, a_o in zip(small_u.names, small_o.names, strict=True) if a_o is not site.alias]
            names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            body.append(small_u.with_changes(names=names))
    return new.with_changes(body=body) if body else None


def _after_imports(body: list[Any]) -> int:
    """Index after the last top-level import that comes before the first def or class."""
    import libcst as cst

    at = 0
    for i, stmt in enumerate(body):
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            break
        if isinstance(stmt, cst.SimpleStatementLine) and any(
                isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
            at = i + 1
        elif isinstance(stmt, cst.Try) and "import" in cst.Module(body=[stmt]).code:
            at = i + 1
    return at


def _loader_call() -> Any:
    import libcst as cst

    return cst.Call(func=cst.Name(LOADER))

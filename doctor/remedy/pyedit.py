"""Python edits with libcst: a concrete syntax tree keeps every comment, blank line and quote.

Code that a remedy adds is parsed with the module's own configuration, so it
comes out with the file's indentation (spaces or tabs) and line endings.
libcst is imported inside the functions: the gate never loads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from doctor.remedy.draft import RemedyContext
from doctor.remedy.model import EDIT, CannotPlan

if TYPE_CHECKING:
    import libcst as cst


def parse(ctx: RemedyContext, path: Path) -> cst.Module:
    import libcst as cst

    from doctor.limits import MAX_PYTHON_BYTES

    data = ctx.draft.read(path)
    if data is None:
        raise CannotPlan(f"{path} does not exist")
    if len(data) > MAX_PYTHON_BYTES:  # the checks did not analyse it either; libcst is slower still
        raise CannotPlan(f"{path}: {len(data) / 2**20:.1f} MiB, above the {MAX_PYTHON_BYTES // 2**20} MiB "
                         "limit for analysis; edit it by hand")
    try:
        return cst.parse_module(data)
    except cst.ParserSyntaxError as exc:
        raise CannotPlan(f"{path}:{exc.raw_line}: not valid Python ({exc.message}); fix that first") from None
    except Exception as exc:  # undecodable bytes, odd encodings
        raise CannotPlan(f"{path}: cannot parse as Python ({type(exc).__name__}: {exc})") from None


def save(ctx: RemedyContext, path: Path, module: cst.Module, summary: str, line: int | None) -> None:
    ctx.write(path, module.bytes, EDIT, summary, line)


def styled(module: cst.Module, code: str) -> str:
    """`code` (LF, 4-space indents) in the module's line endings and indentation unit."""
    import re

    indent = module.default_indent
    if indent != "    ":
        code = re.sub(r"^((?:    )+)", lambda m: indent * (len(m.group(1)) // 4), code, flags=re.MULTILINE)
    return code.replace("\n", module.default_newline)


def statement(module: cst.Module, code: str) -> Any:
    """Parse one statement written with LF and 4-space indents, in the module's style."""
    import libcst as cst

    return cst.parse_statement(styled(module, code), config=module.config_for_parsing)


def comment_lines(module: cst.Module, *texts: str) -> list[Any]:
    import libcst as cst

    return [cst.EmptyLine(comment=cst.Comment("# " + t)) for t in texts]


def dotted(node: Any) -> str:
    """`torch.cuda.stream` for an Attribute/Name chain, '' for anything else."""
    import libcst as cst

    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else ""
    return ""


def module_imports(module: cst.Module) -> dict[str, str]:
    """Bound name -> imported dotted module for top-level `import a.b as c` / `from a import b as c`."""
    import libcst as cst

    names: dict[str, str] = {}
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    full = dotted(alias.name)
                    if alias.asname is not None:
                        names[dotted(alias.asname.name)] = full
                    else:
                        names[full.split(".")[0]] = full.split(".")[0]
            elif isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                base = dotted(small.module) if small.module is not None else ""
                for alias in small.names:
                    name = dotted(alias.name)
                    bound = dotted(alias.asname.name) if alias.asname is not None else name
                    names[bound] = f"{base}.{name}" if base else name
    return names


def last_import_index(module: cst.Module) -> int:
    """Index in module.body after the leading docstring/imports block."""
    import libcst as cst

    index = 0
    for i, stmt in enumerate(module.body):
        if isinstance(stmt, cst.SimpleStatementLine) and all(
                isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
            index = i + 1
    return index


def line_of(ctx_wrapper: Any, node: Any) -> int:
    import libcst.metadata as md

    return int(ctx_wrapper.resolve(md.PositionProvider)[node].start.line)

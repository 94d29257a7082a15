"""Remedy for the HF Trainer's load_best_model_at_end conflict (TRN001; field guide, error 7).

A diagnostic run has no best model to load: turn `load_best_model_at_end` off
where it is set, in the form it is set in: a command-line flag in the job
script, a JSON or YAML config file, or `TrainingArguments(...)` in Python.
`safe`: a flag, edited on its exact span.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from doctor.jobfolder.model import Span
from doctor.model import Phase, Safety
from doctor.registry import remedy
from doctor.remedy import pyedit
from doctor.remedy.draft import RemedyContext
from doctor.remedy.edits import shell_files
from doctor.remedy.model import EDIT, SCRIPT_LINE
from doctor.remedy.spans import SpanEdits, job_of

FLAG = "load_best_model_at_end"
TRUE = ("true", "yes", "1", "y", "t", "on")
FALSE = ("false", "no", "0", "n", "f", "off")
_JSON_RE = re.compile(rf'("{FLAG}"\s*:\s*)(true|"true"|"True"|1)\b')
_YAML_RE = re.compile(rf"^(\s*{FLAG}\s*:\s*)(true|True|TRUE|yes|Yes|on|On)\b", re.MULTILINE)


@remedy("trainer-lbm-off", Safety.SAFE,
        "Turn load_best_model_at_end off for the diagnostic run", phase=Phase.FLAGS)
def lbm_off(ctx: RemedyContext) -> None:
    files = ctx.files() or shell_files(ctx)
    for path in files:
        suffix = path.suffix.lower()
        if suffix == ".json":
            _regex_off(ctx, path, _JSON_RE, lambda v: "false")
        elif suffix in (".yaml", ".yml"):
            _regex_off(ctx, path, _YAML_RE, lambda v: "False" if v[0].isupper() else "false")
        elif suffix == ".py":
            _python_off(ctx, path)
        else:
            _flag_off(ctx, path)
    if not ctx.changes:
        ctx.note = f"{FLAG} is not turned on in the files the finding names"


def _regex_off(ctx: RemedyContext, path: Path, pattern: re.Pattern[str], value: Any) -> None:
    doc = ctx.read_doc(path)
    for m in pattern.finditer(doc.text):
        doc.replace(m.start(2), m.end(2), value(m.group(2)))
    if doc.changed:
        ctx.write_doc(path, doc, EDIT, f"{FLAG}: false", doc.line_of(next(pattern.finditer(doc.text)).start()))


def _flag_off(ctx: RemedyContext, path: Path) -> None:
    """`--load_best_model_at_end` (bare, `True`, or `=True`) -> `--load_best_model_at_end False`,
    on the words the job model read (where a flag came through a variable, in its assignment)."""
    job = job_of(ctx)
    edits = SpanEdits(ctx)
    found = False
    for cmd in job.commands:
        if os.path.realpath(cmd.site.file) != os.path.realpath(str(path)):
            continue
        words = cmd.argv_words
        for i, w in enumerate(words):
            name, eq, value = w.text.partition("=")
            if not name.startswith("--") or name[2:].replace("-", "_") != FLAG:
                continue
            span = w.source
            if span is None:
                continue
            if eq:
                if value.lower() not in FALSE:
                    vstart = span.start + len(name) + 1
                    edits.replace(Span(span.file, vstart, span.end, span.line, span.col, span.end_line,
                                       span.end_col), "False")
                    found = True
            elif i + 1 < len(words) and words[i + 1].text.lower() in TRUE + FALSE:
                nxt = words[i + 1].source
                if words[i + 1].text.lower() in TRUE and nxt is not None:
                    edits.replace(nxt, "False")
                    found = True
            else:
                edits.insert(span.file, span.end, span.line, " False")
                found = True
    if found:
        edits.write(SCRIPT_LINE, f"--{FLAG} False")


def _python_off(ctx: RemedyContext, path: Path) -> None:
    import libcst as cst

    module = pyedit.parse(ctx, path)

    class Off(cst.CSTTransformer):
        count = 0

        def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
            if updated.keyword is not None and updated.keyword.value == FLAG \
                    and isinstance(updated.value, cst.Name) and updated.value.value == "True":
                self.count += 1
                return updated.with_changes(value=cst.Name("False"))
            return updated

        def leave_DictElement(self, original: cst.DictElement, updated: cst.DictElement) -> cst.DictElement:
            if isinstance(updated.key, cst.SimpleString) and updated.key.evaluated_value == FLAG \
                    and isinstance(updated.value, cst.Name) and updated.value.value == "True":
                self.count += 1
                return updated.with_changes(value=cst.Name("False"))
            return updated

        def leave_AnnAssign(self, original: cst.AnnAssign, updated: cst.AnnAssign) -> cst.AnnAssign:
            """A TrainingArguments subclass's field: `load_best_model_at_end: bool = True` or `= field(default=True)`."""
            value = updated.value
            if not (isinstance(updated.target, cst.Name) and updated.target.value == FLAG):
                return updated
            if isinstance(value, cst.Name) and value.value == "True":
                self.count += 1
                return updated.with_changes(value=cst.Name("False"))
            if isinstance(value, cst.Call):
                args = [a.with_changes(value=cst.Name("False")) if a.keyword is not None and a.keyword.value == "default"
                        and isinstance(a.value, cst.Name) and a.value.value == "True" else a for a in value.args]
                if args != list(value.args):
                    self.count += 1
                    return updated.with_changes(value=value.with_changes(args=args))
            return updated

    off = Off()
    new = module.visit(off)
    if off.count:
        pyedit.save(ctx, path, new, f"{FLAG}=False", None)

"""Which branches of an `if` or a `case` run, when the shell's values say so statically:
`case "$MODE" in` with MODE=profile set above, `if [ "$PROFILE" = 1 ]` with PROFILE=1. Where a
value is known only when the job runs, or inside a loop (its later rounds may take other
branches), every branch is read.
"""

from __future__ import annotations

import fnmatch
import re

from doctor.jobfolder.expand import Expansion
from doctor.jobfolder.recovery import STATEMENTS
from doctor.jobfolder.state import Ctx
from doctor.jobfolder.syntax import Node, named

# what sbatch sets in every batch job's environment (a test of one of them is decided: it is set)
SBATCH_SETS = ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NAME", "SLURM_JOB_NODELIST", "SLURM_NODELIST",
               "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST",
               "SLURM_CLUSTER_NAME")
_SLURM_REF = re.compile(r'"?\$(?:\{(' + "|".join(SBATCH_SETS) + r')(?::?[-=+?][^}]*)?\}|('
                        + "|".join(SBATCH_SETS) + r')\b)"?')


class Branches:
    """Choosing the branches that run (mixed into the walker)."""

    def _expand(self, node: Node, ctx: Ctx, split: bool = True) -> Expansion:
        raise NotImplementedError

    def _case_arms(self, node: Node, ctx: Ctx) -> list[Node]:
        """The arms of `case WORD in ...` that run: the matching one(s) when WORD and the patterns
        are known (`MODE=profile` above), else every arm (each one may be the one that runs)."""
        items = [c for c in named(node) if c.type == "case_item"]
        subject = node.child_by_field_name("value")
        if subject is None or ctx.loop is not None:  # a loop's later rounds may take other arms
            return items
        word = self._expand(subject, ctx, split=False)
        if not word.known or word.varies:
            return items
        chosen: list[Node] = []
        falling = False
        for item in items:
            if not falling:
                matched = case_match(word.value, [self._expand(p, ctx, split=False)
                                                  for p in item.children_by_field_name("value")],
                                     [p.type in ("string", "raw_string") for p in item.children_by_field_name("value")])
                if matched is None:
                    return items
                if not matched:
                    continue
            chosen.append(item)
            end = item.children[-1].type if item.children else ";;"
            falling = end == ";&"
            if end not in (";&", ";;&"):
                break
        return chosen

    def _test_value(self, conds: list[Node], ctx: Ctx) -> bool | None:
        """The value of a condition that is one `[ ... ]` / `[[ ... ]]` over known words, else None."""
        if len(conds) != 1 or conds[0].type != "test_command" or ctx.loop is not None:
            return None  # (a loop's later rounds may take the other branch)
        inner = named(conds[0])
        if len(inner) != 1:
            return None
        expr = inner[0]
        if expr.type == "binary_expression":
            left, right = expr.child_by_field_name("left"), expr.child_by_field_name("right")
            op = expr.child_by_field_name("operator")
            if left is None or right is None or op is None:
                return None
            a, b = self._expand(left, ctx, split=False), self._expand(right, ctx, split=False)
            glob = conds[0].children[0].type == "[[" and right.type not in ("string", "raw_string")
            return test_binary(a, ctx.src.text_of(op), b, glob)
        if expr.type == "unary_expression":
            kids = [c for c in expr.children]
            if len(kids) != 2 or ctx.src.text_of(kids[0]) not in ("-n", "-z"):
                return None
            if self._set_by_sbatch(ctx.src.text_of(kids[1]), ctx):  # `[[ -n ${SLURM_JOB_ID:-} ]]` in a
                return ctx.src.text_of(kids[0]) == "-n"              # batch job: set, whatever it is
            word = self._expand(kids[1], ctx, split=False)
            if not word.known or word.varies:
                return None
            return (word.value != "") == (ctx.src.text_of(kids[0]) == "-n")
        return None

    def _set_by_sbatch(self, text: str, ctx: Ctx) -> bool:
        """Whether `text` is one reference to a variable Slurm sets in every batch job, in a job script
        with `#SBATCH` lines that does not set it itself: its value is known only when the job runs,
        but it is not empty there."""
        m = _SLURM_REF.fullmatch(text)
        if m is None:
            return False
        shell = getattr(self, "files", {}).get(ctx.src.path)
        if shell is None or shell.role != "job" or not shell.sbatch:
            return False
        var = ctx.state.vars.get(m.group(1) or m.group(2))
        return var is None or var.site is None


def clause_parts(clause: Node) -> tuple[list[Node], list[Node]]:
    """(condition statements, body statements) of an `if_statement` or `elif_clause`."""
    conds: list[Node] = []
    body: list[Node] = []
    in_body = False
    for p in clause.children:
        if not p.is_named:
            in_body = in_body or p.type == "then"
            continue
        if in_body and p.type in STATEMENTS:
            body.append(p)
        elif not in_body and p.type != "comment":
            conds.append(p)
    return conds, body


def test_binary(a: Expansion, op: str, b: Expansion, glob: bool) -> bool | None:
    """`[ A op B ]` on known words: string (in)equality (a pattern inside `[[ ]]`), integer comparisons."""
    if not (a.known and b.known) or a.varies or b.varies:
        return None
    x, y = a.value, b.value
    if op in ("=", "=="):
        return fnmatch.fnmatchcase(x, y) if glob else x == y
    if op == "!=":
        return not fnmatch.fnmatchcase(x, y) if glob else x != y
    ints = {"-eq": int.__eq__, "-ne": int.__ne__, "-gt": int.__gt__, "-lt": int.__lt__, "-ge": int.__ge__,
            "-le": int.__le__}
    if op in ints:
        try:
            return bool(ints[op](int(x.strip()), int(y.strip())))
        except ValueError:
            return None
    return None


def case_match(subject: str, patterns: list[Expansion], quoted: list[bool]) -> bool | None:
    """Whether `subject` matches one of a case arm's patterns (bash globs; quoted ones literally);
    None when a pattern is only known when the job runs."""
    for pattern, literal in zip(patterns, quoted, strict=True):
        if not pattern.known:
            return None
        if subject == pattern.value if literal else fnmatch.fnmatchcase(subject, pattern.value):
            return True
    return False

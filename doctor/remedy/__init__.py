"""The remedy engine: plan -> preview -> apply -> verify -> undo, and nothing lost.

    plan = make_plan(case, findings)          # nothing touched: Plan with diffs per remedy
    print(plan.diff())                        # unified diffs, new files, env and script lines
    result = apply_plan(plan)                 # atomic writes, backups, journal (.gpu-doctor/)
    checks = verify_plan(plan, run_job_checks(case))   # re-run the checks, record `verified`
    undo(case.root)                           # every file back byte for byte

Remedy modules (`remedies/*.py`) register plan functions with
`@registry.remedy(ID, safety, title)`; a plan function gets a `RemedyContext`
and records changes on its draft, or raises `CannotPlan`. The journal format
is documented in `doctor.remedy.journal`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from doctor.remedy.apply import ApplyResult, UndoResult, apply_plan, undo
    from doctor.remedy.draft import RemedyContext
    from doctor.remedy.journal import remedy_states, transactions
    from doctor.remedy.model import CannotPlan, Change, NotWritable, Plan, RemedyError, RemedyPlan, StaleFile
    from doctor.remedy.planner import make_plan

# Imported on first use: the gate loads the remedy modules (for the catalogue) and must stay fast.
_WHERE = {
    "ApplyResult": "apply", "UndoResult": "apply", "apply_plan": "apply", "undo": "apply",
    "RemedyContext": "draft", "remedy_states": "journal", "transactions": "journal",
    "CannotPlan": "model", "Change": "model", "NotWritable": "model", "Plan": "model",
    "RemedyError": "model", "RemedyPlan": "model", "StaleFile": "model", "make_plan": "planner",
    "plan": "planner",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'doctor.remedy' has no attribute {name!r}")
    module = importlib.import_module(f"doctor.remedy.{_WHERE[name]}")
    return module.make_plan if name == "plan" else getattr(module, name)


__all__ = ["ApplyResult", "CannotPlan", "Change", "NotWritable", "Plan", "RemedyContext", "RemedyError",
           "RemedyPlan", "StaleFile", "UndoResult", "apply_plan", "make_plan", "plan", "remedy_states",
           "transactions", "undo"]

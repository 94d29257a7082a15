"""Who tears the process group down when the script does not: the frameworks SCR002 knows.

- accelerate: `Accelerator.end_training()` calls `torch.distributed.destroy_process_group()`
  since accelerate 0.34 (huggingface/accelerate#3012, Aug 2024); before, it only ended the trackers.
- Lightning (`lightning`, `pytorch_lightning`): destroys the group in an `atexit` handler
  (Lightning-AI/pytorch-lightning#19931, 2024); whether that runs before Score-P's own exit
  handler is not known, so it is a risk, not a pass.
- The HF `Trainer` never does (huggingface/transformers#48874).

The accelerate version comes from a pin in the job folder (requirements*.txt,
pyproject.toml, environment*.yml) or from the framework probe, when it ran.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from doctor import pyast, safeopen
from doctor.facts import Facts
from doctor.limits import MAX_PYTHON_BYTES
from doctor.model import Evidence

ACCELERATE_DESTROYS = (0, 34)
PIN_FILES = ("requirements*.txt", "pyproject.toml", "environment*.yml", "environment*.yaml", "setup.cfg")
PIN = re.compile(r"""(?im)^\s*["']?accelerate\s*(?:\[[^\]]*\])?\s*(==|>=|~=|=)\s*([0-9][0-9.]*)""")


@dataclass(frozen=True)
class Teardown:
    """A framework call or hook that may destroy the process group for the script.

    `destroys` is True (it does), False (this version does not) or None (cannot tell)."""

    framework: str
    destroys: bool | None
    why: str
    evidence: tuple[Evidence, ...]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def accelerate_version(facts: Facts) -> tuple[str, Evidence] | None:
    """The accelerate version the job runs: a pin in the job folder, else the framework probe's."""
    root = facts.case.root
    if root is not None and Path(root).is_dir():
        for pattern in PIN_FILES:
            for path in sorted(Path(root).glob(pattern))[:5]:
                try:
                    text = safeopen.read_text(path)[:200_000]
                except OSError:
                    continue
                m = PIN.search(text)
                if m:
                    line = text.count("\n", 0, m.start()) + 1
                    return m.group(2), Evidence(m.group(0).strip(), path.name, line, f"accelerate {m.group(1)}")
    probed = facts.peek("framework")
    if isinstance(probed, dict) and isinstance(probed.get("accelerate_version"), str):
        version = probed["accelerate_version"]
        return version, Evidence(f"accelerate {version}", label="job's interpreter")
    return None


def _calls(path: str, attr: str) -> list[int]:
    try:
        tree = pyast.parse(safeopen.read_text(path, MAX_PYTHON_BYTES))
    except (OSError, SyntaxError, ValueError):
        return []
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and n.func.attr == attr]


def _imports(script: Any, top: str) -> bool:
    return any(i.module.split(".")[0] == top for i in script.imports)


def framework_teardown(facts: Facts, job: Any, closure: list[Any]) -> Teardown | None:
    """The framework teardown the scripts in `closure` rely on, if any."""
    for s in closure:
        if s.role == "snippet" or not _imports(s, "accelerate"):
            continue
        lines = _calls(s.path, "end_training")
        if not lines:
            continue
        where = Evidence("accelerator.end_training()", job.rel(s.path), lines[0], "teardown")
        found = accelerate_version(facts)
        if found is None:
            return Teardown("accelerate", None, "accelerate's end_training() destroys the process group since "
                            "0.34, but the job's accelerate version is not known here (pin it, e.g. "
                            "accelerate>=0.34 in requirements.txt)", (where,))
        version, pin = found
        if _version(version) >= ACCELERATE_DESTROYS:
            return Teardown("accelerate", True, f"accelerate {version}: end_training() calls "
                            "destroy_process_group() (since 0.34)", (where, pin))
        return Teardown("accelerate", False, f"accelerate {version}: end_training() destroys the process group "
                        "only since 0.34", (where, pin))
    for s in closure:
        if s.role != "snippet" and (_imports(s, "lightning") or _imports(s, "pytorch_lightning")):
            lines = _calls(s.path, "fit")
            if lines:
                return Teardown("lightning", None, "Lightning destroys the process group in an atexit handler; "
                                "whether that runs before Score-P's own exit handler is not known",
                                (Evidence("trainer.fit(...)", job.rel(s.path), lines[0], "training"),))
    return None

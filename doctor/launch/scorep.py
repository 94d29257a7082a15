"""Is Score-P there for an instrumented launch?

Two things must be found: `scorep-config` on the PATH the ranks get (the
Python wrapper calls it to build the measurement library), and the `scorep`
module importable by the job's interpreter (`python -m scorep`).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

from doctor.isolate import run_isolated

FIND_MODULE = ("import importlib.util, sys; s = importlib.util.find_spec('scorep'); "
               "print(s.origin if s else ''); sys.exit(0 if s else 1)")


@dataclass(frozen=True)
class ScorepFound:
    scorep_config: str | None
    module: str | None
    module_error: str | None

    @property
    def ok(self) -> bool:
        return bool(self.scorep_config and self.module)

    def problem(self, python: str) -> str:
        """One line naming what was looked for and not found."""
        missing = []
        if not self.scorep_config:
            missing.append("`scorep-config` is not on PATH")
        if not self.module:
            why = f" ({self.module_error})" if self.module_error else ""
            missing.append(f"the `scorep` Python module is not importable by {python}{why}")
        return ("--instrument scorep needs Score-P, but " + " and ".join(missing)
                + " (load the Score-P module and `pip install scorep` in the job's environment, "
                  "or launch with --instrument none)")


def find_scorep(python: str, env: Mapping[str, str], timeout: float = 30.0) -> ScorepFound:
    config = shutil.which("scorep-config", path=env.get("PATH", ""))
    res = run_isolated([python, "-c", FIND_MODULE], timeout, env=env)
    module = res.stdout.strip() or None if res.returncode == 0 else None
    error = None
    if module is None:
        error = ("timed out" if res.timed_out else
                 (res.stderr.strip().splitlines() or [f"exit code {res.returncode}"])[-1]
                 if res.returncode not in (0, 1) else None)
    return ScorepFound(config, module, error)


def cuda_support(scorep_config: str, env: Mapping[str, str], timeout: float = 15.0) -> bool | None:
    """`CUDA support: yes/no` from `scorep-info config-summary` beside scorep-config (None: cannot tell)."""
    info = os.path.join(os.path.dirname(scorep_config), "scorep-info")
    if not os.path.exists(info):
        return None
    res = run_isolated([info, "config-summary"], timeout, env=env)
    m = re.search(r"CUDA support:\s*(\w+)", res.stdout or "") if res.returncode == 0 else None
    return None if m is None else m.group(1).lower() == "yes"

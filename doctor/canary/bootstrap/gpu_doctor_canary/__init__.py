"""Rank side of gpu-doctor's replica canary (imported by the bootstrap's sitecustomize).

Configured by the launcher through the environment:

    GPU_DOCTOR_CANARY=K            check every K optimizer steps
    GPU_DOCTOR_CANARY_DIR=D        where this rank writes canary/rank_N.json
    GPU_DOCTOR_CANARY_TIMEOUT=S    how long a check waits for the other ranks
    GPU_DOCTOR_CANARY_OPTIMIZER=1  the optimizer's state too (Adam's exp_avg...), not only the parameters

Nothing is imported before the user's program imports torch: `install()` only puts an
import hook in place, and the canary registers itself once `import torch` has finished
(torch.optim.optimizer.register_optimizer_step_post_hook). Only this package and torch
are used: the job's interpreter need not have gpu-doctor installed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of the top-level `torch` so that the canary
    registers right after torch's own `__init__` ran (never in the middle of it)."""

    def find_spec(self, name: str, path: Any = None, target: ModuleType | None = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)   # once, and so the search below does not find us again
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            try:
                from . import watch

                watch.start()
            except Exception as exc:   # never the user's problem
                print(f"gpu-doctor canary: not started: {type(exc).__name__}: {exc}",
                      file=sys.stderr, flush=True)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Start the canary once torch is imported (at once when it already is)."""
    if "torch" in sys.modules:
        from . import watch

        watch.start()
        return
    if not any(isinstance(f, _AfterTorch) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterTorch())

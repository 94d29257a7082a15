"""The catalogue: checks and remedies, each under a stable ID.

Check modules (`checks/*.py`) and remedy modules (`remedies/*.py`) register
themselves with the decorators below when imported (fact providers register
with `doctor.facts.provider`). Keep those modules light: stdlib and `doctor`
at the top level only; heavy libraries (otf2, libcst, bashlex, torch, textual)
are imported inside the functions that need them, so the gate stays fast.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from doctor.facts import FACT_MODULES, Facts
from doctor.model import LAYER_ORDER, Layer, Outcome, Safety

CheckFn = Callable[[Facts], "Outcome | Iterable[Outcome]"]

# Modules that hold checks, in layer order. Missing modules are tolerated so a
# layer can land on its own.
CHECK_MODULES = (
    "checks.node",
    "checks.interconnect",
    "checks.scorep",
    "checks.launcher",
    "checks.script",
    "checks.trainer",
    "checks.artifacts",
)

REMEDY_MODULES = (
    "remedies.node",
    "remedies.p2p",
    "remedies.scorep_env",
    "remedies.scorep_measurement",
    "remedies.launch",
    "remedies.code",
    "remedies.trainer",
)


@dataclass(frozen=True)
class Check:
    """One catalogue entry. The function's docstring is what `explain` prints."""

    id: str
    layer: str
    title: str
    fn: CheckFn
    needs: tuple[str, ...] = ()
    depends_on: tuple[str, ...] = ()
    remedies: tuple[str, ...] = ()
    handles_failures: bool = False

    @property
    def doc(self) -> str:
        return inspect.cleandoc(self.fn.__doc__ or "")


@dataclass(frozen=True)
class Remedy:
    """A remedy family member. `plan` (issue: remedies) turns a case into a Plan."""

    id: str
    safety: Safety
    title: str
    steps: tuple[str, ...] = ()
    plan: Callable[..., Any] | None = None
    fixes: tuple[str, ...] = field(default=())


CHECKS: dict[str, Check] = {}
REMEDIES: dict[str, Remedy] = {}
_loaded = False


def check(id: str, layer: Layer | str, title: str, *, needs: Sequence[str] = (),
          depends_on: Sequence[str] = (), remedies: Sequence[str] = (),
          handles_failures: bool = False) -> Callable[[CheckFn], CheckFn]:
    """Register a check function under a stable ID."""

    def register(fn: CheckFn) -> CheckFn:
        if id in CHECKS and CHECKS[id].fn.__qualname__ != fn.__qualname__:
            raise ValueError(f"check {id} registered twice")
        CHECKS[id] = Check(id, Layer(layer).value, title, fn, tuple(needs), tuple(depends_on),
                           tuple(remedies), handles_failures)
        return fn

    return register


def remedy(id: str, safety: Safety | str, title: str, *, steps: Sequence[str] = (),
           fixes: Sequence[str] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a remedy with a plan function (decorator form)."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        REMEDIES[id] = Remedy(id, Safety(safety), title, tuple(steps), fn, tuple(fixes))
        return fn

    return register


def manual_remedy(id: str, title: str, steps: Sequence[str], fixes: Sequence[str] = ()) -> None:
    """Register a remedy that only prints exact steps."""
    REMEDIES[id] = Remedy(id, Safety.MANUAL, title, tuple(steps), None, tuple(fixes))


def _import_all(names: Iterable[str]) -> None:
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:
            spec = None
        if spec is not None:
            importlib.import_module(name)


def load() -> None:
    """Import every catalogue module once."""
    global _loaded
    if _loaded:
        return
    _import_all(CHECK_MODULES)
    _import_all(FACT_MODULES)
    _import_all(REMEDY_MODULES)
    _loaded = True


# The check-ID prefix of each check module. The gate imports only the modules
# its checks need (fast start; a broken module of another layer cannot stop a
# Slurm prologue); facts and remedies are imported when first asked for.
CHECK_PREFIXES = {
    "GPU": "checks.node",
    "P2P": "checks.interconnect",
    "SCP": "checks.scorep",
    "LNC": "checks.launcher",
    "SCR": "checks.script",
    "TRN": "checks.trainer",
    "ART": "checks.artifacts",
}
_imported: set[str] = set()


def _import_once(name: str) -> None:
    if name not in _imported:
        _import_all([name])
        _imported.add(name)


def load_checks(check_ids: Iterable[str]) -> None:
    """Import the check modules holding `check_ids` and their dependencies (all if unsure)."""
    if _loaded:
        return
    todo, seen = [c.upper() for c in check_ids], set()
    while todo:
        cid = todo.pop()
        if cid in seen:
            continue
        seen.add(cid)
        module = CHECK_PREFIXES.get(cid[:3])
        if module is None:
            load()
            return
        _import_once(module)
        if cid in CHECKS:
            todo.extend(CHECKS[cid].depends_on)


def remedy_for(remedy_id: str) -> Remedy | None:
    """The remedy `remedy_id`, importing remedy modules in order until one registers it."""
    for module in REMEDY_MODULES:
        if remedy_id in REMEDIES:
            break
        _import_once(module)
    return REMEDIES.get(remedy_id)


def get_check(check_id: str) -> Check:
    if check_id.upper() not in CHECKS:
        load_checks([check_id])
    if check_id.upper() not in CHECKS:
        load()
    try:
        return CHECKS[check_id.upper()]
    except KeyError:
        raise KeyError(f"unknown check ID {check_id!r} (see `gpu-doctor list-checks`)") from None


def all_checks() -> list[Check]:
    load()
    return sorted(CHECKS.values(), key=lambda c: (LAYER_ORDER.index(c.layer), c.id))

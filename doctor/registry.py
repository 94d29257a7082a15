"""The catalogue: checks and remedies, each under a stable ID.

Check modules (`checks/*.py`) and remedy modules (`remedies/*.py`) register
themselves with the decorators below when imported (fact providers register
with `doctor.facts.provider`). Keep those modules light: stdlib and `doctor`
at the top level only; heavy libraries (otf2, libcst, tree_sitter, torch, textual)
are imported inside the functions that need them, so the gate stays fast.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import pkgutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from doctor.facts import FACT_MODULES, Facts
from doctor.model import LAYER_ORDER, Layer, Outcome, Phase, Safety

CheckFn = Callable[[Facts], "Outcome | Iterable[Outcome]"]

# The layer of each check-ID prefix. A layer's checks live in `checks/<layer>.py` and any
# `checks/<layer>_<topic>.py`; remedies in any `remedies/*.py`: a module is found by being there.
LAYER_OF_PREFIX = {
    "GPU": "node",
    "P2P": "interconnect",
    "SCP": "scorep",
    "LNC": "launcher",
    "SCR": "script",
    "TRN": "trainer",
    "ART": "artifacts",
}


@functools.cache
def package_modules(package: str) -> tuple[str, ...]:
    """The modules of `package` (`checks`, `remedies`), by name; none if the package is missing."""
    try:
        spec = importlib.util.find_spec(package)
    except ModuleNotFoundError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return ()
    found = pkgutil.iter_modules(list(spec.submodule_search_locations))
    return tuple(sorted(f"{package}.{m.name}" for m in found if not m.ispkg))


def check_modules(layer: str | None = None) -> tuple[str, ...]:
    """The check modules (of one layer), in layer order."""
    def layer_of(module: str) -> str:
        return module.removeprefix("checks.").split("_")[0]

    def rank(module: str) -> tuple[int, str]:
        name = layer_of(module)
        return (LAYER_ORDER.index(name) if name in LAYER_ORDER else len(LAYER_ORDER), module)

    modules = sorted(package_modules("checks"), key=rank)
    return tuple(m for m in modules if layer is None or layer_of(m) == layer)


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
    """A remedy family member. `plan` turns a case into a Plan; `phase` and `after` say when.

    Which checks a remedy answers is said once, by the check (`@check(..., remedies=...)`, narrowed
    per finding by its outcomes): the findings carry it to the planner, `explain` and the tests.
    """

    id: str
    safety: Safety
    title: str
    steps: tuple[str, ...] = ()
    plan: Callable[..., Any] | None = None
    phase: Phase = Phase.MANUAL
    after: tuple[str, ...] = ()  # remedies of the same phase to plan first when both are wanted


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


def remedy(id: str, safety: Safety | str, title: str, *, phase: Phase | str, after: Sequence[str] = (),
           steps: Sequence[str] = ()) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a remedy with a plan function (decorator form), planned in `phase` (see `Phase`)."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        REMEDIES[id] = Remedy(id, Safety(safety), title, tuple(steps), fn, Phase(phase), tuple(after))
        return fn

    return register


def manual_remedy(id: str, title: str, steps: Sequence[str]) -> None:
    """Register a remedy that only prints exact steps."""
    REMEDIES[id] = Remedy(id, Safety.MANUAL, title, tuple(steps), None)


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
    _import_all(check_modules())
    _import_all(FACT_MODULES)
    _import_all(package_modules("remedies"))
    _loaded = True


# The gate imports only the modules its checks need (fast start; a broken module
# of another layer cannot stop a Slurm prologue); facts and remedies are
# imported when first asked for.
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
        layer = LAYER_OF_PREFIX.get(cid[:3])
        if layer is None:
            load()
            return
        for module in check_modules(layer):
            _import_once(module)
        if cid in CHECKS:
            todo.extend(CHECKS[cid].depends_on)


def remedy_for(remedy_id: str) -> Remedy | None:
    """The remedy `remedy_id`, importing remedy modules in order until one registers it."""
    for module in package_modules("remedies"):
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


def layer_checks(layer: str) -> list[Check]:
    """Every check of one layer, by ID (importing the layer's modules)."""
    if not _loaded:
        for module in check_modules(layer):
            _import_once(module)
    return sorted((c for c in CHECKS.values() if c.layer == layer), key=lambda c: c.id)


def all_checks() -> list[Check]:
    load()
    return sorted(CHECKS.values(), key=lambda c: (LAYER_ORDER.index(c.layer), c.id))

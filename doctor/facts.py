"""Facts: what probes measured, gathered once per run, each with its own error.

`Facts.get(name)` computes a fact on first use (or waits for the thread that
is computing it) and returns either the provider's value or a `ProbeFailure`.
Providers never raise into the runner: an exception becomes a failure with
the probe's name and the reason. Fact modules (probes and analysers) register
their providers with `@provider(name)` when imported; `provider_for` imports
them on first use.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from doctor import limits
from doctor.case import Case

# Modules that provide facts (probes and analysers), imported in this order until one has the fact.
FACT_MODULES = (
    "doctor.probes.node",
    "doctor.probes.p2p",
    "doctor.probes.network",
    "doctor.jobfolder.facts",
    "doctor.artifacts.facts",
    "doctor.canary.facts",
)


@dataclass(frozen=True)
class ProbeFailure:
    """A probe that could not produce its fact: `kind` is 'timeout' or 'error'."""

    probe: str
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"probe {self.probe!r} {'timed out' if self.kind == 'timeout' else 'failed'}: {self.detail}"


class ProbeTimeout(Exception):
    """Raised by a provider to report that its probe hit a time limit."""


@dataclass
class ProbeContext:
    """What a provider may use: the case, the facts, and the time left."""

    case: Case
    facts: Facts
    deadline: float
    timeout: float

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def limit(self, own: float | None = None) -> float:
        """The provider's own limit, capped by the run's remaining budget."""
        return min(own if own is not None else self.timeout, self.remaining())

    def need(self, name: str) -> Any:
        """Another fact's value; re-raises its failure so this one fails too."""
        value = self.facts.get(name)
        if isinstance(value, ProbeFailure):
            raise RuntimeError(f"needs {name}: {value.detail}")
        return value


class Facts:
    """Lazily computed, thread-safe, per-run facts."""

    def __init__(self, case: Case, deadline: float, preset: dict[str, Any] | None = None):
        self.case = case
        self.deadline = deadline
        self._lock = threading.Lock()
        self._futures: dict[str, Future[Any]] = {}
        self.durations_ms: dict[str, float] = {}
        self.threads: dict[str, int] = {}  # fact -> the thread computing it (what it reads: limits.reading)
        for name, value in (preset or {}).items():
            fut: Future[Any] = Future()
            fut.set_result(value)
            self._futures[name] = fut

    def get(self, name: str) -> Any:
        """The fact's value or a ProbeFailure; computes it in this thread if new."""
        with self._lock:
            fut = self._futures.get(name)
            owner = fut is None
            if owner:
                fut = Future()
                self._futures[name] = fut
        assert fut is not None
        if owner:
            fut.set_result(self._compute(name))
        # One second of grace past the run's deadline, for every waiter together: a check that asks
        # after it gets the timeout at once (per call, 20 checks asking waited 20 s past --timeout).
        remaining = max(0.0, self.deadline + 1.0 - time.monotonic())
        try:
            return fut.result(timeout=remaining)
        except TimeoutError:
            where = limits.reading(self.threads[name]) if name in self.threads else None
            return ProbeFailure(name, "timeout", "the run's time budget ran out"
                                + (f" while reading {where}" if where else ""))

    def __getitem__(self, name: str) -> Any:
        return self.get(name)

    def peek(self, name: str) -> Any:
        """The value if already computed, else None; never computes."""
        fut = self._futures.get(name)
        return fut.result() if fut is not None and fut.done() else None

    def computed(self) -> dict[str, Any]:
        """Every fact computed so far (to hand to another front end without probing again)."""
        return {name: fut.result() for name, fut in list(self._futures.items()) if fut.done()}

    def _compute(self, name: str) -> Any:
        try:
            prov = provider_for(name)
        except Exception as exc:  # a broken fact module fails only the facts it would give
            return ProbeFailure(name, "error", f"cannot load its provider: {type(exc).__name__}: {exc}")
        if prov is None:
            return ProbeFailure(name, "error", "no provider for this fact")
        if time.monotonic() >= self.deadline:
            return ProbeFailure(name, "timeout", "the run's time budget ran out before it started")
        ctx = ProbeContext(self.case, self, self.deadline, prov.timeout)
        self.threads[name] = threading.get_ident()
        start = time.monotonic()
        try:
            value = prov.fn(ctx)
        except ProbeTimeout as exc:
            value = ProbeFailure(name, "timeout", str(exc))
        except Exception as exc:  # a probe never raises into the runner
            value = ProbeFailure(name, "error", f"{type(exc).__name__}: {exc}")
        self.durations_ms[name] = (time.monotonic() - start) * 1000
        return value


ProviderFn = Callable[[ProbeContext], Any]


@dataclass(frozen=True)
class FactProvider:
    """Produces one named fact. `timeout` is the provider's own limit in seconds."""

    name: str
    fn: ProviderFn
    timeout: float = 10.0
    reads_user_files: bool = False
    eager: bool = True  # started with the run; False: only when a check asks for it


PROVIDERS: dict[str, FactProvider] = {}
_imported: set[str] = set()


def provider(name: str, *, timeout: float = 10.0, reads_user_files: bool = False,
             eager: bool = True) -> Callable[[ProviderFn], ProviderFn]:
    """Register a fact provider. `eager=False`: the run does not start it up front; it is
    computed when a check asks (for a probe only some jobs need, e.g. one that asks slurmctld)."""

    def register(fn: ProviderFn) -> ProviderFn:
        PROVIDERS[name] = FactProvider(name, fn, timeout, reads_user_files, eager)
        return fn

    return register


def provider_for(name: str) -> FactProvider | None:
    """The provider of fact `name`, importing fact modules in order until one registers it."""
    for module in FACT_MODULES:
        if name in PROVIDERS:
            break
        if module not in _imported:
            _import_fact_module(module)
            _imported.add(module)
    return PROVIDERS.get(name)


def _import_fact_module(name: str) -> None:
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        spec = None
    if spec is not None:  # a missing module is tolerated so a layer can land without its facts
        importlib.import_module(name)

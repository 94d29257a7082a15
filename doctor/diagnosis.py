"""The diagnosis: which findings explain which, root causes first, and the next step for each.

`LINKS` is the field guides' causal chains as data: a symptom (a check ID, or
`ART004:<signature>` for one log signature) and the checks that can cause it,
most direct first. `diagnose(run)` applies it after the checks ran: a problem
(a `warn` or `fail`) that explains others and that no other problem explains
is a root cause; its symptoms are listed under it, through intermediate links
too (the FP16 ValueError <- error 802 <- the module-level `scorep.user` import).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from doctor.artifacts.runrecord import had, unsure
from doctor.model import LAYER_ORDER, CheckResult, Safety, Status

if TYPE_CHECKING:
    from doctor.runner import Run


@dataclass(frozen=True)
class Link:
    """`symptom` can be caused by any of `causes`; `why` says how, in one line."""

    symptom: str
    causes: tuple[str, ...]
    why: str


LINKS: tuple[Link, ...] = (
    Link("ART004:fp16_valueerror", ("ART004:cuda_802", "SCR001", "LNC002", "GPU003", "GPU004", "TRN002"),
         "the FP16 ValueError is PyTorch finding no CUDA device: a CUDA init that failed (a hidden error 802)"),
    Link("ART004:cuda_802", ("SCR001", "LNC002", "GPU003", "GPU005"),
         "error 802: Score-P's CUDA adapter probed a runtime that was not ready yet"),
    Link("TRN002", ("GPU003", "GPU004", "GPU005"),
         "fp16/bf16 fails at start-up where the framework cannot use CUDA"),
    Link("GPU004", ("GPU003", "GPU002", "GPU005"),
         "the framework's CUDA init fails while the runtime is not ready"),
    Link("GPU003", ("GPU005",), "a fabric manager that is down keeps the runtime at 802"),
    Link("LNC003", ("GPU003",), "the node whose runtime never comes up is still one the job may get"),
    Link("ART006", ("P2P002",), "DDP replicas that drift apart got wrong bytes with no error: the field "
         "guide's corrupt GPU peer copies"),
    Link("ART001", ("LNC001",), "torchrun under `python -m scorep`: only the launcher agent was measured"),
    Link("ART002", ("SCP002", "SCP007", "SCP001"),
         "no CUDA in the measurement: the adapter was not loaded (--cuda), told to record nothing "
         "(SCOREP_CUDA_ENABLE), or Score-P has no CUDA support"),
    Link("ART003", ("ART004:scorep_oom", "SCP009", "ART004:nccl_watchdog_teardown", "ART004:tpd_zero", "SCR002",
                    "SCP006"),
         "a rank that dies before Score-P flushes leaves no complete folder: Score-P's measurement memory "
         "running out, the NCCL watchdog racing the teardown (no destroy_process_group), or ranks sharing "
         "one folder"),
    Link("ART004:scorep_oom", ("SCP009",),
         "the Python instrumenter's records of `import torch` filled SCOREP_TOTAL_MEMORY (default 16000k)"),
    Link("ART004:scorep_cuda_unsupported", ("SCP001",), "--cuda asked of a Score-P built without CUDA support"),
    Link("ART004:scorep_no_config", ("SCP001",), "scorep-config is not on the job's PATH"),
    Link("ART004:scorep_no_compiler", ("SCP001",),
         "python -m scorep compiles its init library at every start: no C compiler on the job's PATH"),
    Link("ART004:callpath_depth", ("SCP010",), "the unfiltered Python instrumenter records call paths deeper "
                                              "than SCOREP_PROFILING_MAX_CALLPATH_DEPTH"),
    Link("ART004:nccl_watchdog_teardown", ("SCR002",),
         "the NCCL watchdog raced Score-P's teardown: nothing destroyed the process group before exit"),
    Link("ART004:tpd_zero", ("SCR002",), "Score-P was entered from a teardown thread it has no location for"),
    Link("ART004:cupti_dropped", ("SCP004",), "the CUPTI activity buffer is too small for the kernels recorded"),
    Link("ART004:memory_clamp", ("SCP003",), "SCOREP_TOTAL_MEMORY of 4 GiB or more is clamped"),
    Link("ART004:unknown_option_dashdash", ("SCP005",), "scorep-config rejects the `--` after python -m scorep"),
    Link("ART004:experiment_collision", ("SCP006",), "several ranks wrote into one experiment folder"),
    Link("ART004:lbm_conflict", ("TRN001",), "load_best_model_at_end with eval and save strategies that differ"),
)
# What a cause needs of the run that wrote a log line before that line can be its symptom: a
# `gpu-doctor launch` without Score-P proves nothing about Score-P's adapter, one on another host
# nothing about this node (doctor.artifacts.runrecord). A Slurm output file without a launch record is
# the job's run. Where no run of the log lines is known to have had it (no record says, the log does not
# say), the link stands, marked `unsure` with why: the chain says "may explain", never asserts.
PRECONDITIONS: dict[str, str] = {
    "SCR001": "cuda", "LNC002": "cuda", "SCP002": "cuda", "SCP004": "cuda",
    "SCP001": "scorep", "SCP003": "scorep", "SCP005": "scorep", "SCP006": "scorep", "SCP009": "scorep",
    "SCP010": "scorep", "LNC001": "scorep",
    "GPU002": "node", "GPU003": "node", "GPU004": "node", "GPU005": "node",
}
PROBLEM = (Status.FAIL, Status.WARN)
JOB_LAYERS = ("scorep", "launcher", "script", "trainer", "artifacts")


@dataclass(frozen=True)
class Problem:
    """One problem of a run: a check's findings of one key (`ART004:fp16_valueerror`, `SCR002`)."""

    key: str
    check_id: str
    layer: str
    status: Status
    message: str
    remedies: tuple[str, ...]
    next_step: str
    runs: tuple[Any, ...] = field(default=(), compare=False)  # a log signature's runs (ART004 `runs`)

    @property
    def signature(self) -> str | None:
        return self.key.partition(":")[2] or None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.check_id, "signature": self.signature, "layer": self.layer,
                "status": self.status.value, "message": self.message, "next": self.next_step}


@dataclass(frozen=True)
class Symptom:
    """A problem a root cause explains; `via` is the link in between, if any."""

    problem: Problem
    why: str
    via: str | None = None
    unsure: str | None = None   # why the run that wrote the symptom's log lines may lack the cause's precondition

    def to_json(self) -> dict[str, Any]:
        return self.problem.to_json() | {"why": self.why, "via": self.via, "unsure": self.unsure}


@dataclass(frozen=True)
class RootCause:
    problem: Problem
    symptoms: tuple[Symptom, ...]

    @property
    def unsure(self) -> bool:
        """Every symptom hangs on a log whose run is not known to have had this cause's precondition."""
        return bool(self.symptoms) and all(s.unsure for s in self.symptoms)

    def to_json(self) -> dict[str, Any]:
        return self.problem.to_json() | {"explains": [s.to_json() for s in self.symptoms]}


@dataclass(frozen=True)
class Unexplained:
    """A symptom whose possible causes all passed or did not run."""

    problem: Problem
    possible_causes: tuple[str, ...]
    why: str

    def to_json(self) -> dict[str, Any]:
        return self.problem.to_json() | {"possible_causes": list(self.possible_causes), "why": self.why}


@dataclass(frozen=True)
class Diagnosis:
    root_causes: tuple[RootCause, ...]
    unexplained: tuple[Unexplained, ...]
    independent: tuple[Problem, ...]

    @property
    def next_step(self) -> str | None:
        """The one command that helps most: the first root cause's, else the worst problem's."""
        firsts = [r.problem for r in self.root_causes] + sorted(
            [u.problem for u in self.unexplained] + list(self.independent), key=_order)
        return firsts[0].next_step if firsts else None

    def explained_by(self, check_id: str) -> list[tuple[Problem, str]]:
        """The root causes that explain a finding of `check_id`, with the reason."""
        return [(r.problem, s.why) for r in self.root_causes for s in r.symptoms
                if s.problem.check_id == check_id]

    def explained_with_doubt(self, check_id: str) -> list[tuple[Problem, str, str | None]]:
        """`explained_by`, with why each link is in doubt (None: it is not)."""
        return [(r.problem, s.why, s.unsure) for r in self.root_causes for s in r.symptoms
                if s.problem.check_id == check_id]

    def explains(self, check_id: str) -> list[Symptom]:
        """The symptoms a root cause of `check_id` explains."""
        return [s for r in self.root_causes if r.problem.check_id == check_id for s in r.symptoms]

    def to_json(self) -> dict[str, Any]:
        return {"root_causes": [r.to_json() for r in self.root_causes],
                "unexplained": [u.to_json() for u in self.unexplained],
                "independent": [p.to_json() for p in self.independent],
                "next": self.next_step}


def next_command(check_id: str, layer: str, remedies: Iterable[str], root: Any) -> str:
    """A command that works when pasted: the diff of the finding's first plannable remedy
    (`gpu-doctor fix PATH --only ID --diff`), else the catalogue entry (`gpu-doctor explain ID`)."""
    from doctor import registry

    if root is not None and layer in JOB_LAYERS:
        for rid in remedies:
            rem = registry.remedy_for(rid)
            if rem is not None and rem.plan is not None and rem.safety != Safety.MANUAL:
                unsafe = " --unsafe" if rem.safety == Safety.UNSAFE else ""
                return f"gpu-doctor fix {shlex.quote(str(root))} --only {rid}{unsafe} --diff"
    return f"gpu-doctor explain {check_id}"


def planned_next(check_id: str, layer: str, remedies: Iterable[str], case: Any) -> str:
    """`next_command`, after asking each remedy's plan what the printed command would answer:
    `gpu-doctor fix PATH --only ID` plans the job checks of the folder as they are now, so a
    remedy that plans changes gives its diff; one that cannot apply here gives the listing,
    which says why and the manual steps; one with nothing to change is passed over (never a
    `next:` that answers "nothing to change"); else the catalogue entry."""
    from doctor import registry

    root = getattr(case, "root", None)
    if root is None or layer not in JOB_LAYERS:
        return f"gpu-doctor explain {check_id}"
    from doctor.remedy.verify import check_and_plan

    for rid in remedies:
        rem = registry.remedy_for(rid)
        if rem is None or rem.plan is None or rem.safety == Safety.MANUAL:
            continue
        unsafe = " --unsafe" if rem.safety == Safety.UNSAFE else ""
        try:
            _run, plan = check_and_plan(case, only=[rid], unsafe=True, budget_s=30.0)
        except Exception:  # noqa: BLE001 - a plan that cannot be made is not a next step
            continue
        rp = next((p for p in plan.remedies + plan.skipped if p.remedy_id == rid), None)
        if rp is None:
            continue
        if rp.status == "ready":
            return f"gpu-doctor fix {shlex.quote(str(root))} --only {rid}{unsafe} --diff"
        if rp.status == "cannot":
            return f"gpu-doctor fix {shlex.quote(str(root))} --only {rid}{unsafe}"
    return f"gpu-doctor explain {check_id}"


def problems(results: Iterable[CheckResult], root: Any = None) -> list[Problem]:
    """The warn/fail findings of a run, one per key (a check, or a check and log signature)."""
    found: dict[str, Problem] = {}
    for r in results:
        groups: dict[str, list[Any]] = {}
        for f in r.findings:
            if f.status in PROBLEM:
                sig = f.entities.get("signature") if r.check_id == "ART004" else None
                groups.setdefault(f"{r.check_id}:{sig}" if sig else r.check_id, []).append(f)
        for key, fs in groups.items():
            worst = max(fs, key=lambda f: f.status.rank)
            remedies = tuple(dict.fromkeys(rid for f in fs for rid in f.remedies))
            runs = tuple(run for f in fs for run in (f.data.get("runs") or ()))
            found[key] = Problem(key, r.check_id, r.layer, worst.status, worst.message, remedies,
                                 next_command(r.check_id, r.layer, remedies, root), runs)
    return list(found.values())


def _order(p: Problem) -> tuple[int, int, str]:
    layer = LAYER_ORDER.index(p.layer) if p.layer in LAYER_ORDER else len(LAYER_ORDER)
    return (-p.status.rank, layer, p.key)


def _possible(cause: Problem, symptom: Problem) -> bool:
    """Whether a run that wrote the symptom's log lines had what `cause` needs (PRECONDITIONS)."""
    need = PRECONDITIONS.get(cause.check_id)
    return need is None or not symptom.runs or any(had(run, need) for run in symptom.runs)


def _doubt(cause: Problem, symptom: Problem) -> str | None:
    """Why it is not known that a run behind the symptom's log lines had what `cause` needs (None: one did)."""
    need = PRECONDITIONS.get(cause.check_id)
    if need is None or not symptom.runs:
        return None
    doubts = [unsure(run, need) for run in symptom.runs if had(run, need)]
    return None if not doubts or any(d is None for d in doubts) else doubts[0]


def _present(key: str, by_key: dict[str, Problem]) -> list[Problem]:
    """The problems a LINKS entry names: `ART004:x` one signature, `ART004` any of them."""
    if key in by_key:
        return [by_key[key]]
    return [p for p in by_key.values() if ":" not in key and p.check_id == key]


def diagnose_results(results: Iterable[CheckResult], root: Any = None) -> Diagnosis:
    found = problems(results, root)
    by_key = {p.key: p for p in found}
    causes: dict[str, list[tuple[Problem, str, str | None]]] = {}  # symptom key -> (cause, why, doubt)
    for link in LINKS:
        for symptom in _present(link.symptom, by_key):
            for key in link.causes:
                for cause in _present(key, by_key):
                    if cause.key != symptom.key and _possible(cause, symptom):
                        causes.setdefault(symptom.key, []).append((cause, link.why, _doubt(cause, symptom)))
    explains: dict[str, list[tuple[Problem, str, str | None]]] = {}
    for symptom_key, cs in causes.items():
        for cause, why, doubt in cs:
            explains.setdefault(cause.key, []).append((by_key[symptom_key], why, doubt))
    roots = []
    for p in sorted(found, key=_order):
        if p.key in explains and p.key not in causes:
            roots.append(RootCause(p, tuple(_symptoms(p.key, explains))))
    # A cause the logs' own runs are known to allow comes before one they may not.
    roots.sort(key=lambda r: (-r.problem.status.rank, r.unsure, -len(r.symptoms), _order(r.problem)))
    linked = {k for k in by_key if k in causes or k in explains}
    unexplained = []
    for p in sorted(found, key=_order):
        if p.key in linked:
            continue
        first = next((lk for lk in LINKS if _present(lk.symptom, {p.key: p})), None)
        if first is not None:
            unexplained.append(Unexplained(p, first.causes, first.why))
    independent = tuple(p for p in sorted(found, key=_order)
                        if p.key not in linked and not any(u.problem is p for u in unexplained))
    return Diagnosis(tuple(roots), tuple(unexplained), independent)


def _symptoms(key: str, explains: dict[str, list[tuple[Problem, str, str | None]]]) -> list[Symptom]:
    """Everything `key` explains, directly and through the symptoms it explains (each once); a symptom
    reached through a link in doubt is in doubt too."""
    out: dict[str, Symptom] = {}
    todo: list[tuple[Problem, str, str | None, str | None]] = [(p, why, None, d) for p, why, d in explains.get(key, [])]
    while todo:
        problem, why, via, doubt = todo.pop(0)
        if problem.key in out or problem.key == key:
            continue
        out[problem.key] = Symptom(problem, why, via, doubt)
        todo += [(p, w, problem.key, doubt or d) for p, w, d in explains.get(problem.key, [])]
    return sorted(out.values(), key=lambda s: _order(s.problem))


def diagnose(run: Run) -> Diagnosis:
    """The diagnosis of a finished run."""
    return diagnose_results(run.results, run.case.root)

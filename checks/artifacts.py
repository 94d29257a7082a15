"""Artifacts layer: what the run left behind (experiment folders, traces, profiles, logs).

The field guide's worst surprises show only after a run: a trace of the
launcher agent alone (error 8), zero CUDA kernels despite SCOREP_CUDA_ENABLE
(error 9), dropped CUPTI records (error 10), ranks that died at teardown and
left no trace (error 11).
"""

from __future__ import annotations

import os
from typing import Any

from doctor import registry
from doctor.artifacts.discover import cuda_requested
from doctor.artifacts.experiments import Experiment, Experiments
from doctor.artifacts.jobinfo import expected_ranks, job_cuda_enable, launch_ranks, rank_nodes
from doctor.artifacts.logscan import LogScan
from doctor.artifacts.runrecord import RunRecord, launched_experiments
from doctor.artifacts.signatures import SIGNATURE_CHECKS, signature_outcome
from doctor.facts import Facts, ProbeFailure
from doctor.model import Evidence, Layer, Outcome, fail, passed, skip, unknown, warn
from doctor.registry import check
from doctor.wording import count, noun_for

ARTIFACTS = Layer.ARTIFACTS


def _job(facts: Facts) -> Any:
    """The parsed job folder if some provider gives it; the ART checks work without."""
    value = facts.get("job")
    return None if isinstance(value, ProbeFailure) else value


def _none_found(exps: Experiments) -> Outcome:
    where = exps.root or "the job folder"
    return skip(f"no Score-P experiment folders under {where} (nothing to verify yet)")


def describe(exp: Experiment) -> str:
    """'1 process, 1 CPU thread, 2 GPU locations (CUDA[0:7], CUDA[0:20])'."""
    gpus = exp.gpu_locations
    cpus = max((len(s.cpu_threads) for s in exp.readable), default=0)
    names = ", ".join(g.name for g in gpus[:4]) + (", ..." if len(gpus) > 4 else "")
    text = f"{count(exp.processes, 'process')}, {count(cpus, 'CPU thread')}, " \
           f"{count(len(gpus), 'GPU location')}"
    return text + (f" ({names})" if gpus else "")


def score_line(exp: Experiment) -> Evidence | None:
    """The scorep-score summary of the profile: 'USR 98.9%, SCOREP 1.1% of 38.5 s'."""
    prof = exp.profile
    if prof is None or not prof.ok or not prof.by_type or not prof.total_time:
        return None
    parts = [f"{row['type']} {100 * row['time'] / prof.total_time:.1f}%" for row in prof.by_type
             if row["type"] != "ALL"]
    return Evidence(f"{', '.join(parts)} of {prof.total_time:.2f} s", prof.path, None, "scorep-score")


def _unreadable(exps: Experiments) -> Outcome | None:
    if any(e.readable for e in exps.folders):
        return None
    bad = [e for e in exps.folders if e.problems]
    ev = [Evidence(p, e.path) for e in bad for p in e.problems[:2]]
    return unknown(f"none of the {count(len(exps.folders), 'experiment folder')} holds a readable trace or "
                   "profile (see ART003)", ev[:8])


@check("ART001", ARTIFACTS, "The trace holds the ranks, not just the launcher", needs=["experiments"],
       remedies=["per-rank-launch"])
def launcher_only(facts: Facts) -> Outcome | list[Outcome]:
    """What it does:
    Reads the definitions of every trace (`traces.otf2`) and profile (`profile.cubex`)
    in the job folder's Score-P experiment folders and flags a measurement that holds
    exactly one process whose regions are torch's elastic agent (`_invoke_run`,
    `LocalElasticAgent`...) and no GPU locations or CUDA regions.

    Why is this bad?
    `python -m scorep torchrun ...` measures the launcher: Score-P removes its
    LD_PRELOAD after the re-exec, so the workers torchrun spawns run unmeasured. The
    trace opens fine and shows one long `_invoke_run` bar: the agent waiting.

    Example:
    `traces/` holds `0.def 0.evt` for an 8-GPU run; `scorep-score` shows USR 98.9%
    and no CUDA type.

    Remedy:
    Launch each rank yourself, each as its own `python -m scorep` process with its own
    `SCOREP_EXPERIMENT_DIRECTORY=scorep_rank_N` (`gpu-doctor launch` does this).

    Severity:
    fail for a measurement of the launcher agent only; unknown when no folder is readable; skip
    without experiment folders; else pass.

    Fix safety:
    Unsafe: it rewrites how the job starts; review the generated launch first.
    """
    exps: Experiments = facts["experiments"]
    if not exps.folders:
        return _none_found(exps)
    bad = _unreadable(exps)
    if bad is not None:
        return bad
    outcomes: list[Outcome] = []
    for exp in exps.folders:
        if not exp.launcher_only:
            continue
        ev = [Evidence(describe(exp), exp.path, label="measured"),
              Evidence(", ".join(exp.agent_regions[:3]), exp.path, label="elastic-agent regions")]
        score = score_line(exp)
        if score is not None:
            ev.append(score)
        outcomes.append(fail(
            f"{exp.dir.name}: only the launcher was measured (one process, elastic-agent regions, "
            "no GPU locations): the workers ran unmeasured",
            ev, "per-rank-launch", entities={"folder": exp.path}))
    if outcomes:
        return outcomes
    measured = [e for e in exps.folders if e.readable]
    return passed(f"{count(len(measured), 'experiment folder')} measured the workers, not only the launcher",
                  [Evidence(describe(e), e.path) for e in measured[:8]])


@check("ART002", ARTIFACTS, "CUDA activity was recorded where it was asked for",
       needs=["experiments"], remedies=["scorep-add-cuda", "scorep-cuda-enable-fix"])
def cuda_recorded(facts: Facts) -> Outcome | list[Outcome]:
    """What it does:
    For every experiment folder whose `scorep.cfg` (the settings the run really had)
    or whose job environment sets `SCOREP_CUDA_ENABLE` (for a folder a `gpu-doctor launch` wrote, that
    run's own record, launch.json, instead of the job script), looks for CUDA in the trace or
    profile definitions: GPU locations named `CUDA[dev:stream]` and regions of the CUDA
    paradigm. GPU locations of other kinds (`HIP[0:0]`) do not count as CUDA.

    Why is this bad?
    `SCOREP_CUDA_ENABLE` only configures the CUDA adapter; without `--cuda` on
    `python -m scorep` the adapter is never loaded and the measurement holds no kernel,
    no memcpy and no NCCL collective, only Python regions.

    Example:
    `SCOREP_CUDA_ENABLE=kernel,memcpy,sync` in scorep.cfg, `scorep-score` shows USR
    98% and no CUDA type.

    Remedy:
    Add `--cuda` to the launch: `python -m scorep --cuda --thread=pthread train.py`.

    Severity:
    fail when CUDA recording was asked for and no CUDA location or region was recorded; warn for
    CUDA API regions without GPU activity (kernel recording off); skip when CUDA was not asked
    for or no folder exists; else pass.

    Fix safety:
    Safe: it adds a flag to the instrumented command.
    """
    exps: Experiments = facts["experiments"]
    if not exps.folders:
        return _none_found(exps)
    bad = _unreadable(exps)
    if bad is not None:
        return bad
    job_setting = job_cuda_enable(_job(facts))
    # A folder a `gpu-doctor launch` wrote is judged by what that run was started with, not the job script.
    launched = launched_experiments(facts.case.root)
    outcomes = [o for e in exps.folders if e.readable and not e.launcher_only
                for record in [launched.get(os.path.realpath(e.path))]
                for o in [_launched_without_cuda(e, record) or _cuda_outcome(e, None if record else job_setting)]
                if o is not None]
    if not outcomes:
        return skip("CUDA recording was not asked for (no SCOREP_CUDA_ENABLE in scorep.cfg or the job)")
    return outcomes


def _launched_ranks(facts: Facts, exps: Experiments) -> tuple[int, Evidence] | None:
    """The rank count of the `gpu-doctor launch` run that wrote every rank folder here (its record)."""
    launched = launched_experiments(facts.case.root)
    ranks = [e for e in exps.folders if e.dir.kind == "rank"]
    record = next(iter(launched.values()), None)
    if record is None or record.world_size is None or not ranks \
            or not all(os.path.realpath(e.path) in launched for e in ranks):
        return None
    return record.world_size, Evidence(f"gpu-doctor launch ran WORLD_SIZE={record.world_size}", record.path,
                                       label="launch")


def _launched_without_cuda(exp: Experiment, record: RunRecord | None) -> Outcome | None:
    """A skip for a folder of a `gpu-doctor launch` run without --cuda whose scorep.cfg asks for no CUDA."""
    if record is None or record.cuda or exp.cuda_setting is not None or exp.cuda_locations or exp.cuda_regions:
        return None
    return skip(f"{exp.dir.name}: CUDA recording was not asked for: {record.describe()} wrote it "
                f"(its record: {record.path})", Evidence(" ".join(record.scorep_flags) or "no flags", record.path,
                                                         label="launch"))


def _cuda_outcome(exp: Experiment, job_setting: tuple[str, Evidence] | None) -> Outcome | None:
    name = exp.dir.name
    cuda = exp.cuda_locations
    if exp.cuda_regions and not cuda:
        return _api_only(exp)
    if cuda or exp.cuda_regions:
        nccl = exp.nccl_kernels
        extra = f", NCCL kernels ({nccl[0]}...)" if nccl else ""
        return passed(f"{name}: {count(len(cuda), 'CUDA location')}, {count(exp.cuda_regions, 'CUDA region')}{extra}",
                      Evidence(describe(exp), exp.path))
    asked = exp.cuda_setting
    if asked is not None:
        value, cfg, line = asked
        where = Evidence(f"SCOREP_CUDA_ENABLE={value}", cfg, line or None, "scorep.cfg")
    elif job_setting is not None and cuda_requested(job_setting[0]):
        value, where = job_setting[0], job_setting[1]
    else:
        return None
    ev = [where, Evidence(describe(exp), exp.path, label="measured")]
    others = [g.name for g in exp.gpu_locations]
    if others:
        ev.append(Evidence(f"GPU locations are not CUDA: {', '.join(others[:4])}", exp.path))
    paradigms = sorted({p for s in exp.readable for p in s.paradigms})
    ev.append(Evidence(", ".join(paradigms) or "none", exp.path, label="region paradigms"))
    score = score_line(exp)
    if score is not None:
        ev.append(score)
    return fail(f"{name}: SCOREP_CUDA_ENABLE={value} but no CUDA locations or CUDA regions were "
                "recorded: the CUDA adapter was never loaded (no --cuda?)",
                ev, "scorep-add-cuda", entities={"folder": exp.path})


def _api_only(exp: Experiment) -> Outcome:
    """CUDA API regions but no GPU stream: the adapter ran, kernel recording was off."""
    ev = [Evidence(describe(exp), exp.path, label="measured"),
          Evidence(f"{count(exp.cuda_regions, 'CUDA region')}, no CUDA[dev:stream] location", exp.path)]
    asked = exp.cuda_setting
    if asked is not None:
        ev.insert(0, Evidence(f"SCOREP_CUDA_ENABLE={asked[0]}", asked[1], asked[2] or None, "scorep.cfg"))
    chk = registry.CHECKS.get("SCP007")
    remedies = chk.remedies if chk is not None and chk.remedies else ("scorep-cuda-enable-fix",)
    return warn(f"{exp.dir.name}: CUDA API calls were recorded but no GPU activity (no kernels, no "
                "memcpy): SCOREP_CUDA_ENABLE lacks 'kernel'?", ev, remedies, entities={"folder": exp.path})


@check("ART003", ARTIFACTS, "Every rank left a complete measurement", needs=["experiments"],
       remedies=["destroy-process-group"])
def ranks_complete(facts: Facts) -> Outcome | list[Outcome]:
    """What it does:
    Counts the per-rank experiment folders (`scorep_rank_N`) that hold a readable trace
    or profile against the ranks the job runs (WORLD_SIZE, the task count or
    `--nproc_per_node` in the job script; else gaps in the rank numbering; after
    `gpu-doctor launch`, the ranks it ran). After a multi-node launch it counts the ranks
    per node and names the node none of whose ranks left an experiment folder. Flags
    leftover `scorep-measurement-tmp` / `scorep-failed-*` folders, folders with only
    `scorep.cfg`, empty folders, and truncated or corrupt archives.

    Why is this bad?
    A rank that aborts at exit (the NCCL watchdog racing Score-P's teardown:
    `dummyHasPrimaryContext`, `ncclCommWatchdog`) dies before Score-P flushes: its
    folder keeps only `MANIFEST.md` and `scorep.cfg`, or stays `scorep-measurement-tmp`.
    An analysis of the remaining ranks silently misses them.

    Example:
    8 ranks, 2 `scorep_rank_N` folders with traces, 6 with only `scorep.cfg`.

    Remedy:
    Call `torch.distributed.destroy_process_group()` at the end of training so NCCL is
    torn down before the interpreter and Score-P shut down.

    Severity:
    fail for leftover tmp/failed folders, missing or incomplete rank folders, or fewer measured
    processes than ranks (those ranks' data is lost); warn for rank folders beyond the job's
    rank count (another run?); skip without experiment folders; else pass.

    Fix safety:
    Unsafe: it edits the training script (shown as a diff first).
    """
    exps: Experiments = facts["experiments"]
    if not exps.folders:
        return _none_found(exps)
    outcomes: list[Outcome] = []
    for exp in exps.leftovers:
        outcomes.append(fail(f"{exp.dir.name} left behind: a process died before Score-P finished "
                             "its measurement", [Evidence(", ".join(exp.dir.files) or "empty", exp.path)],
                             "destroy-process-group", entities={"folder": exp.path}))
    options = getattr(facts.case, "options", None)
    expected = launch_ranks(options) or _launched_ranks(facts, exps) or expected_ranks(_job(facts))
    outcomes.extend(_missing_ranks(exps, expected, rank_nodes(options)))
    for exp in exps.folders:
        if exp.problems and exp.dir.kind not in ("tmp", "failed", "rank"):
            outcomes.append(fail(f"{exp.dir.name}: {exp.problems[0]}",
                                 [Evidence(p, exp.path) for p in exp.problems],
                                 "destroy-process-group", entities={"folder": exp.path}))
    if outcomes:
        return outcomes
    ranks = exps.rank_folders
    if ranks:
        return passed(f"{'all ' if len(ranks) > 1 else ''}{count(len(ranks), 'rank folder')} "
                      f"{noun_for(len(ranks), 'holds', 'hold')} a readable trace or profile")
    return passed(f"{count(len(exps.folders), 'experiment folder')}, each with a readable trace or profile")


def _missing_ranks(exps: Experiments, expected: tuple[int, Evidence] | None,
                   nodes: dict[int, str] | None = None) -> list[Outcome]:
    ranks = {e.dir.rank: e for e in exps.rank_folders if e.dir.rank is not None}
    if not ranks:
        return _uncovered(exps, expected)
    if expected is not None:
        n, source = expected
    else:
        n, source = max(ranks) + 1, Evidence(f"rank folders numbered up to {max(ranks)}", exps.root)
    outcomes: list[Outcome] = []
    complete = [r for r in range(n) if r in ranks and ranks[r].readable and not ranks[r].problems]
    missing = [r for r in range(n) if r not in ranks]
    broken = [r for r, e in ranks.items() if e.problems]
    if missing or broken:
        ev = [source] + [Evidence(f"scorep_rank_{r}: not found", exps.root) for r in missing[:8]]
        ev += [Evidence(f"{ranks[r].dir.name}: {ranks[r].problems[0]}", ranks[r].path) for r in broken[:8]]
        lost = sorted(missing + broken)
        by_node, empty = _per_node(nodes or {}, n, set(complete), set(missing))
        ev += [Evidence(line, exps.root, label="per node") for line in by_node]
        message = (f"{len(complete)} of {count(n, 'rank')} left a complete measurement; missing or incomplete: "
                   f"{', '.join(f'rank {r}' for r in lost[:10])}")
        if empty:
            message += "; " + "; ".join(f"no experiment folder from any rank on {node} "
                                        f"(ranks {', '.join(map(str, ranks))})" for node, ranks in empty)
        entities: dict[str, Any] = {"ranks": lost}
        if empty:
            entities["nodes"] = [node for node, _ in empty]
        outcomes.append(fail(message, ev, "destroy-process-group", entities=entities))
    extra = sorted(r for r in ranks if r >= n)
    if extra:
        outcomes.append(warn(f"rank folders beyond the job's {n} ranks: "
                             f"{', '.join(f'scorep_rank_{r}' for r in extra[:8])} (left from another run?)",
                             [source], "destroy-process-group"))
    return outcomes


def _per_node(nodes: dict[int, str], n: int, complete: set[int],
              missing: set[int]) -> tuple[list[str], list[tuple[str, list[int]]]]:
    """Per node: 'node2: 0 of 2 ranks measured (ranks 2, 3)'; and the nodes none of whose
    ranks left an experiment folder, with their ranks."""
    ranks_of: dict[str, list[int]] = {}
    for r in range(n):
        if r in nodes:
            ranks_of.setdefault(nodes[r], []).append(r)
    lines = [f"{node}: {len(set(rs) & complete)} of {count(len(rs), 'rank')} measured (ranks {', '.join(map(str, rs))})"
             for node, rs in ranks_of.items()]
    empty = [(node, rs) for node, rs in ranks_of.items() if set(rs) <= missing]
    return lines, empty


def _uncovered(exps: Experiments, expected: tuple[int, Evidence] | None) -> list[Outcome]:
    """Without rank folders: do the measurements hold as many processes as the job has ranks?"""
    if expected is None or any(e.launcher_only for e in exps.folders):
        return []  # a launcher-only trace is ART001's finding
    n, source = expected
    measured = [e for e in exps.folders if e.readable and e.dir.kind not in ("tmp", "failed")]
    covered = sum(e.processes for e in measured)
    if not measured or covered >= n:
        return []
    ev = [source] + [Evidence(describe(e), e.path) for e in measured[:8]]
    return [fail(f"the measurements hold {count(covered, 'process')} for the job's {count(n, 'rank')}",
                 ev, "destroy-process-group")]


@check("ART004", ARTIFACTS, "No known failure signatures in the job's logs", needs=["logscan"],
       remedies=sorted({r for _, rems in SIGNATURE_CHECKS.values() for r in rems}))
def log_signatures(facts: Facts) -> Outcome | list[Outcome]:
    """What it does:
    Scans the job's logs (`*.log`, `slurm-*.out`, `*.out`, `*.err`; `--log` to choose)
    for the messages of the field guide's failures: dropped CUPTI records (with the
    dropped count, the current and the proposed SCOREP_CUDA_BUFFER), Score-P's memory
    clamp, `Unknown option: '--'`, `dummyHasPrimaryContext` / `ncclCommWatchdog`, the
    FP16 ValueError, CUDA error 802, experiment folder collisions, `tpd == 0`, the
    `load_best_model_at_end` ValueError, and what real Score-P 8.4 prints when its measurement
    memory runs out (`No free memory page available`), when `--cuda` meets a Score-P without
    CUDA, when `scorep-config` or a C compiler is missing, and its call-path depth warning.

    Why is this bad?
    Each one names a failure whose cause lives elsewhere (a too small buffer, a
    missing warm-up, the process-group teardown); the message is the proof.

    Example:
    `[CUPTI Activity] Dropped 85222 records. Current buffer size: 1048576 bytes` ...
    `Proposed minimum SCOREP_CUDA_BUFFER=8889000`.

    Remedy:
    The matching check's remedy: SCP004 (SCOREP_CUDA_BUFFER above the proposal),
    SCP003, SCP005, SCP006, SCP009 (SCOREP_TOTAL_MEMORY from Score-P's own value), SCP010,
    SCP001, SCR002, GPU003, TRN001, TRN002.

    Severity:
    fail for each signature that means a failed or lost run (dropped records, `--`, the watchdog
    abort, the FP16 ValueError, error 802, collisions, `tpd == 0`, the load_best_model_at_end
    error); warn for the memory clamp (the run goes on); skip without logs; unknown when no log
    can be read; else pass.

    Fix safety:
    As the matching remedy.
    """
    scan: LogScan = facts["logscan"]
    files = getattr(scan, "files", None)
    errors = getattr(scan, "errors", [])
    if not scan:
        if files == [] and not errors:
            return skip("no log files found in the job folder (pass --log FILE)")
        ev = [Evidence(e) for e in errors[:5]]
        if files and len(errors) >= len(files):
            return unknown("no log file could be read", ev)
        where = count(len(files), "log file") if files is not None else "the log files"
        return passed(f"no known failure signatures in {where}", ev)
    groups: dict[str, list[dict[str, Any]]] = {}
    for match in scan:
        groups.setdefault(match["signature"], []).append(match)
    return [signature_outcome(name, matches) for name, matches in groups.items()]


@check("ART005", ARTIFACTS, "No collective timed out waiting for a rank", needs=["collective_logs"])
def collective_timeouts(facts: Facts) -> Outcome | list[Outcome]:
    """What it does:
    Reads the ranks' logs for the messages torch and NCCL print when a collective never finished:
    the NCCL watchdog's `Watchdog caught collective operation timeout: WorkNCCL(SeqNum=..., OpType=...)`
    and `Timeout at NCCL work: N`, the desync report (`TORCH_NCCL_DESYNC_DEBUG=1`: `ranks [1] are the
    lagging ranks that caused this timeout`, `[1] joined but didn't finish collective #N`, `[1] finished
    collective #N, but didn't join collective #N+1`), gloo's `Rank 1 failed to pass monitoredBarrier`
    (`TORCH_DISTRIBUTED_DEBUG=DETAIL` or `dist.monitored_barrier`), and NCCL RAS lines naming a
    missing or unresponsive process. It names the ranks that did not join: those the report names,
    else the ranks of the job that printed no watchdog timeout while the others did. When the last
    `gpu-doctor launch --flight-recorder` left Flight Recorder dumps in its run folder, they decide:
    the first collective not every rank entered, or whose op, shape or dtype differ between ranks
    (the way torch's `fr_trace` matches them). gloo's `Timed out waiting Nms for recv operation`
    counts as a timeout too.

    Why is this bad?
    A collective that times out means one rank went elsewhere (skipped a collective, hung in its data
    loader, died) and every other rank waited for it until the watchdog killed the job: the
    rank that did not join is the one to look at, not the ranks whose logs show the error.

    Example:
    `[rank0]:[E1201 ...] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1043,
    OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600021 milliseconds before
    timing out.` in rank_0.log, rank_2.log and rank_3.log, nothing in rank_1.log.

    Remedy:
    Look at the rank named: `gpu-doctor launch --stall 300` samples every rank's stack when the job
    stops advancing (long before the watchdog's 10 minutes) and writes hang.json; on a job that runs
    now, `gpu-doctor hang --job JOBID` does the same on every node.

    Severity:
    fail when a collective timed out or a report names lagging ranks; skip without logs; unknown when
    no log can be read; else pass.

    Fix safety:
    No automatic fix: the cause is in the training code or on the rank's node.
    """
    from doctor.hang.logs import flight_lagging, lagging

    found = facts["collective_logs"]
    files = getattr(found, "files", None)
    errors = getattr(found, "errors", [])
    flight = getattr(found, "flight", None)
    out_of_step = flight_lagging(flight)
    if out_of_step and flight is not None:
        ranks_text = ", ".join(map(str, out_of_step))
        return fail(f"the Flight Recorder dumps of the last launch show rank{'s' if len(out_of_step) > 1 else ''} "
                    f"{ranks_text} out of step: {flight['summary']}; gpu-doctor launch --stall / gpu-doctor hang "
                    "show where each rank is", [Evidence(m["text"], m["file"], m["line"]) for m in list(found)[:4]],
                    data={"lagging_ranks": out_of_step, "from": "flight_recorder"})
    if not found:
        if not files and not errors:
            return skip("no log files found in the job folder (pass --log FILE)")
        if files and len(errors) >= len(files):
            return unknown("no log file could be read", [Evidence(e) for e in errors[:5]])
        return passed(f"no collective timeouts or desync reports in {count(len(files or []), 'log file')}")
    expected = expected_ranks(_job(facts))
    ranks, info = lagging(found, expected[0] if expected else None)
    what = f"collective #{info['seq']}" if info.get("seq") is not None else "a collective"
    if info.get("op"):
        what += f" ({info['op']})"
    if ranks:
        how = f"the desync report names {'them' if len(ranks) > 1 else 'it'}" if info["from"] == "report" else \
            f"ranks {', '.join(map(str, info['timed_out']))} timed out waiting, the others printed no timeout"
        message = (f"{what} timed out waiting for rank{'s' if len(ranks) > 1 else ''} "
                   f"{', '.join(map(str, ranks))}, which did not join ({how})")
    else:
        message = (f"{what} timed out" + (f" on ranks {', '.join(map(str, info['timed_out']))}" if info["timed_out"] else "")
                   + ": the logs do not say which rank did not join (TORCH_NCCL_DESYNC_DEBUG=1 names it)")
    ev = [Evidence(m["text"], m["file"], m["line"], f"rank {m['rank']}" if "rank" in m else None)
          for m in list(found)[:8]]
    return fail(message + "; gpu-doctor launch --stall / gpu-doctor hang show where each rank is", ev,
                data={"lagging_ranks": ranks, **info})

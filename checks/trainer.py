"""Trainer layer: HF TrainingArguments that stop a run before it starts, or hide why."""

from __future__ import annotations

from typing import Any

from doctor.facts import Facts, ProbeFailure
from doctor.jobfolder.model import UNKNOWN, ArgValue, Job, TrainerArgs
from doctor.jobfolder.queries import ev, script_problems
from doctor.limits import bound_problem
from doctor.model import Evidence, Layer, Outcome, fail, passed, skip, unknown
from doctor.registry import check
from doctor.wording import noun_for

L = Layer.TRAINER
DEFAULT_EVAL = "no"
DEFAULT_SAVE = "steps"
DEFAULT_STEPS = 500


def refused_configs(job: Job) -> list[Outcome]:
    """`unknown` for each trainer config refused as hostile or over a bound (an alias bomb...)."""
    return [unknown(f"cannot read {job.rel(n.file)}: {n.text}", Evidence(n.text, job.rel(n.file), None,
                                                                          "not analysed"),
                    entities={"file": job.rel(n.file), "bound": "not analysed"})
            for n in job.notes if n.kind == "config" and bound_problem(n.text)]


def _strategy(ta: TrainerArgs, *keys: str) -> ArgValue | None:
    return next((ta.values[k] for k in keys if k in ta.values), None)


def _ev(job: Job, av: ArgValue | None, key: str, default: Any) -> Evidence:
    if av is None:
        return Evidence(f"{key} not set: default {default!r}", label="default")
    return ev(job, av.site, av.source)


def _where(job: Job, ta: TrainerArgs) -> str:
    return f"{job.rel(ta.site.file)}:{ta.site.line}"


@check("TRN001", L, "load_best_model_at_end with eval and save strategies that differ",
       needs=("job",), remedies=("trainer-lbm-off",))
def best_model_strategies(facts: Facts) -> list[Outcome]:
    """What it does:
    Resolves `load_best_model_at_end`, the eval strategy (`--eval_strategy` or the older
    `--evaluation_strategy`, default "no") and `--save_strategy` (default "steps") of every run,
    from CLI flags (`--flag value`, `--flag=value`, a bare `--load_best_model_at_end`), trainer
    config files (JSON/YAML for HfArgumentParser) and `TrainingArguments(...)` keywords.

    Why is this bad?
    TrainingArguments refuses the combination at start-up: "--load_best_model_at_end requires
    the save and eval strategy to match, but found Evaluation strategy: NO / Save strategy:
    STEPS". With both on "steps", save_steps must be a multiple of eval_steps.

    Example:
        --evaluation_strategy no --load_best_model_at_end True

    Remedy:
    For a diagnostic trace there is no best model: `--load_best_model_at_end False` (or
    give eval and save the same strategy).

    Severity:
    fail for load_best_model_at_end with strategies that differ, or save_steps not a multiple of
    eval_steps (TrainingArguments raises at start-up); unknown when a value is only known at run
    time; skip without trainer arguments; else pass.

    Fix safety:
    Safe: changes one trainer argument.
    """
    job: Job = facts["job"]
    out: list[Outcome] = refused_configs(job)
    for ta in job.trainer:
        lbm = ta.values.get("load_best_model_at_end")
        if lbm is None or lbm.value is False:
            continue
        if lbm.value is UNKNOWN:
            out.append(unknown(f"load_best_model_at_end cannot be known before the run ({_where(job, ta)})",
                               ev(job, lbm.site, lbm.source)))
            continue
        ev_av = _strategy(ta, "eval_strategy", "evaluation_strategy")
        sv_av = _strategy(ta, "save_strategy")
        if ta.partial and (ev_av is None or sv_av is None):
            out.append(unknown("load_best_model_at_end=True with strategies passed through **kwargs",
                               ev(job, lbm.site, lbm.source)))
            continue
        eval_s = ev_av.value if ev_av is not None else DEFAULT_EVAL
        save_s = sv_av.value if sv_av is not None else DEFAULT_SAVE
        if UNKNOWN in (eval_s, save_s):
            out.append(unknown("load_best_model_at_end=True, but a strategy is only known when the job runs",
                               ev(job, lbm.site, lbm.source)))
            continue
        evidence = [ev(job, lbm.site, lbm.source), _ev(job, ev_av, "eval_strategy", DEFAULT_EVAL),
                    _ev(job, sv_av, "save_strategy", DEFAULT_SAVE)]
        data = lbm.site.data() | {
            "source": lbm.source, "key": lbm.key, "flag": f"--{lbm.key}", "value": True, "proposed": False,
            "eval_strategy": eval_s, "save_strategy": save_s, "script": ta.script,
            "eval_site": ev_av.site.data() if ev_av else None, "save_site": sv_av.site.data() if sv_av else None,
        }
        if save_s == "best":
            out.append(passed("load_best_model_at_end with save_strategy=best", evidence))
        elif str(eval_s).lower() != str(save_s).lower():
            out.append(fail(f"load_best_model_at_end=True needs matching strategies, but eval is {eval_s!r} and "
                            f"save is {save_s!r}: TrainingArguments raises ValueError at start-up",
                            evidence, "trainer-lbm-off", entities={"file": job.rel(lbm.site.file)}, data=data))
        elif eval_s == "steps":
            out.extend(_steps_multiple(job, ta, evidence, data))
        else:
            out.append(passed(f"load_best_model_at_end with eval and save both {eval_s!r}", evidence))
    if out:
        return out
    if not job.trainer and not job.scripts:
        return [skip("no trainer arguments found")]
    off = [ta.values["load_best_model_at_end"] for ta in job.trainer if "load_best_model_at_end" in ta.values]
    if off:
        return [passed("load_best_model_at_end is off", ev(job, off[0].site, off[0].source))]
    unread = script_problems(job, [s for s in job.scripts if s.role != "snippet"], "TRN001")
    return unread or [passed("no run sets load_best_model_at_end")]


def _steps_multiple(job: Job, ta: TrainerArgs, evidence: list[Evidence], data: dict[str, Any]) -> list[Outcome]:
    def num(key: str) -> Any:
        av = ta.values.get(key)
        return av.value if av is not None else None

    save = num("save_steps") or DEFAULT_STEPS
    evs = num("eval_steps") or num("logging_steps") or DEFAULT_STEPS
    if UNKNOWN in (save, evs) or not all(isinstance(v, (int, float)) for v in (save, evs)):
        return [unknown("eval/save steps only known when the job runs", evidence)]
    if save < 1 or evs < 1 or save % evs == 0:
        return [passed(f"load_best_model_at_end with steps strategies (save {save}, eval {evs})", evidence)]
    return [fail(f"load_best_model_at_end needs save_steps ({save}) to be a multiple of eval_steps ({evs})",
                 evidence, "trainer-lbm-off", data=data | {"save_steps": save, "eval_steps": evs})]


def _fp16_error_here(facts: Facts) -> Evidence | None:
    """The first FP16 ValueError in the log of a `gpu-doctor launch` run on this host (its record says so)."""
    scan = facts.get("logscan")
    if isinstance(scan, ProbeFailure) or not scan:
        return None
    for m in scan:
        run = m.get("run")
        if m.get("signature") == "fp16_valueerror" and isinstance(run, dict) and run.get("node") is True:
            return Evidence(m["text"], m["file"], m["line"], "log")
    return None


@check("TRN002", L, "fp16/bf16 asked for where the framework has no CUDA",
       needs=("job", "framework", "nvml", "logscan"), remedies=("cuda-warmup",), handles_failures=True)
def mixed_precision_needs_cuda(facts: Facts) -> list[Outcome]:
    """What it does:
    When a run asks for fp16 or bf16 (trainer flags, config files, `TrainingArguments`,
    `accelerate launch --mixed_precision`), checks with GPU004's probe that torch in the job's
    interpreter can really use CUDA.

    Why is this bad?
    "ValueError: FP16 Mixed precision training with AMP or APEX ('--fp16') can only be used on
    CUDA devices" looks like a config error; on a GPU node it is the symptom of a CUDA runtime
    that was not ready (error 802) when Score-P's CUDA adapter first touched it.

    Example:
        --fp16 on a node whose torch.zeros(1).cuda() fails with error 802

    Remedy:
    Fix CUDA first (see GPU003 and GPU004: warm-up before Score-P, exclude a broken node);
    the flag is fine.

    Severity:
    fail when fp16/bf16 is asked for and torch in the job's interpreter cannot use CUDA (the
    FP16 ValueError); on a host without a driver, fail when a run gpu-doctor launched here stopped with
    the FP16 ValueError ("no GPU on this host"), else skip (the GPU node must say); unknown when
    GPU004 could not tell; else pass.

    Fix safety:
    Safe: the warm-up is inserted before the launch; nothing in the trainer changes.
    """
    job = facts.get("job")
    if isinstance(job, ProbeFailure):
        return [unknown(str(job), entities={"probe": "job"})]
    refused = refused_configs(job)
    if refused:
        return refused
    asked: list[tuple[str, Evidence, dict[str, Any]]] = []
    for ta in job.trainer:
        for key in ("fp16", "bf16"):
            av = ta.values.get(key)
            if av is not None and av.value is True:
                asked.append((key, ev(job, av.site, av.source), av.site.data()))
    for cmd in job.commands:
        sp = cmd.launch.spawner if cmd.launch is not None else None
        if sp is not None and sp.mixed_precision in ("fp16", "bf16"):
            asked.append((sp.mixed_precision, ev(job, cmd.site, "accelerate"), cmd.site.data()))
    if not asked:
        # TrainingArguments(fp16=True) in a script we could not read would go unseen.
        unread = script_problems(job, [s for s in job.scripts if s.role != "snippet"], "TRN002")
        if unread:
            return unread
        if not job.scripts and not any(cmd.launch for cmd in job.commands):
            return [skip("no training script or launch found: nothing asks for fp16/bf16")]
        return [passed("no fp16/bf16 asked for")]
    key, where, site = asked[0]
    data = site | {"precision": key, "see": ["GPU003", "GPU004"]}
    nv = facts.get("nvml")
    if isinstance(nv, dict) and not nv.get("driver_loaded") and not facts.case.gpus_expected:
        here = _fp16_error_here(facts)
        if here is not None:
            return [fail(f"no GPU on this host: {key} needs CUDA, and the run gpu-doctor launched here stopped "
                         f"with the FP16 ValueError; run it on a GPU node", [where, here], data=data)]
        # A login node or a laptop: the GPU node decides, not this host.
        return [skip(f"{key} is asked for; this host has no NVIDIA driver, so whether torch can use CUDA "
                     "is for the GPU node to say: run gpu-doctor there", where, data=data)]
    fw = facts.get("framework")
    if isinstance(fw, ProbeFailure):
        return [unknown(f"{key} is asked for, but whether torch can use CUDA is unknown ({fw}); see GPU003 and "
                        "GPU004", where, data=data)]
    if not isinstance(fw, dict):
        return [unknown(f"{key} is asked for; GPU004's probe gave nothing", where, data=data)]
    if fw.get("ok"):
        return [passed(f"{key} asked for and torch {fw.get('torch_version')} can use CUDA "
                       f"({fw.get('device_count')} {noun_for(int(fw.get('device_count') or 0), 'device')})", where)]
    if fw.get("import_error"):
        return [unknown(f"{key} is asked for, but torch cannot be imported by {fw.get('python')} "
                        f"({fw['import_error']}): pass the job's interpreter with --python", where, data=data)]
    reason = fw.get("error") or "no CUDA"
    data |= {"framework_error": reason, "torch_cuda": fw.get("torch_cuda")}
    remedies = ("cuda-warmup",) if fw.get("torch_cuda") else ()
    hint = "" if fw.get("torch_cuda") else " (this torch has no CUDA build)"
    return [fail(f"{key} is asked for but torch in the job's interpreter cannot use CUDA ({reason}){hint}: the run "
                 "would stop with the FP16 ValueError, hiding the real CUDA error; see GPU003 and GPU004",
                 [where, Evidence(str(reason), label="GPU004")], remedies, data=data)]

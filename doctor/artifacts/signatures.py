"""ART004's catalogue: what each log signature means, how bad it is, and whose remedy fixes it.

The remedy is the matching check's: taken from the registry when that check is
registered with remedies, else the fallback IDs below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from doctor.model import Evidence, Outcome, fail, warn
from doctor.wording import count, noun_for

EVIDENCE_LINES = 8

# signature -> (matching check, fallback remedy IDs)
SIGNATURE_CHECKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "cupti_dropped": ("SCP004", ("scorep-cuda-buffer",)),
    "memory_clamp": ("SCP003", ("scorep-total-memory",)),
    "unknown_option_dashdash": ("SCP005", ("scorep-drop-dashdash",)),
    "nccl_watchdog_teardown": ("SCR002", ("destroy-process-group",)),
    "fp16_valueerror": ("TRN002", ("cuda-warmup",)),
    "cuda_802": ("GPU003", ("node-cuda-warmup", "node-exclude")),
    "experiment_collision": ("SCP006", ("scorep-per-rank-dirs",)),
    "tpd_zero": ("SCR002", ("destroy-process-group",)),
    "lbm_conflict": ("TRN001", ("trainer-lbm-off",)),
    "scorep_oom": ("SCP009", ("scorep-measurement-memory",)),
    "scorep_cuda_unsupported": ("SCP001", ("manual-scorep-install",)),
    "callpath_depth": ("SCP010", ("scorep-callpath-depth",)),
    "scorep_no_config": ("SCP001", ("manual-scorep-install",)),
    "scorep_no_compiler": ("SCP001", ("manual-scorep-install",)),
}


def remedies_for(signature: str) -> tuple[str, ...]:
    from doctor import registry

    check_id, fallback = SIGNATURE_CHECKS.get(signature, ("", ()))
    chk = registry.CHECKS.get(check_id)
    return chk.remedies if chk is not None and chk.remedies else fallback


def suggest_buffer(proposed: int) -> str:
    """The SCOREP_CUDA_BUFFER to set for CUPTI's proposal (`scorep_values` owns the value)."""
    from doctor.jobfolder.scorep_values import format_size, proposed_cuda_buffer

    return format_size(proposed_cuda_buffer(proposed))


def _max(matches: list[dict[str, Any]], key: str) -> int | None:
    values = [m["values"][key] for m in matches if isinstance(m["values"].get(key), int)]
    return max(values) if values else None


def _ranks(matches: list[dict[str, Any]]) -> str:
    ranks = sorted({m["values"]["rank"] for m in matches if isinstance(m["values"].get("rank"), int)})
    return f" on {noun_for(len(ranks), 'rank')} {', '.join(map(str, ranks[:8]))}" if ranks else ""


def _dropped(matches: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    dropped, current = _max(matches, "dropped"), _max(matches, "current_buffer")
    proposed = _max(matches, "proposed_buffer")
    data: dict[str, Any] = {"dropped": dropped, "current_buffer": current, "proposed_buffer": proposed}
    text = f"CUPTI dropped activity records{_ranks(matches)} (up to {dropped or '?'} per report"
    if current:
        text += f", buffer {current} bytes"
    if proposed:
        data["SCOREP_CUDA_BUFFER"] = suggest_buffer(proposed)
        text += f"; Score-P proposes SCOREP_CUDA_BUFFER>={proposed}, e.g. {data['SCOREP_CUDA_BUFFER']}"
    return text + "): kernels are missing from the trace", data


def _simple(text: str) -> Callable[[list[dict[str, Any]]], tuple[str, dict[str, Any]]]:
    def message(matches: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        values: dict[str, Any] = {}
        for m in matches:
            for k, v in m["values"].items():
                values.setdefault(k, v)
        values.pop("rank", None)
        return text.format(ranks=_ranks(matches), **{k: values.get(k, "?") for k in
                                                     ("eval_strategy", "save_strategy", "wording")}), values
    return message


def _oom(matches: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    from doctor.scorep_memory import propose_total_memory

    total = _max(matches, "total_memory")
    data: dict[str, Any] = {"total_memory": total}
    text = f"Score-P ran out of measurement memory{_ranks(matches)} ('No free memory page available'"
    if total:
        data["SCOREP_TOTAL_MEMORY"] = propose_total_memory(total)
        text += f" with SCOREP_TOTAL_MEMORY={total} bytes; set e.g. {data['SCOREP_TOTAL_MEMORY']}"
    return text + "): the rank aborted and its experiment folder holds no trace", data


def _callpath(matches: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    limit, reached = _max(matches, "max_depth"), _max(matches, "reached_depth")
    data: dict[str, Any] = {"max_depth": limit, "reached_depth": reached}
    text = f"the profile's call paths went deeper than Score-P records{_ranks(matches)} (limit {limit or '?'}"
    if reached:
        data["SCOREP_PROFILING_MAX_CALLPATH_DEPTH"] = reached
        text += f", reached {reached}; Score-P proposes SCOREP_PROFILING_MAX_CALLPATH_DEPTH={reached}"
    return text + "): deeper calls are folded together in the profile", data


MESSAGES: dict[str, Callable[[list[dict[str, Any]]], tuple[str, dict[str, Any]]]] = {
    "cupti_dropped": _dropped,
    "memory_clamp": _simple("Score-P clamped SCOREP_TOTAL_MEMORY{ranks} ('Too {wording} memory requested': "
                            "4 GiB or more asked for, it must stay below 4 GiB)"),
    "unknown_option_dashdash": _simple("scorep-config rejected the '--' separator{ranks}: the instrumented "
                                       "run never started"),
    "nccl_watchdog_teardown": _simple("ranks aborted at teardown{ranks} (NCCL watchdog vs. Score-P shutdown): "
                                      "they died before Score-P flushed"),
    "fp16_valueerror": _simple("the FP16 ValueError{ranks}: PyTorch saw no CUDA device (usually a hidden "
                               "CUDA error 802)"),
    "cuda_802": _simple("CUDA error 802 (system not yet initialized){ranks}: the runtime was not ready"),
    "experiment_collision": _simple("experiment folder collision{ranks} ('File does already exist'): "
                                    "several processes wrote to one folder"),
    "tpd_zero": _simple("Score-P aborted on 'tpd == 0'{ranks}: it was entered from a thread it has no "
                        "location for (typically at teardown)"),
    "lbm_conflict": _simple("load_best_model_at_end needs matching strategies (eval {eval_strategy}, "
                            "save {save_strategy}){ranks}"),
    "scorep_oom": _oom,
    "scorep_cuda_unsupported": _simple("this Score-P has no CUDA support and `python -m scorep --cuda` asked for "
                                       "it{ranks} ('Unsupported feature cuda'): the instrumented run never "
                                       "started"),
    "callpath_depth": _callpath,
    "scorep_no_config": _simple("python -m scorep found no scorep-config on PATH{ranks}: the measurement never "
                                "started (load Score-P in the job script)"),
    "scorep_no_compiler": _simple("python -m scorep found no C compiler on PATH{ranks}: it compiles its init "
                                  "library at every start, so the measurement never started"),
}
WARN_ONLY = {"memory_clamp", "callpath_depth"}


def signature_outcome(signature: str, matches: list[dict[str, Any]]) -> Outcome:
    """One ART004 finding for all matches of one signature."""
    message, data = MESSAGES.get(signature, _simple(f"'{signature}' found{{ranks}}"))(matches)
    ev = [Evidence(m["text"], m["file"], m["line"],
                   f"rank {m['values']['rank']}" if "rank" in m["values"] else None)
          for m in matches[:EVIDENCE_LINES]]
    if len(matches) > EVIDENCE_LINES:
        ev.append(Evidence(f"... and {count(len(matches) - EVIDENCE_LINES, 'more line')}"))
    runs = [m.get("run") for m in matches]
    data = {"signature": signature, "count": len(matches),
            "check": SIGNATURE_CHECKS.get(signature, ("",))[0], **data,
            "runs": [r for i, r in enumerate(runs) if r not in runs[:i]]}
    make = warn if signature in WARN_ONLY else fail
    return make(f"{message} [{count(len(matches), 'line')}]", ev, remedies_for(signature),
                entities={"signature": signature}, data=data)

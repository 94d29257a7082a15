"""torch's Flight Recorder: the flag's variables, and its dumps matched across ranks like `fr_trace`.

`gpu-doctor launch --flight-recorder` sets, per rank (unless the user set them):

    TORCH_FR_BUFFER_SIZE=2000 TORCH_NCCL_TRACE_BUFFER_SIZE=2000      # entries kept per rank
    TORCH_NCCL_DUMP_ON_TIMEOUT=1                                     # NCCL: dump when the watchdog fires
    TORCH_FR_DUMP_TEMP_FILE=RUN_DIR/fr_trace_rank_  (and TORCH_NCCL_DEBUG_INFO_TEMP_FILE, the older name)

NCCL ranks dump by themselves when the watchdog times out; gloo records too (torch 2.6+) but dumps
only when the rank calls `torch._C._distributed_c10d._dump_fr_trace()`. A dump is a pickle of
plain containers: `{"version", "pg_config", "entries": [{"pg_id", "process_group", "collective_seq_id",
"profiling_name", "input_sizes", "input_dtypes", "state", ...}]}`; it is read with an unpickler
that builds nothing but those containers.
"""

from __future__ import annotations

import io
import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from doctor.limits import MAX_FILE_BYTES

BUFFER_ENTRIES = "2000"
DUMP_PREFIX = "fr_trace_rank_"


def flight_recorder_env(base: Mapping[str, str], run_dir: Path) -> dict[str, str]:
    """The variables the flag sets for a rank, without overriding the user's own."""
    wanted = {
        "TORCH_FR_BUFFER_SIZE": BUFFER_ENTRIES,
        "TORCH_NCCL_TRACE_BUFFER_SIZE": BUFFER_ENTRIES,
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": str(run_dir / DUMP_PREFIX),
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(run_dir / DUMP_PREFIX),
    }
    return {k: v for k, v in wanted.items() if k not in base}


class _PlainUnpickler(pickle.Unpickler):
    """Builds dicts, lists, tuples, strings and numbers only: a dump names no class to load."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a Flight Recorder dump holds no objects ({module}.{name})")


def load_dump(path: Path) -> dict[str, Any]:
    """One rank's dump (raises OSError, ValueError)."""
    data = path.read_bytes()[:MAX_FILE_BYTES]
    try:
        doc = _PlainUnpickler(io.BytesIO(data)).load()
    except Exception as exc:
        raise ValueError(f"{path}: not a Flight Recorder dump ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
        raise ValueError(f"{path}: not a Flight Recorder dump (no 'entries')")
    return doc


def find_dumps(run_dir: Path) -> dict[int, Path]:
    """rank -> dump file, from the names torch gives them (`<prefix><rank>`)."""
    found = {}
    for p in sorted(run_dir.glob(f"{DUMP_PREFIX}*")):
        m = re.fullmatch(rf"{DUMP_PREFIX}(\d+)(\.pkl)?", p.name)
        if m and p.is_file():
            found[int(m.group(1))] = p
    return found


def _op(entry: Mapping[str, Any]) -> str:
    """'nccl:all_reduce' -> 'all_reduce'."""
    return str(entry.get("profiling_name", "?")).split(":", 1)[-1]


def _signature(entry: Mapping[str, Any]) -> tuple[str, str, str]:
    return (_op(entry), str(entry.get("input_sizes")), str(entry.get("input_dtypes")))


def _pg_key(entry: Mapping[str, Any]) -> str:
    pg = entry.get("process_group")
    if isinstance(pg, (list, tuple)) and pg:
        return str(pg[1] or pg[0]) if len(pg) > 1 else str(pg[0])
    return str(entry.get("pg_id", "?"))


def analyse(dumps: Mapping[int, Mapping[str, Any]], world: int | None = None) -> dict[str, Any]:
    """Per process group: the first collective not every rank entered, and the first whose op, shape
    or dtype differ between ranks; plus the ranks that left no dump."""
    ranks = sorted(dumps)
    expected = list(range(world)) if world else ranks
    by_pg: dict[str, dict[int, dict[int, Mapping[str, Any]]]] = {}
    for rank, doc in dumps.items():
        for e in doc.get("entries", []):
            if not isinstance(e, Mapping) or e.get("is_p2p") or not e.get("collective_seq_id"):
                continue
            by_pg.setdefault(_pg_key(e), {}).setdefault(rank, {})[int(e["collective_seq_id"])] = e
    groups = []
    for pg, per_rank in sorted(by_pg.items()):
        members = sorted(per_rank)
        last = {r: max(seqs) for r, seqs in per_rank.items()}
        result: dict[str, Any] = {"process_group": pg, "ranks": members,
                                  "last_seq": {str(r): s for r, s in sorted(last.items())}}
        for seq in range(1, max(last.values()) + 1):
            entered = [r for r in members if seq in per_rank[r]]
            if len(entered) < len(members):
                sample = per_rank[entered[0]][seq] if entered else {}
                result["first_unjoined"] = {"seq": seq, "op": _op(sample) if sample else "?",
                                            "joined": entered, "not_joined": [r for r in members if r not in entered]}
                break
        for seq in range(1, max(last.values()) + 1):
            sigs = {r: _signature(per_rank[r][seq]) for r in members if seq in per_rank[r]}
            if len(set(sigs.values())) > 1:
                result["mismatch"] = {"seq": seq, "by_rank": {str(r): {"op": s[0], "sizes": s[1], "dtypes": s[2]}
                                                              for r, s in sorted(sigs.items())}}
                break
        groups.append(result)
    return {"dumps": ranks, "no_dump": [r for r in expected if r not in dumps], "process_groups": groups}


def summary(result: Mapping[str, Any]) -> str:
    """'collective #51 (all_reduce) of default_pg: ranks 0, 2, 3 entered it, rank 1 did not; ...'."""
    parts = []
    for g in result.get("process_groups", []):
        mm = g.get("mismatch")
        if mm:
            ops = "; ".join(f"rank {r}: {v['op']} {v['sizes']} {v['dtypes']}" for r, v in mm["by_rank"].items())
            parts.append(f"collective #{mm['seq']} of {g['process_group'] or 'the default group'} differs between "
                         f"ranks ({ops})")
        un = g.get("first_unjoined")
        if un:
            parts.append(f"collective #{un['seq']} ({un['op']}) of {g['process_group'] or 'the default group'}: "
                         f"rank(s) {', '.join(map(str, un['joined']))} entered it, rank(s) "
                         f"{', '.join(map(str, un['not_joined']))} did not")
    if result.get("no_dump"):
        parts.append(f"no Flight Recorder dump from rank(s) {', '.join(map(str, result['no_dump']))} (the dump "
                     "timed out, or the rank was killed first)")
    return "; ".join(parts) or "the Flight Recorder dumps agree: every rank entered the same collectives"


def read_run(run_dir: Path, world: int | None = None) -> dict[str, Any] | None:
    """The analysis of a run folder's dumps, or None when it has none."""
    paths = find_dumps(run_dir)
    if not paths:
        return None
    dumps, errors = {}, []
    for rank, path in paths.items():
        try:
            dumps[rank] = load_dump(path)
        except (OSError, ValueError) as exc:
            errors.append(str(exc))
    result = analyse(dumps, world)
    result["summary"] = summary(result)
    if errors:
        result["errors"] = errors
    return result

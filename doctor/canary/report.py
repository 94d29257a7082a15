"""canary.json: the ranks' records merged, and what the summary says about them.

Each rank writes `canary/rank_N.json` after every check (so a rank that dies later still
counts); `merge()` turns them into the run's `canary.json`:

    {"k": 10, "action": "fail", "verdict": "mismatch", "checks": 15, "last_check_step": 150,
     "first_mismatch": {"step": 140, "minority": [2], "majority": [0, 1, 3],
                        "tensor": "layer3.weight", "line": "step 140: rank 2's `layer3.weight` ..."},
     "mismatches": [...], "missed": [{"step": 20, "ranks": [3], "line": ...}],
     "silent_ranks": [], "problems": [],
     "cost": {"digest_ms_mean": 0.4, "digest_ms_max": 1.2, "exchange_ms_mean": 0.9,
              "step_ms_mean": 12.5, "overhead_pct": 0.3}}

`overhead_pct` is the training thread's digest time per check over the K steps between
checks; the exchange runs on the canary's own thread and is reported beside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from doctor.wording import count

NEXT_STEP = ("the cause to test next: corrupt GPU peer copies on this node: "
             "gpu-doctor --check-only --playbook p2p --level 2 (P2P002); gpu-doctor explain ART006")


def read_ranks(run_dir: Path) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for path in sorted((run_dir / "canary").glob("rank_*.json")):
        try:
            doc = json.loads(path.read_text())
            out[int(doc.get("rank", path.stem.split("_")[1]))] = doc
        except (OSError, ValueError, TypeError, IndexError):
            continue
    return out


def _merged(records: dict[int, dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for rec in records.values():
        for ev in rec.get(kind, []):
            seen.setdefault(ev["line"], ev)
    return sorted(seen.values(), key=lambda ev: (ev["step"], ev["line"]))


def _cost(records: dict[int, dict[str, Any]], k: int) -> dict[str, Any]:
    checks = sum(r.get("checks", 0) for r in records.values())
    costs = [r.get("cost", {}) for r in records.values()]
    steps = sum(c.get("step_samples", 0) for c in costs)
    digest = sum(c.get("digest_ms_total", 0.0) for c in costs) / checks if checks else None
    hook = sum(c.get("hook_ms_total", 0.0) for c in costs) / checks if checks else None
    step = sum(c.get("step_ms_total", 0.0) for c in costs) / steps if steps else None
    return {
        "digest_ms_mean": digest, "digest_ms_max": max((c.get("digest_ms_max", 0.0) for c in costs), default=None),
        "hook_ms_mean": hook,
        "exchange_ms_mean": sum(c.get("exchange_ms_total", 0.0) for c in costs) / checks if checks else None,
        "exchange_ms_max": max((c.get("exchange_ms_max", 0.0) for c in costs), default=None),
        "step_ms_mean": step,
        "overhead_pct": 100.0 * hook / (k * step) if hook is not None and step else None,
    }


def merge(run_dir: Path, k: int, action: str, world_size: int, timeout_s: float) -> dict[str, Any]:
    records = read_ranks(run_dir)
    mismatches = _merged(records, "mismatches")
    missed = _merged(records, "missed")
    problems = sorted({p for r in records.values() for p in r.get("problems", [])})
    silent = [r for r in range(world_size) if r not in records]
    checks = max((r.get("checks", 0) for r in records.values()), default=0)
    verdict = ("mismatch" if mismatches else "missed" if missed or (silent and checks) else
               "clean" if checks else "no checks")
    return {
        "k": k, "action": action, "timeout_s": timeout_s, "world_size": world_size, "verdict": verdict,
        "checks": checks,
        "last_check_step": max((r.get("last_check_step") or 0 for r in records.values()), default=0) or None,
        "how": sorted({r.get("how", "") for r in records.values()} - {""}),
        "tensors": max((r.get("tensors", 0) for r in records.values()), default=0),
        "device": sorted({r.get("device", "") for r in records.values()} - {""}),
        "first_mismatch": mismatches[0] if mismatches else None,
        "mismatches": mismatches, "missed": missed, "silent_ranks": silent, "problems": problems,
        "cost": _cost(records, k),
        "ranks": {str(r): {"checks": rec.get("checks", 0), "agreed": rec.get("agreed", 0),
                           "steps": rec.get("steps", 0), "host": rec.get("host", ""),
                           "device": rec.get("device", "")} for r, rec in sorted(records.items())},
    }


def write(run_dir: Path, doc: dict[str, Any]) -> Path:
    path = run_dir / "canary.json"
    path.write_text(json.dumps(doc, indent=2))
    return path


def cost_text(doc: dict[str, Any]) -> str:
    c = doc["cost"]
    if c.get("digest_ms_mean") is None:
        return "no cost measured"
    text = f"digest {c['digest_ms_mean']:.2f} ms per check (max {c['digest_ms_max']:.2f})"
    if c.get("overhead_pct") is not None:
        text += f", {c['overhead_pct']:.2f} % of the step time ({c['step_ms_mean']:.2f} ms a step)"
    if c.get("exchange_ms_mean") is not None:
        text += f"; comparison {c['exchange_ms_mean']:.2f} ms on the canary's thread"
    return text


def summary_lines(doc: dict[str, Any]) -> list[str]:
    """What the launch summary says: the alarm lines first, then the cost."""
    lines: list[str] = []
    shown = doc["mismatches"][:3]
    lines += [f"canary: {ev['line']}" for ev in shown]
    if len(doc["mismatches"]) > len(shown):
        lines.append(f"canary: ... and at {count(len(doc['mismatches']) - len(shown), 'later check')} "
                     "(canary.json has them)")
    lines += [f"canary: {ev['line']}" for ev in doc["missed"][:5]]
    if doc["silent_ranks"] and doc["checks"]:
        lines.append(f"canary: rank{'s' if len(doc['silent_ranks']) > 1 else ''} "
                     f"{', '.join(map(str, doc['silent_ranks']))} never reported a check")
    lines += [f"canary: problem: {p}" for p in doc["problems"][:3]]
    if doc["verdict"] == "clean":
        lines.append(f"canary: every {doc['k']} steps, {count(doc['checks'], 'check')} up to step "
                     f"{doc['last_check_step']}: the replicas were identical at every check; {cost_text(doc)}")
    elif doc["verdict"] == "no checks":
        lines.append(f"canary: no check ran (no DistributedDataParallel model stepped {doc['k']} optimizer "
                     "steps; the canary watches DDP parameters only)")
    else:
        lines.append(f"canary: {count(doc['checks'], 'check')} every {doc['k']} steps; {cost_text(doc)}")
    if doc["mismatches"]:
        lines.append(f"canary: {NEXT_STEP}")
    return lines

"""A generated verdict history for `gpu-doctor fleet`: real gate documents from the fake node,
stamped with other hosts, times and job ids, and written as the Prolog writes them.

Planted: three lemon nodes (a failing run on 12 different days, never the latest), one node that
fails only today (its last two runs), one node whose GPU003 alternates pass/warn (flapping,
never failing), and five nodes with one failure each on some past day (noise: neither lemon
nor failing now). Everything else is healthy.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fakes.node import scenario_env

LEMONS = ("n003", "n017", "n042")
TODAY = "n051"
FLAPPER = "n030"
NOISE = ("n005", "n011", "n023", "n038", "n060")


@dataclass(frozen=True)
class Templates:
    healthy: dict[str, Any]
    broken: dict[str, Any]   # never-ready runtime: GPU003 fail, exit 1
    flaky: dict[str, Any]    # ready after a few attempts: GPU003 warn, exit 0


def gate_document(scenario: str, tmp_path: Path) -> dict[str, Any]:
    """A real `--check-only` (prologue) document from the fake node in `scenario`."""
    out = tmp_path / f"{scenario}.json"
    env = scenario_env(scenario, tmp_path / scenario)
    env["SLURM_JOB_ID"] = "1"
    subprocess.run([sys.executable, "-m", "doctor", "--check-only", "--timeout", "3", "--quiet",
                    "--json-file", str(out)], env=env, capture_output=True, timeout=60)
    doc = json.loads(out.read_text())
    return doc


def templates(tmp_path: Path) -> Templates:
    t = Templates(gate_document("healthy", tmp_path), gate_document("permanent_802", tmp_path),
                  gate_document("transient_802", tmp_path))
    assert (t.healthy["exit_code"], t.broken["exit_code"], t.flaky["exit_code"]) == (0, 1, 0)
    assert [c["status"] for c in t.flaky["checks"] if c["id"] == "GPU003"] == ["warn"]  # ready after retries
    return t


HOST, START, JOB = "@@HOST@@", "@@START@@", "@@JOB@@"


def pattern(doc: dict[str, Any]) -> str:
    """`doc` as compact JSON with markers where each run's host, start and job id go."""
    old = doc["run"]["host"]
    out = json.loads(json.dumps(doc))
    out["run"].update(host=HOST, start=START, slurm_job_id=JOB)
    text = json.dumps(out, separators=(",", ":"))
    return text.replace(f" on {old}", f" on {HOST}").replace(f"--exclude={old})", f"--exclude={HOST})")


def stamp(text: str, host: str, start: datetime, job: int) -> str:
    return text.replace(HOST, host).replace(START, start.isoformat()).replace(JOB, str(job))


def history(folder: Path, t: Templates, nodes: int = 64, days: int = 30, per_day: int = 4,
            now: datetime | None = None, seed: int = 7) -> int:
    """Write `nodes` x `days` x `per_day` verdicts into `folder`; the number written."""
    rng = random.Random(seed)
    now = now or datetime.now(UTC)
    folder.mkdir(parents=True, exist_ok=True)
    lemon_days = {n: set(rng.sample(range(days - 1), 12)) for n in LEMONS}
    noise_day = {n: rng.randrange(days - 1) for n in NOISE}
    healthy, broken, flaky = pattern(t.healthy), pattern(t.broken), pattern(t.flaky)
    job = 100000
    written = 0
    for i in range(1, nodes + 1):
        host = f"n{i:03d}"
        for d in range(days):
            for k in range(per_day):
                start = now - timedelta(days=days - 1 - d, hours=6 * (per_day - 1 - k), minutes=10 + i % 7)
                last_two = d == days - 1 and k >= per_day - 2
                if host == TODAY and last_two:  # both on today's date, whatever the hour the tests run
                    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
                    start = max(start, today + timedelta(seconds=k))
                if host in LEMONS:
                    doc = broken if d in lemon_days[host] and k == 1 else healthy
                elif host == TODAY:
                    doc = broken if last_two else healthy
                elif host == FLAPPER:
                    doc = flaky if (d * per_day + k) % 2 else healthy
                elif host in NOISE:
                    doc = broken if d == noise_day[host] and k == 2 else healthy
                else:
                    doc = healthy
                job += 1
                text = stamp(doc, host, start, job)
                (folder / f"job-{job}.{host}.json").write_text(text)
                if doc is broken:  # the Prolog also keeps the node's last failure
                    (folder / f"node-{host}.json").write_text(text)
                written += 1
    return written

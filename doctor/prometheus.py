"""The gate's verdict for Prometheus: node_exporter's textfile collector format.

`gpu-doctor --check-only --prometheus /var/lib/node_exporter/textfile/gpu_doctor.prom` writes,
after every run (exposition format 0.0.4, HELP and TYPE lines):

    gpu_doctor_check_status{check="GPU003",layer="node",status="fail"} 1   (state set: 1 for the
    current status, 0 for each other status)
    gpu_doctor_exit_code 1
    gpu_doctor_last_run_timestamp_seconds 1.7648e+09
    gpu_doctor_check_duration_seconds{check="GPU003"} 2.1

The file is replaced in one rename (a temp file in the same folder, which the collector skips:
it reads only `*.prom`), so a scrape never sees half a verdict and a run that fails before
it is done leaves the previous file as it was.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from doctor.atomic import write_atomic

STATUSES = ("pass", "warn", "fail", "skip", "unknown", "timeout")
MODE = 0o644  # node_exporter runs as its own user


def _label(value: str) -> str:
    """A label value as the text format escapes it: backslash, double quote, line feed."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _family(name: str, help_text: str, kind: str, samples: list[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]


def exposition(doc: dict[str, Any]) -> str:
    """The gate's JSON document (doctor.verdict.run_json) as Prometheus text."""
    status_rows, duration_rows = [], []
    for c in doc.get("checks", []):
        check, layer = _label(str(c["id"])), _label(str(c["layer"]))
        for s in STATUSES:
            status_rows.append(f'gpu_doctor_check_status{{check="{check}",layer="{layer}",status="{s}"}} '
                               f"{1 if c['status'] == s else 0}")
        ms = c.get("duration_ms")
        if isinstance(ms, (int, float)):
            duration_rows.append(f'gpu_doctor_check_duration_seconds{{check="{check}"}} {ms / 1000:.6g}')
    started = datetime.fromisoformat(doc["run"]["start"]).timestamp()
    finished = started + float(doc["run"].get("duration_s") or 0.0)
    lines = [
        *_family("gpu_doctor_check_status", "Status of each gpu-doctor check in the last run: 1 for its "
                 "current status, 0 for the others.", "gauge", status_rows),
        *_family("gpu_doctor_exit_code", "Exit code of the last gpu-doctor --check-only run "
                 "(0 ok, 1 the node or job should not run).", "gauge", [f"gpu_doctor_exit_code {doc['exit_code']}"]),
        *_family("gpu_doctor_last_run_timestamp_seconds", "When the last gpu-doctor run finished, "
                 "seconds since the epoch.", "gauge", [f"gpu_doctor_last_run_timestamp_seconds {finished:.3f}"]),
        *_family("gpu_doctor_check_duration_seconds", "How long each check of the last run took.", "gauge",
                 duration_rows),
    ]
    return "\n".join(lines) + "\n"


def write_prometheus(path: Path, doc: dict[str, Any]) -> None:
    """Replace `path` with the verdict's exposition, atomically (the previous file stays until then)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, exposition(doc).encode("utf-8"), mode=MODE)

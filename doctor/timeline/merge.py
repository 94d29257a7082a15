"""`gpu-doctor timeline --merge a.json b.json ...`: one report from the JSON documents of parts.

A run too large for one machine is read in parts, e.g. one Slurm array task per rank range:

    gpu-doctor timeline RUN --rank-range $((8*SLURM_ARRAY_TASK_ID)):$((8*SLURM_ARRAY_TASK_ID+8)) \\
        --json > part_$SLURM_ARRAY_TASK_ID.json
    gpu-doctor timeline --merge part_*.json

The documents are turned back into the model (times are ticks again: seconds x resolution,
exact for traces shorter than ~50 days at 1 GHz), the runs with the same folder are put back
together experiment by experiment in folder order, and the scaling table is computed again:
the result equals reading the whole run at once.
"""

from __future__ import annotations

import json
import stat
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from doctor.timeline.discover import natural_key
from doctor.timeline.experiment import ExperimentRead, build_run, is_run_summary_note
from doctor.timeline.model import (
    SCHEMA,
    Breakdown,
    HtaCut,
    ProfileSums,
    RankTimeline,
    RegionTime,
    Step,
    StepSummary,
    TimelineReport,
    step_rows,
)
from doctor.timeline.scaling import scaling_table


class MergeError(Exception):
    """A document cannot be merged: the message names the file and the problem, one line."""


def load(path: Path) -> dict[str, Any]:
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise MergeError(f"{path}: not a regular file (a FIFO or a device?)")
        with path.open("rb") as f:
            doc = json.loads(f.read(256 << 20))
    except OSError as exc:
        raise MergeError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise MergeError(f"{path}: not a JSON document ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise MergeError(f"{path}: not a `gpu-doctor timeline --json` document (schema {SCHEMA})")
    return doc


def merge_files(paths: Sequence[Path]) -> TimelineReport:
    docs = [load(p) for p in paths]
    try:
        return merge([(p, d) for p, d in zip(paths, docs, strict=True)])
    except (KeyError, TypeError, ValueError) as exc:
        raise MergeError(f"a document does not have the timeline's fields ({type(exc).__name__}: {exc})") from None


def merge(docs: Sequence[tuple[Path, Mapping[str, Any]]]) -> TimelineReport:
    first_path, first = docs[0]
    for path, doc in docs[1:]:
        for key in ("step_regex", "window"):
            if doc.get(key) != first.get(key):
                raise MergeError(f"{path}: made with {key} {doc.get(key)!r}, {first_path} with "
                                 f"{first.get(key)!r}; merge only parts of one analysis")
    runs: dict[str, tuple[str, dict[Path, ExperimentRead]]] = {}
    for _, doc in docs:
        for run in doc["runs"]:
            _, reads = runs.setdefault(run["path"], (run["label"], {}))
            for read in experiment_reads(run):
                reads[read.path] = combine(reads[read.path], read) if read.path in reads else read
    merged = [build_run(label, Path(path), sorted(reads.values(), key=lambda r: natural_key(r.path)))
              for path, (label, reads) in runs.items()]
    scaling, scaling_notes = scaling_table(merged)
    old_scaling = {n for _, doc in docs for n in _scaling_notes(doc)}
    notes = _unique(n for _, doc in docs for n in doc.get("notes", []) if n not in old_scaling)
    return TimelineReport(str(first["step_regex"]), str(first["window"]), tuple(merged), tuple(scaling),
                          tuple(notes + scaling_notes))


def experiment_reads(run: Mapping[str, Any]) -> list[ExperimentRead]:
    """The run's experiment folders as they were read, with their ranks and profiles."""
    ranks: dict[str, list[RankTimeline]] = {}
    for doc in run.get("rank_timelines", []):
        ranks.setdefault(doc["experiment"], []).append(rank_timeline(doc))
    profiles = {doc["experiment"]: profile_sums(doc) for doc in run.get("profiles", [])}
    reads = []
    for experiment in run.get("experiments", []):
        path = experiment["path"]
        notes = tuple(n for n in experiment.get("notes", []) if not is_run_summary_note(n))
        these = tuple(ranks.get(path, []))
        reads.append(ExperimentRead(Path(path), these, profiles.get(path), notes, sum(r.events for r in these)))
    return reads


def combine(a: ExperimentRead, b: ExperimentRead) -> ExperimentRead:
    """One folder read by two parts (a trace holding several processes, split by rank)."""
    seen = {(r.rank, r.label) for r in a.ranks}
    ranks = sorted([*a.ranks, *(r for r in b.ranks if (r.rank, r.label) not in seen)],
                   key=lambda r: (r.rank is None, r.rank or 0, r.label))
    return ExperimentRead(a.path, tuple(ranks), a.profile or b.profile, tuple(_unique([*a.notes, *b.notes])),
                          sum(r.events for r in ranks))


def breakdown(doc: Mapping[str, Any], resolution: int) -> Breakdown:
    def ticks(seconds: Any) -> int:
        return round(float(seconds) * resolution)

    summed, kernels = doc["summed"], doc["kernels"]
    return Breakdown(resolution, ticks(doc["wall_s"]), ticks(doc["busy_s"]), ticks(doc["compute_s"]),
                     ticks(doc["comm_s"]), ticks(doc["hidden_comm_s"]), ticks(doc["other_s"]),
                     ticks(summed["compute_s"]), ticks(summed["comm_s"]), ticks(summed["other_s"]),
                     int(kernels["compute"]), int(kernels["comm"]))


def rank_timeline(doc: Mapping[str, Any]) -> RankTimeline:
    resolution = int(doc["resolution"])
    steps = doc.get("steps")
    summary = None
    if steps:
        kept = tuple(Step(int(s["index"]), round(float(s["start_s"]) * resolution), breakdown(s, resolution))
                     for s in steps["list"])
        starts = array("q", (-1 if t is None else round(float(t) * resolution)
                             for t in steps.get("collective_starts_s", [])))
        summary = StepSummary(str(steps["region"]), int(steps["count"]), breakdown(steps["total"], resolution),
                              float(steps["median_wall_s"]), float(steps["min_wall_s"]),
                              float(steps["max_wall_s"]), step_rows(kept), starts)
    hta = doc.get("hta")
    cut = None
    if hta:
        ticks = [int(t) for t in hta["ticks"]]
        cut = HtaCut(resolution, ticks[0], ticks[1], ticks[2], ticks[3], ticks[4], ticks[5], ticks[6], ticks[7],
                     ticks[8], hta["window"].startswith("up to"), bool(hta["idle_breakdown"]["host_wait_known"]))
    regions = tuple(RegionTime(str(r["name"]), float(r["exclusive_s"]), int(r["visits"]), str(r["category"]))
                    for r in (doc.get("regions") or {}).get("top", []))
    return RankTimeline(label=str(doc["label"]), rank=doc["rank"], experiment=Path(doc["experiment"]),
                        devices=tuple(doc["devices"]), gpu_locations=tuple(doc["gpu_locations"]),
                        resolution=resolution, events=int(doc["events"]),
                        whole_run=breakdown(doc["whole_run"], resolution), steps=summary,
                        notes=tuple(doc.get("notes", [])), reader=str(doc.get("reader", "python")),
                        hta=cut, regions=regions, format=str(doc.get("format", "otf2")),
                        hints=tuple(doc.get("hints", [])))


def profile_sums(doc: Mapping[str, Any]) -> ProfileSums:
    names = {f.name: f.name for f in fields(ProfileSums) if f.name != "regions"}
    names.update(wall="wall_s", compute_sum="compute_sum_s", comm_sum="comm_sum_s", other_sum="other_sum_s",
                 step_time="step_time_s")
    values = {field: doc[key] for field, key in names.items()}
    values["experiment"] = Path(values["experiment"])
    values["notes"] = tuple(values["notes"])
    values["regions"] = tuple(RegionTime(str(r["name"]), float(r["exclusive_s"]), int(r["visits"]), str(r["category"]))
                              for r in (doc.get("regions") or {}).get("top", []))
    return ProfileSums(**values)


def _scaling_notes(doc: Mapping[str, Any]) -> list[str]:
    """Notes of a part's own scaling table (the merged one has its own)."""
    return [n for n in doc.get("notes", []) if n.startswith("scaling uses") or "left out of the scaling" in n]


def _unique(items: Any) -> list[str]:
    return list(dict.fromkeys(items))

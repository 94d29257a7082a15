"""The same categories from a Cube profile (`profile.cubex`): SUMS, no overlap information.

A profile keeps, per call path and location, the total time; it cannot say whether an NCCL
kernel ran while a compute kernel did. So compute and communication are plain sums of kernel
time on the GPU locations (what `scorep-score -r profile.cubex` shows for the CUDA type), and
their sum can exceed the wall time. Use a trace for the timeline truth.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from doctor.timeline.classify import Kind, cpu_category, gpu_device, region_kind, role_name
from doctor.timeline.model import ProfileSums, RegionTime
from doctor.timeline.trace import _RANK_IN_FOLDER, _reason


class ProfileError(Exception):
    """The profile cannot be read: the message names the problem, one line."""


def read_profile(experiment: Path, step_regex: re.Pattern[str]) -> ProfileSums:
    from pycubexr import CubexParser

    cubex = experiment / "profile.cubex"
    try:
        with CubexParser(str(cubex)) as cube:
            return _sums(cube, experiment, step_regex)
    except ProfileError:
        raise
    except Exception as exc:
        raise ProfileError(f"{cubex}: cannot read the profile ({_reason(exc)})") from None


def _sums(cube: Any, experiment: Path, step_regex: re.Pattern[str]) -> ProfileSums:
    try:
        time = cube.get_metric_values(cube.get_metric_by_name("time"))
    except Exception:
        raise ProfileError(f"{experiment / 'profile.cubex'}: the profile has no `time` metric") from None
    try:
        visits = cube.get_metric_values(cube.get_metric_by_name("visits"))
    except Exception:
        visits = None
    locations = list(cube.get_locations())
    gpu = [i for i, loc in enumerate(locations)
           if str(loc.type).lower() in ("gpu", "accelerator") or gpu_device(loc.name) is not None]
    cpu = [i for i in range(len(locations)) if i not in gpu]
    sums = {Kind.COMPUTE: 0.0, Kind.COMM: 0.0, Kind.OTHER: 0.0}
    counts = {Kind.COMPUTE: 0, Kind.COMM: 0, Kind.OTHER: 0}
    step_time, step_count = 0.0, 0
    cpu_time: dict[str, list[float]] = {}     # region -> [exclusive s on the CPU locations, visits]
    stack = [(root, False) for root in cube.get_root_cnodes()]
    while stack:
        cnode, inside_step = stack.pop()
        region = cnode.region
        if cpu:
            exclusive_cpu = time.cnode_values(cnode, convert_to_exclusive=True)
            entry = cpu_time.setdefault(region.name, [0.0, 0])
            entry[0] += float(sum(exclusive_cpu[i] for i in cpu))
            if visits is not None:
                entry[1] += int(sum(visits.cnode_values(cnode, convert_to_exclusive=True)[i] for i in cpu))
        kind = region_kind(region.name, role_name(region.role))
        if gpu and kind:
            exclusive = time.cnode_values(cnode, convert_to_exclusive=True)
            spent = float(sum(exclusive[i] for i in gpu))
            if spent > 0:
                sums[kind] += spent
                if visits is not None:
                    counts[kind] += int(sum(visits.cnode_values(cnode, convert_to_exclusive=True)[i] for i in gpu))
        is_step = not inside_step and bool(step_regex.search(region.name))
        if is_step:
            inclusive = time.cnode_values(cnode, convert_to_inclusive=True)
            step_time += float(sum(inclusive[i] for i in cpu))
            if visits is not None:
                step_count += int(sum(visits.cnode_values(cnode, convert_to_exclusive=True)[i] for i in cpu))
        stack.extend((child, inside_step or is_step) for child in cnode.get_children())
    wall = max((sum(float(time.cnode_values(root, convert_to_inclusive=True)[i])
                    for root in cube.get_root_cnodes()) for i in cpu), default=0.0)
    notes = []
    if not gpu:
        notes.append("no GPU locations in this profile: CUDA was not recorded (see SCP002/ART002)")
    if not step_count:
        notes.append(f"no step region matches /{step_regex.pattern}/")
    folder = _RANK_IN_FOLDER.search(experiment.name)
    return ProfileSums(
        experiment=experiment, label=experiment.name, rank=int(folder[1]) if folder else None,
        wall=wall, compute_sum=sums[Kind.COMPUTE], comm_sum=sums[Kind.COMM], other_sum=sums[Kind.OTHER],
        compute_visits=counts[Kind.COMPUTE], comm_visits=counts[Kind.COMM],
        step_count=step_count, step_time=step_time, notes=tuple(notes),
        regions=tuple(RegionTime(name, t, int(v), cpu_category(name)) for name, (t, v) in
                      sorted(cpu_time.items(), key=lambda kv: (-kv[1][0], kv[0])) if t > 0 or v))

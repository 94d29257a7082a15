"""Where the time really goes: an overlap-aware compute/communication breakdown from Score-P traces.

Profile sums overstate communication (field guide, lesson 8): NCCL kernels busy-wait, and DDP
overlaps the gradient AllReduce on its own stream with backward compute, so summed kernel time
double-counts the overlap. This package streams the OTF2 events of each rank and does interval
arithmetic on the timeline instead. API for the TUI and the report:

    from doctor.timeline import analyse
    report = analyse([Path("job")])        # TimelineReport (frozen dataclasses)
    report.to_json()                       # the documented JSON document (see model.py)

Heavy libraries (`otf2`, `pycubexr`, `rich`) are imported inside functions.
"""

from doctor.timeline.analyse import analyse
from doctor.timeline.model import Breakdown, RankTimeline, RunTimeline, TimelineReport

__all__ = ["Breakdown", "RankTimeline", "RunTimeline", "TimelineReport", "analyse"]

"""The launcher: every rank its own process (its own `python -m scorep`), watched live.

Engine API (no Textual, no torch; threads inside, usable from threads or asyncio):

    from doctor.launch import LaunchSpec, Launcher
    launcher = Launcher(LaunchSpec("train.py", nproc=4, instrument="scorep"), on_event=print)
    summary = launcher.run()            # or start(); wait(); stop(); subscribe_async(rank)

`gpu-doctor launch` (doctor.launch.cli) is the headless front end.
"""

from doctor.launch.engine import Launcher
from doctor.launch.events import RankState, RankStatus, RunSummary
from doctor.launch.spec import LaunchSpec

__all__ = ["Launcher", "LaunchSpec", "RankState", "RankStatus", "RunSummary"]

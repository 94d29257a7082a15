"""Test-only stand-in for `python -m scorep`.

Like the real wrapper it takes the flags before the script and refuses `--`
(the real one forwards it to scorep-config: "Unknown option: '--'"). It
records what it was given to $FAKE_SCOREP_RECORD_DIR/wrapper_<pid>.json,
creates the experiment folder (failing like Score-P if it already exists:
two ranks sharing a folder collide), runs the script in this process, and
leaves a placeholder profile.cubex when the script ends (os._exit included);
with FAKE_SCOREP_PROFILE=cube a real, readable Cube profile (tests/tracegen.py) instead.

Used only where real Score-P (tests/test_scorep_real.py) cannot do the job: the launcher's
process-control tests (signals, hangs, floods, grandchildren: a rank must do exactly what the
test says, at once, and real Score-P adds its startup and a measurement per rank), the Slurm
tests (ranks inside a throwaway cluster's namespaces; real Score-P there would add minutes to CI
and test nothing new about Slurm), and the tests that read back the argv and environment each
rank was given (FAKE_SCOREP_RECORD_DIR; real Score-P records neither). Unlike real Score-P,
which writes its measurement at exit and loses it on os._exit (measured: the experiment folder
keeps only MANIFEST.md, scorep.cfg and an empty traces/), the stand-in "flushes" on os._exit.
"""

import json
import os
import runpy
import sys
from pathlib import Path

RECORDED = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "PYTHONUNBUFFERED", "LD_PRELOAD")


def main() -> None:
    args = sys.argv[1:]
    flags = []
    while args and args[0].startswith("-"):
        flags.append(args.pop(0))
    if "--" in flags:
        print("[Score-P] scorep-config: Unknown option: '--'", file=sys.stderr)
        sys.exit(1)
    if not args:
        print("fake scorep: no script", file=sys.stderr)
        sys.exit(2)
    script, script_args = args[0], args[1:]
    exp = Path(os.environ.get("SCOREP_EXPERIMENT_DIRECTORY", "scorep-measurement-tmp"))
    record = {"argv": sys.argv[1:], "flags": flags, "script": script, "script_args": script_args,
              "pid": os.getpid(), "cwd": os.getcwd(), "executable": sys.executable,
              "env": {k: v for k, v in os.environ.items() if k in RECORDED or k.startswith("SCOREP_")}}
    record_dir = os.environ.get("FAKE_SCOREP_RECORD_DIR")
    if record_dir:
        Path(record_dir, f"wrapper_{os.getpid()}.json").write_text(json.dumps(record))
    try:
        exp.mkdir(parents=True)
    except FileExistsError:
        print(f"[Score-P] Error: Experiment directory {exp}: File does already exist", file=sys.stderr)
        sys.exit(1)
    (exp / "scorep.cfg").write_text("".join(f'SCOREP_{k}="{v}"\n' for k, v in [("ENABLE_PROFILING", "true")]))
    (exp / "MANIFEST.md").write_text(f"# fake Score-P experiment of pid {os.getpid()}\n")
    print(f"fake scorep: measuring {script} into {exp}", flush=True)
    real_exit = os._exit

    def flush() -> None:
        if os.environ.get("FAKE_SCOREP_PROFILE") == "cube":
            sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
            from tracegen import Process, write_profile

            write_profile(exp, [Process()])
        else:
            (exp / "profile.cubex").write_bytes(b"")

    def flush_then_exit(code: int) -> None:   # the stand-in "flushes" even on os._exit
        flush()
        real_exit(code)

    os._exit = flush_then_exit
    sys.argv = [script, *script_args]
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        flush()


main()

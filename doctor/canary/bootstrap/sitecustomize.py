"""gpu-doctor's canary bootstrap: runs at every rank's interpreter start (PYTHONPATH).

`gpu-doctor launch --canary K` puts this folder first on the ranks' PYTHONPATH. Python
imports the first `sitecustomize` it finds, so this one first runs the sitecustomize it
shadows (the user's, or the distribution's), then, when GPU_DOCTOR_CANARY is set, waits
for `import torch` to register the canary (gpu_doctor_canary). `python -m scorep` re-runs
the interpreter with the same environment, so its measured process gets it too.
Nothing here may break the user's program: a failure is one line on stderr.
"""

import os
import sys


def _run_shadowed() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _start_canary() -> None:
    if not os.environ.get("GPU_DOCTOR_CANARY"):
        return
    try:
        import gpu_doctor_canary

        gpu_doctor_canary.install()
    except Exception as exc:  # never the user's problem
        print(f"gpu-doctor canary: not started: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


if __name__ == "sitecustomize":   # run by Python at start-up (imported as a module, it does nothing)
    try:
        _run_shadowed()
    finally:
        _start_canary()

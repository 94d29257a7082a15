"""GPU peer-to-peer facts: the NVML access matrix (P2P001) and the active copy test (P2P002).

Both probes run in subprocesses with hard timeouts (`run_isolated`): the NVML
matrix in gpu-doctor's own interpreter (`p2p_nvml.py`), the data-integrity
test in the job's interpreter (`p2p_child.py`, torch). This module imports
neither pynvml nor torch; `render_matrix` and `render_integrity` turn the facts
into the text the CLI, the report and the TUI show.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from doctor.case import Case
from doctor.facts import ProbeContext, ProbeTimeout, provider
from doctor.isolate import Isolated, run_isolated

HERE = Path(__file__).resolve().parent
NVML_CHILD = HERE / "p2p_nvml.py"
ACTIVE_CHILD = HERE / "p2p_child.py"
DEFAULT_SIZE = 32 << 20
SIZE_ENV = "GPU_DOCTOR_P2P_SIZE"
BACKEND_ENV = "GPU_DOCTOR_P2P_BACKEND"

# nvmlGpuP2PStatus_t -> (cell code, words)
P2P_STATUS = {
    0: ("OK", "ok"),
    1: ("NS", "chipset not supported"),
    2: ("NS", "GPU not supported"),
    3: ("NS", "IOH topology not supported"),
    4: ("DIS", "disabled by the driver's registry key"),
    5: ("NS", "not supported"),
    6: ("X", "unknown"),
}
CELL_RANK = {"OK": 0, "NS": 1, "DIS": 2, "X": 3}
# nvmlGpuTopologyLevel_t -> the names `nvidia-smi topo -m` uses
TOPOLOGY = {0: "BRD", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
LEGEND = ("OK = peer read+write supported, NS = not supported (copies go through host memory), "
          "DIS = disabled by the driver, X = unknown/broken; link: NV = NVLink, "
          "BRD/PIX/PXB/PHB/NODE/SYS as in `nvidia-smi topo -m`")


def status_cell(code: int | None, error: str | None = None) -> tuple[str, str]:
    """(cell code, words) for one NVML P2P status or query error."""
    if code is None:
        if error and "not supported" in error.lower():
            return "NS", f"query not supported ({error})"
        return "X", f"query failed ({error})"
    return P2P_STATUS.get(code, ("X", f"status {code}"))


def pair_view(pair: Mapping[str, Any]) -> dict[str, Any]:
    """One ordered pair as cell, link and words: {'cell': 'OK', 'link': 'NV', 'read': ...}."""
    errors = pair.get("errors") or {}
    read = status_cell(pair.get("read"), errors.get("read"))
    write = status_cell(pair.get("write"), errors.get("write"))
    nvlink = pair.get("nvlink") == 0
    cell = max(read[0], write[0], key=CELL_RANK.__getitem__)
    link = "NV" if nvlink else TOPOLOGY.get(pair.get("topology"), "?")  # type: ignore[arg-type]
    return {"src": pair["src"], "dst": pair["dst"], "cell": cell, "link": link,
            "read": read[1], "write": write[1], "nvlink": nvlink,
            "topology": TOPOLOGY.get(pair.get("topology"), None)}  # type: ignore[arg-type]


def _grid(count: int, cell: Mapping[tuple[int, int], str], corner: str) -> list[str]:
    heads = [f"GPU{i}" for i in range(count)]
    width = max([len(corner), *(len(h) for h in heads), *(len(c) for c in cell.values())]) + 2
    rows = [corner.ljust(width) + "".join(h.ljust(width) for h in heads)]
    for s in range(count):
        cells = ["-" if s == d else cell.get((s, d), "?") for d in range(count)]
        rows.append(heads[s].ljust(width) + "".join(c.ljust(width) for c in cells))
    return [r.rstrip() for r in rows]


def render_matrix(value: Mapping[str, Any]) -> str:
    """The P2P001 matrix as text: rows are source GPUs, columns destinations."""
    if not value.get("driver_loaded"):
        return f"no P2P matrix: {value.get('error') or 'no NVIDIA driver'}"
    count = len(value.get("gpus", []))
    views = {(p["src"], p["dst"]): pair_view(p) for p in value.get("pairs", [])}
    cells = {k: f"{v['cell']} {v['link']}" for k, v in views.items()}
    return "\n".join(_grid(count, cells, "P2P") + [LEGEND])


def render_integrity(value: Mapping[str, Any]) -> str:
    """The P2P002 result as text: GB/s per verified direction, BAD n, NPA, ERR, HUNG, '...' untested."""
    count = len(value.get("devices", []))
    cells: dict[tuple[int, int], str] = {}
    for d in value.get("directions", []):
        key = (d["src"], d["dst"])
        if d["status"] == "corrupt":
            cells[key] = f"BAD {d['bad_elements']}"
        elif d["status"] == "ok":
            cells[key] = f"{d['gbps']:.1f}" if d.get("gbps") else "OK"
        else:
            cells[key] = {"no_peer_access": "NPA", "error": "ERR"}.get(d["status"], d["status"])
    if value.get("hung_in"):
        cells[tuple(value["hung_in"])] = "HUNG"  # type: ignore[index]
    for pair in value.get("untested", []):
        cells.setdefault(tuple(pair), "...")  # type: ignore[arg-type]
    legend = ("GB/s = bit-exact peer copy at that speed, BAD n = n elements differ from the host-staged "
              "copy, NPA = no peer access (not tested), ERR = CUDA error, HUNG = killed, ... = not tested")
    return "\n".join(_grid(count, cells, "GB/s") + [legend])


# --- P2P001 -----------------------------------------------------------------

@provider("p2p_matrix", timeout=20.0)
def p2p_matrix(ctx: ProbeContext) -> dict[str, Any]:
    """NVML P2P status per ordered pair (read/write/NVLink) and topology, from a subprocess."""
    nv = ctx.facts.get("nvml")
    if isinstance(nv, dict) and isinstance(nv.get("p2p"), dict):  # the nvml child already asked
        value: dict[str, Any] = dict(nv["p2p"])
        value["views"] = [pair_view(p) for p in value.get("pairs", [])]
        return value
    from doctor.probes.node import child_argv, pynvml_dir

    res = run_isolated(child_argv(NVML_CHILD.name, pynvml_dir()), ctx.limit(), env=dict(ctx.case.env))
    if res.timed_out:
        raise ProbeTimeout(f"the NVML P2P query hung; killed after {res.duration_s:.1f}s")
    if res.returncode != 0:
        raise RuntimeError(f"the NVML P2P query {_death(res)}")
    value = res.json()
    value["views"] = [pair_view(p) for p in value.get("pairs", [])]
    return value


def _death(res: Isolated) -> str:
    how = f"was killed by {res.signal_name}" if res.signal_name else f"exited with {res.returncode}"
    tail = res.stderr.strip().splitlines()[-1:] or ["no error output"]
    return f"{how}: {tail[0]}"


# --- P2P002 -----------------------------------------------------------------

def parse_size(text: str) -> int:
    """'32M', '1G', '4096' -> bytes (powers of 1024); between 4 KiB and 16 GiB."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 32M or 1G)")
    size = int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]
    if not (4 << 10) <= size <= (16 << 30):
        raise ValueError(f"P2P test size must be between 4K and 16G, got {text!r}")
    return size


def active_requested(case: Case) -> bool:
    """The active test runs at --level 2 (the p2p playbook and --only raise the level)."""
    return case.level >= 2


def interpreter_refusal(case: Case) -> str | None:
    """Why the job's interpreter must not run here (gate as root, user-writable path), or None."""
    if not (case.gate and case.as_root):
        return None
    python = Path(case.job_python)
    for path in (python, *python.parents, Path(os.path.realpath(python)),
                 *Path(os.path.realpath(python)).parents):
        try:
            st = path.stat()
        except OSError as exc:
            return f"cannot inspect {path}: {exc.strerror or exc}"
        sticky_dir = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
        if st.st_uid != 0 or (st.st_mode & 0o022 and not sticky_dir):
            return (f"refusing to run {python} as root: {path} is owned by uid {st.st_uid} "
                    f"with mode {stat.filemode(st.st_mode)} (user-writable)")
    from doctor.trust import interpreter_refusal as venv_refusal  # its pyvenv.cfg, site-packages, .pth

    why = venv_refusal(str(python))
    return f"refusing to run {python} as root: {why}" if why else None


def test_size(case: Case) -> int:
    raw = case.options.get("p2p_size") or case.env.get(SIZE_ENV)
    if raw is None:
        return DEFAULT_SIZE
    return raw if isinstance(raw, int) else parse_size(str(raw))


def read_integrity(res: Isolated) -> dict[str, Any]:
    """The streamed JSON lines of p2p_child.py -> the p2p_integrity fact (works after a kill)."""
    from doctor.probes.p2p_child import directions  # argparse, ctypes...: only when used

    if res.returncode is None and not res.timed_out:  # could not even start
        return {"requested": True, "error": res.stderr, "devices": [], "tests": [], "directions": [],
                "untested": [], "timed_out": False, "hung_in": None, "crashed": None}
    events = []
    for line in res.stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and "event" in event:
            events.append(event)
    first = next((e for e in events if e["event"] == "devices"), {})
    devices = first.get("devices", [])
    tests = [e for e in events if e["event"] == "pair"]
    finished = {(t["src"], t["dst"]) for t in tests}
    begun = [(e["src"], e["dst"]) for e in events if e["event"] == "begin"]
    open_pair = next((p for p in reversed(begun) if p not in finished), None)
    ids = [d["index"] for d in devices]
    untested: list[list[int]] = next((e["untested"] for e in events if e["event"] == "budget"), [])
    if res.timed_out or res.returncode not in (0, 3):
        untested = [[s, d] for s in ids for d in ids if s != d and (s, d) not in finished
                    and (s, d) != open_pair]
    error = next((e["error"] for e in events if e["event"] == "error"), None)
    if error is None and not first and not res.timed_out:
        error = f"the test {_death(res)}" if res.returncode else "the test printed nothing"
    return {
        "requested": True, "error": error, "devices": devices,
        "bytes": first.get("bytes"), "iterations": first.get("iterations"), "backend": first.get("backend"),
        "tests": tests, "directions": list(directions(tests).values()),
        "timed_out": res.timed_out, "hung_in": list(open_pair) if res.timed_out and open_pair else None,
        "crashed": (_death(res) if res.returncode not in (0, 3) and not res.timed_out else None),
        "crashed_in": list(open_pair) if open_pair and not res.timed_out else None,
        "untested": untested, "duration_s": round(res.duration_s, 3),
        "stderr_tail": res.stderr.strip().splitlines()[-5:],
    }


@provider("p2p_integrity", timeout=120.0)
def p2p_integrity(ctx: ProbeContext) -> dict[str, Any]:
    """Run p2p_child.py in the job's interpreter; {'requested': False} below --level 2."""
    case = ctx.case
    if not active_requested(case):
        return {"requested": False}
    python = case.job_python
    refusal = interpreter_refusal(case)
    if refusal:
        return {"requested": True, "refused": refusal, "python": python}
    size, limit = test_size(case), ctx.limit()
    backend = case.env.get(BACKEND_ENV, "auto")
    if backend not in ("auto", "torch", "cudart"):
        return {"requested": True, "python": python, "devices": [],
                "error": f"{BACKEND_ENV}={backend!r}: use auto, torch or cudart"}
    # No new pair starts after the soft budget; the hard limit kills a hung copy.
    soft = max(0.5, limit - min(3.0, 0.25 * limit))
    argv = [python, *(["-I"] if case.gate and case.as_root else []), str(ACTIVE_CHILD),
            "--bytes", str(size), "--budget", f"{soft:.1f}", "--backend", backend]
    res = run_isolated(argv, limit, env=dict(case.env), cwd="/")  # never a job folder's modules
    value = read_integrity(res)
    value.update(python=python, limit_s=round(limit, 1))
    return value

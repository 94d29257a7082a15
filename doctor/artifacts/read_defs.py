"""Reader child: print definition summaries of OTF2 traces and Cube profiles as JSON lines.

Run as a script in its own process (`python -I read_defs.py trace PATH profile PATH ...`),
because the OTF2 C library writes to stderr and may abort the process on a
damaged archive. Self-contained: stdlib, `otf2` and `pycubexr` only.

Traces: `otf2.reader.Reader` reads the global definitions (traces.def) when it
opens; events are only read when `.events` is iterated, which this never does.
So the cost does not grow with the number of events (bench/bench_trace_summary.py).
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import tarfile
import xml.etree.ElementTree as ET
from typing import Any

MAX_LOCATIONS = 4096
MAX_REGIONS = 50000
TOP_REGIONS = 15
TOP_MODULES = 25
COMMUNICATION = {"mpi", "openmp", "shmem", "pthread"}


def _enum_name(value: Any) -> str:
    return str(value).rsplit(".", 1)[-1].lower()


def _paradigm(value: Any) -> str:
    name = _enum_name(value)
    return "measurement" if name == "measurement_system" else name


def trace_summary(anchor: str) -> dict[str, Any]:
    import _otf2
    import otf2

    reader = otf2.reader.Reader(anchor)  # reads global definitions only
    try:
        defs = reader.definitions
        groups = list(defs.location_groups)
        index = {id(g): i for i, g in enumerate(groups)}
        locations = list(defs.locations)
        regions = list(defs.regions)
        try:
            creator = _otf2.Reader_GetCreator(reader.handle)
        except Exception:
            creator = None
        return {
            "creator": creator,
            "location_groups": [[g.name, _enum_name(g.location_group_type)] for g in groups],
            "locations": [[loc.name, _enum_name(loc.type), index.get(id(loc.group), -1),
                           int(loc.number_of_events)] for loc in locations[:MAX_LOCATIONS]],
            "locations_total": len(locations),
            "events": sum(int(loc.number_of_events) for loc in locations),
            "regions": [[r.name, _paradigm(r.paradigm), _enum_name(r.region_role),
                         str(r.source_file) if r.source_file is not None else ""]
                        for r in regions[:MAX_REGIONS]],
            "regions_total": len(regions),
            "system_tree": [n.name for n in defs.system_tree_nodes],
        }
    finally:
        reader.close()


def _anchor_root(cubex: tarfile.TarFile) -> ET.Element:
    member = cubex.extractfile("anchor.xml")
    if member is None:
        raise ValueError("profile.cubex has no anchor.xml")
    data = member.read()
    if not data.startswith(b"<?xml"):
        data = gzip.decompress(data)
    return ET.fromstring(data)


def profile_definitions(path: str) -> dict[str, Any]:
    """Locations and regions straight from anchor.xml (works where pycubexr does not)."""
    with tarfile.open(path) as cubex:
        root = _anchor_root(cubex)
    attrs = {a.get("key"): a.get("value") for a in root.findall("attr")}
    groups: list[list[Any]] = []
    locations: list[list[Any]] = []
    for group in root.iter("locationgroup"):
        groups.append([group.findtext("name") or "", group.findtext("type") or ""])
        for loc in group.findall("location"):
            locations.append([loc.findtext("name") or "", loc.findtext("type") or "",
                              len(groups) - 1, None])
    program = root.find("program")
    regions = [[r.findtext("name") or "", r.findtext("paradigm") or "", r.findtext("role") or "",
                r.get("mod") or ""] for r in (program.findall("region") if program is not None else [])]
    return {
        "creator": attrs.get("Creator"),
        "location_groups": groups,
        "locations": locations[:MAX_LOCATIONS],
        "locations_total": len(locations),
        "regions": regions[:MAX_REGIONS],
        "regions_total": len(regions),
        "metrics": [m.findtext("uniq_name") for m in root.iter("metric")],
    }


def score_view(path: str) -> dict[str, Any]:
    """The `scorep-score`-like view: visits and exclusive time per type (ALL first) and the top
    regions, summed over all locations (scorep-score's max_buf column needs the trace sizes: omitted)."""
    from pycubexr import CubexParser

    with CubexParser(path) as cube:
        names = {m.name for m in cube.get_metrics()}
        if "time" not in names or "visits" not in names:
            return {"score_error": "the profile has no time/visits metrics"}
        cnodes = cube.all_cnodes()
        incl = _per_cnode(cube, "time", cnodes)
        visits = _per_cnode(cube, "visits", cnodes)
    calls_comm = _calls_communication(cube.get_root_cnodes())
    by_region: dict[tuple[str, str], list[float]] = {}
    for cn in cnodes:
        excl = incl.get(cn.id, 0.0) - sum(incl.get(ch.id, 0.0) for ch in cn.get_children())
        key = (_score_type(cn, calls_comm), cn.region.name)
        acc = by_region.setdefault(key, [0.0, 0.0])
        acc[0] += visits.get(cn.id, 0.0)
        acc[1] += excl
    by_type: dict[str, list[float]] = {}
    for (kind, _), (v, t) in by_region.items():
        acc = by_type.setdefault(kind, [0.0, 0.0])
        acc[0] += v
        acc[1] += t
    total = sum(t for _, t in by_type.values())
    by_type["ALL"] = [sum(v for v, _ in by_type.values()), total]
    rows = sorted(by_region.items(), key=lambda kv: -kv[1][1])[:TOP_REGIONS]
    by_module: dict[str, float] = {}
    for (_kind, name), (v, _t) in by_region.items():
        module = python_module(name)
        if module is not None:
            by_module[module] = by_module.get(module, 0.0) + v

    def pct(t: float) -> float:
        return 100.0 * t / total if total > 0 else 0.0
    return {
        "total_time": total,
        "by_type": [{"type": k, "visits": int(v), "time": t, "percent": pct(t)} for k, (v, t) in
                    sorted(by_type.items(), key=lambda kv: (kv[0] != "ALL", -kv[1][1]))],
        "top_regions": [{"type": k, "region": name, "visits": int(v), "time": t, "percent": pct(t)}
                        for (k, name), (v, t) in rows],
        "module_visits": [{"module": m, "visits": int(v)} for m, v in
                          sorted(by_module.items(), key=lambda kv: -kv[1])[:TOP_MODULES]],
    }


def python_module(region: str) -> str | None:
    """The top-level module of a Python instrumenter region (`torch._ops:<genexpr>` -> `torch`);
    None for user regions (`user:NAME`), the script itself (`__main__:...`) and non-Python regions."""
    if ":" not in region or region.startswith(("user:", "__main__")) or " " in region.split(":", 1)[0]:
        return None
    return region.split(":", 1)[0].split(".", 1)[0] or None


def _per_cnode(cube: Any, metric_name: str, cnodes: list[Any]) -> dict[int, float]:
    values = cube.get_metric_values(cube.get_metric_by_name(metric_name))
    return {cn.id: float(values.cnode_values(cn).sum()) for cn in cnodes}


def _score_type(cnode: Any, calls_comm: set[int]) -> str:
    """scorep-score's types: USR, COM (user code on a path to MPI/OpenMP/...), MPI, CUDA..."""
    paradigm = (cnode.region.paradigm or "").lower()
    if paradigm in ("user", "compiler"):
        return "COM" if cnode.id in calls_comm else "USR"
    names = {"measurement": "SCOREP", "openmp": "OMP", "mpi": "MPI", "cuda": "CUDA"}
    return names.get(paradigm, paradigm.upper() or "UNKNOWN")


def _calls_communication(roots: list[Any]) -> set[int]:
    """Ids of call-tree nodes with a communication region somewhere below them."""
    found: set[int] = set()
    order: list[Any] = []
    stack = list(roots)
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(node.get_children())
    for node in reversed(order):  # children before parents
        if any(ch.id in found or (ch.region.paradigm or "").lower() in COMMUNICATION
               for ch in node.get_children()):
            found.add(node.id)
    return found


def profile_summary(path: str) -> dict[str, Any]:
    result = profile_definitions(path)
    try:
        result.update(score_view(path))
    except Exception as exc:  # the definitions still answer most questions
        result["score_error"] = f"{type(exc).__name__}: {exc}"
    return result


def main(argv: list[str]) -> int:
    readers = {"trace": trace_summary, "profile": profile_summary}
    for kind, path in zip(argv[0::2], argv[1::2], strict=False):
        try:
            doc = {"kind": kind, "path": path, "ok": True, **readers[kind](path)}
        except Exception as exc:
            doc = {"kind": kind, "path": path, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(doc) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    # This file's folder is sys.path[0]: drop it so its siblings (facts.py, summary.py...)
    # can never shadow a module otf2 or pycubexr imports.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.exit(main(sys.argv[1:]))

"""Interconnect layer: GPU peer-to-peer access (P2P001) and peer-copy data integrity (P2P002)."""

from __future__ import annotations

from typing import Any

from doctor.facts import Facts
from doctor.model import Evidence, Layer, Outcome, fail, passed, skip, timeout, unknown, warn
from doctor.probes.p2p import render_integrity, render_matrix
from doctor.registry import check
from doctor.wording import count

CORRUPTION_REMEDIES = ("p2p-nccl-disable", "p2p-visible-devices", "p2p-device-map-single-gpu",
                       "p2p-host-staged-copy", "p2p-exclude-node")


def _arrow(pair: tuple[int, int] | list[int]) -> str:
    return f"GPU{pair[0]}->GPU{pair[1]}"


def _pair_evidence(view: dict[str, Any]) -> Evidence:
    return Evidence(f"{_arrow((view['src'], view['dst']))}: read {view['read']}, write {view['write']}, "
                    f"NVLink {'yes' if view['nvlink'] else 'no'}, topology {view['topology'] or '?'}",
                    label="nvmlDeviceGetP2PStatus")


@check("P2P001", Layer.INTERCONNECT, "GPU peer-to-peer access matrix (NVML)",
       needs=["p2p_matrix"], depends_on=["GPU001"],
       remedies=["p2p-verify-active", "p2p-driver-disabled", "p2p-nccl-disable", "p2p-exclude-node"])
def peer_access_matrix(facts: Facts) -> Outcome | list[Outcome]:
    """What it does:
    Asks NVML, for every ordered GPU pair, whether peer reads and writes are
    supported and whether the pair talks over NVLink, plus the PCIe common
    ancestor (`nvidia-smi topo -p2p rwn`, `nvidia-smi topo -m`), and shows the
    result as a matrix.

    Why is this bad?
    A model split over GPUs (`device_map="auto"`, pipeline stages, NCCL) copies
    tensors between GPUs over these links. A pair whose status is unknown or
    that the driver cannot read is a link not to trust; a pair disabled by the
    driver silently goes through host memory. "Not supported" is normal on
    some topologies (e.g. GPUs under different CPU sockets) and only informs.

    Example:
    GPU0->GPU1: read unknown, write unknown, NVLink no, topology NODE (X).

    Remedy:
    Prove the bytes with the active test (P2P002, `--level 2`); keep NCCL
    off the peer transport or keep the job off the node until it is repaired.

    Severity:
    fail for a pair whose P2P status is broken or unknown; warn for a pair the driver disables;
    skip with fewer than two GPUs or no driver; else pass.

    Fix safety:
    Manual: job-script lines and administrator steps.
    """
    value = facts.get("p2p_matrix")
    if not value.get("driver_loaded"):
        return skip(f"no NVIDIA driver to ask: {value.get('error')}")
    if value.get("error"):
        return unknown(f"NVML P2P query failed: {value['error']}")
    gpus, views = value.get("gpus", []), value.get("views", [])
    if len(gpus) < 2:
        name = gpus[0].get("name") if gpus else None
        return skip(f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}"
                    f"{f' ({name})' if name else ''}: no peer pairs to check")
    data = {"matrix": render_matrix(value), "gpus": gpus, "pairs": views}
    broken = [v for v in views if v["cell"] == "X"]
    disabled = [v for v in views if v["cell"] == "DIS"]
    unsupported = [v for v in views if v["cell"] == "NS"]
    if broken and len(broken) == len(views):
        return unknown("NVML reports no usable P2P status for any GPU pair "
                       f"(e.g. {broken[0]['read']}); run the active test (P2P002) to know more",
                       _pair_evidence(broken[0]), remedies=["p2p-verify-active"], data=data)
    outcomes = [fail(f"P2P status of {_arrow((v['src'], v['dst']))} is broken/unknown "
                     f"(read {v['read']}, write {v['write']}) while other pairs report a status",
                     _pair_evidence(v), remedies=["p2p-verify-active", "p2p-nccl-disable", "p2p-exclude-node"],
                     entities={"pair": [v["src"], v["dst"]]}) for v in broken]
    outcomes += [warn(f"P2P between {_arrow((v['src'], v['dst']))} is disabled by the driver: "
                      "copies go through host memory", _pair_evidence(v),
                      remedies=["p2p-driver-disabled"], entities={"pair": [v["src"], v["dst"]]})
                 for v in disabled]
    if outcomes:
        outcomes[0] = _with_data(outcomes[0], data)
        return outcomes
    nvlink = sum(1 for v in views if v["nvlink"])
    note = (f"; {len(unsupported)} without P2P support (copies go through host memory): "
            + ", ".join(_arrow((v["src"], v["dst"])) for v in unsupported[:6])
            + (" ..." if len(unsupported) > 6 else "")) if unsupported else ""
    return passed(f"{count(len(gpus), 'GPU')}, {len(views)} directed pairs: "
                  f"{len(views) - len(unsupported)} peer read/write OK ({nvlink} over NVLink){note}",
                  [_pair_evidence(v) for v in unsupported[:6]], data=data)


def _with_data(outcome: Outcome, data: dict[str, Any]) -> Outcome:
    return Outcome(outcome.status, outcome.message, outcome.evidence, outcome.remedies,
                   outcome.entities, {**outcome.data, **data})


@check("P2P002", Layer.INTERCONNECT, "Peer copies keep the data bit for bit (active test, --level 2)",
       needs=["p2p_integrity"], depends_on=["GPU001"], remedies=list(CORRUPTION_REMEDIES))
def peer_copy_integrity(facts: Facts) -> Outcome | list[Outcome]:
    """What it does:
    In the job's interpreter (torch), for every ordered GPU pair with peer
    access: stages a patterned buffer on the source through the host, copies
    it GPU to GPU and back, and compares both copies bit for bit with the
    host-staged data. Reports each direction that changed bytes, with the
    number of bad elements, the first offsets and the flipped bits, and the
    bandwidth per pair. Runs only at `--level 2` (or `--playbook p2p`).

    Why is this bad?
    CUDA does not check the bytes of a peer copy. On an unhealthy link
    (loose NVLink cable, broken PCIe P2P across sockets, driver trouble)
    `tensor.to("cuda:1")` succeeds and delivers wrong values: a model split
    with `device_map="auto"` then produces garbage or non-deterministic output
    with no error, while the same model on one GPU is fine.
    `p2pBandwidthLatencyTest` measures speed and never looks at the data.

    Example:
    GPU0->GPU1 corrupts peer copies: 3 of 4194304 elements differ from the
    host-staged copy (first at byte 0x28: expected 0x..., got 0x...).

    Remedy:
    Route data around the bad pair: NCCL_P2P_DISABLE=1 for NCCL jobs,
    `device_map="cuda:0"` or CUDA_VISIBLE_DEVICES without one GPU of the pair,
    host-staged copies (`tensor.cpu().to(dst)`), or `#SBATCH --exclude=<host>`.

    Severity:
    fail when a peer copy differs from the host-staged copy (data corruption, named by pair);
    unknown when the test could not run or crashed; skip unless --level 2 asks for it, or with
    no peer pair; else pass.

    Fix safety:
    Manual: exact job-script lines and code.
    """
    v = facts.get("p2p_integrity")
    if not v.get("requested"):
        return skip("active test not requested: run with --level 2 or --playbook p2p")
    python = v.get("python", "the job's interpreter")
    if v.get("refused"):
        return skip(v["refused"])
    if v.get("error") and not v.get("devices"):
        return unknown(f"the peer-copy test could not run in {python}: {v['error'].strip()}",
                       [Evidence(line, label="stderr") for line in v.get("stderr_tail", [])[-3:]])
    devices = v.get("devices", [])
    if len(devices) < 2:
        return skip(f"{python} sees {len(devices)} GPU{'s' if len(devices) != 1 else ''}: "
                    "no peer pairs to test")
    outcomes = _corruption(v, host=facts.case.host) + _incomplete(v)
    summary = _summary(v)
    if summary is not None:
        outcomes.append(summary)
    if not outcomes:
        return unknown(f"the peer-copy test in {python} reported no pair", remedies=())
    outcomes[0] = _with_data(outcomes[0], {"matrix": render_integrity(v),
                                           "directions": v["directions"], "bytes": v.get("bytes")})
    return outcomes


def _corruption(v: dict[str, Any], host: str) -> list[Outcome]:
    out = []
    for d in v["directions"]:
        if d["status"] == "corrupt":
            first = d["first_bad"][:4]
            offsets = ", ".join(f"{b['byte']:#x}" for b in first)
            ev = [Evidence(f"byte {b['byte']:#x} (element {b['index']}): expected {b['expected']}, "
                           f"got {b['got']} ({b['flipped_bits']} bits flipped)", label=_arrow((d["src"], d["dst"])))
                  for b in first]
            ev.append(Evidence(f"host {host}; {v.get('bytes')} bytes x {v.get('iterations')} copies per pair",
                               label="test"))
            out.append(fail(f"{_arrow((d['src'], d['dst']))} corrupts peer copies: {d['bad_elements']} of "
                            f"{(v.get('bytes') or 0) // 8} elements differ from the host-staged copy "
                            f"in {d['bad_copies']} of {d['copies']} copies (first at byte offsets {offsets})",
                            ev, remedies=CORRUPTION_REMEDIES,
                            entities={"pair": [d["src"], d["dst"]], "host": host}))
        elif d["status"] == "error":
            out.append(unknown(f"{_arrow((d['src'], d['dst']))}: the peer copy failed: {d['error']}",
                               entities={"pair": [d["src"], d["dst"]]}))
    return out


def _incomplete(v: dict[str, Any]) -> list[Outcome]:
    untested = [_arrow(p) for p in v.get("untested", [])]
    rest = f"; not tested: {', '.join(untested[:8])}{' ...' if len(untested) > 8 else ''}" if untested else ""
    if v.get("hung_in"):
        pair = v["hung_in"]
        return [timeout(f"the peer copy {_arrow(pair)} hung; killed after {v.get('duration_s')}s{rest}",
                        remedies=CORRUPTION_REMEDIES, entities={"pair": pair})]
    if v.get("timed_out"):
        return [timeout(f"the peer-copy test was killed after {v.get('duration_s')}s before its first "
                        f"pair (CUDA or torch start-up){rest}")]
    if v.get("crashed"):
        where = f" during {_arrow(v['crashed_in'])}" if v.get("crashed_in") else ""
        return [unknown(f"the peer-copy test {v['crashed']}{where}{rest}",
                        entities={"pair": v["crashed_in"]} if v.get("crashed_in") else {})]
    if untested:
        return [timeout(f"the time budget ran out after {len(v['tests'])} pair tests{rest} "
                        "(raise --timeout or lower --p2p-size)")]
    return []


def _summary(v: dict[str, Any]) -> Outcome | None:
    """A pass for the verified directions (a skip if none had peer access); None if none ran."""
    ok = [d for d in v["directions"] if d["status"] == "ok"]
    npa = [d for d in v["directions"] if d["status"] == "no_peer_access"]
    size = (v.get("bytes") or 0) >> 20
    speeds = [d for d in ok if d.get("gbps")]
    slowest = min(speeds, key=lambda d: d["gbps"]) if speeds else None
    msg = f"{len(ok)} directions copied {size} MiB x{v.get('iterations')} bit-exact"
    if slowest:
        msg += f" (slowest {_arrow((slowest['src'], slowest['dst']))} {slowest['gbps']:.1f} GB/s)"
    if npa:
        msg += (f"; {len(npa)} without peer access, not tested: "
                + ", ".join(_arrow((d["src"], d["dst"])) for d in npa[:6]))
    if not ok:
        return skip(f"no GPU pair has peer access in {v.get('python')}: nothing to test "
                    "(copies go through host memory)") if npa and len(npa) == len(v["directions"]) else None
    return passed(msg, [Evidence(f"{_arrow((d['src'], d['dst']))}: {d['gbps']:.1f} GB/s", label="bandwidth")
                        for d in speeds[:12]])

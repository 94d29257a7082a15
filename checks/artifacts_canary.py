"""Artifacts layer, the replica canary: what `gpu-doctor launch --canary K` found (canary.json).

DDP keeps every rank's parameters bit-identical after each optimizer step; a rank whose copy
differs got wrong bytes from somewhere, silently (the second field guide: GPU peer copies that
corrupt tensors with no error and no NaN). The record names the step, the rank and the tensor;
this check ties it to the GPUs involved and the test to run next (P2P002).
"""

from __future__ import annotations

from typing import Any

from doctor.canary.facts import CanaryRun
from doctor.canary.report import cost_text
from doctor.facts import Facts
from doctor.model import Evidence, Layer, Outcome, fail, passed, skip, unknown, warn
from doctor.registry import check
from doctor.wording import count

REMEDIES = ("p2p-verify-active", "p2p-nccl-disable", "p2p-host-staged-copy", "p2p-exclude-node")


def where_ranks_ran(doc: dict[str, Any], minority: list[int]) -> Evidence:
    """Which devices of which hosts the minority and the others used: the peer paths to test."""
    ranks = doc.get("ranks", {})

    def place(r: int) -> str:
        info = ranks.get(str(r), {})
        return f"{info.get('device') or '?'} on {info.get('host') or '?'}"

    others = [int(r) for r in ranks if int(r) not in minority]
    devices = {ranks.get(str(r), {}).get("device", "") for r in minority + others}
    text = "; ".join(f"rank {r}: {place(r)}" for r in minority)
    if devices and all(d.startswith("cuda") for d in devices):
        mine = sorted({ranks[str(r)]["device"] for r in minority if str(r) in ranks})
        theirs = sorted({ranks[str(r)]["device"] for r in others} - set(mine))
        text += f"; the peer paths to test: {', '.join(f'{a}<->{b}' for a in mine for b in theirs)} (P2P002)"
    elif devices and all(d == "cpu" for d in devices):
        text += "; the parameters live in host memory: no GPU peer copy carried them"
    return Evidence(text, label="where")


@check("ART006", Layer.ARTIFACTS, "The DDP replicas stayed identical (the launch's canary)", needs=["canary"],
       remedies=REMEDIES)
def replicas_identical(facts: Facts) -> Outcome | list[Outcome]:
    """What it does:
    Reads `canary.json`, which `gpu-doctor launch --canary K` writes in the run folder: every K
    optimizer steps each rank hashed its DistributedDataParallel parameters on their own device
    (8 bytes), the ranks compared the digests, and on a mismatch per-tensor digests named the
    first tensor that differs and the minority rank(s). The newest canary.json in the job folder
    counts (the folder itself, `--run-dir` one or two levels down, `.gpu-doctor/runs/*/`).

    Why is this bad?
    DDP's ranks must hold bit-identical parameters after every step. A rank whose copy differs
    got wrong bytes with no error and no NaN: the second field guide's unhealthy GPU peer copies
    (P2P002 finds such a pair on an idle node), or other silent data corruption. The run trains
    on, averaging gradients of a model that no longer exists on every rank, and its metrics
    look merely odd.

    Example:
    `step 140: rank 2's `layer3.weight` differs from ranks 0, 1, 3` (canary.json of a run
    where rank 2 ran on cuda:2 of node07).

    Remedy:
    Test the node's GPU pairs first: `gpu-doctor --check-only --playbook p2p --level 2`
    (P2P002, p2p-verify-active) on that node, the peer paths between the minority rank's GPU
    and the others'. Then the field guide's way around a bad link: NCCL_P2P_DISABLE=1 in the
    job script (p2p-nccl-disable), or cross-GPU copies staged through host memory in the code
    (p2p-host-staged-copy); keep the job off the node until the link is repaired
    (p2p-exclude-node).

    Severity:
    fail when the ranks' parameters differed at a check; warn when a rank missed a check (it
    was late past the canary's timeout, or ended: the other ranks could not compare with it);
    pass when every check agreed; skip without canary.json or when no check ran; unknown when
    canary.json cannot be read.

    Fix safety:
    Manual. NCCL_P2P_DISABLE=1 routes NCCL's traffic through host memory: the same results,
    slower. Host-staged copies change the job's code where it moves tensors between GPUs. Neither
    repairs the link, and neither undoes the corruption: restart from a checkpoint saved before
    the first differing step.
    """
    run: CanaryRun = facts["canary"]
    if run.path is None:
        return skip("no canary.json in the job folder (gpu-doctor launch --canary K writes one)")
    if run.doc is None:
        return unknown(run.problem, Evidence(run.problem, run.path))
    doc = run.doc
    if doc["mismatches"]:
        return _differed(run.path, doc)
    if doc["missed"]:
        ev = [Evidence(m["line"], run.path) for m in doc["missed"][:5]]
        ranks = sorted({r for m in doc["missed"] for r in m.get("ranks", [])})
        return warn(f"{count(len(ranks), 'rank')} missed a canary check ({doc['missed'][0]['line']}): "
                    "those steps were compared without them", ev, entities={"ranks": ranks})
    if not doc.get("checks"):
        return skip(f"canary.json holds no check (nothing stepped {doc['k']} optimizer steps on a DDP model)",
                    Evidence(run.path))
    return passed(f"the replicas were identical at all {count(doc['checks'], 'check')} every {doc['k']} steps "
                  f"up to step {doc.get('last_check_step')}; {cost_text(doc)}", Evidence(run.path))


def _differed(path: str, doc: dict[str, Any]) -> Outcome:
    first = doc["first_mismatch"] or doc["mismatches"][0]
    minority = list(first.get("minority") or [])
    ev = [Evidence(m["line"], path) for m in doc["mismatches"][:3]]
    ev.append(where_ranks_ran(doc, minority))
    hosts = sorted({doc.get("ranks", {}).get(str(r), {}).get("host", "") for r in minority} - {""})
    on = f" on {', '.join(hosts)}" if hosts else ""
    return fail(f"the DDP replicas differed: {first['line']}; test that node's GPU peer copies next "
                f"(gpu-doctor --check-only --playbook p2p --level 2{on})", ev, REMEDIES,
                entities={"rank": minority[0] if len(minority) == 1 else minority, "host": hosts[0] if hosts else None},
                data={"step": first["step"], "tensor": first.get("tensor"), "minority": minority,
                      "majority": first.get("majority")})

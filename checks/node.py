"""Node layer: the driver, the two CUDA APIs, the framework and the NVSwitch fabric.

The field guide's first four errors live here: `nvidia-smi` (NVML) answering
while the CUDA runtime still returns 802, `is_available()` saying False without
a reason, and a node whose runtime never becomes ready.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from doctor.facts import Facts
from doctor.model import Evidence, Layer, Outcome, fail, passed, skip, timeout, unknown, warn
from doctor.probes.cuda_errors import describe, short
from doctor.registry import check
from doctor.wording import count, noun_for

NODE = Layer.NODE


def expected_gpus(case: Any) -> tuple[int | None, str]:
    """GPUs the job expects and where that came from ('--expect-gpus 4', 'SLURM_JOB_GPUS=0,1')."""
    n = case.gpus_expected
    if case.expect_gpus is not None:
        return n, f"--expect-gpus {case.expect_gpus}"
    for name in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES"):
        if case.env.get(name, "").strip():
            return n, f"{name}={case.env[name]}"
    return n, ""


def visible_count(nvml_count: int, env: Mapping[str, str]) -> tuple[int, str | None]:
    """How many GPUs the CUDA APIs should see: NVML's count, limited by CUDA_VISIBLE_DEVICES."""
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return nvml_count, None
    entries = [e for e in cvd.split(",") if e.strip()]
    if cvd.strip() in ("-1", "NoDevFiles"):
        entries = []
    return min(len(entries), nvml_count), f"CUDA_VISIBLE_DEVICES={cvd}"


def version(v: int | None) -> str:
    """12040 -> '12.4'."""
    return f"{v // 1000}.{v % 1000 // 10}" if isinstance(v, int) and v > 0 else "unknown"


def seconds(s: float) -> str:
    return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"


def gpu_line(gpu: Mapping[str, Any]) -> Evidence:
    mem = gpu.get("memory_total")
    parts = [gpu.get("name") or "?", gpu.get("pci_bus_id") or "?", gpu.get("uuid") or "?"]
    if isinstance(mem, int):
        parts.append(f"{mem / 2**30:.1f} GiB")
    return Evidence(", ".join(parts), label=f"GPU {gpu.get('index')}")


@check("GPU001", NODE, "NVIDIA driver loads and NVML lists the GPUs", needs=["nvml"],
       remedies=["node-driver"])
def driver_loaded(facts: Facts) -> Outcome | list[Outcome]:
    """What it does:
    Initialises NVML (what `nvidia-smi` uses) in a subprocess and reads the driver
    version, the CUDA version the driver supports, and each GPU's name, PCI bus ID,
    UUID and memory. Compares the GPU count with what the job expects
    (`--expect-gpus`, else the GPUs Slurm allocated: `SLURM_JOB_GPUS`/`CUDA_VISIBLE_DEVICES`).

    Why is this bad?
    Without a loaded driver nothing else on the node can work. A host with no NVIDIA
    driver at all is fine (a login node) unless GPUs are expected there: then the job
    was placed on a broken or misconfigured node. Fewer GPUs than expected usually
    means a GPU fell off the bus (`GPU is lost`, Xid 79).

    Example:
    `nvmlInit failed: Driver Not Loaded` on a node where `#SBATCH --gres=gpu:4` placed the job.

    Remedy:
    Manual: check the kernel module (`lsmod | grep nvidia`, `dmesg | grep -i nvrm`),
    reinstall or reload the driver, or drain the node and tell the admins.

    Severity:
    fail when GPUs are expected (--expect-gpus, Slurm's allocation) and the driver is missing,
    NVML cannot initialise, or it lists fewer GPUs; skip on a host without a driver where none
    are expected; warn when the driver loads but lists no GPU or a GPU's queries fail; else
    pass.

    Fix safety:
    manual: gpu-doctor never touches the driver.
    """
    nv = facts["nvml"]
    host = facts.case.host
    n_expected, source = expected_gpus(facts.case)
    err = Evidence(str(nv.get("error")), label="NVML") if nv.get("error") else ()
    if nv.get("no_driver"):
        if n_expected:
            return fail(f"no NVIDIA driver on {host}, but {count(n_expected, 'GPU')} {noun_for(n_expected, 'is', 'are')} expected ({source})",
                        err, "node-driver", entities={"host": host})
        return skip("no NVIDIA driver on this host", err, entities={"host": host})
    if not nv.get("driver_loaded"):
        return fail(f"NVML cannot initialise on {host}: {nv.get('error')}", err, "node-driver",
                    entities={"host": host})
    gpus = nv.get("gpus") or []
    evidence = [Evidence(f"{nv.get('driver_version')} (CUDA {version(nv.get('cuda_driver_version'))})",
                         label="driver")] + [gpu_line(g) for g in gpus]
    if n_expected and len(gpus) < n_expected:
        return fail(f"NVML sees {count(len(gpus), 'GPU')} on {host}, but {n_expected} {noun_for(n_expected, 'is', 'are')} expected ({source})",
                    evidence, "node-driver", entities={"host": host})
    if not gpus:
        return warn("the NVIDIA driver is loaded but NVML sees no GPU", evidence, "node-driver")
    out: list[Outcome] = [warn(f"GPU {g['index']}: NVML queries failed: {g['errors']}", gpu_line(g),
                               "node-driver", entities={"gpu": g["index"]})
                          for g in gpus if g.get("errors")]
    names = sorted({str(g.get("name")) for g in gpus})
    out.append(passed(f"driver {nv.get('driver_version')} (CUDA {version(nv.get('cuda_driver_version'))}), "
                      f"{count(len(gpus), 'GPU')}: {', '.join(names)}", evidence))
    return out


@check("GPU002", NODE, "CUDA driver API agrees with NVML", needs=["nvml", "cuda_driver"],
       depends_on=["GPU001"], remedies=["node-cuda-libs", "node-driver"])
def driver_api_agrees(facts: Facts) -> Outcome:
    """What it does:
    Loads `libcuda.so.1` in a fresh process, calls `cuInit(0)` and `cuDeviceGetCount`,
    and compares the count with NVML's (limited by `CUDA_VISIBLE_DEVICES`) and the
    driver's CUDA version with NVML's.

    Why is this bad?
    NVML and the CUDA driver API are different libraries. When they disagree the job
    sees a different machine than `nvidia-smi` shows: a stub or a cuda-compat
    `libcuda.so` earlier on the library path (errors 34, 803, 804), a GPU that CUDA
    cannot use, or a node that is not ready yet (802).

    Example:
    `cuDeviceGetCount` says 3 while NVML lists 4 GPUs and no `CUDA_VISIBLE_DEVICES` is set.

    Remedy:
    Manual: find which `libcuda.so.1` is loaded (`ldconfig -p | grep libcuda`,
    `LD_LIBRARY_PATH`), remove stub/compat copies from the path; if a GPU is missing,
    check `nvidia-smi -q` and `dmesg` for Xid errors.

    Severity:
    fail when libcuda cannot be loaded, cuInit/cuDeviceGetCount return an error no retry cures,
    or the driver API counts other GPUs than NVML; warn for a retryable cuInit error (GPU003
    decides) or a libcuda from another driver (cuda-compat); else pass.

    Fix safety:
    manual.
    """
    nv, drv = facts["nvml"], facts["cuda_driver"]
    host = facts.case.host
    lib = Evidence(str(drv.get("path") or drv.get("library")), label="library")
    if not drv.get("loaded"):
        return fail(f"libcuda.so.1 cannot be loaded on {host} although NVML reports driver "
                    f"{nv.get('driver_version')}", Evidence(str(drv.get("load_error")), label="dlopen"),
                    "node-cuda-libs", entities={"host": host})
    code = drv.get("code")
    if code == 802:
        return warn(f"cuInit returned {describe(code, 'driver', drv.get('name'))}; GPU003 decides "
                    "whether the node becomes ready", lib, ["node-cuda-warmup", "node-fabric-manager"])
    if code:
        rem = ["node-cuda-libs"] if code in (34, 803, 804) else ["node-driver"]
        return fail(f"cuInit/cuDeviceGetCount returned {describe(code, 'driver', drv.get('name'))} on "
                    f"{host}", lib, rem, entities={"host": host})
    nvml_count = len(nv.get("gpus") or [])
    want, why = visible_count(nvml_count, facts.case.env)
    count = drv.get("count")
    evidence = [lib, Evidence(str(count), label="cuDeviceGetCount"),
                Evidence(str(nvml_count), label="NVML device count")]
    if why:
        evidence.append(Evidence(why, label="environment"))
    if count != want:
        limit = f" ({why} allows {want})" if why else ""
        return fail(f"CUDA driver API sees {count} GPUs but NVML sees {nvml_count}{limit}", evidence,
                    ["node-cuda-libs", "node-driver"], entities={"host": host})
    nv_ver, cu_ver = nv.get("cuda_driver_version"), drv.get("driver_version")
    if nv_ver and cu_ver and nv_ver != cu_ver:
        return warn(f"libcuda reports CUDA {version(cu_ver)} but NVML reports {version(nv_ver)}: another "
                    "driver's libcuda (cuda-compat?) is on the library path", evidence, "node-cuda-libs")
    return passed(f"cuInit ok, {count} GPUs, CUDA {version(cu_ver)}: agrees with NVML", evidence)


def attempt_lines(rt: Mapping[str, Any]) -> list[Evidence]:
    lines = []
    for a in rt.get("attempts", []):
        if a.get("timed_out"):
            what = f"no answer within {seconds(a.get('duration_s', 0))}, killed"
        elif a.get("crashed"):
            what = f"crashed ({a['crashed']})"
        else:
            what = describe(a.get("code"), a.get("api", "runtime"), a.get("name"))
        lines.append(Evidence(f"{what} after {a.get('duration_s', 0):.2f} s",
                              label=f"attempt {a.get('attempt')}"))
    return lines


def runtime_notes(last: Mapping[str, Any]) -> list[Evidence]:
    """Which library answered, and why a runtime library was passed over."""
    notes = [Evidence(str(last.get("path") or last.get("library")), label="library")]
    if last.get("runtime_missing"):
        notes.append(Evidence(str(last["runtime_missing"]), label="runtime"))
    notes += [Evidence(str(s), label="skipped") for s in last.get("skipped") or []]
    return notes


def ready_outcome(rt: Mapping[str, Any], nv: Any, facts: Facts) -> Outcome:
    last, k = rt["last"], rt["ready_attempt"]
    call = "cudaGetDeviceCount" if last.get("api") == "runtime" else "cuInit"
    lib = f"{last.get('library')}, runtime {version(last.get('runtime_version'))}" \
        if last.get("api") == "runtime" else "no CUDA runtime library; probed the driver API"
    evidence = attempt_lines(rt) + runtime_notes(last)
    if k > 1:
        earlier = sorted({short(a.get("code")) for a in rt["attempts"][:-1]})
        return warn(f"CUDA runtime ready after attempt {k} ({call}; earlier attempts: "
                    f"{', '.join(earlier)}; waited {seconds(rt['waited_s'])})", evidence,
                    ["cuda-warmup", "node-cuda-warmup"], data={"ready_attempt": k})
    if isinstance(nv, dict) and nv.get("driver_loaded"):
        want, why = visible_count(len(nv.get("gpus") or []), facts.case.env)
        if last.get("count") != want:
            return warn(f"CUDA runtime sees {last.get('count')} GPUs but NVML sees "
                        f"{len(nv.get('gpus') or [])}{f' ({why})' if why else ''}", evidence, "node-driver")
    return passed(f"CUDA runtime ready at attempt 1: {last.get('count')} GPUs ({lib})", evidence,
                  data={"ready_attempt": 1})


@check("GPU003", NODE, "CUDA runtime API becomes ready", needs=["cuda_runtime"],
       depends_on=["GPU001"], remedies=["cuda-warmup", "exclude-node", "node-cuda-warmup", "node-exclude"])
def runtime_ready(facts: Facts) -> Outcome:
    """What it does:
    Calls `cudaGetDeviceCount` (the runtime API that PyTorch and Score-P's CUDA adapter
    use) in a fresh process per attempt, retrying with backoff inside the time budget,
    and records each attempt's error code. Says "ready after attempt k" (warn),
    "never ready within N s" (fail), or "hung" (timeout).

    Why is this bad?
    `nvidia-smi` can answer while the runtime still returns 802 (system not ready). A
    process whose first CUDA call fails stays broken: Score-P's CUDA adapter, loaded
    before PyTorch, poisons the whole rank, and PyTorch later reports only
    `is_available() == False` or an FP16 ValueError. A runtime that never gets ready
    is a broken node, not a slow one.

    Example:
    attempts 1-2: 802 cudaErrorSystemNotReady, attempt 3: 4 devices -> "ready after attempt 3".

    Remedy:
    Warm CUDA up once, outside Score-P, before the instrumented run (a retry loop around
    `torch.zeros(1).cuda()`); exclude a node that never gets ready
    (`#SBATCH --exclude=<host>`) and report it to the admins.

    Severity:
    warn for "ready after attempt k" (k > 1: a cold node, the job may meet it; LNC002 and SCR001
    turn this into a fail for an unwarmed launch), or a runtime that counts other GPUs than
    NVML; fail for "never ready within N s" and errors no retry cures; timeout when an attempt
    hangs; pass at attempt 1.

    Fix safety:
    safe with a job folder: `cuda-warmup` inserts the warm-up step before the instrumented
    launch and `exclude-node` adds `#SBATCH --exclude=<host>` to the job script; manual
    steps (`node-cuda-warmup`, `node-exclude`) otherwise.
    """
    rt = facts["cuda_runtime"]
    host = facts.case.host
    last = rt["last"]
    call = "cudaGetDeviceCount" if last.get("api") == "runtime" else "cuInit"
    evidence = attempt_lines(rt) + runtime_notes(last)
    state = rt["state"]
    if state == "ready":
        return ready_outcome(rt, facts.get("nvml"), facts)
    if state == "hung":
        return timeout(f"hung in cuda_runtime probe on {host}: {call} did not return within "
                       f"{seconds(last.get('duration_s', 0))} (attempt {last.get('attempt')}, killed)",
                       evidence, ["exclude-node", "node-exclude"],
                       entities={"host": host, "probe": "cuda_runtime"})
    what = describe(last.get("code"), last.get("api", "runtime"), last.get("name"))
    if state == "never_ready":
        return fail(f"CUDA runtime never ready within {seconds(rt['waited_s'])} on {host}: "
                    f"{len(rt['attempts'])} attempt{'' if len(rt['attempts']) == 1 else 's'}, last {what}; exclude this node "
                    f"(#SBATCH --exclude={host})", evidence,
                    ["exclude-node", "node-exclude", "node-fabric-manager"],
                    entities={"host": host})
    rem = ["node-cuda-libs"] if last.get("code") in (34, 803, 804) else ["node-driver", "node-exclude"]
    return fail(f"{call} returned {what} on {host}", evidence, rem, entities={"host": host})



@check("GPU004", NODE, "The framework can use CUDA in the job's interpreter",
       needs=["framework", "nvml"], depends_on=["GPU001"], remedies=["node-cuda-warmup"])
def framework_cuda(facts: Facts) -> Outcome:
    """What it does:
    Runs `torch.zeros(1).cuda()` inside try/except with the job's interpreter
    (`--python`, else the `python` the job script runs, else the current one) in a
    subprocess, and reports the exception
    text, the torch version, `torch.version.cuda`, the NCCL version and torch's device
    count next to NVML's. It never uses `torch.cuda.is_available()` as the test.

    Why is this bad?
    `is_available()` returns False without saying why, and on a node that is still
    starting up it returns False where a moment later CUDA works. The real cause (802,
    a CPU-only torch build, a driver too old for torch's CUDA) only shows in the
    exception of a real CUDA operation. Downstream it surfaces as "FP16 Mixed precision
    training ... can only be used on CUDA devices".

    Example:
    `RuntimeError: CUDA error: system not ready` while NVML lists 4 GPUs.

    Remedy:
    Warm CUDA up before the job (see GPU003); install a CUDA build of torch that the
    driver supports (`torch.version.cuda` not above the driver's CUDA version).

    Severity:
    fail when torch cannot be imported, is a CPU-only build, or `torch.zeros(1).cuda()` raises
    while NVML sees GPUs; warn when torch counts other GPUs than NVML; skip when no torch is
    found and no --python names one; else pass.

    Fix safety:
    manual.
    """
    fw, nv = facts["framework"], facts["nvml"]
    python = fw.get("python") or facts.case.job_python
    n_nvml = len(nv.get("gpus") or [])
    if fw.get("import_error"):
        where = f" ({fw['python_source']})" if fw.get("python_source") else ""
        msg = f"torch cannot be imported by {python}{where}: {fw['import_error']}"
        if facts.case.python is None:
            return skip(msg + " (pass the job's interpreter with --python)")
        return fail(msg, Evidence(fw["import_error"], label=python), "node-cuda-warmup")
    evidence = [Evidence(f"torch {fw.get('torch_version')}, CUDA {fw.get('torch_cuda')}, "
                         f"NCCL {fw.get('nccl_version')}", label=python),
                Evidence(f"torch.cuda.device_count()={fw.get('device_count')}, "
                         f"is_available()={fw.get('is_available')}, NVML: {count(n_nvml, 'GPU')}", label="counts")]
    if not fw.get("ok"):
        error = str(fw.get("error"))
        evidence.insert(0, Evidence(error, label="torch.zeros(1).cuda()"))
        if fw.get("torch_cuda") is None and fw.get("torch_version"):
            return fail(f"torch {fw['torch_version']} in {python} is a CPU-only build while NVML sees "
                        f"{count(n_nvml, 'GPU')}: {error}", evidence, "node-cuda-warmup")
        hint = "; see GPU003" if ("802" in error or "not ready" in error.lower()) else ""
        return fail(f"torch.zeros(1).cuda() raised {error} while NVML sees {count(n_nvml, 'GPU')}{hint}",
                    evidence, "node-cuda-warmup")
    want, why = visible_count(n_nvml, facts.case.env)
    if fw.get("device_count") != want:
        return warn(f"torch sees {fw.get('device_count')} GPUs but NVML sees {n_nvml}"
                    f"{f' ({why})' if why else ''}", evidence, "node-driver")
    return passed(f"torch {fw.get('torch_version')} (CUDA {fw.get('torch_cuda')}) ran "
                  f"torch.zeros(1).cuda(): {fw.get('device_count')} GPUs", evidence)


FABRIC_NOT_READY = (1, 2)  # not started, in progress


@check("GPU005", NODE, "NVSwitch fabric is ready", needs=["fabric"], depends_on=["GPU001"],
       remedies=["node-fabric-manager"])
def fabric_ready(facts: Facts) -> Outcome:
    """What it does:
    Reads each GPU's NVSwitch fabric state through NVML (`nvmlDeviceGetGpuFabricInfoV`,
    shown by `nvidia-smi -q` under "Fabric"): not supported, not started, in progress,
    or completed, and the registration status.

    Why is this bad?
    On NVSwitch systems (HGX/DGX) CUDA cannot start until the fabric manager has
    registered every GPU with the fabric; until then the runtime returns 802 (system
    not ready). A fabric manager that is down keeps the node at 802 for good.

    Example:
    `GPU 0: fabric state in progress` a minute after boot, or for hours when
    `nvidia-fabricmanager` failed.

    Remedy:
    Manual: `systemctl status nvidia-fabricmanager`, restart it, check its log
    (`/var/log/fabricmanager.log`); its version must match the driver's.

    Severity:
    fail when the NVSwitch fabric is not ready or its registration failed (the fabric manager is
    down: every CUDA init answers 802); warn for degraded bandwidth; skip without NVSwitch;
    unknown when the state cannot be read; else pass.

    Fix safety:
    manual.
    """
    fab = facts["fabric"]
    if fab.get("error"):
        return unknown(f"cannot read the fabric state: {fab['error']}", remedies="node-fabric-manager")
    gpus = fab.get("gpus") or []
    lines = [Evidence(f"{g.get('state_name') or 'not supported'}, status {g.get('status')}"
                      + (f", error {g['error']}" if g.get("error") else ""), label=f"GPU {g['index']}")
             for g in gpus]
    if not gpus or not any(g.get("supported") for g in gpus):
        return skip("no NVSwitch fabric on this node (NVML: not supported)", lines[:1])
    bad = [g for g in gpus if g.get("state") in FABRIC_NOT_READY]
    if bad:
        states = sorted({g["state_name"] for g in bad})
        ids = ", ".join(str(g["index"]) for g in bad)
        return fail(f"NVSwitch fabric not ready on GPU {ids} ({', '.join(states)}): is the fabric manager "
                    "running?", lines, "node-fabric-manager", entities={"host": facts.case.host})
    failed = [g for g in gpus if g.get("error") or (g.get("state") == 3 and g.get("status"))]
    if failed:
        ids = ", ".join(str(g["index"]) for g in failed)
        return fail(f"NVSwitch fabric registration failed on GPU {ids}", lines, "node-fabric-manager",
                    entities={"host": facts.case.host})
    degraded = [g for g in gpus if (g.get("health_mask") or 0) & 0x3 == 1]
    if degraded:
        ids = ", ".join(str(g["index"]) for g in degraded)
        return warn(f"NVSwitch fabric bandwidth degraded on GPU {ids}", lines, "node-fabric-manager")
    return passed(f"NVSwitch fabric completed on {count(len(gpus), 'GPU')}", lines)
